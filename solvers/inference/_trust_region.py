"""The methods (`TrustRegion`, `NewtonTrustRegion`, `LevenbergMarquardt`) and their one loop.

One loop serves all three; they differ in the curvature of the quadratic model (Gauss-Newton
``J^T J`` or the exact Hessian) and in how a step is limited (a trust radius or a damping).
Bounds are kept by projection with an active set: a parameter at a bound whose gradient pushes
it out is held there for the step, the others move, and the trial point is clipped to the box.
Steps are measured relative to each parameter's size (``max(|x|, scale)``, 1 for a log
parameter): the trust radius starts at 1 ("each parameter changes by about its size") and never
exceeds ``max_radius`` (default 1), and the damping is ``lam * diag(1 / size^2)``. The trust
region also limits the parameters the residuals are most sensitive to: with ``s_i = |J_i| size_i``
(the change of the residuals when parameter ``i`` changes by its size) and ``s_ref`` the geometric
mean of the ``s_i``, parameter ``i``'s relative step is weighted by ``max(1, s_i / s_ref)``. No
parameter may move further than in the plain relative region, so an insensitive parameter cannot
leap onto a plateau (where the model no longer depends on it, which pure sensitivity scaling,
MINPACK's ``D = sqrt(diag J^T J)``, allows); but a well-determined parameter of large size (NIST's
Eckerle4 from its first start: the centre b3 = 500, determined to 0.05) no longer zigzags across
its narrow valley at every step while the others crawl (200 steps without converging before,
26 evaluations with the weights). The sensitivity scaling itself is kept for the convergence
tests, which it makes independent of units.

The fit converges when the projected gradient is within ``grad_tol`` where the curvature is
definite, or when the Newton step from
the current point (definite curvature) moves every parameter by less than ``step_tol`` times its
size, or predicts a cost decrease below ``cost_tol * cost``. Running out of steps, a trust region
that shrinks to rounding level, a vanishing gradient where the curvature is singular (a plateau,
undetermined parameters) or a non-finite cost at the start ends the fit unconverged.

Near the minimum the cost stops resolving steps: a step whose predicted decrease is below the
cost's rounding error (``ROUNDING * eps * sqrt(m)`` times the cost) cannot be judged by the
decrease it achieves. There a step is taken when it leaves the cost unchanged to rounding and
lowers the (sensitivity-scaled) gradient, and a trust region that shrinks to rounding level at a
point whose Newton step predicts less than that is converged (``COST``), not collapsed.

A trial point where the cost, gradient or curvature is not finite (the model gave NaN or infinity
there: a failed ODE/DAE solve, ``sqrt`` or ``log`` of a negative number) is a failed evaluation:
it is rejected and the trust region shrunk, exactly like a step that increased the cost, and never
tested for convergence. When the region has shrunk to rounding level around such points the fit
ends ``NONFINITE``; the last non-finite trial point is returned so that the experiments that gave
the non-finite values can be named.
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

#: A fit stalled where the Newton step predicts a decrease below ``ROUNDING * eps * sqrt(m)``
#: times the cost has converged as far as the cost can tell (``COST``), not collapsed.
ROUNDING = 16.0
#: `tight()`'s tolerances.
TIGHT_GRAD_TOL = 0.0
TIGHT_STEP_TOL = 1e-13
TIGHT_COST_TOL = 1e-22
TIGHT_MAX_STEPS = 2000


@dataclass(frozen=True)
class _Method:
    grad_tol: float = 1e-10
    step_tol: float = 1e-10
    cost_tol: float = 1e-14
    max_steps: int = 1000

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
        for name in ("initial_radius", "max_radius"):
            value = getattr(self, name, None)
            if value is not None and not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"{type(self).__name__}({name}=...) must be a number > 0, got "
                                 f"{value!r}")

    @classmethod
    def tight(cls, **overrides: Any) -> Any:
        """The method with tolerances at the rounding level of float64, for reference digits.

        ``grad_tol=0``, ``step_tol=1e-13``, ``cost_tol=1e-22``, ``max_steps=2000``: the fit runs
        until the Gauss-Newton step is below ``1e-13`` of every parameter, or no step lowers the
        gradient any more below the cost's resolution (see the module docstring), which costs a
        few more evaluations than the default. ``overrides`` replace any field, e.g.
        ``TrustRegion.tight(max_steps=5000)``.
        """
        fields: dict[str, Any] = {"grad_tol": TIGHT_GRAD_TOL, "step_tol": TIGHT_STEP_TOL,
                                  "cost_tol": TIGHT_COST_TOL, "max_steps": TIGHT_MAX_STEPS}
        fields.update(overrides)
        return cls(**fields)


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
        max_radius: the largest trust radius (same units; default 1, or ``initial_radius`` when
            that is larger): no step changes a parameter by more than about its size, so a fit
            cannot leap into another basin (NIST's MGH10 from its first start leapt to negative
            b2, b3 at radius 4 and ran off along a plateau).

    `TrustRegion.tight()` gives tolerances at float64's rounding level (see `tight`).
    """

    initial_radius: float | None = None
    max_radius: float = 1.0


