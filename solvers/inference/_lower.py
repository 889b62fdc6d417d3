"""`lower`: pose a problem on a layout — pad, assign experiments to devices, place the arrays."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .._mesh import Layout
from . import _balance
from ._problem import InferenceProblem
from ._structure import (
    BucketPlan,
    FlatParameters,
    HostBucket,
    build_buckets,
    flat_parameters,
    parameter_index,
)

__all__ = ["LoweredProblem", "Plan", "lower"]

logger = logging.getLogger(__name__)

DATA = "data"


@dataclass(frozen=True)
class Plan:
    """The static part of a lowered problem: with the method, the key of the compiled fit."""

    mesh: Mesh
    buckets: tuple[BucketPlan, ...]
    log: tuple[bool, ...]


@dataclass(frozen=True, eq=False)
class LoweredProblem:
    """A problem placed on a mesh, ready for `optsolve`.

    Attributes:
        problem: the `InferenceProblem` it came from.
        layout: the `Layout` it was placed with.
        names: the fitted scalars, shared parameters first, then per-group copies ``"k[A]"``.
        assignment: for each position on the ``data`` axis, the ids of the experiments it holds.
        work: each position's total work (solver steps, or the experiments' ``work``), or
            ``None`` when not measured.
        experiment_work: the work of each experiment by id, where measured.
        balanced: whether experiments were reassigned by work (``Layout.balance_steps``).
        n_residuals: the number of observations (padding excluded).
        noise_known: whether every measurement gives its noise (else covariances are scaled).
        slots: for each group of alike experiments (in ``plan.buckets`` order), the experiment
            id in each stacked slot (device order), ``None`` for zero-weight padding; empty
            where not known (experiments evaluated by other processes).
    """

    problem: InferenceProblem
    layout: Layout
    plan: Plan
    flat: FlatParameters
    data: tuple[dict[str, Any], ...]
    x0: jax.Array
    lower: jax.Array
    upper: jax.Array
    typical: jax.Array
    assignment: tuple[tuple[str, ...], ...]
    work: tuple[float, ...] | None
    experiment_work: dict[str, float]
    balanced: bool
    n_residuals: int
    noise_known: bool
    slots: tuple[tuple[str | None, ...], ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return self.flat.names

    @property
    def mesh(self) -> Mesh:
        return self.plan.mesh


def _mesh_of(layout: Layout) -> Mesh:
    if layout.mesh is None:
        return Mesh(np.array(jax.local_devices()[:1], dtype=object), (DATA,))
    mesh = layout.mesh
    if DATA not in mesh.axis_names:
        raise ValueError(f"the layout's mesh has axes {tuple(mesh.axis_names)!r} and no 'data' "
                         "axis; inference splits experiments along 'data': use "
                         "global_mesh(('data',)) or global_mesh(('data', 'model'), shape=...)")
    return mesh


def natural(log: Any, x: np.ndarray) -> np.ndarray:
    """Natural units of fitted coordinates: ``exp`` of the log parameters only.

    ``exp`` is taken of the log parameters' entries alone, so a linear parameter above ~709
    neither overflows nor warns.
    """
    log = np.asarray(log, dtype=bool)
    x = np.asarray(x, dtype=np.float64)
    out = x.copy()
    out[log] = np.exp(x[log])
    return out


@partial(jax.jit, static_argnums=(0, 1))
def _steps(model: Any, names: tuple[str, ...], theta: jax.Array, conditions: dict[str, Any],
           times: jax.Array) -> jax.Array:
    """Each experiment's solver steps (vmapped; compiled once per model)."""
    def one(theta, conditions, times):
        return model.steps(dict(zip(names, theta)), conditions, times)

    return jax.vmap(one)(theta, conditions, times)


