"""Consistent initialization (IDA's ``IDACalcIC``), in IDA's two modes.

``"ya_ydp"`` (``IDA_YA_YDP_INIT``): given the differential unknowns of ``y0``, find the algebraic
unknowns and the derivatives of the differential ones so that ``F(t0, y0, y'0) = 0``. The
unknowns are ``z = (y_a, h y'_d)`` with ``h`` IDA's ``hic`` (`solvers.dae._stepper` sizes it from
the first output time), so both parts are in units of ``y`` and share the error weights; the
matrix is ``dF/dy_a + dF/dy'_d / h``. When no unknown is algebraic, the norm in the convergence
test is scaled by ``tdist / h`` as IDA scales it (its ``sysindex = 0`` case, ``tscale * cj``), so
that ``y'`` itself, not ``h y'``, is converged.

``"y"`` (``IDA_Y_INIT``): given all of ``y'0``, find all of ``y`` with ``F(t0, y, y'0) = 0``;
the matrix is ``dF/dy``.

Newton with the exact matrix (the iteration matrix's pattern) refactored every iteration and a
backtracking line search on the norm of the Newton update; converged when that norm is below
``0.01 newton_tol`` (IDA's ``epiccon``). Derivatives follow from the implicit function theorem,
solved against the last factor with two refinement steps.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..linear import FACTOR, REFACTOR
from ._context import Context
from ._newton import wrms

__all__ = ["Initialized", "initialize"]

_MAX_ITERATIONS = 10
_MAX_BACKTRACKS = 5


class Initialized(NamedTuple):
    y: jax.Array
    yp: jax.Array
    numeric: Any
    converged: jax.Array
    iterations: jax.Array   # Newton iterations (each one a factorization)
    residuals: jax.Array
    solves: jax.Array


def _zeros(x: Any) -> Any:
    """Zero tangents: float0 for integer and boolean leaves, zeros for inexact ones."""
    def zero(a):
        if jnp.issubdtype(jnp.result_type(a), jnp.inexact):
            return jnp.zeros_like(a)
        return np.zeros(np.shape(a), dtype=jax.dtypes.float0)

    return jax.tree.map(zero, x)


def _masks(ctx: Context, mode: str, h, dtype: Any) -> tuple[Any, Any, Any]:
    """``(cy, cyp, keep)``: the update ``dz`` moves ``y`` by ``cy dz`` and ``y'`` by
    ``cyp dz`` (the matrix is ``dF/dy diag(cy) + dF/dy' diag(cyp)``); ``keep`` is 1 where the
    given ``y'0`` is kept."""
    if mode == "y":
        return 1.0, 0.0, 1.0
    alg = jnp.asarray(ctx.algebraic, dtype)
    return alg, (1.0 - alg) / h, 0.0


def _run(ctx: Context, mode: str, t0, h, scale, ewt, numeric, y0, yp0, args) -> Initialized:
    backend, symbolic = ctx.backend, ctx.symbolic
    cy, cyp, _ = _masks(ctx, mode, h, y0.dtype)
    epic = 0.01 * ctx.solver.newton_tol

    def step_of(y, yp):
        return ctx.residual(t0, y, yp, args)

    def apply(y, yp, dz, lam):
        return y - lam * dz * cy, yp - lam * dz * cyp

    class Carry(NamedTuple):
        y: jax.Array
        yp: jax.Array
        numeric: Any
        it: jax.Array
        done: jax.Array
        ok: jax.Array
        nres: jax.Array
        nsolve: jax.Array

    def body(c: Carry) -> Carry:
        values = ctx.matrix_values(t0, c.y, c.yp, args, cy, cyp)
        update = jnp.where(c.it == 0, FACTOR, REFACTOR)
        numeric = backend.update(symbolic, c.numeric, values, update)
        dz = backend.solve(symbolic, numeric, step_of(c.y, c.yp))
        fnorm = scale * wrms(dz, ewt)

        class Search(NamedTuple):
            lam: jax.Array
            y: jax.Array
            yp: jax.Array
            fnew: jax.Array
            k: jax.Array
            done: jax.Array

        def search(sc: Search) -> Search:
            y, yp = apply(c.y, c.yp, dz, sc.lam)
            fnew = scale * wrms(backend.solve(symbolic, numeric, step_of(y, yp)), ewt)
            good = jnp.isfinite(fnew) & (fnew <= (1.0 - 1e-4 * sc.lam) * fnorm)
            k = sc.k + 1
            done = good | (k >= _MAX_BACKTRACKS)
            return Search(jnp.where(done, sc.lam, 0.5 * sc.lam), y, yp, fnew, k, done)

        zero = jnp.zeros((), jnp.int32)
        found = jax.lax.while_loop(
            lambda sc: ~sc.done, search,
            Search(jnp.ones((), y0.dtype), c.y, c.yp, fnorm, zero, jnp.asarray(False)))
        small = fnorm <= epic
        y = jnp.where(small, apply(c.y, c.yp, dz, 1.0)[0], found.y)
        yp = jnp.where(small, apply(c.y, c.yp, dz, 1.0)[1], found.yp)
        ok = small | (jnp.isfinite(found.fnew) & (found.fnew <= epic))
        it = c.it + 1
        done = ok | ~jnp.isfinite(fnorm) | (it >= _MAX_ITERATIONS)
        return Carry(y, yp, numeric, it, done, ok, c.nres + 1 + found.k,
                     c.nsolve + 1 + found.k)

    zero = jnp.zeros((), jnp.int32)
    if mode == "ya_ydp":
        yp0 = yp0 * (1.0 - jnp.asarray(ctx.algebraic, y0.dtype))  # y'_a does not enter F
    out = jax.lax.while_loop(lambda c: ~c.done, body,
                             Carry(y0, yp0, numeric, zero, jnp.asarray(False),
                                   jnp.asarray(False), zero, zero))
    return Initialized(out.y, out.yp, out.numeric, out.ok, out.it, out.nres, out.nsolve)


@partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def initialize(ctx: Context, mode: str, t0, h, scale, ewt, numeric, y0, yp0,
               args) -> Initialized:
    """Consistent ``(y, y')`` at ``t0`` (see the module docstring): ``mode`` ``"ya_ydp"`` or
    ``"y"``, ``h`` IDA's ``hic``, ``scale`` the factor of the norm in the convergence test.
    Differentiable in ``y0`` (its part that is given), ``yp0`` (likewise) and ``args``."""
    return _run(ctx, mode, t0, h, scale, ewt, numeric, y0, yp0, args)


@initialize.defjvp
def _initialize_jvp(ctx, mode, primals, tangents):
    t0, h, _scale, _ewt, _numeric, y0, _yp0, args = primals
    dy0, dyp0, dargs = tangents[5], tangents[6], tangents[7]
    out = initialize(ctx, mode, *primals)
    backend, symbolic = ctx.backend, ctx.symbolic
    cy, cyp, keep = _masks(ctx, mode, h, y0.dtype)
    y, yp = out.y, out.yp
    # The given parts keep their tangents; the solved ones follow from F = 0. In "ya_ydp" the
    # given y'_a is dropped (it does not enter F) and y'_d is solved: yp's given part is none.
    fixed_y = dy0 * (1.0 - (cy if mode == "ya_ydp" else 1.0))
    fixed_yp = dyp0 * keep

    def linear_residual(dz):
        return jax.jvp(lambda a, b, p: ctx.residual(t0, a, b, p), (y, yp, args),
                       (fixed_y + dz * cy, fixed_yp + dz * cyp, dargs))[1]

    dz = jnp.zeros_like(y)
    for _ in range(3):  # one solve and two refinements with the exact matrix-vector product
        dz = dz - backend.linear_solve(symbolic, out.numeric, linear_residual(dz))
    tangent = Initialized(fixed_y + dz * cy, fixed_yp + dz * cyp, _zeros(out.numeric),
                          _zeros(out.converged), _zeros(out.iterations),
                          _zeros(out.residuals), _zeros(out.solves))
    return out, tangent
