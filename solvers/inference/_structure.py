"""The static structure of a problem: flat parameters, groups of alike experiments, model probes.

Nothing here compiles: models are only traced (`jax.eval_shape`), so bad input is reported before
any XLA compilation.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._problem import Experiment, InferenceProblem, Model, Parameter

__all__ = ["BucketPlan", "FlatParameters", "HostBucket", "build_buckets", "flat_parameters"]


@dataclass(frozen=True)
class FlatParameters:
    """Every fitted scalar: shared parameters, then each per-group copy (``"k[A]"``)."""

    names: tuple[str, ...]
    base: tuple[Parameter, ...]
    group: tuple[str | None, ...]
    index: Mapping[tuple[str, str | None], int]

    @property
    def log(self) -> tuple[bool, ...]:
        return tuple(p.log for p in self.base)

    def internal(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Initial values, lower and upper bounds, typical sizes, in the fitted coordinates."""
        x0, lo, hi, typical = [], [], [], []
        for p in self.base:
            if p.log:
                x0.append(math.log(p.initial))
                lo.append(math.log(p.lower) if p.lower > 0 else -math.inf)
                hi.append(math.log(p.upper) if math.isfinite(p.upper) else math.inf)
                typical.append(1.0)
            else:
                x0.append(p.initial)
                lo.append(p.lower)
                hi.append(p.upper)
                typical.append(p.scale or (abs(p.initial) if p.initial != 0 else 1.0))
        return (np.asarray(x0, dtype=np.float64), np.asarray(lo, dtype=np.float64),
                np.asarray(hi, dtype=np.float64), np.asarray(typical, dtype=np.float64))


def flat_parameters(problem: InferenceProblem) -> FlatParameters:
    names: list[str] = []
    base: list[Parameter] = []
    group: list[str | None] = []
    for p in problem.parameters:
        names.append(p.name)
        base.append(p)
        group.append(None)
    groups = list(dict.fromkeys(problem.group_of(e) for e in problem.experiments))
    for p in problem.per_experiment:
        for g in groups:
            names.append(f"{p.name}[{g}]")
            base.append(p)
            group.append(g)
    index = {(p.name, g): i for i, (p, g) in enumerate(zip(base, group))}
    return FlatParameters(tuple(names), tuple(base), tuple(group), index)


@dataclass(frozen=True)
class BucketPlan:
    """What is static about a group of experiments sharing one model and condition shapes.

    Hashable: it is part of the key under which the fit is compiled.
    """

    model: Model
    names: tuple[str, ...]      # the parameter names the model reads, in slot order
    keys: tuple[str, ...] | None  # output keys of a mapping-valued model
    width: int                  # observables per time
    sequential: bool            # experiments of a device run one after another (counted steps)

    def flatten(self, out: Any) -> jax.Array:
        """The model output as one vector ``(times * width,)``, time-major."""
        if self.keys is not None:
            out = jnp.stack([jnp.asarray(out[k]) for k in self.keys], axis=-1)
        out = jnp.asarray(out)
        return out.reshape(-1)


@dataclass
class HostBucket:
    """A bucket's experiments and their host-side index arrays (before padding and placement)."""

    plan: BucketPlan
    experiments: list[Experiment]
    times: list[np.ndarray]     # sorted union of measurement times, per experiment
    obs: list[np.ndarray]       # flat output index per observation row, per experiment
    n_times: int
    n_rows: int


class _MissingParameter(KeyError):
    pass


class _Tracking(Mapping):
    """The ``params`` a model sees while probed: records which names it reads."""

    def __init__(self, values: dict[str, Any], used: set[str]):
        self._values, self._used = values, used

    def __getitem__(self, name: str) -> Any:
        if name not in self._values:
            raise _MissingParameter(name)
        self._used.add(name)
        return self._values[name]

    def __contains__(self, name: object) -> bool:
        return name in self._values

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self._values else default

    def __iter__(self) -> Iterator[str]:
        self._used.update(self._values)
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def _condition_signature(e: Experiment) -> tuple[tuple[str, tuple[int, ...]], ...]:
    return tuple(sorted((k, np.shape(v)) for k, v in e.conditions.items()))


def _union_times(e: Experiment) -> tuple[np.ndarray, list[np.ndarray]]:
    union = np.unique(np.concatenate([m.times for m in e.measurements]))
    return union, [np.searchsorted(union, m.times) for m in e.measurements]


def _probe(model: Model, visible: tuple[str, ...], e: Experiment, times: np.ndarray
           ) -> tuple[tuple[str, ...], Any]:
    used: set[str] = set()
    dtype = jnp.result_type(float)

    def traced(theta, conditions, t):
        params = _Tracking({n: theta[i] for i, n in enumerate(visible)}, used)
        return model(params, conditions, t)

    try:
        out = jax.eval_shape(traced, jax.ShapeDtypeStruct((len(visible),), dtype),
                             {k: jnp.asarray(v, dtype) for k, v in e.conditions.items()},
                             jax.ShapeDtypeStruct(times.shape, dtype))
    except _MissingParameter as exc:
        name = exc.args[0]
        raise ValueError(f"the model of experiment {e.id!r} reads parameter {name!r}, which the "
                         f"problem does not declare (declared: {', '.join(visible) or 'none'}); "
                         f"add Parameter({name!r}, initial) to parameters= or per_experiment=")\
            from None
    except Exception as exc:
        exc.add_note(f"(while tracing the model of experiment {e.id!r} with "
                     f"{len(times)} times and conditions {sorted(e.conditions)})")
        raise
    return tuple(n for n in visible if n in used), out


