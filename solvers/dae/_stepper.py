"""The time-stepping loop: IDA's variable-order, variable-step BDF in fixed-leading-coefficient
form with modified divided differences, as one `jax.lax.while_loop` (one iteration per attempted
step). Each attempt runs SUNDIALS IDA's pieces (Brown, Hindmarsh, Petzold) in IDA's order:
``IDASetCoeffs`` and ``IDAPredict`` (`predict`), ``IDANls`` (`_nonlinear_solve`: refactor,
Newton, constraints), ``IDATestError`` (`test_error`), then ``IDACompleteStep``
(`complete_step`) or ``IDAHandleNFlag`` (`handle_failure`), and ``IDAGetSolution`` at the save
times (`_save`); the formulas live in `solvers.dae._bdf`. Before the loop, ``IDACalcIC``
(`_calc_ic`) and IDASolve's start (`_initial_step`, `_first_state`); after each attempt,
IDASolve's return (`_return_flag`) ends the loop or lets it go on.

Step-size control and order selection are held out of derivatives (`jax.lax.stop_gradient`):
the derivative of a solve is that of the discrete solution on the steps it took.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ..linear import FACTOR, KEEP, REFACTOR
from ._bdf import (
    Failed,
    Predicted,
    combine,
    complete_step,
    enforce_constraints,
    handle_failure,
    interpolate,
    new_rows,
    predict,
    test_error,
)
from ._context import Context
from ._initialize import Initialized, initialize
from ._jida import JIDA
from ._newton import correct, wrms
from ._quadrature import Quadrature
from ._roots import Found, Roots, RootState, check_step, start
from ._solution import STAT_NAMES, Status

__all__ = ["integrate"]

sg = jax.lax.stop_gradient


class _Stats(NamedTuple):
    steps: jax.Array
    rejected_steps: jax.Array
    error_test_failures: jax.Array
    convergence_failures: jax.Array
    newton_iterations: jax.Array
    factorizations: jax.Array
    pivoting_factorizations: jax.Array
    solves: jax.Array
    residual_evaluations: jax.Array
    initialization_iterations: jax.Array


assert _Stats._fields == STAT_NAMES


class _State(NamedTuple):
    t: jax.Array
    h: jax.Array
    k: jax.Array
    kused: jax.Array
    hused: jax.Array
    ns: jax.Array
    phase: jax.Array
    psi: jax.Array        # (K + 1,)
    phi: tuple            # K + 2 arrays (n,): the modified divided differences
    cj: jax.Array         # of the last attempt (IDA's cjlast)
    cjold: jax.Array      # at the last factorization
    ss: jax.Array
    numeric: Any
    setup: jax.Array      # refactor at the next attempt regardless of cj
    pivot: jax.Array      # the next factorization chooses pivots afresh
    ncf: jax.Array
    nef: jax.Array
    stats: _Stats
    save: jax.Array
    ys: jax.Array
    code: jax.Array
    roots: RootState | None   # None without root functions
    qphi: tuple | None        # the quadrature's K + 2 rows (k,); None without one
    qs: jax.Array | None      # the quadrature at the save times (m, k)


class _Solved(NamedTuple):
    """The outcome of one attempt's nonlinear solve (``IDANls``)."""

    corr: Any               # the corrector's `Corrected`
    ee: jax.Array           # y - y_pred, after the constraint correction
    call: jax.Array         # the matrix was refactored for this attempt
    numeric: Any
    cjold: jax.Array
    ss: jax.Array
    conv: jax.Array
    retry: jax.Array        # failed with an old matrix: retry at once with a fresh one
    conv_fail: jax.Array    # failed with a fresh matrix
    cfail: jax.Array        # converged, but the constraints failed beyond a small correction
    eta_c: jax.Array        # the step ratio after a constraint failure
    bound: Any              # where the constraints moved y onto a bound (NaN elsewhere), or None


