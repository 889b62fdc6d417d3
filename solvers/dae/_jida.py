"""`JIDA`: the solver's settings (method, tolerances, linear backend)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..linear import LinearSolver

__all__ = ["JIDA", "violated"]


@dataclass(frozen=True)
class JIDA:
    """Variable-step, variable-order BDF for index-1 DAEs, in the manner of SUNDIALS IDA.

    Attributes:
        linear: the linear solver: ``"auto"`` (cuDSS on a GPU once built, KLU on a CPU),
            ``"dense"``, ``"klu"``, ``"cudss"`` or a `solvers.linear.LinearSolver`.
        rtol, atol: local error tolerances; the weights are ``1 / (rtol |y| + atol)`` and a step
            passes when the weighted RMS norm of its error estimate is at most 1. ``rtol`` is a
            number; ``atol`` a number or one per unknown (an array shaped like ``y0``; IDA's
            ``IDASStolerances`` / ``IDASVtolerances``), stored as a tuple.
        constraints: ``None``, or one code per unknown (IDA's ``IDASetConstraints``): ``0`` none,
            ``1`` ``y >= 0``, ``2`` ``y > 0``, ``-1`` ``y <= 0``, ``-2`` ``y < 0``. Enforced as
            IDA does after each converged corrector: a small violation (weighted norm of the
            correction at most ``newton_tol``) is corrected onto the bound (``0``, or
            ``0.1 / weight`` inside it for the strict ones); a larger one rejects the step,
            which is retried with ``h`` cut to 0.9 of the fraction that reaches the bound (at
            least 0.1) and counts as a convergence failure. Stored as a tuple.
        max_order: the highest BDF order (1 to 5).
        max_steps: the most accepted steps; reaching it ends the solve with ``MAX_STEPS``.
        initial_step: the first step; default IDA's (``0.001 (first_output - t0)``,
            shortened when ``|y'0|`` is large; `pdesolve`'s ``first_output`` is by default the
            first save time after ``t0``).
        max_step: the largest step.
        suppress_algebraic: leave algebraic unknowns out of the error test.
        max_newton: corrector iterations per attempt (IDA's ``maxcor``, 4).
        newton_tol: the corrector's convergence coefficient (IDA's ``epcon``, 0.33).
        dcj: the relative change of the step coefficient ``c = alpha / h`` beyond which the
            iteration matrix is refactored (IDA's 0.25).
        max_error_failures, max_convergence_failures: failures allowed within one step.
        initialize: the consistent initialization at ``t0`` (IDA's ``IDACalcIC``):
            ``"ya_ydp"`` (default; ``True`` is the same) computes the algebraic unknowns and the
            derivatives of the differential ones (``IDA_YA_YDP_INIT``; run when ``yp0`` is
            not given or some unknown is algebraic); ``"y"`` computes all of ``y`` given
            ``yp0`` (``IDA_Y_INIT``); ``False`` uses the given ``y0``, ``yp0`` as they are.
            Its step is sized from `pdesolve`'s ``first_output``.
        sensitivity_error_control: put the forward sensitivities into the local error test
            when a solve is differentiated (IDAS's ``IDASetSensErrCon``): the derivative then
            comes from one solve of the state with its sensitivities (one block per scalar
            input differentiated, `solvers.dae._sensitivity`), whose steps the
            sensitivities' errors also set. Default ``False``: the derivative of the computed
            solution on its own steps, consistent with the values returned (what a fit's
            gradient wants), with errors the error test does not see. No effect on a solve
            that is not differentiated; not with ``roots``.
    """

    linear: str | LinearSolver = "auto"
    rtol: float = 1e-6
    atol: float | Sequence[float] | np.ndarray = 1e-9
    max_order: int = 5
    max_steps: int = 20_000
    initial_step: float | None = None
    max_step: float = math.inf
    suppress_algebraic: bool = False
    max_newton: int = 4
    newton_tol: float = 0.33
    dcj: float = 0.25
    max_error_failures: int = 10
    max_convergence_failures: int = 10
    initialize: bool | str = "ya_ydp"
    constraints: Sequence[int] | None = None
    sensitivity_error_control: bool = False

    def __post_init__(self) -> None:
        value = self.rtol
        if not (isinstance(value, (int, float)) and value >= 0 and math.isfinite(value)):
            raise ValueError(f"JIDA(rtol=...) must be a finite number >= 0, got {value!r}")
        object.__setattr__(self, "atol", _atol(self.atol))
        if self.rtol == 0 and min(self.atol_values) == 0:
            raise ValueError(f"JIDA needs rtol > 0 or every atol > 0 (rtol=0 and atol="
                             f"{self.atol!r} give an infinite weight); e.g. JIDA(rtol=1e-6, "
                             f"atol=1e-9)")
        object.__setattr__(self, "constraints", _constraints(self.constraints))
        object.__setattr__(self, "initialize", _initialize(self.initialize))
        if not (isinstance(self.max_order, int) and 1 <= self.max_order <= 5):
            raise ValueError(f"JIDA(max_order=...) must be 1, 2, 3, 4 or 5, got "
                             f"{self.max_order!r}")
        for name in ("max_steps", "max_newton", "max_error_failures", "max_convergence_failures"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"JIDA({name}=...) must be a positive int, got {value!r}")
        if not (0 < self.newton_tol <= 1):
            raise ValueError(f"JIDA(newton_tol=...) must be in (0, 1], got {self.newton_tol!r}")
        if not (0 < self.dcj < 1):
            raise ValueError(f"JIDA(dcj=...) must be in (0, 1), got {self.dcj!r}")
        if not (self.max_step > 0):
            raise ValueError(f"JIDA(max_step=...) must be > 0, got {self.max_step!r}")
        if self.initial_step is not None and not (self.initial_step > 0):
            raise ValueError(f"JIDA(initial_step=...) must be > 0, got {self.initial_step!r}")
        if not isinstance(self.sensitivity_error_control, (bool, np.bool_)):
            raise TypeError(f"JIDA(sensitivity_error_control=...) takes True or False, got "
                            f"{self.sensitivity_error_control!r}")
        object.__setattr__(self, "sensitivity_error_control",
                           bool(self.sensitivity_error_control))
        if not isinstance(self.linear, (str, LinearSolver)):
            raise TypeError(f"JIDA(linear=...) takes 'auto', 'dense', 'klu', 'cudss' or a "
                            f"LinearSolver, got {self.linear!r}")

    @property
    def atol_values(self) -> tuple[float, ...]:
        """``atol`` as a tuple (one entry for a scalar)."""
        return self.atol if isinstance(self.atol, tuple) else (self.atol,)


def violated(constraints: Sequence[int], y: Any) -> Any:
    """Where ``y`` violates the constraint codes (IDA's ``N_VConstrMask``); numpy or JAX."""
    xp = np if isinstance(y, np.ndarray) else jnp
    c = xp.asarray(constraints, dtype=y.dtype)
    return ((xp.abs(c) > 1.5) & (y * c <= 0)) | ((xp.abs(c) > 0.5) & (y * c < 0))


def _atol(value: object) -> float | tuple[float, ...]:
    """A scalar stays a float; an array shaped like ``y0`` becomes a tuple of floats."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not (value >= 0 and math.isfinite(value)):
            raise ValueError(f"JIDA(atol=...) must be finite and >= 0, got {value!r}")
        return float(value)
    try:
        a = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"JIDA(atol=...) takes a number or one number per unknown, got "
                         f"{value!r}") from None
    if a.ndim == 0:
        return _atol(float(a))
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"JIDA(atol=...) takes a number or a 1-D array shaped like y0, got "
                         f"shape {a.shape}")
    if not (np.all(np.isfinite(a)) and np.all(a >= 0)):
        raise ValueError(f"JIDA(atol=...) entries must be finite and >= 0, got {a.tolist()!r}")
    return tuple(float(v) for v in a)


def _initialize(value: object) -> str | bool:
    """``"ya_ydp"`` (also ``True``), ``"y"`` or ``False``."""
    if value is True or (isinstance(value, str) and value == "ya_ydp"):
        return "ya_ydp"
    if value is False or (isinstance(value, str) and value == "y"):
        return value
    raise ValueError(f"JIDA(initialize=...) takes 'ya_ydp' (IDA_YA_YDP_INIT, the default; "
                     f"also True), 'y' (IDA_Y_INIT: all of y from a given yp0) or False (take "
                     f"y0, yp0 as given), got {value!r}")


def _constraints(value: object) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        c = np.asarray(value)
    except (TypeError, ValueError):
        c = np.asarray([object()])
    if c.ndim != 1 or c.size == 0 or not np.all(np.isin(c, (-2, -1, 0, 1, 2))) \
            or c.dtype.kind not in "iuf":
        raise ValueError(f"JIDA(constraints=...) takes one code per unknown from 0 (none), 1 "
                         f"(>= 0), 2 (> 0), -1 (<= 0), -2 (< 0), as IDASetConstraints; got "
                         f"{value!r}")
    return tuple(int(v) for v in c)
