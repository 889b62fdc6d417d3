"""`optsolve`: run a method on a (lowered) problem and report the fit."""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np

from .._mesh import Layout
from ._covariance import covariance
from ._lower import LoweredProblem, lower, natural
from ._problem import InferenceProblem
from ._solution import OptResult, Status
from ._trust_region import LevenbergMarquardt, NewtonTrustRegion, TrustRegion, _Method, run

__all__ = ["optsolve"]

logger = logging.getLogger(__name__)

_run = jax.jit(run, static_argnums=(0, 1))
_warned_x64 = False


def _host(a: jax.Array) -> np.ndarray:
    """A replicated array's value (works when the mesh spans other processes too)."""
    return np.asarray(a.addressable_data(0))


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
    result = OptResult(values={n: float(v) for n, v in zip(names, theta)}, names=names,
                       covariance=cov, cost=cost, gradient=_host(out.totals.gradient),
                       status=status, iterations=int(_host(out.accepted)),
                       nfev=int(_host(out.trials)) + 1,
                       at_bound=tuple(n for n, b in zip(names, at_bound) if b),
                       n_residuals=m)
    if not status.converged:
        logger.warning("fit did not converge: %s (%s) after %d evaluations", status.name.lower(),
                       status.message, result.nfev)
    return result