def _nonlinear_solve(ctx: Context, args: Any, constraints: Sequence[int] | None, temp1: float,
                     st: _State, p: Predicted, ewt: jax.Array) -> _Solved:
    """IDANls: refactor when cj drifted (or asked for), correct by modified Newton, then check
    the constraints."""
    s, backend, symbolic = ctx.solver, ctx.backend, ctx.symbolic
    dtype = p.y_pred.dtype
    cj = p.cj
    cjratio = cj / st.cjold
    call = st.setup | (cjratio < temp1) | (cjratio > 1.0 / temp1)
    ss = jnp.where(cj != st.cj, 100.0, st.ss)
    mode = jnp.where(call, jnp.where(st.pivot, FACTOR, REFACTOR), KEEP)
    values = jax.lax.cond(
        call, lambda: ctx.matrix_values(p.t_new, p.y_pred, p.yp_pred, args, 1.0, cj),
        lambda: jnp.zeros((ctx.problem.pattern.nnz,), dtype))
    numeric = backend.update(symbolic, st.numeric, values, mode)
    cjold = jnp.where(call, cj, st.cjold)
    cjratio = jnp.where(call, 1.0, cjratio)
    ss = jnp.where(call, 20.0, ss)
    scale = 2.0 / (1.0 + cjratio)

    corr = correct(ctx, p.t_new, sg(cj), sg(scale), ewt, sg(ss), numeric, p.y_pred, p.yp_pred,
                   args)
    conv = corr.converged
    ee = corr.y - p.y_pred
    bound = None
    if constraints is None:
        cfail, eta_c = jnp.asarray(False), jnp.asarray(0.25, dtype)
    else:
        # y as IDA forms it (y_pred + ee), so the corrected phi are IDA's to the last bit
        ee, cfail, eta_c, bound = enforce_constraints(constraints, ee, p.y_pred + ee, st.phi[0],
                                                      ewt, s.newton_tol)
        cfail = conv & cfail
    return _Solved(corr, ee, call, numeric, cjold, ss, conv, ~conv & ~call, ~conv & call, cfail,
                   eta_c, bound)


def _save(K: int, ts: jax.Array, ok, p: Predicted, histories: tuple, k, save, outs: tuple,
          upto):
    """Interpolate each history (the state's ``phi``, a quadrature's) into its ``outs`` at the
    ``ts`` up to ``upto`` (the step's end, or a terminal root in it) that a successful step
    covered (``IDAGetSolution``, ``IDAGetQuad``)."""
    m = ts.shape[0]

    def save_one(carry):
        i, outs = carry
        at = (i, jnp.zeros((), i.dtype))
        return i + 1, tuple(
            jax.lax.dynamic_update_slice(
                out, interpolate(K, ts[i], p.t_new, p.psi_new, phi, k)[None, :], at)
            for phi, out in zip(histories, outs))

    def saving(carry):
        i, _ = carry
        return ok & (i < m) & (ts[jnp.minimum(i, m - 1)] <= upto)

    return jax.lax.while_loop(saving, save_one, (save, outs))


def _count(stats: _Stats, ok, nls_fail, err_fail, nl: _Solved, pivot) -> _Stats:
    def i32(b: jax.Array) -> jax.Array:
        return b.astype(jnp.int32)

    corr = nl.corr
    return _Stats(
        steps=stats.steps + i32(ok),
        rejected_steps=stats.rejected_steps + i32(nls_fail | err_fail),
        error_test_failures=stats.error_test_failures + i32(err_fail),
        convergence_failures=stats.convergence_failures + i32(nls_fail),
        newton_iterations=stats.newton_iterations + corr.iterations,
        factorizations=stats.factorizations + i32(nl.call),
        pivoting_factorizations=stats.pivoting_factorizations + i32(nl.call & pivot),
        solves=stats.solves + corr.iterations,
        residual_evaluations=stats.residual_evaluations + corr.residuals,
        initialization_iterations=stats.initialization_iterations)


def _error_weights(s: JIDA, atol: jax.Array, y: jax.Array) -> jax.Array:
    """IDAEwtSet: the weights ``1 / (rtol |y| + atol)`` of the error norms (no derivative)."""
    return 1.0 / (s.rtol * jnp.abs(sg(y)) + atol)


class _Run(NamedTuple):
    """What every attempt of one solve shares."""

    ctx: Context
    args: Any
    t1: jax.Array
    ts: jax.Array           # the save times
    roots: Roots | None
    atol: jax.Array         # a scalar or one per unknown
    emask: Any              # 0 on algebraic unknowns left out of the error test, else 1
    constraints: Sequence[int] | None
    temp1: float            # refactor when cj / cjold leaves (temp1, 1 / temp1)
    eps: Any                # the machine epsilon of the solve's dtype
    quad: Quadrature | None
    qtol: tuple | None      # (rtol, atol) of the quadrature's error weights, under control

    def weights(self, y: jax.Array) -> jax.Array:
        return _error_weights(self.ctx.solver, self.atol, y)

    def quad_weights(self, q: jax.Array) -> jax.Array:
        assert self.qtol is not None   # only under the quadrature's error control
        rtol, atol = self.qtol
        return 1.0 / (rtol * jnp.abs(sg(q)) + atol)


