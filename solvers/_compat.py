"""Small shims over JAX versions (0.10 here, 0.11 and newer on GPU machines)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

__all__ = ["shard_map"]


def shard_map(f: Callable[..., Any], mesh: jax.sharding.Mesh, in_specs: Any, out_specs: Any
              ) -> Callable[..., Any]:
    """``jax.shard_map`` where it exists, else ``jax.experimental.shard_map.shard_map``.

    Replication checking is off: models run user code (while loops, scans) whose loop carries
    start replicated and become device-varying, which the checker refuses; the solver itself
    states what is replicated (every output is ``psum``-ed over the ``data`` axis).
    """
    if hasattr(jax, "shard_map"):
        return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                             check_vma=False)
    from jax.experimental.shard_map import shard_map as legacy  # pragma: no cover (jax < 0.7)

    return legacy(f, mesh, in_specs, out_specs, check_rep=False)  # pragma: no cover
