"""The GPU sparse backend (NVIDIA cuDSS): the name is reserved until its GPU build exists.

It will be an XLA FFI custom call of our own, compiled against ``jax.ffi.include_dir()`` and the
headers of the ``nvidia-cudss-cu12`` (or cu13) wheel, with ``libcudss`` loaded lazily so that CPU
installs never need it; on a ``model`` mesh axis it factors one matrix across devices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import jax

from ._base import LinearSolver
from ._pattern import Pattern

__all__ = ["CuDSS", "cudss_available"]


def cudss_available() -> bool:
    """Whether the cuDSS backend is built and usable here (not yet)."""
    return False


@dataclass(frozen=True)
class CuDSS(LinearSolver):
    """Sparse LU on NVIDIA GPUs through cuDSS (reserved; raises until the GPU build exists)."""

    name: ClassVar[str] = "cudss"
    stateful: ClassVar[bool] = True

    def _missing(self) -> RuntimeError:
        platform = jax.default_backend()
        return RuntimeError(
            "linear='cudss' needs the GPU build of the cuDSS backend (an XLA FFI extension built "
            "against nvidia-cudss-cu12/cu13), which this install does not have (JAX platform: "
            f"{platform!r}); use linear='klu' on a CPU, linear='dense' anywhere, or "
            "linear='auto', which picks the best backend available here")

    def analyse(self, pattern: Pattern) -> Any:
        raise self._missing()

    def empty(self, symbolic: Any, dtype: Any) -> Any:
        raise self._missing()

    def factor(self, symbolic: Any, values: jax.Array) -> Any:
        raise self._missing()

    def refactor(self, symbolic: Any, numeric: Any, values: jax.Array) -> Any:
        raise self._missing()

    def solve(self, symbolic: Any, numeric: Any, b: jax.Array) -> jax.Array:
        raise self._missing()