def _measure_work(bucket: HostBucket, index: np.ndarray, theta0: np.ndarray) -> list[float] | None:
    """Solver steps per experiment at the initial parameters, or the experiments' ``work``."""
    plan = bucket.plan
    if plan.sequential:
        conditions = {k: np.stack([e.conditions[k] for e in bucket.experiments])
                      for k in bucket.experiments[0].conditions}
        counts = _steps(plan.model, plan.names, theta0[index], conditions,
                        np.stack(bucket.times))
        return [float(c) for c in np.asarray(counts)]
    given = [e.work for e in bucket.experiments]
    if all(w is None for w in given):
        return None
    known = [w for w in given if w is not None]
    mean = sum(known) / len(known)
    return [mean if w is None else w for w in given]


def _place(host: np.ndarray, sharding: NamedSharding) -> jax.Array:
    return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])


def _bucket_arrays(bucket: HostBucket, order: list[int], index: np.ndarray,
                   sharding: NamedSharding) -> dict[str, Any]:
    """Stack a bucket's experiments in device order; ``-1`` slots are zero-weight padding."""
    exps = bucket.experiments
    real = [max(i, 0) for i in order]   # padding repeats experiment 0's inputs
    n_rows = bucket.n_rows
    obs = np.zeros((len(order), n_rows), np.int32)
    weights = np.zeros((len(order), n_rows))
    for slot, i in enumerate(order):
        if i < 0:
            continue
        rows = bucket.obs[i]
        obs[slot, :len(rows)] = rows
        noise = [np.ones(m.times.shape) if m.noise is None else
                 np.broadcast_to(m.noise, m.times.shape) for m in exps[i].measurements]
        weights[slot, :len(rows)] = 1.0 / np.concatenate(noise)
    loaded: dict[int, np.ndarray] = {}

    def load(i: int) -> np.ndarray:
        if i not in loaded:
            e = exps[i]
            parts = []
            for j, m in enumerate(e.measurements):
                where = f"experiment {e.id!r}, measurement {j}"
                parts.append(m.check_values(m.values(), where) if m.lazy else m.values)
            loaded[i] = np.concatenate(parts)
        return loaded[i]

    def values(idx: tuple[slice, ...] | None) -> np.ndarray:
        assert idx is not None  # typed Optional by JAX, which always passes a shard's index
        slots = range(len(order))[idx[0]]
        block = np.zeros((len(slots), n_rows))
        for j, slot in enumerate(slots):
            if order[slot] >= 0:
                v = load(order[slot])
                block[j, :len(v)] = v
        return block[(slice(None),) + tuple(idx[1:])]

    conditions = {k: _place(np.stack([exps[i].conditions[k] for i in real]), sharding)
                  for k in exps[0].conditions}
    return {
        "times": _place(np.stack([bucket.times[i] for i in real]), sharding),
        "conditions": conditions,
        "index": _place(index[real], sharding),
        "obs": _place(obs, sharding),
        "weights": _place(weights, sharding),
        "values": jax.make_array_from_callback((len(order), n_rows), sharding, values),
    }


