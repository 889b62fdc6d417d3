"""`pdesolve`: solve a DAE problem with `JIDA`, compiled once per problem, solver and shapes.

Derivatives. The solve is a `jax.custom_jvp` whose tangent is ``S @ d(inputs)``, with ``S`` the
forward sensitivities of the saved states with respect to every input that has a non-zero
tangent (``args`` leaves, ``y0``, ``yp0``), computed in one pass that carries all directions
(`jax.jacfwd` through the stepping loop; each corrector's sensitivity is solved against the same
factor as the state). Because the tangent is a matrix product it is linear and transposable, so
`jax.jvp`, `jax.jacfwd`, `jax.grad` (reverse mode) and Hessians all work. The cost is one
sensitivity direction per scalar input differentiated: cheap for parameters, ``n`` directions for
``y0`` (there is no adjoint solve). The sensitivities of the save times a failed solve did not
reach (all of them when it failed at ``t0``) are NaN: a failed solve never differentiates to
zeros. After a terminal root (``Status.ROOT``, not a failure) the rows after it are NaN in
forward mode by a select, which reverse mode drops, so gradients of the rows before the root
stay finite. Root times (``Solution.root_ts``) are differentiated by the implicit function
theorem (`solvers.dae._roots`), in the same pass; quadratures (``Solution.qs``) as the states.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero

from ._context import Context, context
from ._jacobian import admit as admit_jacobian
from ._jida import JIDA, violated
from ._problem import DAEProblem
from ._quadrature import Quadrature
from ._roots import Roots
from ._sensitivity import augmented_sensitivities
from ._solution import STAT_NAMES, SaveAt, Solution, Status
from ._stepper import integrate

__all__ = ["pdesolve"]

logger = logging.getLogger(__name__)


def _zero_tangent(x: Any) -> Any:
    if jnp.issubdtype(jnp.result_type(x), jnp.inexact):
        return jnp.zeros_like(x)
    return np.zeros(np.shape(x), dtype=jax.dtypes.float0)


@partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2))
def _solve(ctx: Context, roots: Roots | None, quad: Quadrature | None, args: Any, y0: jax.Array,
           yp0: Any, t0: jax.Array, t1: jax.Array, ts: jax.Array, tout1: jax.Array) -> Any:
    return integrate(ctx, args, y0, yp0, t0, t1, ts, tout1, roots, quad)


def _solve_jvp(ctx, roots, quad, primals, tangents):
    args, y0, yp0, t0, t1, ts, tout1 = primals
    leaves, treedef = jax.tree.flatten((args, y0, yp0))
    dleaves = jax.tree.leaves(tangents[:3], is_leaf=lambda x: isinstance(x, SymbolicZero))
    chosen = tuple(i for i, (x, d) in enumerate(zip(leaves, dleaves))
                   if not isinstance(d, SymbolicZero)
                   and jnp.issubdtype(jnp.result_type(x), jnp.inexact))
    if not chosen:
        out = _solve(ctx, roots, quad, *primals)
        return out, jax.tree.map(_zero_tangent, out)
    if ctx.solver.sensitivity_error_control:
        (jac, jac_roots, jac_qs), out = _augmented(ctx, quad, treedef, chosen, leaves, t0, t1,
                                                   ts, tout1)
    else:
        (jac, jac_roots, jac_qs), out = _sensitivities(ctx, roots, quad, treedef, chosen,
                                                       leaves, t0, t1, ts, tout1)
    ys, root_ts = out[0], out[3]
    # NaN sensitivities where the solve failed: a factor, so that the tangent stays linear (its
    # transpose, reverse mode, carries the NaN) and second derivatives are NaN there too.
    nan_rows = jnp.where(_unreached(ys, out[2]), jnp.nan, 1.0)
    after = _after_root(ys, out[2])[:, None]
    dys, dqs = (_rows_tangent(jc, chosen, dleaves, nan_rows, after) for jc in (jac, jac_qs))
    # The root times' derivatives (implicit function theorem, `solvers.dae._roots`); NaN, by
    # the same select, for the padding.
    droots = jnp.zeros_like(root_ts)
    for j, i in enumerate(chosen):
        d = jnp.asarray(dleaves[i], root_ts.dtype)
        droots = droots + jnp.tensordot(jac_roots[j], d, axes=d.ndim)
    droots = jnp.where(jnp.isnan(root_ts), jnp.nan, droots)
    tangent = jax.tree.map(_zero_tangent, out)
    return out, (dys, tangent[1], tangent[2], droots, tangent[4], dqs)


def _rows_tangent(jac: Any, chosen: tuple[int, ...], dleaves: list[Any], nan_rows: jax.Array,
                  after: jax.Array) -> jax.Array:
    """The tangent of an output saved by rows (the states, a quadrature): ``sum_i jac[i] @
    d(leaf i)``, NaN by a factor on the rows a failed solve did not reach and, after a terminal
    root (not a failure), NaN by a select: its transpose drops their cotangents, so reverse mode
    gives the derivatives of the rows before the root (a quantity that reads a later row is NaN
    itself)."""
    terms = []
    for j, i in enumerate(chosen):
        d = jnp.asarray(dleaves[i], jac[j].dtype)
        sens = jac[j] * nan_rows.reshape((-1,) + (1,) * (jac[j].ndim - 1))
        terms.append(jnp.tensordot(sens, d, axes=d.ndim))
    return jnp.where(after, jnp.nan, sum(terms[1:], terms[0]))


def _unreached(ys: jax.Array, code: jax.Array) -> jax.Array:
    """The save times whose derivatives are NaN: of a failed solve, those it did not reach (their
    states are NaN) and, when the initialization failed or ``F(t0)`` was not finite, all."""
    failed = (code != Status.SUCCESS.code) & (code != Status.ROOT.code)
    at_start = (code == Status.INITIALIZATION.code) | (code == Status.NONFINITE.code)
    return failed & (at_start | jnp.any(jnp.isnan(ys), axis=1))


def _after_root(ys: jax.Array, code: jax.Array) -> jax.Array:
    """The save times after a terminal root (their states are NaN)."""
    return (code == Status.ROOT.code) & jnp.any(jnp.isnan(ys), axis=1)


@partial(jax.jit, static_argnums=(0, 1, 2, 3, 4))
def _sensitivities(ctx: Context, roots: Roots | None, quad: Quadrature | None, treedef: Any,
                   chosen: tuple[int, ...], leaves: list[Any], t0: jax.Array, t1: jax.Array,
                   ts: jax.Array, tout1: jax.Array) -> Any:
    """The solve, and ``d ys / d leaves[i]``, ``d root_ts / d leaves[i]`` and ``d qs / d
    leaves[i]`` for ``i`` in ``chosen``, in one pass (jitted, so a model that solves twice with
    the same shapes, as a fit does, is traced once)."""
    def run(*selected):
        full = list(leaves)
        for i, x in zip(chosen, selected):
            full[i] = x
        a, y, yp = jax.tree.unflatten(treedef, full)
        out = integrate(ctx, a, y, yp, t0, t1, ts, tout1, roots, quad)
        return (out[0], out[3], out[5]), out

    return jax.jacfwd(run, argnums=tuple(range(len(chosen))), has_aux=True)(
        *(leaves[i] for i in chosen))


#: With ``JIDA(sensitivity_error_control=True)``: the solve with its sensitivities in the error
#: test (`solvers.dae._sensitivity`), jitted as `_sensitivities`.
_augmented = jax.jit(augmented_sensitivities, static_argnums=(0, 1, 2, 3))

_solve.defjvp(_solve_jvp, symbolic_zeros=True)
_compiled = jax.jit(_solve, static_argnums=(0, 1, 2))


def _concrete(x: Any) -> np.ndarray | None:
    """The value of ``x``, or ``None`` while tracing."""
    try:
        return np.asarray(x)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return None


def _check_vectors(solver: JIDA, problem: DAEProblem, y0: jax.Array) -> None:
    """Per-unknown settings have one entry per unknown; a concrete ``y0`` meets the
    constraints (IDA refuses one that does not)."""
    for name, value in (("atol", solver.atol), ("constraints", solver.constraints)):
        if isinstance(value, tuple) and len(value) != problem.n:
            raise ValueError(f"JIDA({name}=...) has {len(value)} entries but {problem!r} has "
                             f"{problem.n} unknowns; give one per unknown (or a scalar atol)")
    if solver.constraints is None:
        return
    y = _concrete(y0)
    if y is not None:
        bad = np.flatnonzero(violated(solver.constraints, y))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"y0 violates the constraints at {bad.size} unknowns, e.g. y0[{i}] "
                             f"= {float(y[i])!r} with code {solver.constraints[i]} (1: >= 0, "
                             f"2: > 0, -1: <= 0, -2: < 0); start inside them")


def _first_output(first_output: Any, t0: jax.Array, t1: jax.Array, ts: jax.Array,
                  concrete: tuple[Any, Any, Any], dtype: Any) -> jax.Array:
    """IDA's ``tout1``: ``first_output``, else the first save time after ``t0`` (else ``t1``);
    ``concrete`` holds ``t0``, ``t1``, ``ts`` when known (``None`` while tracing)."""
    c0, c1, cts = concrete
    if first_output is None:
        if c0 is not None and c1 is not None and cts is not None:
            after = cts[cts > c0]
            return jnp.asarray(after[0] if after.size else c1, dtype)
        return jnp.min(jnp.where(ts > t0, ts, t1))
    tout1 = jnp.asarray(first_output, dtype)
    if tout1.ndim != 0:
        raise ValueError(f"first_output must be a time (a scalar), got shape {tout1.shape}")
    c = _concrete(tout1)
    if c is not None and c0 is not None and not c > c0:
        raise ValueError(f"first_output={float(c)!r} must be after t0={float(c0)!r}: it is IDA's "
                         f"tout1, the first time the solution is wanted (None: the first save "
                         f"time after t0)")
    return tout1


def _run(problem: DAEProblem, solver: JIDA, roots: Roots | None, quad: Quadrature | None,
         args: Any, *operands: Any) -> Any:
    """The compiled solve with ``args``, else the problem's own; a residual that fails for
    want of parameters says where to give them."""
    given = problem.args if args is None else args
    try:
        return _compiled(context(problem, solver), roots, quad, given, *operands)
    except TypeError as err:
        if given is not None or "NoneType" not in str(err):
            raise
        raise TypeError(f"the residual of {problem!r} failed with args=None ({err}): the "
                        "problem carries no parameters and pdesolve got none; pass "
                        "pdesolve(..., args={...}) or build it as DAEProblem(..., args={...})"
                        ) from err


def pdesolve(problem: DAEProblem, solver: JIDA | None, span: tuple[Any, Any], y0: Any,
             yp0: Any = None, *, saveat: SaveAt | None = None, args: Any = None,
             first_output: Any = None, roots: Roots | None = None,
             quadrature: Quadrature | Any = None) -> Solution:
    """Solve the index-1 DAE ``F(t, y, y', args) = 0`` from ``t0`` to ``t1``.

    Arguments:
        problem: a `DAEProblem` (or what a spec's ``build()`` returns).
        solver: `JIDA(linear=..., rtol=..., atol=..., max_order=5)`; ``None`` is ``JIDA()``.
        span: ``(t0, t1)`` with ``t1 > t0``.
        y0: the initial state ``(n,)``. With ``JIDA(initialize="ya_ydp")`` (default, also
            ``True``) its algebraic part is only a first guess: it is made consistent, as are
            the derivatives; with ``initialize="y"`` all of it is a guess, solved given ``yp0``.
        yp0: initial derivatives; ``None`` lets the consistent initialization compute them
            (``initialize="y"`` needs them).
        saveat: `SaveAt(ts=...)`: where to return the state; default ``t1`` only.
        args: the residual's ``args`` (parameters); default ``problem.args``.
        first_output: IDA's ``tout1``, the time that sizes the initialization's step
            (``IDACalcIC``) and the first step: ``0.001 (first_output - t0)``, cut by
            ``|y'0|``; default the first save time after ``t0`` (``t1`` if none is).
        roots: `Roots(g, direction=, terminal=, max_roots=)`: root functions located after
            each step (IDA's ``IDARootInit``); their times are ``Solution.root_ts``, and a
            terminal one ends the solve there with ``Status.ROOT``.
        quadrature: `Quadrature(q, error_control=False)` or a bare ``q(t, y, yp, args) ->
            (k,)``: integrals ``int_{t0}^t q`` computed with the steps (IDAS's
            ``IDAQuadInit``), returned as ``Solution.qs`` at the save times.

    Returns:
        A `Solution`: ``ts``, ``ys`` (``(len(ts), n)``), ``qs``, ``stats`` and ``status``. A
        failed solve is returned, not raised: ``status`` says why, and the states (and
        quadratures) it did not reach are NaN.

    Traceable (call it inside ``jit``, ``vmap``, a fit's model) and differentiable with respect
    to ``args``, ``y0`` and ``yp0`` (`jax.jvp`, `jax.jacfwd`, `jax.grad`); not with respect to
    the times. Outside a trace it runs compiled, once per problem, solver and output shape.

    Raises:
        TypeError, ValueError: for a wrong problem, shapes or times (before anything compiles).
    """
    if hasattr(problem, "build") and not isinstance(problem, DAEProblem):
        raise TypeError(f"pdesolve takes a DAEProblem; build it first: "
                        f"pdesolve({type(problem).__name__}.build(layout=None), ...)")
    if not isinstance(problem, DAEProblem):
        raise TypeError(f"pdesolve takes a DAEProblem, got {type(problem).__name__}")
    solver = JIDA() if solver is None else solver
    if not isinstance(solver, JIDA):
        raise TypeError(f"pdesolve's solver must be JIDA(...), got {solver!r}")
    saveat = SaveAt() if saveat is None else saveat
    if not isinstance(saveat, SaveAt):
        raise TypeError(f"saveat must be SaveAt(ts=...), got {saveat!r}")
    try:
        t0, t1 = span
    except (TypeError, ValueError):
        raise ValueError(f"span must be (t0, t1), got {span!r}") from None
    dtype = jnp.result_type(float)
    if y0 is None:
        raise ValueError(f"pdesolve needs y0, an array of shape ({problem.n},)")
    y0 = jnp.asarray(y0, dtype)
    if y0.shape != (problem.n,):
        raise ValueError(f"y0 has shape {y0.shape} but {problem!r} has {problem.n} unknowns")
    _check_vectors(solver, problem, y0)
    if yp0 is not None:
        yp0 = jnp.asarray(yp0, dtype)
        if yp0.shape != (problem.n,):
            raise ValueError(f"yp0 has shape {yp0.shape}; give ({problem.n},) or None")
    elif not solver.initialize:
        raise ValueError("JIDA(initialize=False) uses y0 and yp0 as given: pass yp0= (or let "
                         "the solver initialize consistently)")
    elif solver.initialize == "y":
        raise ValueError("JIDA(initialize='y') solves for all of y0 given yp0 (IDA_Y_INIT): "
                         f"pass yp0= of shape ({problem.n},), e.g. zeros for a steady state")
    t0, t1 = jnp.asarray(t0, dtype), jnp.asarray(t1, dtype)
    ts = jnp.reshape(t1, (1,)) if saveat.ts is None else jnp.asarray(saveat.ts, dtype)
    if ts.ndim != 1 or ts.size == 0:
        raise ValueError(f"SaveAt(ts=...) must be a non-empty 1-D array, got shape {ts.shape}")
    c0, c1, cts = _concrete(t0), _concrete(t1), _concrete(ts)
    if c0 is not None and c1 is not None and not c1 > c0:
        raise ValueError(f"span (t0, t1) = ({float(c0)!r}, {float(c1)!r}) needs t1 > t0")
    if cts is not None:
        if np.any(np.diff(cts) < 0):
            raise ValueError("SaveAt(ts=...) must be sorted in increasing order")
        if c0 is not None and c1 is not None and (cts[0] < c0 or cts[-1] > c1):
            raise ValueError(f"SaveAt(ts=...) spans [{cts[0]!r}, {cts[-1]!r}], outside the "
                             f"span [{float(c0)!r}, {float(c1)!r}]; save inside [t0, t1]")
    if roots is not None and not isinstance(roots, Roots):
        raise TypeError(f"roots must be Roots(g, direction=None, terminal=False), got {roots!r}")
    if roots is not None and solver.sensitivity_error_control:
        raise ValueError("JIDA(sensitivity_error_control=True) does not take roots= (root "
                         "times have no derivative from the sensitivity solve); drop roots= or "
                         "use JIDA(sensitivity_error_control=False), whose derivatives include "
                         "the root times'")
    quad = Quadrature.of(quadrature)
    if quad is not None and quad.error_control:
        quad.tolerances(solver.rtol, solver.atol)   # refused here, before anything compiles
    tout1 = _first_output(first_output, t0, t1, ts, (c0, c1, cts), dtype)
    admit_jacobian(problem, problem.args if args is None else args, t0, y0, yp0, solver)
    ys, stats, code, root_ts, root_index, qs = _run(problem, solver, roots, quad, args, y0, yp0,
                                                    t0, t1, ts, tout1)
    sol = Solution(ts=ts, ys=ys, stats=dict(zip(STAT_NAMES, stats)), code=code, root_ts=root_ts,
                   root_index=root_index, qs=qs)
    concrete = _concrete(code)
    if concrete is not None and concrete.ndim == 0 and \
            int(concrete) not in (Status.SUCCESS.code, Status.ROOT.code):
        status = Status.of(int(concrete))
        logger.warning("pdesolve of %r ended with %s: %s", problem, status.name.lower(),
                       status.message)
    return sol
