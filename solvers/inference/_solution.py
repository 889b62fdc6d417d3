"""How a fit ended (`Status`) and what it found (`OptResult`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._status import CodedStatus
from ._problem import Parameter

__all__ = ["OptResult", "Status"]


class Status(CodedStatus):
    """Why a fit stopped. ``converged`` is true for the first three only."""

    RUNNING = (0, "running")
    GRADIENT = (1, "the projected gradient is within grad_tol")
    STEP = (2, "the Newton step is within step_tol of every parameter")
    COST = (3, "the predicted decrease of the cost is within cost_tol")
    MAX_STEPS = (-1, "max_steps trial steps were taken without converging")
    COLLAPSED = (-2, "the step shrank to rounding level without converging: a cost that is not "
                     "smooth (e.g. a model solved with too loose tolerances), float32 arithmetic "
                     "(enable jax_enable_x64) or tolerances below rounding level")
    NONFINITE = (-3, "the cost, gradient or curvature is not finite at the initial parameters, "
                     "or at every trial point down to rounding level (the model gives NaN or "
                     "infinity there: a failed ODE/DAE solve, sqrt or log of a negative number); "
                     "nonfinite_experiments names the experiments that do; start elsewhere or "
                     "bound the parameters away from where they fail")
    SINGULAR = (-4, "the gradient vanished where the curvature is singular: the data do not "
                    "determine some parameter combination, or the model lost its sensitivity "
                    "(a plateau; a log parameter running towards 0); bound the parameters, "
                    "start closer or remove the undetermined ones")

    @property
    def converged(self) -> bool:
        return self.code > 0



Key = Parameter | str | tuple[Any, str]


@dataclass(frozen=True, eq=False)
class OptResult:
    """The outcome of `optsolve`.

    ``res[D]`` is the fitted value of parameter ``D`` (a `Parameter` or its name);
    ``res[k, "A"]`` the value of per-experiment parameter ``k`` for group ``"A"``.

    Attributes:
        values: fitted values by name (per-group copies as ``"k[A]"``), natural units.
        names: the order of rows and columns of ``covariance``.
        covariance: the parameter covariance, natural units: ``(J^T J)^-1`` of the weighted
            residuals (from an SVD of the column-scaled Jacobian factor), times the residual
            variance ``2 cost / (m - p)`` (``p`` the rank) unless every measurement gives its
            noise. Rows of parameters held at a bound, and of parameters in a combination the
            data do not determine (named in a logged warning), are NaN.
        cost: ``0.5 * sum(((model - data) / noise) ** 2)`` at the solution.
        gradient: the gradient of the cost in the fitted coordinates.
        converged: whether a convergence test passed (never true for a failed fit).
        status: a `Status`; ``termination`` is its name, ``message`` its explanation.
        iterations: accepted steps; ``nfev``: evaluations of the cost with its derivatives.
        at_bound: names of parameters that ended at a bound.
        n_residuals: observations fitted.
        nonfinite_trials: trial points (the start included) where the cost or its derivatives
            were not finite; each was rejected like a step that increased the cost.
        nonfinite_experiments: for a fit that did not converge after such a point, the ids of
            the experiments whose cost or derivatives were not finite at the last of them (in
            the order of the problem); empty otherwise.
    """

    values: Mapping[str, float]
    names: tuple[str, ...]
    covariance: np.ndarray
    cost: float
    gradient: np.ndarray
    status: Status
    iterations: int
    nfev: int
    at_bound: tuple[str, ...]
    n_residuals: int
    nonfinite_trials: int = 0
    nonfinite_experiments: tuple[str, ...] = ()

    @property
    def converged(self) -> bool:
        return self.status.converged

    @property
    def termination(self) -> str:
        return self.status.name.lower()

    @property
    def message(self) -> str:
        return self.status.message

    @property
    def njev(self) -> int:
        """Derivative evaluations (each cost evaluation also gives its derivatives)."""
        return self.nfev

    @property
    def standard_errors(self) -> dict[str, float]:
        """Square roots of the covariance's diagonal, by name."""
        return {n: math.sqrt(v) if v >= 0 else math.nan
                for n, v in zip(self.names, np.diag(self.covariance))}

    def _name(self, key: Key) -> str:
        if isinstance(key, tuple):
            if len(key) != 2:
                raise KeyError(f"use res[parameter] or res[parameter, group], got {key!r}")
            base, group = key
            name = f"{base.name if isinstance(base, Parameter) else base}[{group}]"
        else:
            name = key.name if isinstance(key, Parameter) else key
        if name not in self.values:
            groups = [n for n in self.names if n.startswith(f"{name}[")]
            hint = (f"; it is fitted per group: use res[{name!r}, group] with one of "
                    f"{[g[len(name) + 1:-1] for g in groups]}" if groups else
                    f"; fitted: {list(self.names)}")
            raise KeyError(f"no fitted parameter {name!r}{hint}")
        return name

    def __getitem__(self, key: Key) -> float:
        return self.values[self._name(key)]

    def standard_error(self, key: Key) -> float:
        """The standard error of one parameter (same keys as ``res[...]``)."""
        return self.standard_errors[self._name(key)]

    def __repr__(self) -> str:
        errors = self.standard_errors
        body = ", ".join(f"{n}={v:.6g}±{errors[n]:.2g}" for n, v in self.values.items())
        return (f"OptResult({body}; cost={self.cost:.6g}, converged={self.converged} "
                f"({self.termination}), iterations={self.iterations}, nfev={self.nfev})")