def _assign(bucket: HostBucket, index: np.ndarray, theta0: np.ndarray, layout: Layout,
            n_dev: int, device_work: list[float]) -> tuple[list[list[int]], list[float] | None]:
    """The experiments of ``bucket`` on each device, and their work where it is known.

    Contiguous blocks; or, with ``layout.balance_steps`` not ``False`` and more than one
    experiment per device, longest-first by measured work on top of ``device_work`` (the work of
    the buckets placed before).
    """
    n = len(bucket.experiments)
    groups = _balance.contiguous(n, n_dev)
    want = layout.balance_steps is not False and -(-n // n_dev) > 1 and n_dev > 1
    work = _measure_work(bucket, index, theta0) if want else None
    if work is None:
        if want and layout.balance_steps:
            logger.info("balance_steps=True but the model has no steps() and the experiments "
                        "no work=; keeping the initial assignment")
        return groups, None
    before = _balance.loads(groups, work)
    groups = _balance.longest_first(work, n_dev, start=device_work)
    logger.info("balance_steps: %d experiments of %s on %d devices: work per device "
                "%s before, %s after", n, getattr(bucket.plan.model, "__name__",
                                                  type(bucket.plan.model).__name__),
                n_dev, before, _balance.loads(groups, work))
    return groups, work


def lower(problem: InferenceProblem, layout: Layout | None = None) -> LoweredProblem:
    """Pose a problem on a layout: check it, assign experiments to devices, place the data.

    Experiments that share a model and condition shapes are stacked and split along the mesh's
    ``data`` axis in equal blocks; when the count does not divide the axis, zero-weight copies pad
    the last blocks. With ``layout.balance_steps`` not ``False`` and more than one experiment per
    device, experiments are reassigned longest-first by their solver steps (models with a
    ``steps`` method, e.g. `ODEModel`, measured at the initial parameters) or their ``work``.

    Arguments:
        problem: an `InferenceProblem` (or `Study`).
        layout: a `Layout`; ``None`` runs on one device.

    Returns:
        A `LoweredProblem` for `optsolve`.

    Raises:
        ValueError, TypeError: for a mesh without a ``data`` axis, a parameter a model reads but
            the problem lacks (or one no model reads), bad observables or non-finite data — all
            before anything is compiled.
    """
    if not isinstance(problem, InferenceProblem):
        raise TypeError(f"lower() takes an InferenceProblem (or Study), got "
                        f"{type(problem).__name__}")
    layout = Layout() if layout is None else layout
    if not isinstance(layout, Layout):
        raise TypeError(f"layout must be a Layout, got {type(layout).__name__}; e.g. "
                        "Layout(mesh=global_mesh(('data',)))")
    mesh = _mesh_of(layout)
    flat = flat_parameters(problem)
    buckets = build_buckets(problem, flat)
    x0, lo, hi, typical = flat.internal()
    theta0 = natural(flat.log, x0)
    n_dev = mesh.shape[DATA]
    sharding = NamedSharding(mesh, PartitionSpec(DATA))
    replicated = NamedSharding(mesh, PartitionSpec())

    data: list[dict[str, Any]] = []
    slot_ids: list[tuple[str | None, ...]] = []
    per_device: list[list[str]] = [[] for _ in range(n_dev)]
    device_work = [0.0] * n_dev
    experiment_work: dict[str, float] = {}
    balanced, work_known = False, True
    for bucket in buckets:
        index = parameter_index(bucket, problem, flat)
        n = len(bucket.experiments)
        slots = -(-n // n_dev)
        groups, work = _assign(bucket, index, theta0, layout, n_dev, device_work)
        if work is not None:
            experiment_work.update((e.id, w) for e, w in zip(bucket.experiments, work))
            balanced = True
            device_work = [a + b for a, b in zip(device_work, _balance.loads(groups, work))]
        else:
            work_known = False
        order = []
        for d, g in enumerate(groups):
            order += g + [-1] * (slots - len(g))
            per_device[d] += [bucket.experiments[i].id for i in g]
        data.append(_bucket_arrays(bucket, order, index, sharding))
        slot_ids.append(tuple(None if i < 0 else bucket.experiments[i].id for i in order))
        logger.debug("lowered %d experiments (%d slots of %d times, %d rows) on %d devices",
                     n, slots * n_dev, bucket.n_times, bucket.n_rows, n_dev)

    n_residuals = sum(len(o) for b in buckets for o in b.obs)
    noise_known = all(m.noise is not None for e in problem.experiments for m in e.measurements)
    dtype = jnp.result_type(float)

    def put(a: np.ndarray) -> jax.Array:
        return _place(np.asarray(a, dtype=dtype), replicated)

    return LoweredProblem(
        problem=problem, layout=layout,
        plan=Plan(mesh, tuple(b.plan for b in buckets), flat.log), flat=flat, data=tuple(data),
        x0=put(x0), lower=put(lo), upper=put(hi), typical=put(typical),
        assignment=tuple(tuple(ids) for ids in per_device),
        work=tuple(device_work) if balanced and work_known else None,
        experiment_work=experiment_work, balanced=balanced,
        n_residuals=n_residuals, noise_known=noise_known, slots=tuple(slot_ids))
