"""The corrector: modified Newton on one BDF step, and its sensitivities against the same factor.

Each attempt solves ``G(c) = F(t, y_pred + c, yp_pred + cj c, args) = 0`` for the correction
``c`` with the factored iteration matrix ``M ~ dF/dy + cj_old dF/dy'``, scaling each update by
``2 / (1 + cj / cj_old)`` as IDA does when the matrix is older than ``cj``. Convergence follows
IDA: the first update below ``0.0001 newton_tol`` passes at once, later ones when
``rate / (1 - rate) |update| <= newton_tol``, with the rate estimated from successive updates;
a rate above 0.9 or ``max_newton`` iterations fail (the stepper then refactors or shrinks h).

The derivative is defined by a `jax.custom_jvp`: at the converged state, the tangent solves the
linearized corrector ``(dF/dy + cj dF/dy') dc = -(F_y dy_pred + F_y' dyp_pred + F_p dp)`` by
iterating with the same factor (a staggered forward sensitivity, as in IDAS), to a relative
tolerance of ``0.1 newton_tol`` in the norm of the tangent itself.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._context import Context

__all__ = ["Corrected", "correct", "wrms"]

_SENSITIVITY_ITERATIONS = 12


def wrms(x: jax.Array, w: jax.Array) -> jax.Array:
    """IDA's weighted root-mean-square norm ``sqrt(mean((x w)^2))``."""
    return jnp.sqrt(jnp.mean(jnp.square(x * w)))


class Corrected(NamedTuple):
    y: jax.Array
    yp: jax.Array
    converged: jax.Array   # bool
    iterations: jax.Array  # int32: solves done
    ss: jax.Array          # IDA's rate estimate, carried to the next attempt
    residuals: jax.Array   # int32: residual evaluations


def _float0(x: jax.Array) -> Any:
    """The tangent of a bool or integer array: float0 zeros, a numpy array that JAX takes where
    the tangent's `jax.Array` goes (hence ``Any``)."""
    return np.zeros(np.shape(x), dtype=jax.dtypes.float0)


def _newton(ctx: Context, t, cj, scale, ewt, ss, numeric, y_pred, yp_pred, args) -> Corrected:
    s = ctx.solver
    tol = s.newton_tol
    backend, symbolic = ctx.backend, ctx.symbolic

    class Carry(NamedTuple):
        y: jax.Array
        yp: jax.Array
        res: jax.Array
        m: jax.Array
        oldnrm: jax.Array
        ss: jax.Array
        done: jax.Array
        ok: jax.Array
        nres: jax.Array

    def body(c: Carry) -> Carry:
        delta = scale * backend.solve(symbolic, numeric, c.res)
        y, yp = c.y - delta, c.yp - cj * delta
        delnrm = wrms(delta, ewt)
        first = c.m == 0
        oldnrm = jnp.where(first, delnrm, c.oldnrm)
        rate = (delnrm / jnp.where(oldnrm > 0, oldnrm, 1.0)) ** (
            1.0 / jnp.maximum(c.m, 1).astype(delnrm.dtype))
        diverging = ~first & (rate > 0.9)
        ss_ = jnp.where(first, c.ss, rate / (1.0 - rate))
        finite = jnp.isfinite(delnrm)
        ok = finite & ~diverging & ((first & (delnrm <= 1e-4 * tol)) | (ss_ * delnrm <= tol))
        m = c.m + 1
        done = ok | ~finite | diverging | (m >= s.max_newton)
        res = jax.lax.cond(done, lambda: c.res, lambda: ctx.residual(t, y, yp, args))
        return Carry(y, yp, res, m, oldnrm, ss_, done, ok, c.nres + (~done).astype(jnp.int32))

    res0 = ctx.residual(t, y_pred, yp_pred, args)
    zero = jnp.zeros((), jnp.int32)
    # A non-finite residual gives a non-finite update, which fails the first iteration.
    init = Carry(y_pred, yp_pred, res0, zero, jnp.zeros((), y_pred.dtype), ss,
                 jnp.asarray(False), jnp.asarray(False), jnp.ones((), jnp.int32))
    out = jax.lax.while_loop(lambda c: ~c.done, body, init)
    return Corrected(out.y, out.yp, out.ok, out.m, out.ss, out.nres)


@partial(jax.custom_jvp, nondiff_argnums=(0,))
def correct(ctx: Context, t, cj, scale, ewt, ss, numeric, y_pred, yp_pred, args) -> Corrected:
    """Modified Newton for one attempt (see the module docstring); differentiable in
    ``y_pred``, ``yp_pred`` and ``args``."""
    return _newton(ctx, t, cj, scale, ewt, ss, numeric, y_pred, yp_pred, args)


@correct.defjvp
def _correct_jvp(ctx, primals, tangents):
    t, cj, scale, _ewt, _ss, numeric, _y_pred, _yp_pred, args = primals
    dy_pred, dyp_pred, dargs = tangents[6], tangents[7], tangents[8]
    out = correct(ctx, *primals)
    y, yp = out.y, out.yp
    s = ctx.solver
    backend, symbolic = ctx.backend, ctx.symbolic
    tiny = jnp.finfo(y.dtype).tiny

    def linear_residual(dc):
        return jax.jvp(lambda a, b, p: ctx.residual(t, a, b, p), (y, yp, args),
                       (dy_pred + dc, dyp_pred + cj * dc, dargs))[1]

    class Carry(NamedTuple):
        dc: jax.Array
        i: jax.Array
        old: jax.Array
        done: jax.Array

    def body(c: Carry) -> Carry:
        delta = scale * backend.linear_solve(symbolic, numeric, linear_residual(c.dc))
        dc = c.dc - delta
        d = dy_pred + dc
        w = 1.0 / (s.rtol * (jnp.abs(d) + jnp.sqrt(jnp.mean(d * d))) + tiny)
        norm = wrms(delta, w)
        rate = jnp.where(c.i > 0, norm / jnp.where(c.old > 0, c.old, 1.0), 0.5)
        rate = jnp.minimum(rate, 0.99)
        small = (rate / (1.0 - rate)) * norm <= 0.1 * s.newton_tol
        i = c.i + 1
        done = small | ~jnp.isfinite(norm) | (i >= _SENSITIVITY_ITERATIONS)
        return Carry(dc, i, norm, done)

    init = Carry(jnp.zeros_like(y), jnp.zeros((), jnp.int32), jnp.zeros((), y.dtype),
                 jnp.asarray(False))
    dc = jax.lax.while_loop(lambda c: ~c.done, body, init).dc
    tangent_out = Corrected(dy_pred + dc, dyp_pred + cj * dc, _float0(out.converged),
                            _float0(out.iterations), jnp.zeros_like(out.ss),
                            _float0(out.residuals))
    return out, tangent_out
