"""`JIDA`: the solver's settings (method, tolerances, linear backend)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..linear import LinearSolver

__all__ = ["JIDA"]


@dataclass(frozen=True)
class JIDA:
    """Variable-step, variable-order BDF for index-1 DAEs, in the manner of SUNDIALS IDA.

    Attributes:
        linear: the linear solver: ``"auto"`` (cuDSS on a GPU once built, KLU on a CPU),
            ``"dense"``, ``"klu"``, ``"cudss"`` or a `solvers.linear.LinearSolver`.
        rtol, atol: local error tolerances; the weights are ``1 / (rtol |y| + atol)`` and a step
            passes when the weighted RMS norm of its error estimate is at most 1.
        max_order: the highest BDF order (1 to 5).
        max_steps: the most accepted steps; reaching it ends the solve with ``MAX_STEPS``.
        initial_step: the first step; default IDA's (``0.001 (t1 - t0)``, shortened when
            ``|y'0|`` is large).
        max_step: the largest step.
        suppress_algebraic: leave algebraic unknowns out of the error test.
        max_newton: corrector iterations per attempt (IDA's ``maxcor``, 4).
        newton_tol: the corrector's convergence coefficient (IDA's ``epcon``, 0.33).
        dcj: the relative change of the step coefficient ``c = alpha / h`` beyond which the
            iteration matrix is refactored (IDA's 0.25).
        max_error_failures, max_convergence_failures: failures allowed within one step.
        initialize: compute consistent algebraic unknowns and derivatives at ``t0`` (IDA's
            ``IDA_YA_YDP_INIT``); when ``False`` the given ``y0``, ``yp0`` are used as they are.
    """

    linear: str | LinearSolver = "auto"
    rtol: float = 1e-6
    atol: float = 1e-9
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
    initialize: bool = True

    def __post_init__(self) -> None:
        for name in ("rtol", "atol"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value >= 0 and math.isfinite(value)):
                raise ValueError(f"JIDA({name}=...) must be a finite number >= 0, got {value!r}")
        if self.rtol == 0 and self.atol == 0:
            raise ValueError("JIDA needs rtol > 0 or atol > 0; e.g. JIDA(rtol=1e-6, atol=1e-9)")
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
        if not isinstance(self.linear, (str, LinearSolver)):
            raise TypeError(f"JIDA(linear=...) takes 'auto', 'dense', 'klu', 'cudss' or a "
                            f"LinearSolver, got {self.linear!r}")
