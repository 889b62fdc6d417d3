"""A user-supplied iteration matrix (IDA's ``IDASetJacFn``): its layout, how the solver uses it,
and the check against the matrix forward-mode differentiation gives.

``DAEProblem(jacobian=J)`` with ``J(t, y, yp, c, args)`` returning ``dF/dy + c dF/dy'``, either
as the values of the pattern's entries in the pattern's order (shape ``(nnz,)``: by column, then
row, after the diagonal is added; `jacobian_entries` gives their ``(rows, cols)``) or as a dense
``(n, n)`` array, whose entries outside the pattern are dropped (as the differentiated matrix
drops them).

Where the solver builds ``dF/dy diag(cy) + dF/dy' diag(cyp)`` it calls ``J``: the stepper's
corrector (``cy = 1``, ``cyp = cj``) and ``IDA_Y_INIT`` (``cy = 1``, ``cyp = 0``) with one call;
``IDA_YA_YDP_INIT`` (``cy`` 1 on the algebraic unknowns, ``cyp`` ``1 / h`` on the differential
ones) with two, ``J(0) = dF/dy`` and ``J(1 / h)``, from which the differential columns take
``J(1 / h) - J(0) = dF/dy' / h`` (the exact Newton matrix of the initialization, as the
differentiated one; IDA hands it ``J(1 / h)`` whole). ``J`` is called on values held out of
differentiation: its own derivatives are never taken.
"""

from __future__ import annotations

import logging
import weakref
from functools import partial
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

if TYPE_CHECKING:
    from ._context import Context
    from ._problem import DAEProblem

logger = logging.getLogger(__name__)

__all__ = ["CHECK_FLOOR", "CHECK_RTOL", "check_jacobian", "jacobian_entries", "user_values"]

#: The default relative tolerance of the check (``check_jacobian=True``).
CHECK_RTOL = 1e-6
#: Entries are compared relative to ``max(|AD|, CHECK_FLOOR * max |AD|)``.
CHECK_FLOOR = 1e-8
#: The step coefficients ``c`` the check compares at: ``dF/dy``, and ``dF/dy + dF/dy'``.
CHECK_C = (0.0, 1.0)

sg = jax.lax.stop_gradient


def jacobian_entries(problem: DAEProblem) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, cols)`` of the entries whose values a ``jacobian`` of shape ``(nnz,)`` returns,
    in that order: the problem's pattern (with its diagonal) by column, then row."""
    return problem.pattern.rows, problem.pattern.cols


def _layout_error(problem: DAEProblem, shape: Any) -> ValueError:
    p = problem.pattern
    return ValueError(
        f"the jacobian of {problem!r} returned shape {shape}; J(t, y, yp, c, args) must return "
        f"dF/dy + c dF/dyp as the values of the pattern's {p.nnz} entries in its order, shape "
        f"({p.nnz},) (their (rows, cols) are solvers.dae.jacobian_entries(problem)), or as a "
        f"dense ({p.n}, {p.n}) array")


def _as_values(problem: DAEProblem, out: Any, dtype: Any) -> jax.Array:
    """``J``'s output as the pattern's values (refusing any other shape)."""
    out = jnp.asarray(out)
    p = problem.pattern
    if out.shape == (p.nnz,):
        return out.astype(dtype)
    if out.shape == (p.n, p.n):
        return out[jnp.asarray(p.rows), jnp.asarray(p.cols)].astype(dtype)
    raise _layout_error(problem, out.shape)


def _call(problem: DAEProblem, t, y, yp, c, args) -> jax.Array:
    assert problem.jacobian is not None
    c = jnp.asarray(c, y.dtype)
    return _as_values(problem, problem.jacobian(t, y, yp, c, args), y.dtype)


def user_values(problem: DAEProblem, t: jax.Array, y: jax.Array, yp: jax.Array, args: Any,
                cy: Any, cyp: Any) -> jax.Array:
    """The entries (pattern order) of ``dF/dy diag(cy) + dF/dy' diag(cyp)`` from the problem's
    ``jacobian``: one call when ``cy`` is 1 and ``cyp`` one number, else two (module
    docstring)."""
    single = isinstance(cy, (int, float)) and cy == 1 and jnp.ndim(cyp) == 0
    t, y, yp, args, cyp = sg((t, y, yp, args, cyp))
    if single:
        return _call(problem, t, y, yp, cyp, args)
    cy = sg(cy)
    cols = jnp.asarray(problem.pattern.cols)
    cy = jnp.broadcast_to(jnp.asarray(cy, y.dtype), y.shape)
    cyp = jnp.broadcast_to(jnp.asarray(cyp, y.dtype), y.shape)
    top = jnp.max(jnp.abs(cyp))
    c = jnp.where(top > 0, top, 1.0)
    a = _call(problem, t, y, yp, 0.0, args)           # dF/dy
    b = _call(problem, t, y, yp, c, args) - a         # c dF/dy'
    return a * cy[cols] + b * (cyp[cols] / c)