def _calc_ic(ctx: Context, args: Any, y0: jax.Array, yp0: jax.Array | None, t0: jax.Array,
             tout1: jax.Array, run: _Run) -> Initialized:
    """IDACalcIC: consistent ``(y, y')`` at ``t0`` and the work it took, when the solver asks
    for it and it is needed (``"ya_ydp"``: no ``yp0``, or algebraic unknowns; ``"y"``: always);
    else ``(y0, yp0)`` as given. Its step ``hic`` is IDA's: ``0.001 |tout1 - t0|`` cut to
    ``0.5 / |y'0|`` (WRMS norm, the given ``y'0``) when that is smaller."""
    s = ctx.solver
    numeric = ctx.backend.empty(ctx.symbolic, y0.dtype)
    mode = s.initialize
    run_ic = mode == "y" or (mode == "ya_ydp" and (yp0 is None or ctx.problem.has_algebraic))
    yp0 = jnp.zeros_like(y0) if yp0 is None else yp0
    if run_ic:
        ewt = run.weights(y0)
        tdist = tout1 - t0
        hic = 0.001 * tdist
        ypnorm = wrms(sg(yp0), ewt * run.emask)
        hic = sg(jnp.where(ypnorm > 0.5 / hic, 0.5 / ypnorm, hic))
        # IDA's sysindex = 0 (no algebraic unknown): the norm of h y' is scaled by tdist / h.
        index0 = mode == "ya_ydp" and not ctx.problem.has_algebraic
        scale = tdist / hic if index0 else jnp.ones_like(hic)
        return initialize(ctx, mode, t0, hic, sg(scale), ewt, numeric, y0, yp0, args)
    zero = jnp.zeros((), jnp.int32)
    return Initialized(y0, yp0, numeric, jnp.asarray(True), zero, zero, zero)


def _initial_step(s: JIDA, tdist: jax.Array, span: jax.Array, yp0: jax.Array, ewt0: jax.Array,
                  emask: Any, dtype: Any) -> jax.Array:
    """IDASolve's first step: ``s.initial_step``, or ``0.001 tdist`` (``tdist`` from ``t0`` to the
    first output time, IDA's first ``tout``) cut so that the weighted RMS norm of ``h y'0`` is at
    most 0.5; never over ``max_step`` or the span ``t1 - t0``."""
    if s.initial_step is None:
        h = 0.001 * tdist
        ypnorm = wrms(sg(yp0), ewt0 * emask)
        h = jnp.where(ypnorm > 0.5 / h, 0.5 / ypnorm, h)
    else:
        h = jnp.asarray(s.initial_step, dtype)
    return jnp.minimum(jnp.minimum(h, s.max_step), span)


def _first_state(ctx: Context, args: Any, ic: Initialized, t0: jax.Array, h: jax.Array,
                 ts: jax.Array, roots: Roots | None = None,
                 quad: Quadrature | None = None) -> _State:
    """The state before the first attempt (IDASolve's start): the history ``phi = (y0, h y'0,
    0, ...)`` at order 1, the states at the save times up to ``t0``, the initialization's
    counts, and a failure code when the initialization failed or ``F(t0)`` is not finite; a
    quadrature's history ``(0, h q(t0, y0, y'0), 0, ...)``."""
    K, n = ctx.solver.max_order, ctx.n
    y0, yp0 = ic.y, ic.yp
    dtype = y0.dtype
    zero = jnp.zeros((), jnp.int32)
    finite0 = jnp.all(jnp.isfinite(ctx.residual(t0, sg(y0), sg(yp0), sg(args))))
    phi = (y0, h * yp0) + tuple(jnp.zeros((n,), dtype) for _ in range(K))
    psi = jnp.zeros((K + 1,), dtype).at[0].set(h)
    early = ts <= t0
    ys = jnp.where(early[:, None], y0[None, :], jnp.full((ts.shape[0], n), jnp.nan, dtype))
    code0 = jnp.where(~ic.converged, Status.INITIALIZATION.code,
                      jnp.where(~finite0, Status.NONFINITE.code, -1)).astype(jnp.int32)
    stats0 = _Stats(*(zero,) * 9, ic.iterations)
    stats0 = stats0._replace(residual_evaluations=ic.residuals + 1, solves=ic.solves,
                             factorizations=ic.iterations,
                             pivoting_factorizations=jnp.minimum(ic.iterations, 1))
    qphi = qs = None
    if quad is not None:
        q0 = quad.evaluate(t0, y0, yp0, args)
        qphi = (jnp.zeros_like(q0), h * q0) + tuple(jnp.zeros_like(q0) for _ in range(K))
        qs = jnp.where(early[:, None], 0.0, jnp.full((ts.shape[0], q0.shape[0]), jnp.nan, dtype))
    return _State(t=t0, h=h, k=jnp.ones((), jnp.int32), kused=zero, hused=jnp.zeros_like(h),
                  ns=zero, phase=zero, psi=psi, phi=phi, cj=1.0 / h, cjold=1.0 / h,
                  ss=jnp.asarray(20.0, dtype), numeric=ic.numeric, setup=jnp.asarray(True),
                  pivot=jnp.asarray(True), ncf=zero, nef=zero, stats=stats0,
                  save=jnp.sum(early).astype(jnp.int32), ys=ys, code=code0,
                  roots=None if roots is None else start(roots, t0, y0, yp0, args),
                  qphi=qphi, qs=qs)


