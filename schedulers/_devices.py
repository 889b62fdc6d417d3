"""Device groups and visible GPUs, found without importing JAX or touching a GPU."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

#: A device group: device ids run by one process, ``(0, 1)``, or one tuple of device ids per
#: process of a group that runs each task on several processes at once, ``((0,), (1,))``.
Group = tuple[int, ...] | tuple[tuple[int, ...], ...]

_EXAMPLE = "e.g. [(0,), (1,)], or [((0,), (1,)), ((2,), (3,))] for groups of two processes"


def _is_device(d: Any) -> bool:
    return isinstance(d, int) and not isinstance(d, bool) and d >= 0


def _is_nested(group: tuple[Any, ...]) -> bool:
    return any(isinstance(p, (tuple, list)) for p in group)


def group_processes(group: Group) -> tuple[tuple[int, ...], ...]:
    """The device ids of each process of a normalized group: ``(0, 1)`` gives ``((0, 1),)``."""
    return group if _is_nested(group) else (group,)  # type: ignore[return-value]


def group_devices(group: Group) -> tuple[int, ...]:
    """Every device id of a normalized group, in order: ``((0,), (1,))`` gives ``(0, 1)``."""
    return tuple(d for process in group_processes(group) for d in process)


def _check_group(i: int, group: tuple[Any, ...], several_processes: bool) -> Group:
    if _is_nested(group):
        processes = tuple(tuple(p) if isinstance(p, (tuple, list)) else p for p in group)
        for j, process in enumerate(processes):
            if not isinstance(process, tuple) or not process or not all(map(_is_device, process)):
                raise ValueError(
                    f"device group {i} is {group!r}; process {j} of it is {process!r}, but each "
                    "process of a group needs a non-empty tuple of device ids (ints >= 0), "
                    "e.g. ((0,), (1,)) for two processes of one device each"
                )
        if len(processes) == 1:
            return processes[0]
        if not several_processes:
            flat = tuple(d for p in processes for d in p)
            raise ValueError(
                f"device group {i} is {group!r}, a group of {len(processes)} processes; this "
                f"scheduler runs each group in one process. Give it as {flat!r}, or run it with "
                "execution='processes'"
            )
        return processes
    if not group or not all(map(_is_device, group)):
        raise ValueError(
            f"device group {i} is {group!r}; a group is a non-empty tuple of device ids "
            "(ints >= 0), e.g. (0,) or (0, 1), or a tuple of them per process, e.g. ((0,), (1,))"
        )
    return group


def normalize_groups(device_groups: Any, *,
                     several_processes: bool = False) -> list[Group] | None:
    """Check device groups: a list of tuples of device ids (``solvers.mesh_groups`` gives one).

    A group may also be a tuple of per-process tuples, ``((0,), (1,))``: its tasks run on two
    processes at once (``solvers.mesh_groups(mesh, shape, per_process=1)`` gives such groups).
    A group of one process, ``((0, 1),)``, is the plain group ``(0, 1)``.

    Args:
        device_groups: the groups, or None.
        several_processes: whether groups of several processes are allowed (schedulers that
            run them say so); otherwise they are refused.

    Returns None for None. Raises `ValueError` for an empty list, a group that is not a sequence
    of non-negative ints (or of such sequences), an empty process, a device in two groups or in
    two processes, or a group of several processes where they are not allowed.
    """
    if device_groups is None:
        return None
    try:
        groups = [tuple(g) for g in device_groups]
    except TypeError:
        raise ValueError(
            f"device_groups must be a list of tuples of device ids, {_EXAMPLE}, got "
            f"{device_groups!r}"
        ) from None
    if not groups:
        raise ValueError("device_groups is empty; give at least one group, e.g. [(0,)]")
    checked = [_check_group(i, g, several_processes) for i, g in enumerate(groups)]
    seen: dict[int, tuple[int, int]] = {}
    for i, group in enumerate(checked):
        for j, process in enumerate(group_processes(group)):
            for d in process:
                if d in seen and seen[d][0] != i:
                    raise ValueError(
                        f"device {d} is in group {seen[d][0]} and in group {i}; tasks would "
                        f"share it. Give each device to one group, {_EXAMPLE}"
                    )
                if d in seen:
                    raise ValueError(
                        f"device {d} is in process {seen[d][1]} and in process {j} of device "
                        f"group {i} {group!r}; give each device to one process, e.g. "
                        "((0,), (1,))"
                    )
                seen[d] = (i, j)
    return checked


_COUNT_FLAG = "--xla_force_host_platform_device_count"


def device_environment(devices: tuple[int, ...],
                       inherited: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables that give a worker process exactly ``devices``, set before it starts.

    ``CUDA_VISIBLE_DEVICES`` names the GPUs. Where JAX runs on CPUs (no GPU), the devices are
    emulated: ``JAX_NUM_CPU_DEVICES`` (read by JAX's ``jax_num_cpu_devices``) and, for JAX
    versions before it, ``XLA_FLAGS``'s ``--xla_force_host_platform_device_count`` are set to
    ``len(devices)``, replacing any count in ``inherited`` (default: this process's
    environment), whose other XLA flags are kept.
    """
    inherited = os.environ if inherited is None else inherited
    kept = re.sub(rf"(^|\s){_COUNT_FLAG}(=\S*)?(?=\s|$)", " ", inherited.get("XLA_FLAGS", ""))
    count = str(len(devices))
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, devices)),
            "JAX_NUM_CPU_DEVICES": count,
            "XLA_FLAGS": " ".join(kept.split() + [f"{_COUNT_FLAG}={count}"])}


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
