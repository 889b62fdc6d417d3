"""The methods (`TrustRegion`, `NewtonTrustRegion`, `LevenbergMarquardt`) and their one loop.

One loop serves all three; they differ in the curvature of the quadratic model (Gauss-Newton
``J^T J`` or the exact Hessian) and in how a step is limited (a trust radius or a damping).
Bounds are kept by projection with an active set: a parameter at a bound whose gradient pushes
it out is held there for the step, the others move, and the trial point is clipped to the box.
Steps are measured relative to each parameter's size (``max(|x|, scale)``, 1 for a log
parameter): the trust radius starts at 1 ("each parameter changes by about its size") and the
damping is ``lam * diag(1 / size^2)``. Measuring steps by sensitivity instead (MINPACK's
``D = sqrt(diag J^T J)``) lets an insensitive parameter leap far, e.g. onto a plateau where the
model no longer depends on it; that scaling is kept for the convergence tests, which it makes
independent of units.

The fit converges when the projected gradient is within ``grad_tol`` where the curvature is
definite, or when the Newton step from
the current point (definite curvature) moves every parameter by less than ``step_tol`` times its
size, or predicts a cost decrease below ``cost_tol * cost``. Running out of steps, a trust region
that shrinks to rounding level, a vanishing gradient where the curvature is singular (a plateau,
undetermined parameters) or a non-finite cost at the start ends the fit unconverged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from ._evaluate import Totals, evaluate, jacobian_factor
from ._lower import Plan
from ._solution import Status
from ._subproblem import damped_step, newton_step, scaled_eigen, trust_region_step

__all__ = ["LevenbergMarquardt", "NewtonTrustRegion", "TrustRegion", "run"]


@dataclass(frozen=True)
class _Method:
    grad_tol: float = 1e-10
    step_tol: float = 1e-10
    cost_tol: float = 1e-14
    max_steps: int = 200

    exact_hessian: ClassVar[bool] = False
    damped: ClassVar[bool] = False

    def __post_init__(self) -> None:
        for name in ("grad_tol", "step_tol", "cost_tol"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value >= 0):
                raise ValueError(f"{type(self).__name__}({name}=...) must be a number >= 0, got "
                                 f"{value!r}")
        if not (isinstance(self.max_steps, int) and self.max_steps >= 1):
            raise ValueError(f"{type(self).__name__}(max_steps=...) must be a positive int, got "
                             f"{self.max_steps!r}")


@dataclass(frozen=True)
class TrustRegion(_Method):
    """Gauss-Newton trust region on the least-squares structure (curvature ``J^T J``).

    Attributes:
        grad_tol: converged when every component of the projected gradient ``J^T r`` (fitted
            coordinates: ``log`` for log parameters) is at most this.
        step_tol: converged when the Gauss-Newton step changes each parameter by less than this
            times its size (``max(|x|, scale)``; for log parameters, relative change).
        cost_tol: converged when the Gauss-Newton step predicts a decrease below this times the
            cost.
        max_steps: the most trial steps; reaching it ends the fit unconverged.
        initial_radius: the first trust radius, relative to the parameters' sizes; default 1:
            the first step changes the parameters by about their own size (``max(|x0|,
            scale)``; a log parameter by about a factor e).
    """

    initial_radius: float | None = None


@dataclass(frozen=True)
class NewtonTrustRegion(_Method):
    """Trust region on the exact Hessian of the cost (forward-over-forward autodiff).

    Costs a Hessian per step but converges quadratically also for large residuals. Same
    attributes as `TrustRegion` (``grad_tol`` applies to the gradient of the cost).
    """

    initial_radius: float | None = None
    exact_hessian: ClassVar[bool] = True


@dataclass(frozen=True)
class LevenbergMarquardt(_Method):
    """Levenberg-Marquardt: Gauss-Newton damped by ``lam / size^2`` (Nielsen's damping update).

    Attributes:
        initial_damping: the first ``lam`` relative to the largest curvature in size units.
        (others as in `TrustRegion`)
    """

    initial_damping: float = 1e-3
    damped: ClassVar[bool] = True


class _State(NamedTuple):
    x: jax.Array
    totals: Totals
    d: jax.Array        # sensitivity scaling sqrt(diag J^T J), non-decreasing (tests only)
    limit: jax.Array    # trust radius, or damping for Levenberg-Marquardt
    nu: jax.Array       # damping growth factor (Levenberg-Marquardt)
    trials: jax.Array
    accepted: jax.Array
    status: jax.Array


class Outcome(NamedTuple):
    x: jax.Array
    totals: Totals
    free: jax.Array
    trials: jax.Array
    accepted: jax.Array
    status: jax.Array
    jacobian_r: jax.Array   # R with R^T R = J^T J at x, for the covariance


def _free(x, g, lo, hi):
    return ~(((x <= lo) & (g > 0)) | ((x >= hi) & (g < 0)))


def _curvature(method: _Method, t: Totals) -> jax.Array:
    return t.hessian if method.exact_hessian else t.gauss_newton


def _size(x, typical, log):
    return jnp.where(log, 1.0, jnp.maximum(jnp.abs(x), typical))


def _finite(t: Totals) -> jax.Array:
    return (jnp.isfinite(t.cost) & jnp.all(jnp.isfinite(t.gradient))
            & jnp.all(jnp.isfinite(t.hessian)) & jnp.all(jnp.isfinite(t.gauss_newton)))


def _check(method: _Method, x, t: Totals, d, lo, hi, size) -> jax.Array:
    """The convergence status at the current point (``RUNNING`` when not converged)."""
    free = _free(x, t.gradient, lo, hi)
    grad_ok = jnp.max(jnp.abs(jnp.where(free, t.gradient, 0.0)), initial=0.0) <= method.grad_tol
    e = scaled_eigen(_curvature(method, t), t.gradient, d, free)
    q, decrease, definite = newton_step(e)
    step_ok = definite & jnp.all(jnp.abs(q / d) <= method.step_tol * size)
    cost_ok = definite & (decrease <= method.cost_tol * t.cost)
    # A vanishing gradient is a minimum only where the curvature is definite; on a plateau or
    # along undetermined directions the fit fails; at a saddle the exact-Hessian step escapes.
    saddle = method.exact_hessian & (e.mu[0] < -1e3 * e.tiny)
    return jnp.select([grad_ok & definite, step_ok, cost_ok, grad_ok & ~saddle],
                      [Status.GRADIENT.code, Status.STEP.code, Status.COST.code,
                       Status.SINGULAR.code], Status.RUNNING.code).astype(jnp.int32)


def run(plan: Plan, method: _Method, data: tuple[dict[str, Any], ...], x0: jax.Array,
        lo: jax.Array, hi: jax.Array, typical: jax.Array) -> Outcome:
    """The fit, as one traced program (call it under `jax.jit`)."""
    hessian = method.exact_hessian
    log = jnp.asarray(plan.log, dtype=bool)
    eps = jnp.finfo(x0.dtype).eps

    def value(x):
        return evaluate(plan, data, x, hessian=hessian)

    t0 = value(x0)
    diag = jnp.sqrt(jnp.diag(t0.gauss_newton))
    d0 = jnp.where(diag > 0, diag, 1.0)
    if isinstance(method, LevenbergMarquardt):  # the damped method
        mu0 = jnp.max(jnp.diag(t0.gauss_newton) * _size(x0, typical, log) ** 2)
        limit0 = method.initial_damping * jnp.where(mu0 > 0, mu0, 1.0)
    else:
        radius = (method.initial_radius
                  if isinstance(method, (TrustRegion, NewtonTrustRegion)) else None)
        limit0 = jnp.asarray(1.0 if radius is None else radius)
    ok0 = _finite(t0)
    status0 = jnp.where(ok0, _check(method, x0, t0, d0, lo, hi, _size(x0, typical, log)),
                        Status.NONFINITE.code).astype(jnp.int32)
    zero = jnp.asarray(0, jnp.int32)
    state = _State(x0, t0, d0, jnp.asarray(limit0, x0.dtype), jnp.asarray(2.0, x0.dtype), zero,
                   zero, status0)

    def body(s: _State) -> _State:
        t = s.totals
        free = _free(s.x, t.gradient, lo, hi)
        h = _curvature(method, t)
        # Trust regions are measured relative to each parameter's size; damping is Marquardt's.
        scale = 1.0 / _size(s.x, typical, log)
        e = scaled_eigen(h, t.gradient, scale, free)
        q = damped_step(e, s.limit) if method.damped else trust_region_step(e, s.limit)
        p = q / scale
        x_try = jnp.clip(s.x + p, lo, hi)
        step = x_try - s.x
        predicted = -(t.gradient @ step + 0.5 * step @ h @ step)
        t_try = value(x_try)
        good = _finite(t_try) & (predicted > 0)
        rho = jnp.where(good, (t.cost - t_try.cost) / jnp.where(good, predicted, 1.0), -jnp.inf)
        accept = rho > 1e-4
        if method.damped:
            shrink = jnp.maximum(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3)
            limit = jnp.where(accept, s.limit * shrink, s.limit * s.nu)
            nu = jnp.where(accept, 2.0, 2.0 * s.nu)
        else:
            norm = jnp.linalg.norm(scale * step)
            limit = jnp.where(rho < 0.25, 0.25 * norm,
                              jnp.where((rho > 0.75) & (norm > 0.99 * s.limit), 2.0 * s.limit,
                                        s.limit))
            nu = s.nu
        x = jnp.where(accept, x_try, s.x)
        totals = jax.tree.map(lambda new, old: jnp.where(accept, new, old), t_try, t)
        d = jnp.where(accept, jnp.maximum(s.d, jnp.sqrt(jnp.diag(totals.gauss_newton))), s.d)
        size = _size(x, typical, log)
        status = jnp.where(accept, _check(method, x, totals, d, lo, hi, size), Status.RUNNING.code)
        stalled = ~accept & jnp.all(jnp.abs(p) <= 4 * eps * size)
        # Stalled where the curvature is singular: undetermined parameters, not a rough cost.
        definite = newton_step(scaled_eigen(h, t.gradient, s.d, free))[2]
        trials = s.trials + 1
        status = jnp.where((status == Status.RUNNING.code) & stalled,
                           jnp.where(definite, Status.COLLAPSED.code, Status.SINGULAR.code),
                           status)
        status = jnp.where((status == Status.RUNNING.code) & (trials >= method.max_steps),
                           Status.MAX_STEPS.code, status)
        return _State(x, totals, d, limit, nu, trials, s.accepted + accept.astype(jnp.int32),
                      status.astype(jnp.int32))

    final = jax.lax.while_loop(lambda s: s.status == Status.RUNNING.code, body, state)
    free = _free(final.x, final.totals.gradient, lo, hi)
    return Outcome(final.x, final.totals, free, final.trials, final.accepted, final.status,
                   jacobian_factor(plan, data, final.x))
