"""`optsolve`: run a method on a (lowered) problem and report the fit."""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np

from .._mesh import Layout
from ._covariance import covariance
from ._evaluate import finite_slots
from ._lower import LoweredProblem, lower, natural
from ._problem import InferenceProblem
from ._solution import OptResult, Status
from ._trust_region import LevenbergMarquardt, NewtonTrustRegion, TrustRegion, _Method, run

__all__ = ["optsolve"]

logger = logging.getLogger(__name__)

_run = jax.jit(run, static_argnums=(0, 1))
_finite_slots = jax.jit(finite_slots, static_argnums=(0,), static_argnames=("hessian",))
_warned_x64 = False


def _host(a: jax.Array) -> np.ndarray:
    """A replicated array's value (works when the mesh spans other processes too)."""
    return np.asarray(a.addressable_data(0))


def _nonfinite_experiments(lowered: LoweredProblem, x: jax.Array, hessian: bool
                           ) -> tuple[str, ...]:
    """The ids of the experiments whose cost or derivatives are not finite at ``x``."""
    flags = _finite_slots(lowered.plan, lowered.data, x, hessian=hessian)
    bad: set[str] = set()
    for i, f in enumerate(flags):
        ok = _host(f)
        if i >= len(lowered.slots):   # evaluated elsewhere (another process): not named here
            if not ok.all():
                bad.add(f"<experiments of group {i}, evaluated by another process>")
            continue
        bad.update(e for e, good in zip(lowered.slots[i], ok) if e is not None and not good)
    order = [e.id for e in lowered.problem.experiments]
    return tuple(sorted(bad, key=lambda e: order.index(e) if e in order else len(order)))


def optsolve(problem: InferenceProblem | LoweredProblem, method: _Method | None = None, *,
             layout: Layout | None = None) -> OptResult:
    """Fit a problem by weighted least squares.

    Arguments:
        problem: an `InferenceProblem` / `Study` (lowered here, on ``layout``), or the result of
            `lower` (placed on a mesh, experiments split along its ``data`` axis).
        method: `TrustRegion()` (default), `NewtonTrustRegion(grad_tol=...)` or
            `LevenbergMarquardt()`.
        layout: where to run an unlowered problem; ``None`` is one device.

    Returns:
        An `OptResult`: ``res[param]``, ``converged``, ``cost``, ``iterations``, ``termination``,
        ``covariance``, ``standard_errors``. A fit that did not converge is returned (with
        ``converged=False`` and the reason), not raised.

    The fit is compiled once per problem structure (models, shapes, mesh) and method, and reused
    for new data of the same shapes. Enable float64 (``jax.config.update("jax_enable_x64",
    True)``) for fits: in float32 the tolerances cannot be met and results are approximate.
    """
    global _warned_x64
    if isinstance(problem, LoweredProblem):
        if layout is not None:
            raise ValueError("optsolve(lowered, layout=...): the problem is already lowered on a "
                             "layout; pass the InferenceProblem instead, or lower it again")
        lowered = problem
    else:
        lowered = lower(problem, layout)
    method = TrustRegion() if method is None else method
    if not isinstance(method, (TrustRegion, NewtonTrustRegion, LevenbergMarquardt)):
        raise TypeError(f"method must be TrustRegion(), NewtonTrustRegion() or "
                        f"LevenbergMarquardt(), got {method!r}")
    if jnp.result_type(float) != jnp.float64 and not _warned_x64:
        _warned_x64 = True
        logger.warning("fitting in float32: call jax.config.update('jax_enable_x64', True) at "
                       "start-up for float64 fits (tolerances assume it)")
    out = _run(lowered.plan, method, lowered.data, lowered.x0, lowered.lower, lowered.upper,
               lowered.typical)
    x = _host(out.x).astype(np.float64)
    log = np.asarray(lowered.plan.log, dtype=bool)
    theta = natural(log, x)
    lo, hi = _host(lowered.lower), _host(lowered.upper)
    at_bound = (x <= lo) | (x >= hi)
    cost = float(_host(out.totals.cost))
    m = lowered.n_residuals
    cov = covariance(_host(out.jacobian_r).astype(np.float64), theta, log, at_bound,
                     lowered.names, m, cost, lowered.noise_known)
    status = Status.of(int(_host(out.status)))
    names = lowered.names
    nonfinite = int(_host(out.nonfinite))
    culprits: tuple[str, ...] = ()
    if nonfinite and not status.converged:
        culprits = _nonfinite_experiments(lowered, out.bad_x, method.exact_hessian)
    result = OptResult(values={n: float(v) for n, v in zip(names, theta)}, names=names,
                       covariance=cov, cost=cost, gradient=_host(out.totals.gradient),
                       status=status, iterations=int(_host(out.accepted)),
                       nfev=int(_host(out.trials)) + 1,
                       at_bound=tuple(n for n, b in zip(names, at_bound) if b),
                       n_residuals=m, nonfinite_trials=nonfinite,
                       nonfinite_experiments=culprits)
    if not status.converged:
        where = ""
        if culprits:
            bad = natural(log, _host(out.bad_x).astype(np.float64))
            where = (f"; {nonfinite} trial points gave a non-finite cost or derivatives, the "
                     f"last at {dict(zip(names, bad.round(12).tolist()))}, from experiment(s) "
                     f"{', '.join(map(repr, culprits))}")
        logger.warning("fit did not converge: %s (%s) after %d evaluations%s",
                       status.name.lower(), status.message, result.nfev, where)
    return result
