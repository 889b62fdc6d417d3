"""The time-stepping loop: IDA's variable-order, variable-step BDF in fixed-leading-coefficient
form with modified divided differences, as one `jax.lax.while_loop` (one iteration per attempted
step). Follows SUNDIALS IDA (Brown, Hindmarsh, Petzold): ``IDASetCoeffs``, ``IDAPredict``,
``IDATestError``, ``IDAHandleNFlag``, ``IDACompleteStep``, ``IDAGetSolution``.

Step-size control and order selection are held out of derivatives (`jax.lax.stop_gradient`):
the derivative of a solve is that of the discrete solution on the steps it took.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ..linear import FACTOR, KEEP, REFACTOR
from ._context import Context
from ._initialize import initialize
from ._jida import violated
from ._newton import correct, wrms
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


def _coefficients(K: int, h, k, ns, psi):
    """IDASetCoeffs for order ``k``: the new psi, and alpha, beta, sigma, gamma (vectors over
    ``i = 0..K``, meaningful for ``i <= k``), the leading coefficient cj and the error constant.

    IDA's recurrences in closed form: ``psi_new[i] = psi[i-1] + h``, ``beta`` the running
    product of ``psi_new[i-1] / psi[i-1]``, ``alpha = h / psi_new``, ``sigma`` the running
    product of ``i alpha[i]``, ``gamma`` the running sum of ``alpha[i-1] / h``.
    """
    i = jnp.arange(K + 1)
    active = (i >= 1) & (i <= k)
    shifted = jnp.concatenate([jnp.zeros((1,), psi.dtype), psi[:-1]]) + h
    psi_new = jnp.where(i <= k, shifted, psi)
    prev_new = jnp.concatenate([jnp.ones((1,), psi.dtype), psi_new[:-1]])
    prev_old = jnp.concatenate([jnp.ones((1,), psi.dtype), psi[:-1]])
    ratio = jnp.where(active, prev_new / jnp.where(prev_old == 0, 1.0, prev_old), 1.0)
    beta = jnp.where(i <= k, jnp.cumprod(ratio), 1.0)
    alpha = jnp.where(i <= k, h / psi_new, 1.0)
    sigma = jnp.cumprod(jnp.where(active, i * alpha, 1.0))
    alpha_prev = jnp.concatenate([jnp.ones((1,), psi.dtype), alpha[:-1]])
    gamma = jnp.cumsum(jnp.where(active, alpha_prev / h, 0.0))
    below = i < k
    alphas = -jnp.sum(jnp.where(below, 1.0 / (i + 1.0), 0.0))
    alpha0 = -jnp.sum(jnp.where(below, alpha, 0.0))
    cj = -alphas / h
    ak = alpha[k]
    ck = jnp.maximum(jnp.abs(ak + alphas - alpha0), ak)
    return psi_new, alpha, beta, sigma, gamma, cj, ck


# phi is kept as a tuple of rows and combined with unrolled adds: XLA:CPU runs a reduction over
# the leading axis of a (K + 2, n) array as a slow generic reduce, and stacking rows costs a pass;
# chains of row operations fuse into one loop over n.

def _combine(weights, rows):
    """``sum_j weights[j] rows[j]``."""
    out = weights[0] * rows[0]
    for j in range(1, len(rows)):
        out = out + weights[j] * rows[j]
    return out


def _pick(rows, j):
    """``rows[j]`` for a traced ``j`` in ``0..len(rows)-1``."""
    return jax.lax.select_n(jnp.clip(j, 0, len(rows) - 1).astype(jnp.int32), *rows)


def _interpolate(K: int, t, tn, psi, phi, kord):
    """IDAGetSolution: the state at ``t`` from the BDF polynomial of the last step."""
    delt = t - tn
    c = jnp.ones_like(delt)
    gam = delt / psi[0]
    coef = [c]
    for j in range(1, K + 1):
        active = j <= kord
        c = c * gam
        coef.append(jnp.where(active, c, 0.0))
        gam = jnp.where(active, (delt + psi[j - 1]) / psi[jnp.minimum(j, K)], gam)
    coef = coef + [jnp.zeros_like(delt)]
    return _combine(coef, phi)


def _enforce(constraints: tuple[int, ...], ee, y, y_last, ewt, tol):
    """IDA's constraint check after a converged corrector (``IDANls``).

    Where ``y`` violates a constraint, the correction ``v`` moves it onto the bound (0, or
    ``0.1 / ewt`` inside it for a strict one). A small ``v`` (weighted norm at most the
    corrector's ``tol``) is applied; a larger one fails the attempt, and the step is to be cut by
    ``eta = max(0.9 min(y_last / (y_last - y)), 0.1)`` over the violated unknowns.
    Returns the (corrected) ``ee``, whether the attempt failed, and ``eta``.
    """
    c = jnp.asarray(constraints, y.dtype)
    mask = violated(constraints, sg(y))
    target = jnp.where(jnp.abs(c) > 1.5, 0.1 * c / ewt, 0.0)
    v = jnp.where(mask, y - target, 0.0)
    small = wrms(sg(v), ewt) <= tol
    ee = jnp.where(small, ee - v, ee)
    y, y_last = sg(y), sg(y_last)
    gap = jnp.where(mask, y_last - y, 0.0)
    quotient = jnp.where(gap != 0, y_last / jnp.where(gap != 0, gap, 1.0), jnp.inf)
    eta = jnp.maximum(0.9 * jnp.min(quotient), 0.1)
    eta = jnp.where(jnp.isfinite(eta), eta, 0.25)
    return ee, jnp.any(mask) & ~small, sg(eta)


def integrate(ctx: Context, args: Any, y0: jax.Array, yp0: jax.Array | None, t0: jax.Array,
              t1: jax.Array, ts: jax.Array) -> tuple[jax.Array, _Stats, jax.Array]:
    """Solve from ``t0`` to ``t1``; returns the states at ``ts``, the statistics and the status
    code. Traceable; differentiable (forward mode) in ``args``, ``y0`` and ``yp0``."""
    s = ctx.solver
    K = s.max_order
    n = ctx.n
    dtype = y0.dtype
    backend, symbolic = ctx.backend, ctx.symbolic
    eps = jnp.finfo(dtype).eps
    t0, t1, ts = sg(t0), sg(t1), sg(ts)
    m = ts.shape[0]
    zero = jnp.zeros((), jnp.int32)
    alg = jnp.asarray(ctx.algebraic)
    emask = jnp.where(alg, 0.0, 1.0).astype(dtype) if s.suppress_algebraic else 1.0

    atol = jnp.asarray(s.atol, dtype)   # a scalar or one per unknown
    constraints = s.constraints if s.constraints is not None and any(s.constraints) else None

    def weights(y):
        return 1.0 / (s.rtol * jnp.abs(sg(y)) + atol)

    # --- consistent initial values ---------------------------------------------------------
    tdist = t1 - t0
    h_ic = 0.001 * tdist
    numeric = backend.empty(symbolic, dtype)
    run_ic = s.initialize and (yp0 is None or ctx.problem.has_algebraic)
    yp0 = jnp.zeros_like(y0) if yp0 is None else yp0
    if run_ic:
        ic = initialize(ctx, t0, h_ic, weights(y0), numeric, y0, yp0, args)
        y0, yp0, numeric = ic.y, ic.yp, ic.numeric
        ic_ok, ic_iter, ic_res, ic_solves = ic.converged, ic.iterations, ic.residuals, ic.solves
    else:
        ic_ok, ic_iter, ic_res, ic_solves = jnp.asarray(True), zero, zero, zero
    res0 = ctx.residual(t0, sg(y0), sg(yp0), sg(args))
    finite0 = jnp.all(jnp.isfinite(res0))

    # --- initial step (IDASolve) -------------------------------------------------------------
    ewt0 = weights(y0)
    if s.initial_step is None:
        h = 0.001 * tdist
        ypnorm = wrms(sg(yp0), ewt0 * emask)
        h = jnp.where(ypnorm > 0.5 / h, 0.5 / ypnorm, h)
    else:
        h = jnp.asarray(s.initial_step, dtype)
    h = jnp.minimum(jnp.minimum(h, s.max_step), tdist)

    phi = (y0, h * yp0) + tuple(jnp.zeros((n,), dtype) for _ in range(K))
    psi = jnp.zeros((K + 1,), dtype).at[0].set(h)
    ys = jnp.full((m, n), jnp.nan, dtype)
    early = ts <= t0
    ys = jnp.where(early[:, None], y0[None, :], ys)
    code0 = jnp.where(~ic_ok, Status.INITIALIZATION.code,
                      jnp.where(~finite0, Status.NONFINITE.code, -1)).astype(jnp.int32)
    stats0 = _Stats(*(zero,) * 9, ic_iter)
    stats0 = stats0._replace(residual_evaluations=ic_res + 1, solves=ic_solves,
                             factorizations=ic_iter,
                             pivoting_factorizations=jnp.minimum(ic_iter, 1))
    state = _State(t=t0, h=h, k=jnp.ones((), jnp.int32), kused=zero, hused=jnp.zeros_like(h),
                   ns=zero, phase=zero, psi=psi, phi=phi, cj=1.0 / h, cjold=1.0 / h,
                   ss=jnp.asarray(20.0, dtype), numeric=numeric, setup=jnp.asarray(True),
                   pivot=jnp.asarray(True), ncf=zero, nef=zero, stats=stats0,
                   save=jnp.sum(early).astype(jnp.int32), ys=ys, code=code0)

    temp1 = (1.0 - s.dcj) / (1.0 + s.dcj)

    def attempt(st: _State) -> _State:
        remaining = t1 - st.t
        h = jnp.where(remaining > 0, jnp.minimum(st.h, remaining), st.h)
        k = st.k
        last = h >= remaining
        ns = jnp.where((h != st.hused) | (k != st.kused), 0, st.ns)
        ns = jnp.minimum(ns + 1, st.kused + 2)
        psi_new, alpha, beta, sigma, gamma, cj, ck = _coefficients(K, h, k, ns, st.psi)
        # phi* = beta phi on rows ns..k, kept as scale factors (never materialized).
        rows = jnp.arange(K + 2)
        bfull = jnp.concatenate([beta, jnp.ones((1,), dtype)])
        star = jnp.where((rows >= ns) & (rows <= k), bfull, 1.0)
        phi_star = tuple(star[j] * st.phi[j] for j in range(K + 2))
        t_new = jnp.where(last, t1, st.t + h)
        order_mask = (rows <= k).astype(dtype)
        y_pred = _combine(order_mask * star, st.phi)
        gfull = jnp.concatenate([gamma, jnp.zeros((1,), dtype)]) * order_mask
        yp_pred = _combine((gfull * star).at[0].set(0.0), st.phi)
        ewt = weights(st.phi[0])

        # Linear solver setup (IDANls): when cj drifted, or asked for.
        cjratio = cj / st.cjold
        call = st.setup | (cjratio < temp1) | (cjratio > 1.0 / temp1)
        ss = jnp.where(cj != st.cj, 100.0, st.ss)
        mode = jnp.where(call, jnp.where(st.pivot, FACTOR, REFACTOR), KEEP)
        values = jax.lax.cond(
            call, lambda: ctx.matrix_values(t_new, y_pred, yp_pred, args, 1.0, cj),
            lambda: jnp.zeros((ctx.problem.pattern.nnz,), dtype))
        numeric = backend.update(symbolic, st.numeric, values, mode)
        cjold = jnp.where(call, cj, st.cjold)
        cjratio = jnp.where(call, 1.0, cjratio)
        ss = jnp.where(call, 20.0, ss)
        scale = 2.0 / (1.0 + cjratio)

        corr = correct(ctx, t_new, sg(cj), sg(scale), ewt, sg(ss), numeric, y_pred, yp_pred,
                       args)
        conv = corr.converged
        retry = ~conv & ~call
        conv_fail = ~conv & call
        ee = corr.y - y_pred
        if constraints is None:
            cfail, eta_c = jnp.asarray(False), jnp.asarray(0.25, dtype)
        else:
            # y as IDA forms it (y_pred + ee), so the corrected phi are IDA's to the last bit
            ee, cfail, eta_c = _enforce(constraints, ee, y_pred + ee, st.phi[0], ewt,
                                        s.newton_tol)
            cfail = conv & cfail

        # Local error test and order reduction (IDATestError).
        es = sg(ee)
        w = ewt * emask
        enorm = wrms(es, w)
        km1, km2 = jnp.maximum(k - 1, 0), jnp.maximum(k - 2, 0)
        erk = sigma[k] * enorm
        terk = (k + 1) * erk
        d1 = _pick(phi_star, k) + es
        erkm1 = sigma[km1] * wrms(d1, w)
        terkm1 = k * erkm1
        d2 = _pick(phi_star, km1) + d1
        terkm2 = (k - 1) * sigma[km2] * wrms(d2, w)
        lower = ((k > 2) & (jnp.maximum(terkm1, terkm2) <= terk)) | \
                ((k == 2) & (terkm1 <= 0.5 * terk))
        knew = jnp.where(lower, k - 1, k)
        est = jnp.where(lower, erkm1, erk)
        err_fail = conv & ~cfail & ~(ck * enorm <= 1.0)  # a NaN estimate fails too
        ok = conv & ~cfail & ~err_fail

        # Success (IDACompleteStep): order and step for the next step, then the phi update.
        nst = st.stats.steps + 1
        kdiff = k - st.kused
        phase = jnp.where((knew == k - 1) | (k == K), 1, st.phase)
        terkp1 = wrms(es - _pick(st.phi, k + 1), w)
        erkp1 = terkp1 / (k + 2)
        keep_order = (k == K) | (k + 1 >= ns) | (kdiff == 1)
        raise1 = (terkp1 < 0.5 * terk)
        lowerk = (terkm1 <= jnp.minimum(terk, terkp1))
        raisek = ~lowerk & (terkp1 < terk)
        act_lower = (knew == k - 1) | (~keep_order & (k > 1) & lowerk)
        act_raise = ~act_lower & ~keep_order & jnp.where(k == 1, raise1, raisek)
        k1 = k + act_raise.astype(jnp.int32) - act_lower.astype(jnp.int32)
        est1 = jnp.where(act_raise, erkp1, jnp.where(act_lower, erkm1, erk))
        rr = (2.0 * est1 + 1e-4) ** (-1.0 / (k1 + 1.0))
        hnew = jnp.where(rr >= 2.0, 2.0 * h, jnp.where(rr <= 1.0, h * jnp.clip(rr, 0.5, 0.9), h))
        grow0 = nst > 1
        k_next = jnp.where(phase == 0, jnp.where(grow0, k + 1, k), k1)
        h_next = jnp.minimum(jnp.where(phase == 0, jnp.where(grow0, 2.0 * h, h), hnew), s.max_step)
        suffix = [None] * (K + 2)
        acc = ee
        for j in range(K + 1, -1, -1):  # phi_j <- sum_{i=j..k} phi*_i + ee for j <= k
            acc = acc + order_mask[j] * phi_star[j]
            suffix[j] = acc
        phi_new = tuple(jnp.where(j <= k, suffix[j], jnp.where((j == k + 1) & (k < K), ee,
                                                                phi_star[j]))
                        for j in range(K + 2))

        # Failure (IDAHandleNFlag): shrink h, maybe the order.
        nls_fail = conv_fail | cfail   # IDA counts a constraint failure as a convergence failure
        ncf = st.ncf + nls_fail.astype(jnp.int32)
        nef = st.nef + err_fail.astype(jnp.int32)
        k_e = jnp.where(nef <= 2, knew, 1)
        rr_e = jnp.where(nef == 1, jnp.clip(0.9 * (2.0 * est + 1e-4) ** (-1.0 / (k_e + 1.0)),
                                            0.25, 0.9), 0.25)
        rr_f = jnp.where(err_fail, rr_e, jnp.where(cfail, eta_c, 0.25))
        h_fail = h * rr_f
        k_fail = jnp.where(err_fail, k_e, k)
        first = st.stats.steps == 0
        psi_fail = jnp.where(first, st.psi.at[0].set(h_fail), st.psi)
        shrink1 = first & (nls_fail | err_fail)
        phi_fail = tuple(jnp.where(shrink1, rr_f * row, row) if j == 1 else row
                         for j, row in enumerate(st.phi))

        # Save the states at the ts this step covered.
        def save_one(carry):
            i, ys = carry
            y_t = _interpolate(K, ts[i], t_new, psi_new, phi_new, k)
            at = (i, jnp.zeros((), i.dtype))
            return i + 1, jax.lax.dynamic_update_slice(ys, y_t[None, :], at)

        def saving(carry):
            i, _ = carry
            return ok & (i < m) & (ts[jnp.minimum(i, m - 1)] <= t_new)

        save, ys = jax.lax.while_loop(saving, save_one, (st.save, st.ys))

        # Status.
        tiny_h = h_fail <= 10.0 * eps * jnp.maximum(jnp.abs(st.t), jnp.abs(t1))
        code = jnp.select(
            [ok & last, ok & (nst >= s.max_steps),
             conv_fail & (ncf >= s.max_convergence_failures),
             cfail & (ncf >= s.max_convergence_failures),
             err_fail & (nef >= s.max_error_failures),
             (nls_fail | err_fail) & tiny_h],
            [Status.SUCCESS.code, Status.MAX_STEPS.code, Status.CONVERGENCE.code,
             Status.CONSTRAINTS.code, Status.ERROR_TEST.code, Status.STEP_TOO_SMALL.code],
            -1).astype(jnp.int32)

        st_stats = st.stats
        i32 = lambda b: b.astype(jnp.int32)  # noqa: E731
        stats = _Stats(
            steps=st_stats.steps + i32(ok),
            rejected_steps=st_stats.rejected_steps + i32(nls_fail | err_fail),
            error_test_failures=st_stats.error_test_failures + i32(err_fail),
            convergence_failures=st_stats.convergence_failures + i32(nls_fail),
            newton_iterations=st_stats.newton_iterations + corr.iterations,
            factorizations=st_stats.factorizations + i32(call),
            pivoting_factorizations=st_stats.pivoting_factorizations + i32(call & st.pivot),
            solves=st_stats.solves + corr.iterations,
            residual_evaluations=st_stats.residual_evaluations + corr.residuals,
            initialization_iterations=st_stats.initialization_iterations)

        def pick(a, b, c):  # success, retry, failure
            return jnp.where(ok, a, jnp.where(retry, b, c))

        return _State(
            t=jnp.where(ok, t_new, st.t),
            h=pick(h_next, st.h, h_fail),
            k=pick(k_next, k, k_fail).astype(jnp.int32),
            kused=jnp.where(ok, k, st.kused),
            hused=jnp.where(ok, h, st.hused),
            ns=jnp.where(ok, ns, st.ns),
            phase=pick(phase, st.phase, 1).astype(jnp.int32),
            psi=pick(psi_new, st.psi, psi_fail),
            phi=tuple(jnp.where(ok, a, b) for a, b in zip(phi_new, phi_fail)),
            cj=cj, cjold=cjold, ss=jnp.where(ok, corr.ss, ss), numeric=numeric,
            setup=retry | conv_fail, pivot=jnp.where(call, conv_fail, st.pivot | conv_fail),
            ncf=jnp.where(ok, 0, ncf), nef=jnp.where(ok, 0, nef),
            stats=stats, save=save, ys=ys, code=code)

    final = jax.lax.while_loop(lambda st: st.code < 0, attempt, state)
    ys = backend.release(symbolic, final.numeric, final.ys)
    return ys, final.stats, final.code