def _output_layout(out: Any, n_times: int, e: Experiment) -> tuple[tuple[str, ...] | None, int]:
    if isinstance(out, Mapping):
        keys = tuple(sorted(out))
        if not keys or any(getattr(out[k], "shape", None) != (n_times,) for k in keys):
            shapes = {k: getattr(out[k], "shape", type(out[k]).__name__) for k in keys}
            raise ValueError(f"the model of experiment {e.id!r} returned a mapping with shapes "
                             f"{shapes}; each observable must have shape ({n_times},), one value "
                             "per time")
        return keys, len(keys)
    shape = getattr(out, "shape", None)
    if shape == (n_times,):
        return None, 1
    if shape is not None and len(shape) == 2 and shape[0] == n_times:
        return None, int(shape[1])
    raise ValueError(f"the model of experiment {e.id!r} returned {shape or type(out).__name__} "
                     f"for {n_times} times; return shape ({n_times},), ({n_times}, k) or a "
                     "mapping of observables to arrays of that length")


def _column(m_obs: int | str | None, keys: tuple[str, ...] | None, width: int, where: str) -> int:
    if m_obs is None:
        if width != 1:
            have = list(keys) if keys is not None else f"columns 0..{width - 1}"
            raise ValueError(f"{where}: the model returns {width} observables ({have}); say which "
                             "one this measurement observes with Measurement(observable=...)")
        return 0
    if isinstance(m_obs, str):
        if keys is None or m_obs not in keys:
            have = list(keys) if keys is not None else "an array, not a mapping"
            raise ValueError(f"{where}: observable {m_obs!r} is not an output of the model "
                             f"(outputs: {have})")
        return keys.index(m_obs)
    if keys is not None or not 0 <= m_obs < width:
        raise ValueError(f"{where}: observable {m_obs!r} is not an output of the model "
                         f"(outputs: {list(keys) if keys is not None else list(range(width))})")
    return m_obs


def build_buckets(problem: InferenceProblem, flat: FlatParameters) -> list[HostBucket]:
    """Group experiments by model and condition shapes; probe each model; check parameter use."""
    visible = tuple(dict.fromkeys(p.name for p in problem.parameters + problem.per_experiment))
    by_key: dict[Any, list[Experiment]] = {}
    for e in problem.experiments:
        try:
            hash(e.model)
        except TypeError:
            raise TypeError(f"the model of experiment {e.id!r} ({type(e.model).__name__}) is not "
                            "hashable; the fit is compiled once per model, so use a function or a "
                            "frozen dataclass") from None
        by_key.setdefault((e.model, _condition_signature(e)), []).append(e)
    buckets, used_flat = [], set()
    for (model, _), experiments in by_key.items():
        unions = [_union_times(e) for e in experiments]
        n_times = max(len(u) for u, _ in unions)
        padded = np.concatenate([unions[0][0], np.full(n_times - len(unions[0][0]),
                                                       unions[0][0][-1])])
        names, out = _probe(model, visible, experiments[0], padded)
        keys, width = _output_layout(out, n_times, experiments[0])
        times, obs = [], []
        for e, (union, positions) in zip(experiments, unions):
            rows = []
            for i, (m, pos) in enumerate(zip(e.measurements, positions)):
                col = _column(m.observable, keys, width, f"experiment {e.id!r}, measurement {i}")
                rows.append(pos * width + col)
            times.append(np.concatenate([union, np.full(n_times - len(union), union[-1])]))
            obs.append(np.concatenate(rows).astype(np.int32))
            group = problem.group_of(e)
            for n in names:
                used_flat.add(flat.index.get((n, None), flat.index.get((n, group))))
        plan = BucketPlan(model, names, keys, width, callable(getattr(model, "steps", None)))
        buckets.append(HostBucket(plan, experiments, times, obs, n_times,
                                  max(len(o) for o in obs)))
    for i, name in enumerate(flat.names):
        if i not in used_flat:
            where = ("any experiment's model" if flat.group[i] is None else
                     f"the model of any experiment in group {flat.group[i]!r}")
            raise ValueError(f"parameter {name!r} is not read by {where}, so the data cannot "
                             f"determine it; remove it from the problem or read "
                             f"params[{flat.base[i].name!r}] in the model")
    return buckets


def parameter_index(bucket: HostBucket, problem: InferenceProblem,
                    flat: FlatParameters) -> np.ndarray:
    """For each experiment of the bucket, the flat index of each model parameter slot."""
    rows = []
    for e in bucket.experiments:
        group = problem.group_of(e)
        rows.append([flat.index[(n, None)] if (n, None) in flat.index else flat.index[(n, group)]
                     for n in bucket.plan.names])
    return np.asarray(rows, dtype=np.int32).reshape(len(rows), len(bucket.plan.names))
