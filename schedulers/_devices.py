"""Device groups and visible GPUs, found without importing JAX or touching a GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any


def normalize_groups(device_groups: Any) -> list[tuple[int, ...]] | None:
    """Check device groups: a list of tuples of device ids (``solvers.mesh_groups`` gives one).

    Returns None for None. Raises `ValueError` for an empty list, a group that is not a sequence
    of non-negative ints, or a device in two groups.
    """
    if device_groups is None:
        return None
    try:
        groups = [tuple(g) for g in device_groups]
    except TypeError:
        raise ValueError(
            f"device_groups must be a list of tuples of device ids, e.g. [(0,), (1,)], got "
            f"{device_groups!r}"
        ) from None
    if not groups:
        raise ValueError("device_groups is empty; give at least one group, e.g. [(0,)]")
    seen: dict[int, int] = {}
    for i, group in enumerate(groups):
        if not group or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                for d in group):
            raise ValueError(
                f"device group {i} is {group!r}; a group is a non-empty tuple of device ids "
                "(ints >= 0), e.g. (0,) or (0, 1)"
            )
        for d in group:
            if d in seen:
                raise ValueError(
                    f"device {d} is in group {seen[d]} and in group {i}; tasks would share it. "
                    "Give each device to one group"
                )
            seen[d] = i
    return groups


def visible_gpus() -> list[int]:
    """The GPU ids this process may use: ``CUDA_VISIBLE_DEVICES`` if set, else ``nvidia-smi -L``."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        ids = [p.strip() for p in env.split(",") if p.strip()]
        return [int(p) for p in ids if p.isdigit()]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    return [i for i, line in enumerate(out.stdout.splitlines()) if line.startswith("GPU ")]
