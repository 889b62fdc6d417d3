"""Where to save (`SaveAt`), how a solve ended (`Status`) and what it returns (`Solution`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from .._status import CodedStatus

__all__ = ["STAT_NAMES", "SaveAt", "Solution", "Status"]


@dataclass(frozen=True, eq=False)
class SaveAt:
    """The times at which `pdesolve` returns the state.

    Attributes:
        ts: increasing times in ``[t0, t1]`` (interpolated by the BDF polynomial of the step that
            covers them); ``None`` saves the state at ``t1`` only.
    """

    ts: Any = None


class Status(CodedStatus):
    """How a solve ended; `Solution.success` for ``SUCCESS`` and ``ROOT`` (both ended where
    asked), the others are failures."""

    SUCCESS = (0, "reached t1")
    MAX_STEPS = (1, "max_steps steps were taken before t1")
    ERROR_TEST = (2, "the local error test failed repeatedly (max_error_failures in one step); "
                     "the solution may be singular or the tolerances too tight")
    CONVERGENCE = (3, "the corrector (Newton) failed to converge repeatedly "
                      "(max_convergence_failures in one step): a singular iteration matrix, a "
                      "wrong sparsity pattern, or a residual that is not finite")
    STEP_TOO_SMALL = (4, "the step size fell below rounding level of t")
    INITIALIZATION = (5, "the consistent initialization did not converge: the algebraic equations "
                         "have no solution near y0, or the pattern misses entries")
    NONFINITE = (6, "the residual is not finite at the initial state")
    CONSTRAINTS = (7, "the constraints could not be met: max_convergence_failures steps in a row "
                      "violated them by more than a small correction (IDA's IDA_CONSTR_FAIL); "
                      "check the constraint codes, or tighten rtol/atol")
    ROOT = (8, "stopped at a terminal root of roots= (IDA's IDA_ROOT_RETURN): root_ts holds its "
               "time; the save times after it were not reached (NaN)")


#: The statistics every solve reports, in this order.
STAT_NAMES = ("steps", "rejected_steps", "error_test_failures", "convergence_failures",
              "newton_iterations", "factorizations", "pivoting_factorizations", "solves",
              "residual_evaluations", "initialization_iterations")


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class Solution:
    """The result of `pdesolve`.

    Attributes:
        ts: the save times ``(m,)``.
        ys: the states at ``ts``, ``(m, n)``; rows after a failure, or after a terminal root,
            are NaN.
        stats: counts (int arrays): ``steps`` accepted, ``rejected_steps`` (error test and
            convergence failures), ``newton_iterations``, ``factorizations`` (each one a
            Jacobian evaluation; ``pivoting_factorizations`` of them with fresh pivots, the rest
            refactorizations on the same pattern), ``solves`` (linear solves of the corrector),
            ``residual_evaluations``, ``initialization_iterations``.
        code: the `Status` code (an int array); ``status`` gives the `Status` itself.
        root_ts: the times of the roots of ``pdesolve(roots=Roots(...))``, in the order found,
            ``(max_roots,)`` padded with NaN; ``(0,)`` without ``roots``.
        root_index: the component of ``g`` of each root (int32), padded with -1; ``(0,)``
            without ``roots``.
        qs: the integrals of ``pdesolve(quadrature=q)`` at ``ts``, ``(m, k)``; ``(m, 0)``
            without one. Rows not reached are NaN, as ``ys``'s.

    A `Solution` is a pytree, so it can be returned from ``jit`` and ``vmap``ped.
    """

    ts: jax.Array
    ys: jax.Array
    stats: dict[str, jax.Array]
    code: jax.Array
    root_ts: jax.Array
    root_index: jax.Array
    qs: jax.Array

    @property
    def status(self) -> Status:
        """The `Status` (needs a concrete, unbatched ``code``)."""
        return Status.of(int(np.asarray(self.code)))

    @property
    def success(self) -> bool:
        """Reached ``t1``, or stopped at a terminal root (``ROOT``)."""
        return self.status in (Status.SUCCESS, Status.ROOT)

    @property
    def message(self) -> str:
        return self.status.message

    def summary(self) -> str:
        """One line: status, steps, rejections, factorizations per step."""
        s = {k: int(np.asarray(v)) for k, v in self.stats.items()}
        per_step = s["factorizations"] / max(s["steps"], 1)
        return (f"{self.status.name.lower()}: {s['steps']} steps ({s['rejected_steps']} rejected), "
                f"{s['newton_iterations']} Newton iterations, {s['factorizations']} "
                f"factorizations ({per_step:.3f} per step), {s['solves']} solves")