def _return_flag(s: JIDA, ok, last, nst, nl: _Solved, f: Failed, err_fail, nls_fail,
                 tiny_h) -> jax.Array:
    """IDASolve's return after an attempt, as a `Status` code; ``-1``: go on."""
    return jnp.select(
        [ok & last, ok & (nst >= s.max_steps),
         nl.conv_fail & (f.ncf >= s.max_convergence_failures),
         nl.cfail & (f.ncf >= s.max_convergence_failures),
         err_fail & (f.nef >= s.max_error_failures),
         (nls_fail | err_fail) & tiny_h],
        [Status.SUCCESS.code, Status.MAX_STEPS.code, Status.CONVERGENCE.code,
         Status.CONSTRAINTS.code, Status.ERROR_TEST.code, Status.STEP_TOO_SMALL.code],
        -1).astype(jnp.int32)


def _no_root(rs: RootState, t: jax.Array) -> Found:
    """What `check_step` returns when nothing is checked (a rejected attempt)."""
    return Found(rs, jnp.asarray(False), t)


def _attempt(run: _Run, st: _State) -> _State:
    """One attempted step (IDAStep): predict, solve, test the error, then complete the step or
    handle the failure (a retry with a fresh matrix keeps ``h`` and the order)."""
    ctx = run.ctx
    s = ctx.solver
    K = s.max_order
    k = st.k
    p = predict(K, st.t, run.t1, st.h, k, st.hused, st.kused, st.ns, st.psi, st.phi)
    ewt = run.weights(st.phi[0])
    nl = _nonlinear_solve(ctx, run.args, run.constraints, run.temp1, st, p, ewt)
    eeq = qstar = None
    extra: tuple = ()
    if run.quad is not None and st.qphi is not None:
        # IDAQuadNls: Q' = q at the corrected state, i.e. the correction (q - Q'_pred) / c
        qv = run.quad.evaluate(p.t_new, p.y_pred + nl.ee, p.yp_pred + p.cj * nl.ee, run.args)
        eeq = (qv - combine(p.wyp, st.qphi)) / p.cj
        qstar = tuple(p.star[j] * row for j, row in enumerate(st.qphi))
        if run.qtol is not None:
            extra = ((eeq, qstar, run.quad_weights(st.qphi[0])),)
    e = test_error(p, k, nl.ee, ewt * run.emask, extra)
    err_fail = nl.conv & ~nl.cfail & ~e.passed
    ok = nl.conv & ~nl.cfail & ~err_fail
    nst = st.stats.steps + 1
    done = complete_step(K, s.max_step, p, e, nl.ee, k, st.kused, st.phase, st.phi, nst,
                         nl.bound, tuple(x[1] for x in extra))
    nls_fail = nl.conv_fail | nl.cfail   # a constraint failure counts as one, as in IDA
    f = handle_failure(p, e, nls_fail, err_fail, nl.cfail, nl.eta_c, k, st.ncf, st.nef,
                       st.psi, st.phi, st.stats.steps == 0)
    rs, upto, root_stop = st.roots, p.t_new, jnp.asarray(False)
    roots = run.roots
    if roots is not None and rs is not None:
        before = rs
        found = jax.lax.cond(
            ok, lambda: check_step(roots, K, before, run.args, p.t_new, p.h, p.psi_new,
                                   done.phi_new, k, run.eps),
            lambda: _no_root(before, p.t_new))
        rs, upto, root_stop = found.state, found.t_root, found.terminal
    qphi, qs = st.qphi, st.qs
    if qphi is None or qstar is None or qs is None:
        save, (ys,) = _save(K, run.ts, ok, p, (done.phi_new,), k, st.save, (st.ys,), upto)
    else:
        qnew = new_rows(K, p, k, eeq, qstar)
        save, (ys, qs) = _save(K, run.ts, ok, p, (done.phi_new, qnew), k, st.save, (st.ys, qs),
                               upto)
        qphi = tuple(jnp.where(ok, a, f.scale1 * b if j == 1 else b)
                     for j, (a, b) in enumerate(zip(qnew, qphi)))
    # Below rounding level of t itself (not of t1: a long span must not floor the first steps)
    tiny_h = f.h_fail <= 10.0 * run.eps * jnp.abs(st.t) + jnp.finfo(st.t.dtype).tiny
    code = _return_flag(s, ok, p.last, nst, nl, f, err_fail, nls_fail, tiny_h)
    code = jnp.where(root_stop, Status.ROOT.code, code).astype(jnp.int32)

    def pick3(a, b, c):  # success, retry, failure
        return jnp.where(ok, a, jnp.where(nl.retry, b, c))

    return _State(
        t=jnp.where(ok, p.t_new, st.t),
        h=pick3(done.h_next, st.h, f.h_fail),
        k=pick3(done.k_next, k, f.k_fail).astype(jnp.int32),
        kused=jnp.where(ok, k, st.kused),
        hused=jnp.where(ok, p.h, st.hused),
        ns=jnp.where(ok, p.ns, st.ns),
        phase=pick3(done.phase, st.phase, 1).astype(jnp.int32),
        psi=pick3(p.psi_new, st.psi, f.psi_fail),
        phi=tuple(jnp.where(ok, a, b) for a, b in zip(done.phi_new, f.phi_fail)),
        cj=p.cj, cjold=nl.cjold, ss=jnp.where(ok, nl.corr.ss, nl.ss), numeric=nl.numeric,
        setup=nl.retry | nl.conv_fail,
        pivot=jnp.where(nl.call, nl.conv_fail, st.pivot | nl.conv_fail),
        ncf=jnp.where(ok, 0, f.ncf), nef=jnp.where(ok, 0, f.nef),
        stats=_count(st.stats, ok, nls_fail, err_fail, nl, st.pivot), save=save, ys=ys,
        code=code, roots=rs, qphi=qphi, qs=qs)