@dataclass(frozen=True)
class NewtonTrustRegion(_Method):
    """Trust region on the exact Hessian of the cost (forward-over-forward autodiff).

    Costs a Hessian per step but converges quadratically also for large residuals. Same
    attributes as `TrustRegion` (``grad_tol`` applies to the gradient of the cost).
    """

    initial_radius: float | None = None
    max_radius: float = 1.0
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
    nonfinite: jax.Array   # trial points (the start included) where the totals were not finite
    bad_x: jax.Array       # the last of them (x0 when there was none)


class Outcome(NamedTuple):
    x: jax.Array
    totals: Totals
    free: jax.Array
    trials: jax.Array
    accepted: jax.Array
    status: jax.Array
    jacobian_r: jax.Array   # R with R^T R = J^T J at x, for the covariance
    nonfinite: jax.Array    # trial points where the cost or its derivatives were not finite
    bad_x: jax.Array        # the last such point


def _free(x, g, lo, hi):
    return ~(((x <= lo) & (g > 0)) | ((x >= hi) & (g < 0)))


def _curvature(method: _Method, t: Totals) -> jax.Array:
    return t.hessian if method.exact_hessian else t.gauss_newton


def _size(x, typical, log):
    return jnp.where(log, 1.0, jnp.maximum(jnp.abs(x), typical))


def _finite(t: Totals) -> jax.Array:
    return (jnp.isfinite(t.cost) & jnp.all(jnp.isfinite(t.gradient))
            & jnp.all(jnp.isfinite(t.hessian)) & jnp.all(jnp.isfinite(t.gauss_newton)))


