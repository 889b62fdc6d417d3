"""What a fit is about: parameters, measurements, experiments and the inference problem.

A *model* is a function ``model(params, conditions, times)``: ``params`` maps parameter names to
scalars (natural units), ``conditions`` is the experiment's mapping of condition names to arrays,
``times`` a 1-D array (the sorted union of the experiment's measurement times). It returns the
predictions at ``times``: an array ``(len(times),)`` for one observable, ``(len(times), k)`` for
``k`` observables (a measurement picks one with ``observable=i``), or a mapping of observable
names to ``(len(times),)`` arrays (``observable="name"``). It must be traceable by JAX; closed
forms, `ODEModel` and (later) `pdesolve` all qualify.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Experiment", "InferenceProblem", "Measurement", "Parameter", "Study"]

Model = Callable[..., Any]


def _finite_float(value: Any, what: str) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{what} must be a number, got {value!r}") from None
    return out


@dataclass(frozen=True)
class Parameter:
    """A fitted parameter.

    Attributes:
        name: the key the model reads from ``params``.
        initial: the starting value (natural units).
        lower, upper: bounds (natural units); the fit never leaves them.
        log: fit ``log(value)`` instead of ``value`` (needs ``lower >= 0``): for positive rate
            constants and scales spanning decades. Reported values and covariances stay natural.
        scale: a typical magnitude, used by the step-size convergence test; default
            ``abs(initial)`` (or 1 when that is 0). Ignored when ``log=True``.
    """

    name: str
    initial: float
    lower: float = -math.inf
    upper: float = math.inf
    log: bool = False
    scale: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or "[" in self.name:
            raise ValueError(f"Parameter name must be a non-empty string without '[', got "
                             f"{self.name!r}")
        for attr in ("initial", "lower", "upper"):
            object.__setattr__(self, attr, _finite_float(getattr(self, attr),
                                                         f"Parameter {self.name!r} {attr}"))
        if not math.isfinite(self.initial):
            raise ValueError(f"Parameter {self.name!r} initial value must be finite, got "
                             f"{self.initial!r}")
        if math.isnan(self.lower) or math.isnan(self.upper) or not self.lower < self.upper:
            raise ValueError(f"Parameter {self.name!r} needs lower < upper, got lower="
                             f"{self.lower!r}, upper={self.upper!r}")
        if not self.lower <= self.initial <= self.upper:
            raise ValueError(f"Parameter {self.name!r} initial value {self.initial!r} lies outside "
                             f"its bounds [{self.lower!r}, {self.upper!r}]; start inside them")
        if self.log and (self.lower < 0 or self.initial <= 0):
            raise ValueError(f"Parameter {self.name!r} has log=True, which needs lower >= 0 and "
                             f"initial > 0; got lower={self.lower!r}, initial={self.initial!r}")
        if self.scale is not None:
            scale = _finite_float(self.scale, f"Parameter {self.name!r} scale")
            if not (math.isfinite(scale) and scale > 0):
                raise ValueError(f"Parameter {self.name!r} scale must be positive and finite, "
                                 f"got {self.scale!r}")
            object.__setattr__(self, "scale", scale)


@dataclass(frozen=True, eq=False)
class Measurement:
    """Observations of one observable of an experiment.

    Attributes:
        times: 1-D array of observation times.
        values: array of ``len(times)`` observed values, or a function of no arguments returning
            it; a function is called only on the process that owns the experiment (in one
            process: when the problem is lowered).
        noise: standard deviation of the observation noise (scalar or per time). ``None``: unknown;
            residuals are unweighted and the covariance is scaled by the residual variance.
        observable: which model output this measures: ``None`` for a model with one output, an
            integer column of a 2-D output, or a key of a mapping output.
    """

    times: Any
    values: Any
    noise: Any = None
    observable: int | str | None = None

    def __post_init__(self) -> None:
        times = np.asarray(self.times, dtype=np.float64)
        object.__setattr__(self, "times", times)
        if not callable(self.values):
            object.__setattr__(self, "values", np.asarray(self.values, dtype=np.float64))
        if self.noise is not None:
            object.__setattr__(self, "noise", np.asarray(self.noise, dtype=np.float64))
        if not (self.observable is None or isinstance(self.observable, (int, str))):
            raise TypeError(f"Measurement observable is None, an int or a str, got "
                            f"{self.observable!r}")

    @property
    def lazy(self) -> bool:
        """Whether ``values`` is a loader function."""
        return callable(self.values)

    def check(self, where: str) -> None:
        """Validate times and noise (and values, when given as an array); ``where`` names it."""
        t = self.times
        if t.ndim != 1 or t.size == 0:
            raise ValueError(f"{where}: times must be a non-empty 1-D array, got shape {t.shape}")
        _no_nan(t, f"{where}: times", t)
        if self.noise is not None:
            noise = self.noise
            if noise.ndim not in (0, 1) or (noise.ndim == 1 and noise.shape != t.shape):
                raise ValueError(f"{where}: noise must be a scalar or have the shape of times "
                                 f"{t.shape}, got shape {noise.shape}")
            bad = ~(np.isfinite(noise) & (noise > 0))
            if bad.any():
                i = int(np.flatnonzero(np.broadcast_to(bad, t.shape))[0])
                value = float(np.broadcast_to(noise, t.shape)[i])
                raise ValueError(f"{where}: noise must be positive and finite, got {value!r} at "
                                 f"index {i}; use noise=None when the noise level is unknown")
        if not self.lazy:
            self.check_values(self.values, where)

    def check_values(self, values: Any, where: str) -> np.ndarray:
        """Validate loaded values against the times; return them as float64."""
        try:
            values = np.asarray(values, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{where}: values must be numbers ({exc})") from None
        if values.shape != self.times.shape:
            raise ValueError(f"{where}: values have shape {values.shape} but times have shape "
                             f"{self.times.shape}; give one value per time")
        _no_nan(values, f"{where}: values", self.times)
        return values


def _no_nan(array: np.ndarray, what: str, times: np.ndarray) -> None:
    bad = ~np.isfinite(array)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{what} contain {bad.sum()} non-finite entries, the first "
                         f"{float(array[i])!r} at index {i} (time {float(times[i]):.6g}); drop "
                         "those observations (and their times) before building the Measurement")


@dataclass(frozen=True, eq=False, init=False)
class Experiment:
    """One experiment: a model, its conditions and what was measured.

    Attributes:
        id: a unique name, e.g. ``"A-1"``.
        model: the model function (see the module docstring).
        conditions: mapping of condition names to numbers or arrays, passed to the model.
        measurements: one `Measurement` or a sequence of them (at least one).
        work: an optional estimate of this experiment's cost (e.g. solver steps) used by
            ``Layout(balance_steps=...)`` when the model cannot count its own steps.

    Once built, ``conditions`` is a dict of float64 arrays and ``measurements`` a tuple.
    """

    id: str
    model: Model
    conditions: dict[str, np.ndarray]
    measurements: tuple[Measurement, ...]
    work: float | None

    # Written out (not generated) so that the fields hold the checked values with their own
    # types while the arguments take what users pass.
    def __init__(self, id: str, model: Model, conditions: Mapping[str, Any] | None = None,
                 measurements: Measurement | Sequence[Measurement] = (),
                 work: float | None = None) -> None:
        if not isinstance(id, str) or not id:
            raise ValueError(f"Experiment id must be a non-empty string, got {id!r}")
        object.__setattr__(self, "id", id)
        if not callable(model):
            raise TypeError(f"experiment {id!r}: model must be callable "
                            f"model(params, conditions, times), got {type(model).__name__}")
        object.__setattr__(self, "model", model)
        if isinstance(measurements, Measurement):
            measurements = (measurements,)
        measurements = tuple(measurements)
        if not measurements:
            raise ValueError(f"experiment {self.id!r} has no measurements; give "
                             f"measurements=Measurement(times, values, noise) (or drop the "
                             "experiment from the problem)")
        for i, m in enumerate(measurements):
            if not isinstance(m, Measurement):
                raise TypeError(f"experiment {self.id!r}: measurement {i} is a "
                                f"{type(m).__name__}, expected a Measurement")
            m.check(f"experiment {self.id!r}, measurement {i}")
        object.__setattr__(self, "measurements", measurements)
        arrays = {} if conditions is None else dict(conditions)
        for name, value in arrays.items():
            try:
                array = np.asarray(value, dtype=np.float64)
            except (TypeError, ValueError):
                raise TypeError(f"experiment {self.id!r}: condition {name!r} must be numeric, got "
                                f"{value!r}") from None
            if not np.isfinite(array).all():
                raise ValueError(f"experiment {self.id!r}: condition {name!r} is not finite: "
                                 f"{value!r}")
            arrays[name] = array
        object.__setattr__(self, "conditions", arrays)
        if work is not None:
            cost = _finite_float(work, f"experiment {self.id!r} work")
            if not (math.isfinite(cost) and cost >= 0):
                raise ValueError(f"experiment {self.id!r}: work must be >= 0, got {work!r}")
            work = cost
        object.__setattr__(self, "work", work)


def _default_group(experiment: Experiment) -> str:
    return experiment.id


@dataclass(frozen=True, eq=False, init=False)
class InferenceProblem:
    """A joint fit of experiments: shared parameters, and optionally per-group ones.

    Attributes:
        experiments: the experiments (unique ids).
        parameters: parameters shared by every experiment.
        per_experiment: parameters fitted separately for every group of experiments
            (hierarchical fits): each group gets its own copy, reported as ``res[k, group]``.
        groups: maps an experiment to its group name; default: its id (one copy per experiment).
            E.g. ``lambda e: e.id.split("-")[0]`` gives one copy per particle ``"A"``, ``"B"``.

    ``Study`` is the same class under the name the hierarchical pages use. Once built, the
    three sequences are tuples.
    """

    experiments: tuple[Experiment, ...]
    parameters: tuple[Parameter, ...]
    per_experiment: tuple[Parameter, ...]
    groups: Callable[[Experiment], str]

    # Written out (not generated) so that the fields hold tuples while the arguments take any
    # sequence.
    def __init__(self, experiments: Sequence[Experiment], parameters: Sequence[Parameter] = (),
                 per_experiment: Sequence[Parameter] = (),
                 groups: Callable[[Experiment], str] = _default_group) -> None:
        object.__setattr__(self, "groups", groups)
        experiments = tuple(experiments)
        if not experiments:
            raise ValueError("InferenceProblem needs at least one experiment")
        seen: set[str] = set()
        for e in experiments:
            if not isinstance(e, Experiment):
                raise TypeError(f"InferenceProblem experiments must be Experiment objects, got "
                                f"{type(e).__name__}")
            if e.id in seen:
                raise ValueError(f"experiment id {e.id!r} appears twice; ids must be unique")
            seen.add(e.id)
        shared, local = tuple(parameters), tuple(per_experiment)
        if not shared and not local:
            raise ValueError("InferenceProblem has no parameters; pass parameters=(...) "
                             "(shared) and/or per_experiment=(...)")
        names: set[str] = set()
        for p in shared + local:
            if not isinstance(p, Parameter):
                raise TypeError(f"parameters must be Parameter objects, got {p!r}; use "
                                f"Parameter({p!r}, initial)")
            if p.name in names:
                raise ValueError(f"parameter name {p.name!r} appears twice; names must be unique")
            names.add(p.name)
        object.__setattr__(self, "experiments", experiments)
        object.__setattr__(self, "parameters", shared)
        object.__setattr__(self, "per_experiment", local)

    def group_of(self, experiment: Experiment) -> str:
        """The group name of an experiment (for per-experiment parameters)."""
        group = self.groups(experiment)
        if not isinstance(group, str):
            raise TypeError(f"groups(experiment {experiment.id!r}) must return a str, got "
                            f"{group!r}")
        return group


Study = InferenceProblem