def integrate(ctx: Context, args: Any, y0: jax.Array, yp0: jax.Array | None, t0: jax.Array,
              t1: jax.Array, ts: jax.Array, tout1: jax.Array, roots: Roots | None = None,
              quad: Quadrature | None = None
              ) -> tuple[jax.Array, _Stats, jax.Array, jax.Array, jax.Array, jax.Array]:
    """Solve from ``t0`` to ``t1``; returns the states at ``ts``, the statistics, the status
    code, the root times and components (``(max_roots,)``, NaN and -1 padded; ``(0,)``
    without ``roots``), and the quadrature at ``ts`` (``(m, k)``; ``(m, 0)`` without one).
    ``tout1`` (IDA's first output time) sizes the initialization's step and the first step.
    Traceable; differentiable (forward mode) in ``args``, ``y0`` and ``yp0``."""
    s = ctx.solver
    dtype = y0.dtype
    t0, t1, ts, tout1 = sg(t0), sg(t1), sg(ts), sg(tout1)
    alg = jnp.asarray(ctx.algebraic)
    emask = jnp.where(alg, 0.0, 1.0).astype(dtype) if s.suppress_algebraic else 1.0
    constraints = s.constraints if s.constraints is not None and any(s.constraints) else None
    qtol = None
    if quad is not None and quad.error_control:
        rq, aq = quad.tolerances(s.rtol, s.atol)
        qtol = (jnp.asarray(rq, dtype), jnp.asarray(aq, dtype))
    run = _Run(ctx, args, t1, ts, roots, jnp.asarray(s.atol, dtype), emask, constraints,
               (1.0 - s.dcj) / (1.0 + s.dcj), jnp.finfo(dtype).eps, quad, qtol)
    ic = _calc_ic(ctx, args, y0, yp0, t0, tout1, run)
    h = _initial_step(s, tout1 - t0, t1 - t0, ic.yp, run.weights(ic.y), emask, dtype)
    state = _first_state(ctx, args, ic, t0, h, ts, roots, quad)
    final = jax.lax.while_loop(lambda st: st.code < 0, partial(_attempt, run), state)
    ys = ctx.backend.release(ctx.symbolic, final.numeric, final.ys)
    qs = jnp.zeros((ts.shape[0], 0), dtype) if final.qs is None else final.qs
    if final.roots is None:
        return (ys, final.stats, final.code, jnp.zeros((0,), dtype), jnp.zeros((0,), jnp.int32),
                qs)
    return ys, final.stats, final.code, final.roots.root_ts, final.roots.root_index, qs