def _trust_scale(t: Totals, size: jax.Array, free: jax.Array) -> jax.Array:
    """``D`` of the trust region ``|D p| <= radius``: relative steps, the sensitive limited more.

    ``1 / size`` weighted by ``max(1, s_i / s_ref)``, ``s_i = |J_i| size_i`` and ``s_ref`` their
    geometric mean over the free parameters with ``s_i > 0`` (see the module docstring).
    """
    s = jnp.sqrt(jnp.maximum(jnp.diag(t.gauss_newton), 0.0)) * size
    use = free & (s > 0) & jnp.isfinite(s)
    count = jnp.maximum(jnp.sum(use), 1)
    ref = jnp.exp(jnp.sum(jnp.where(use, jnp.log(jnp.where(use, s, 1.0)), 0.0)) / count)
    weight = jnp.where(use, jnp.maximum(1.0, s / ref), 1.0)
    return weight / size


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
    # The relative rounding error of a cost summed over m residuals, generously: 16 eps sqrt(m).
    rows = sum(int(d["values"].size) for d in data)
    floor = ROUNDING * eps * rows ** 0.5

    def value(x):
        return evaluate(plan, data, x, hessian=hessian)

    t0 = value(x0)
    diag = jnp.sqrt(jnp.diag(t0.gauss_newton))
    d0 = jnp.where(diag > 0, diag, 1.0)
    max_radius = 1.0
    if isinstance(method, LevenbergMarquardt):  # the damped method
        mu0 = jnp.max(jnp.diag(t0.gauss_newton) * _size(x0, typical, log) ** 2)
        limit0 = method.initial_damping * jnp.where(mu0 > 0, mu0, 1.0)
    else:
        assert isinstance(method, (TrustRegion, NewtonTrustRegion))
        radius = method.initial_radius
        limit0 = jnp.asarray(1.0 if radius is None else radius)
        max_radius = max(method.max_radius, 1.0 if radius is None else radius)
    ok0 = _finite(t0)
    status0 = jnp.where(ok0, _check(method, x0, t0, d0, lo, hi, _size(x0, typical, log)),
                        Status.NONFINITE.code).astype(jnp.int32)
    zero = jnp.asarray(0, jnp.int32)
    state = _State(x0, t0, d0, jnp.asarray(limit0, x0.dtype), jnp.asarray(2.0, x0.dtype), zero,
                   zero, status0, (~ok0).astype(jnp.int32), x0)

    def body(s: _State) -> _State:
        t = s.totals
        free = _free(s.x, t.gradient, lo, hi)
        h = _curvature(method, t)
        # Trust regions are measured relative to each parameter's size; damping is Marquardt's.
        size_x = _size(s.x, typical, log)
        scale = 1.0 / size_x if method.damped else _trust_scale(t, size_x, free)
        e = scaled_eigen(h, t.gradient, scale, free)
        q = damped_step(e, s.limit) if method.damped else trust_region_step(e, s.limit)
        p = q / scale
        x_try = jnp.clip(s.x + p, lo, hi)
        step = x_try - s.x
        predicted = -(t.gradient @ step + 0.5 * step @ h @ step)
        t_try = value(x_try)
        finite = _finite(t_try)
        good = finite & (predicted > 0)
        rho = jnp.where(good, (t.cost - t_try.cost) / jnp.where(good, predicted, 1.0), -jnp.inf)
        # Below the cost's resolution (a predicted decrease under its rounding error) the cost
        # cannot judge a step: one that leaves it unchanged to rounding and lowers the gradient
        # (sensitivity-scaled, free parameters) is taken; the gradient can tell where the cost
        # cannot (large-residual problems converge linearly there: MGH09, Thurber).
        def scaled_gradient(g):
            return jnp.linalg.norm(jnp.where(free, g / s.d, 0.0))

        unresolved = (good & (predicted <= floor * t.cost)
                      & (t_try.cost <= t.cost * (1.0 + floor))
                      & (scaled_gradient(t_try.gradient) < scaled_gradient(t.gradient)))
        accept = (rho > 1e-4) | unresolved
        if method.damped:
            shrink = jnp.maximum(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3)
            limit = jnp.where(accept, s.limit * shrink, s.limit * s.nu)
            nu = jnp.where(accept, 2.0, 2.0 * s.nu)
        else:
            norm = jnp.linalg.norm(scale * step)
            limit = jnp.where(rho < 0.25, 0.25 * norm,
                              jnp.where((rho > 0.75) & (norm > 0.99 * s.limit),
                                        jnp.minimum(2.0 * s.limit, max_radius), s.limit))
            limit = jnp.where(unresolved & (rho < 0.25), s.limit, limit)
            nu = s.nu
        x = jnp.where(accept, x_try, s.x)
        totals = jax.tree.map(lambda new, old: jnp.where(accept, new, old), t_try, t)
        d = jnp.where(accept, jnp.maximum(s.d, jnp.sqrt(jnp.diag(totals.gauss_newton))), s.d)
        size = _size(x, typical, log)
        status = jnp.where(accept, _check(method, x, totals, d, lo, hi, size), Status.RUNNING.code)
        stalled = ~accept & jnp.all(jnp.abs(p) <= 4 * eps * size)
        # Stalled where the curvature is singular: undetermined parameters, not a rough cost.
        _, decrease, definite = newton_step(scaled_eigen(h, t.gradient, s.d, free))
        # Stalled where the Newton step promises less than the cost's own rounding error: the
        # minimum is found to the precision the cost can resolve (tolerances below it).
        resolved = definite & (decrease <= floor * t.cost)
        trials = s.trials + 1
        # Stalled among non-finite trial points: the fit cannot get past them.
        status = jnp.where((status == Status.RUNNING.code) & stalled,
                           jnp.select([~finite, resolved, definite],
                                      [Status.NONFINITE.code, Status.COST.code,
                                       Status.COLLAPSED.code], Status.SINGULAR.code),
                           status)
        status = jnp.where((status == Status.RUNNING.code) & (trials >= method.max_steps),
                           Status.MAX_STEPS.code, status)
        return _State(x, totals, d, limit, nu, trials, s.accepted + accept.astype(jnp.int32),
                      status.astype(jnp.int32), s.nonfinite + (~finite).astype(jnp.int32),
                      jnp.where(finite, s.bad_x, x_try))

    final = jax.lax.while_loop(lambda s: s.status == Status.RUNNING.code, body, state)
    free = _free(final.x, final.totals.gradient, lo, hi)
    return Outcome(final.x, final.totals, free, final.trials, final.accepted, final.status,
                   jacobian_factor(plan, data, final.x), final.nonfinite, final.bad_x)