def admit(problem: DAEProblem, args: Any, t0: jax.Array, y0: jax.Array, yp0: Any,
          solver: Any = None) -> None:
    """`pdesolve`'s door for a problem with a ``jacobian``: its output's shape (always, before
    anything compiles), and with ``check_jacobian`` its values against the differentiated
    matrix at the initial state, once per problem (when the inputs are concrete)."""
    jacobian = problem.jacobian
    if jacobian is None:
        return

    def spec(x):
        return jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x))

    leaves, treedef = jax.tree.flatten((t0, y0, args))
    key = (treedef, tuple((jnp.shape(x), jnp.result_type(x)) for x in leaves))
    seen = _shapes_seen.setdefault(problem, set())
    if key not in seen:   # trace J once per input structure, not at every call
        t, y, a = jax.tree.map(spec, (t0, y0, args))
        out = jax.eval_shape(lambda *inputs: jacobian(*inputs), t, y, y,
                             jax.ShapeDtypeStruct((), y.dtype), a)
        shape = getattr(out, "shape", None)
        p = problem.pattern
        if shape not in ((p.nnz,), (p.n, p.n)):
            raise _layout_error(problem, shape if shape is not None else type(out).__name__)
        seen.add(key)
    if not problem.check_jacobian or problem in _checked:
        return
    yp0 = jnp.zeros_like(y0) if yp0 is None else yp0
    try:
        values = jax.tree.map(np.asarray, (t0, y0, yp0, args))
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        if problem not in _deferred:
            _deferred.add(problem)
            logger.warning("check_jacobian of %r: pdesolve was called with traced inputs "
                           "(inside jit, grad or vmap), so the jacobian is checked at the first "
                           "call with concrete ones; or call solvers.dae.check_jacobian(problem, "
                           "t0, y0, yp0, args) once", problem)
        return
    check_jacobian(problem, *values, solver=solver)


_checked: weakref.WeakSet[DAEProblem] = weakref.WeakSet()
_shapes_seen: weakref.WeakKeyDictionary[DAEProblem, set[Any]] = weakref.WeakKeyDictionary()
_deferred: weakref.WeakSet[DAEProblem] = weakref.WeakSet()


def check_jacobian(problem: DAEProblem, t: Any, y: Any, yp: Any = None, args: Any = None, *,
                   rtol: float | None = None, solver: Any = None) -> None:
    """Compare the problem's ``jacobian`` with the matrix forward-mode differentiation of its
    residual gives, at ``(t, y, yp)`` (``yp`` default zeros) with ``args`` (default the
    problem's), at ``c = 0`` (``dF/dy``) and ``c = 1``; raise a ValueError naming the worst
    entry when an entry differs by more than ``rtol max(|AD|, 1e-8 max |AD|)`` (``rtol``
    default ``problem.check_jacobian`` when it is a number, else ``1e-6``). Entries where both
    are non-finite agree; where one is, they do not."""
    from ._context import context
    from ._jida import JIDA

    if problem.jacobian is None:
        raise ValueError(f"{problem!r} has no jacobian to check; pass DAEProblem(..., "
                         f"jacobian=J)")
    if rtol is None:
        given = problem.check_jacobian
        rtol = CHECK_RTOL if isinstance(given, bool) else float(given)
    ctx = context(problem, solver if solver is not None else JIDA(linear="dense"))
    dtype = jnp.result_type(float)
    y = jnp.asarray(y, dtype)
    yp = jnp.zeros_like(y) if yp is None else jnp.asarray(yp, dtype)
    args = problem.args if args is None else args
    user, ad = (np.asarray(a) for a in _both(ctx, jnp.asarray(t, dtype), y, yp, args))
    rows, cols = problem.pattern.rows, problem.pattern.cols
    for i, c in enumerate(CHECK_C):
        u, a = user[i], ad[i]
        fa, fu = np.isfinite(a), np.isfinite(u)
        top = float(np.abs(a[fa]).max(initial=0.0))
        scale = np.maximum(np.abs(np.where(fa, a, 0.0)), CHECK_FLOOR * top)
        diff = np.abs(np.where(fa & fu, u, 0.0) - np.where(fa & fu, a, 0.0))
        err = np.where(scale > 0, diff / np.where(scale > 0, scale, 1.0),
                       np.where(diff > 0, np.inf, 0.0))
        err = np.where(fa == fu, err, np.inf)   # one of the two is not finite
        k = int(np.argmax(err))
        if err[k] > rtol:
            bad = int(np.sum(err > rtol))
            raise ValueError(
                f"the jacobian of {problem!r} disagrees with the derivative of its residual at "
                f"t = {float(t)!r}, c = {c}: at entry (row {int(rows[k])}, col {int(cols[k])}) "
                f"J gives {float(u[k])!r} where AD gives {float(a[k])!r} (relative error "
                f"{float(err[k]):.3g} > rtol {rtol:g}; {bad} of {u.size} entries disagree). J must "
                f"return dF/dy + c dF/dyp in the pattern's order (solvers.dae.jacobian_entries); "
                f"fix it, or drop check_jacobian if it is approximate on purpose")
    _checked.add(problem)
    logger.info("the jacobian of %r agrees with AD at t = %r (rtol %g)", problem, float(t), rtol)


@partial(jax.jit, static_argnums=(0,))
def _both(ctx: Context, t: jax.Array, y: jax.Array, yp: jax.Array, args: Any):
    user = jnp.stack([user_values(ctx.problem, t, y, yp, args, 1.0, jnp.asarray(c, y.dtype))
                      for c in CHECK_C])
    ad = jnp.stack([ctx.ad_values(t, y, yp, args, 1.0, jnp.asarray(c, y.dtype))
                    for c in CHECK_C])
    return user, ad
