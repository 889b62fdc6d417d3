"""Device meshes, device groups and the layout that places a problem on a mesh."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import jax
import numpy as np
from jax.sharding import Mesh

__all__ = ["Layout", "check_model_groups", "global_mesh", "mesh_groups"]

logger = logging.getLogger(__name__)


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def _normalize_axes(axes: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(axes, str):
        axes = (axes,)
    axes = tuple(axes)
    if not axes or not all(isinstance(a, str) and a for a in axes):
        raise ValueError(f"mesh axes must be a non-empty tuple of names, got {axes!r}; "
                         "e.g. global_mesh(('data',)) or global_mesh(('data', 'model'), "
                         "shape=(4, 2))")
    if len(set(axes)) != len(axes):
        raise ValueError(f"mesh axis names must be distinct, got {axes!r}")
    return axes


def _resolve_shape(axes: tuple[str, ...], shape: Sequence[int] | None, n: int) -> tuple[int, ...]:
    if shape is None:
        if len(axes) == 1:
            return (n,)
        example = ", ".join(["-1"] + ["1"] * (len(axes) - 1))
        raise ValueError(f"global_mesh({axes!r}) needs shape= for {len(axes)} axes: JAX sees {n} "
                         f"devices; e.g. shape=({example}) (-1 takes the remaining devices)")
    shape = tuple(shape)
    if len(shape) != len(axes):
        raise ValueError(f"shape {shape!r} has {len(shape)} entries but the mesh has "
                         f"{len(axes)} axes {axes!r}; give one size per axis")
    if not all(isinstance(s, (int, np.integer)) and (s >= 1 or s == -1) for s in shape):
        raise ValueError(f"shape {shape!r} must hold positive integers (at most one -1)")
    if list(shape).count(-1) > 1:
        raise ValueError(f"shape {shape!r} has more than one -1; give all sizes but one")
    known = math.prod(s for s in shape if s != -1)
    for axis, size in zip(axes, shape):
        if size != -1 and n % size:
            raise ValueError(f"shape {shape!r}: axis {axis!r} of size {size} does not divide the "
                             f"{n} devices JAX sees; use a divisor of {n} ({_divisors(n)})")
    if n % known:
        raise ValueError(f"shape {shape!r} needs a multiple of {known} devices but JAX sees {n}; "
                         f"choose sizes whose product divides {n}")
    if -1 in shape:
        shape = tuple(n // known if s == -1 else int(s) for s in shape)
    elif known != n:
        raise ValueError(f"shape {shape!r} covers {known} devices but JAX sees {n}; the sizes "
                         f"must multiply to {n} (or use -1 for one axis)")
    return tuple(int(s) for s in shape)


def global_mesh(axes: str | Sequence[str], shape: Sequence[int] | None = None) -> Mesh:
    """A mesh over every device JAX sees, in every process.

    Arguments:
        axes: the axis names, e.g. ``("data",)`` or ``("data", "model")``.
        shape: the size of each axis; needed for more than one axis. One entry may be ``-1``
            for "the remaining devices". The sizes must multiply to the device count.

    Returns:
        A `jax.sharding.Mesh`. Devices are ordered as `jax.devices()` orders them (by process,
        then id), so the devices of one group on the last axis sit in one process where they can.

    Raises:
        ValueError: when the axes are malformed or the shape does not divide the device count.
    """
    axes = _normalize_axes(axes)
    devices = jax.devices()
    shape = _resolve_shape(axes, shape, len(devices))
    mesh = Mesh(np.array(devices, dtype=object).reshape(shape), axes)
    logger.debug("global_mesh: axes %s, shape %s over %d devices", axes, shape, len(devices))
    return mesh


def mesh_groups(mesh: Mesh, group_shape: Sequence[int], *, per_process: int | None = None
                ) -> list[tuple[int, ...]] | list[tuple[tuple[int, ...], ...]]:
    """Split a mesh into blocks of ``group_shape`` devices and return each block's device ids.

    ``mesh_groups(global_mesh(("data",)), (1,))`` is ``[(0,), (1,), ...]``: one device per
    group, the form ``campaign.checkpointed_map(..., device_groups=...)`` takes. Only the mesh's
    device objects are read; no backend is started beyond what building the mesh did.

    Arguments:
        mesh: a `jax.sharding.Mesh`, e.g. from `global_mesh`.
        group_shape: the block size along each mesh axis; each must divide that axis.
        per_process: devices per process inside a group, for groups whose tasks run on several
            processes at once (one process per GPU): ``mesh_groups(mesh, (2,), per_process=1)``
            is ``[((0,), (1,)), ((2,), (3,)), ...]``. ``None`` (default): one process per group.

    Returns:
        A list of tuples of ``Device.id`` integers, blocks in row-major order over the mesh and
        devices in row-major order inside a block; with ``per_process``, each block split into
        consecutive tuples of ``per_process`` ids, one per process.
    """
    if not isinstance(mesh, Mesh):
        raise TypeError(f"mesh_groups needs a jax.sharding.Mesh, got {type(mesh).__name__}; "
                        "build one with global_mesh(('data',))")
    grid = np.asarray(mesh.devices)
    group_shape = tuple(group_shape)
    if len(group_shape) != grid.ndim:
        raise ValueError(f"group_shape {group_shape!r} has {len(group_shape)} entries but the "
                         f"mesh has axes {tuple(mesh.axis_names)!r} of shape {grid.shape}; give "
                         f"one block size per axis, e.g. {(1,) * grid.ndim!r}")
    for axis, size, block in zip(mesh.axis_names, grid.shape, group_shape):
        if not isinstance(block, (int, np.integer)) or block < 1 or size % block:
            raise ValueError(f"group_shape {group_shape!r}: block {block!r} on axis {axis!r} "
                             f"must be a positive divisor of the axis size {size} "
                             f"({_divisors(size)})")
    counts = [size // block for size, block in zip(grid.shape, group_shape)]
    groups = []
    for index in np.ndindex(*counts):
        cells = grid[tuple(slice(i * b, (i + 1) * b) for i, b in zip(index, group_shape))]
        groups.append(tuple(int(d.id) for d in cells.reshape(-1)))
    if per_process is None:
        return groups
    size = len(groups[0])
    if not isinstance(per_process, (int, np.integer)) or per_process < 1 or size % per_process:
        raise ValueError(f"per_process={per_process!r} must be a positive divisor of the "
                         f"{size} devices of a group of shape {group_shape!r} ({_divisors(size)}),"
                         f" e.g. mesh_groups(mesh, {group_shape!r}, per_process=1)")
    return [tuple(g[i:i + per_process] for i in range(0, size, per_process)) for g in groups]


def check_model_groups(devices: np.ndarray, axis_names: Sequence[str]) -> None:
    """Refuse a grid of devices whose ``model`` groups mix one-process and several-process groups.

    A model group (the devices along the ``model`` axis at one index of the other axes) factors
    one matrix: within one process by cuDSS's multi-GPU mode, across processes by its multi-node
    mode. One program runs one of the two, so the groups must agree. Only each device's
    ``process_index`` is read (any objects with that attribute will do).

    Raises:
        ValueError: naming a one-process and a several-process group, and the fix.
    """
    axis_names = tuple(axis_names)
    if "model" not in axis_names:
        return
    grid = np.moveaxis(np.asarray(devices, dtype=object), axis_names.index("model"), -1)
    groups = grid.reshape(-1, grid.shape[-1])
    spans = [sorted({int(d.process_index) for d in group}) for group in groups]
    single = [i for i, s in enumerate(spans) if len(s) == 1]
    several = [i for i, s in enumerate(spans) if len(s) > 1]
    if single and several:
        i, j = single[0], several[0]
        raise ValueError(
            f"the mesh's 'model' groups mix one-process and several-process devices: group {i} "
            f"lies in process {spans[i][0]}, group {j} spans processes {spans[j]}; a program "
            "factors either within a process (multi-GPU) or across processes (multi-node, "
            "DIFFSOUP_MGMN=1), not both. Give the 'model' axis a size that divides the devices "
            "per process, or one that is a multiple of it, e.g. global_mesh(('data', 'model'), "
            "shape=(-1, jax.local_device_count()))")


@dataclass(frozen=True)
class Layout:
    """Where a problem runs: a device mesh, and whether to balance experiments between devices.

    Attributes:
        mesh: a `jax.sharding.Mesh`; inference splits experiments along its ``"data"`` axis and
            replicates them along the others. ``None`` runs on one device.
        balance_steps: ``None`` (default) reassigns experiments between devices by their step
            counts whenever a device holds more than one; ``True`` the same; ``False`` keeps the
            initial assignment (experiments in order, in equal contiguous blocks).

    Raises:
        ValueError: when the mesh's ``model`` groups mix one-process and several-process devices
            (`check_model_groups`).
    """

    mesh: Mesh | None = None
    balance_steps: bool | None = None

    def __post_init__(self) -> None:
        if self.mesh is not None and not isinstance(self.mesh, Mesh):
            raise TypeError(f"Layout(mesh=...) needs a jax.sharding.Mesh or None, got "
                            f"{type(self.mesh).__name__}; build one with global_mesh(('data',))")
        if self.balance_steps not in (None, True, False):
            raise TypeError(f"Layout(balance_steps=...) is None, True or False, got "
                            f"{self.balance_steps!r}")
        if self.mesh is not None:
            check_model_groups(self.mesh.devices, self.mesh.axis_names)
