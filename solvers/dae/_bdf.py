"""IDA's BDF in fixed-leading-coefficient form, one function per piece of SUNDIALS IDA
(Brown, Hindmarsh, Petzold): ``IDASetCoeffs`` (`coefficients`), ``IDAPredict`` (`predict`), the
constraint check of ``IDANls`` (`enforce_constraints`), ``IDATestError`` (`test_error`),
``IDACompleteStep`` (`complete_step`), ``IDAHandleNFlag`` (`handle_failure`) and
``IDAGetSolution`` (`interpolate`). `solvers.dae._stepper` runs them in its loop.

The modified divided differences ``phi`` are a tuple of ``K + 2`` rows (``K`` the highest
order), combined by unrolled adds: XLA:CPU runs a reduction over the leading axis of a
``(K + 2, n)`` array as a slow generic reduce, and stacking rows costs a pass; chains of row
operations fuse into one loop over ``n``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ._jida import violated
from ._newton import wrms

__all__ = ["Completed", "ErrorTest", "Failed", "Predicted", "coefficients", "combine",
           "complete_step", "enforce_constraints", "handle_failure", "interpolate",
           "interpolate_both", "new_rows", "pick", "predict", "test_error"]

sg = jax.lax.stop_gradient


def coefficients(K: int, h, k, ns, psi):
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


def combine(weights, rows):
    """``sum_j weights[j] rows[j]``."""
    out = weights[0] * rows[0]
    for j in range(1, len(rows)):
        out = out + weights[j] * rows[j]
    return out


def pick(rows, j):
    """``rows[j]`` for a traced ``j`` in ``0..len(rows)-1``."""
    return jax.lax.select_n(jnp.clip(j, 0, len(rows) - 1).astype(jnp.int32), *rows)


def interpolate(K: int, t, tn, psi, phi, kord):
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
    return combine(coef, phi)


def interpolate_both(K: int, t, tn, psi, phi, kord):
    """IDAGetSolution with its derivative: ``(y(t), y'(t))`` from the BDF polynomial of the
    last step (IDA's ``cvals`` and ``dvals``), for the root functions."""
    delt = t - tn
    c = jnp.ones_like(delt)
    d = jnp.zeros_like(delt)
    gam = delt / psi[0]
    cs, ds = [c], [d]
    for j in range(1, K + 1):
        active = j <= kord
        d = jnp.where(active, d * gam + c / psi[j - 1], 0.0)
        c = jnp.where(active, c * gam, 0.0)
        gam = jnp.where(active, (delt + psi[j - 1]) / psi[j], gam)
        cs.append(c)
        ds.append(d)
    zero = jnp.zeros_like(delt)
    return combine(cs + [zero], phi), combine([zero] + ds[1:] + [zero], phi)


def enforce_constraints(constraints: Sequence[int], ee, y, y_last, ewt, tol):
    """IDA's constraint check after a converged corrector (``IDANls``).

    Where ``y`` violates a constraint, the correction ``v`` moves it onto the bound (0, or
    ``0.1 / ewt`` inside it for a strict one). A small ``v`` (weighted norm at most the
    corrector's ``tol``) is applied; a larger one fails the attempt, and the step is to be cut by
    ``eta = max(0.9 min(y_last / (y_last - y)), 0.1)`` over the violated unknowns.
    Returns the (corrected) ``ee``, whether the attempt failed, ``eta``, and ``bound``: the
    bound each corrected unknown was moved onto, NaN where none was (for `complete_step`).
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
    bound = jnp.where(mask & small, target, jnp.nan)
    return ee, jnp.any(mask) & ~small, sg(eta), bound


class Predicted(NamedTuple):
    """An attempt's step, coefficients and predicted state (``IDASetCoeffs``, ``IDAPredict``)."""

    h: jax.Array
    last: jax.Array         # the step ends at t1
    t_new: jax.Array
    ns: jax.Array
    psi_new: jax.Array
    sigma: jax.Array
    cj: jax.Array
    ck: jax.Array
    phi_star: tuple         # beta phi on rows ns..k (IDA scales phi in place)
    order_mask: jax.Array   # rows <= k
    y_pred: jax.Array
    yp_pred: jax.Array
    star: jax.Array         # (K + 2,): phi* = star phi, row by row
    wy: jax.Array           # (K + 2,): y_pred = sum wy phi
    wyp: jax.Array          # (K + 2,): yp_pred = sum wyp phi


def predict(K: int, t, t1, h, k, hused, kused, ns, psi, phi) -> Predicted:
    """The next attempt from ``t`` with step ``h`` (cut to reach ``t1``) at order ``k``."""
    dtype = psi.dtype
    remaining = t1 - t
    h = jnp.where(remaining > 0, jnp.minimum(h, remaining), h)
    last = h >= remaining
    ns = jnp.where((h != hused) | (k != kused), 0, ns)
    ns = jnp.minimum(ns + 1, kused + 2)
    psi_new, _alpha, beta, sigma, gamma, cj, ck = coefficients(K, h, k, ns, psi)
    # phi* = beta phi on rows ns..k, kept as scale factors (never materialized).
    rows = jnp.arange(K + 2)
    bfull = jnp.concatenate([beta, jnp.ones((1,), dtype)])
    star = jnp.where((rows >= ns) & (rows <= k), bfull, 1.0)
    phi_star = tuple(star[j] * phi[j] for j in range(K + 2))
    t_new = jnp.where(last, t1, t + h)
    order_mask = (rows <= k).astype(dtype)
    wy = order_mask * star
    y_pred = combine(wy, phi)
    gfull = jnp.concatenate([gamma, jnp.zeros((1,), dtype)]) * order_mask
    wyp = (gfull * star).at[0].set(0.0)
    yp_pred = combine(wyp, phi)
    return Predicted(h, last, t_new, ns, psi_new, sigma, cj, ck, phi_star, order_mask, y_pred,
                     yp_pred, star, wy, wyp)


class ErrorTest(NamedTuple):
    """The local error estimates at orders k, k-1, k-2 and the verdict (``IDATestError``)."""

    es: jax.Array       # the correction, held out of derivatives
    w: jax.Array        # the error test's weights
    erk: jax.Array
    terk: jax.Array
    erkm1: jax.Array
    terkm1: jax.Array
    knew: jax.Array     # the order after an order reduction
    est: jax.Array      # the estimate at knew
    passed: jax.Array   # ck |ee| <= 1 (a NaN estimate fails)
    extra: tuple        # (correction, weights) of each other history in the test


def _norm(d, w, ds: Sequence, extra: Sequence):
    """The error test's norm: the state's weighted RMS norm of ``d``, or, with other histories
    in the test (``ds`` their rows, ``extra`` their ``(correction, weights)``), the largest of
    the norms (IDAS's ``IDAQuadWrmsNormUpdate``, ``IDASensWrmsNormUpdate``)."""
    out = wrms(d, w)
    for dx, (_, wx) in zip(ds, extra):
        out = jnp.maximum(out, wrms(dx, wx))
    return out


def test_error(p: Predicted, k, ee, w, extra: Sequence = ()) -> ErrorTest:
    """``extra``: ``(correction, phi*, weights)`` of each other history in the test (a
    quadrature's under error control), whose norms join the state's."""
    es = sg(ee)
    xs = tuple((sg(e), wx) for e, _, wx in extra)
    stars = [rows for _, rows, _ in extra]
    enorm = _norm(es, w, [e for e, _ in xs], xs)
    km1, km2 = jnp.maximum(k - 1, 0), jnp.maximum(k - 2, 0)
    erk = p.sigma[k] * enorm
    terk = (k + 1) * erk
    d1 = pick(p.phi_star, k) + es
    d1x = [pick(rows, k) + e for rows, (e, _) in zip(stars, xs)]
    erkm1 = p.sigma[km1] * _norm(d1, w, d1x, xs)
    terkm1 = k * erkm1
    d2 = pick(p.phi_star, km1) + d1
    d2x = [pick(rows, km1) + d for rows, d in zip(stars, d1x)]
    terkm2 = (k - 1) * p.sigma[km2] * _norm(d2, w, d2x, xs)
    lower = ((k > 2) & (jnp.maximum(terkm1, terkm2) <= terk)) | \
            ((k == 2) & (terkm1 <= 0.5 * terk))
    knew = jnp.where(lower, k - 1, k)
    est = jnp.where(lower, erkm1, erk)
    return ErrorTest(es, w, erk, terk, erkm1, terkm1, knew, est, p.ck * enorm <= 1.0, xs)


class Completed(NamedTuple):
    """After a successful step (``IDACompleteStep``): the next order and step, the new phi."""

    k_next: jax.Array
    h_next: jax.Array
    phase: jax.Array
    phi_new: tuple


def complete_step(K: int, max_step: float, p: Predicted, e: ErrorTest, ee, k, kused, phase,
                  phi, nst, bound=None, extra_phi: Sequence = ()) -> Completed:
    """Order and step for the next step (the first steps raise both until phase 1), then
    ``phi_j <- sum_{i=j..k} phi*_i + ee``. ``nst`` counts this step; ``bound`` is
    `enforce_constraints`'s (`on_bounds`); ``extra_phi`` the histories of `test_error`'s
    ``extra``, in its order."""
    h = p.h
    kdiff = k - kused
    phase = jnp.where((e.knew == k - 1) | (k == K), 1, phase)
    terkp1 = _norm(e.es - pick(phi, k + 1), e.w,
                   [ex - pick(rows, k + 1) for rows, (ex, _) in zip(extra_phi, e.extra)], e.extra)
    erkp1 = terkp1 / (k + 2)
    keep_order = (k == K) | (k + 1 >= p.ns) | (kdiff == 1)
    raise1 = (terkp1 < 0.5 * e.terk)
    lowerk = (e.terkm1 <= jnp.minimum(e.terk, terkp1))
    raisek = ~lowerk & (terkp1 < e.terk)
    act_lower = (e.knew == k - 1) | (~keep_order & (k > 1) & lowerk)
    act_raise = ~act_lower & ~keep_order & jnp.where(k == 1, raise1, raisek)
    k1 = k + act_raise.astype(jnp.int32) - act_lower.astype(jnp.int32)
    est1 = jnp.where(act_raise, erkp1, jnp.where(act_lower, e.erkm1, e.erk))
    rr = (2.0 * est1 + 1e-4) ** (-1.0 / (k1 + 1.0))
    hnew = jnp.where(rr >= 2.0, 2.0 * h, jnp.where(rr <= 1.0, h * jnp.clip(rr, 0.5, 0.9), h))
    grow0 = nst > 1
    k_next = jnp.where(phase == 0, jnp.where(grow0, k + 1, k), k1)
    h_next = jnp.minimum(jnp.where(phase == 0, jnp.where(grow0, 2.0 * h, h), hnew), max_step)
    phi_new = new_rows(K, p, k, ee, p.phi_star)
    if bound is not None:
        phi_new = on_bounds(K, p, k, bound, phi_new)
    return Completed(k_next, h_next, phase, phi_new)


def new_rows(K: int, p: Predicted, k, ee, phi_star: Sequence) -> tuple:
    """A history after a successful step: ``phi_j <- sum_{i=j..k} phi*_i + ee`` for ``j <= k``,
    ``phi_{k+1} <- ee`` (kept for an order increase), the rest as predicted."""
    suffix = []  # built from j = K + 1 down to 0, then put in order
    acc = ee
    for j in range(K + 1, -1, -1):
        acc = acc + p.order_mask[j] * phi_star[j]
        suffix.append(acc)
    suffix.reverse()
    return tuple(jnp.where(j <= k, suffix[j], jnp.where((j == k + 1) & (k < K), ee, phi_star[j]))
                 for j in range(K + 2))


def on_bounds(K: int, p: Predicted, k, bound, phi_new: tuple) -> tuple:
    """``phi`` of the unknowns the constraint check moved onto their bound, in exact arithmetic.

    IDA's correction ``ee <- ee - v`` with ``v = y_pred + ee - b`` makes ``ee = b - y_pred``, so
    ``phi_j <- sum_{i=j..k} phi*_i + ee`` is ``b - sum_{i<j} phi*_i``: the solution ``phi_0`` is
    ``b`` itself, and ``phi_{k+1}`` (kept for an order increase) is ``b - y_pred``. Summed the
    long way these cancel only to rounding (a residue of ~1e-16 of the terms, of either sign);
    IDA's own sums cancel exactly where they happen to be exact. Computed here from the prefix
    sums (in ``y_pred``'s order), a corrected unknown is exactly on its bound, and one that
    stays there predicts the bound again.
    """
    fixed = ~jnp.isnan(bound)
    b = jnp.where(fixed, bound, 0.0)
    before = jnp.zeros_like(b)  # sum_{i<j} phi*_i
    rows = []
    for j in range(K + 2):
        kept = (j <= k) | ((j == k + 1) & (k < K))
        rows.append(jnp.where(fixed & kept, b - before, phi_new[j]))
        before = before + p.order_mask[j] * p.phi_star[j]
    return tuple(rows)


class Failed(NamedTuple):
    """After a failed attempt (``IDAHandleNFlag``): counts, the new step, order and history."""

    ncf: jax.Array
    nef: jax.Array
    h_fail: jax.Array
    k_fail: jax.Array
    psi_fail: jax.Array
    phi_fail: tuple
    scale1: jax.Array   # phi_fail[1] = scale1 phi[1] (1 but on a failed first step)


def handle_failure(p: Predicted, e: ErrorTest, nls_fail, err_fail, cfail, eta_c, k, ncf, nef,
                   psi, phi, first) -> Failed:
    """A corrector or constraint failure (``nls_fail``) cuts ``h`` by 4 (a constraint failure
    by ``eta_c``); error-test failures by 0.25-0.9, then 4, then drop to order 1. On the first
    step ``psi[0]`` and ``phi[1]`` follow the new ``h`` (IDA's ``IDAReset``)."""
    ncf = ncf + nls_fail.astype(jnp.int32)
    nef = nef + err_fail.astype(jnp.int32)
    k_e = jnp.where(nef <= 2, e.knew, 1)
    rr_e = jnp.where(nef == 1, jnp.clip(0.9 * (2.0 * e.est + 1e-4) ** (-1.0 / (k_e + 1.0)),
                                        0.25, 0.9), 0.25)
    rr_f = jnp.where(err_fail, rr_e, jnp.where(cfail, eta_c, 0.25))
    h_fail = p.h * rr_f
    k_fail = jnp.where(err_fail, k_e, k)
    psi_fail = jnp.where(first, psi.at[0].set(h_fail), psi)
    shrink1 = first & (nls_fail | err_fail)
    phi_fail = tuple(jnp.where(shrink1, rr_f * row, row) if j == 1 else row
                     for j, row in enumerate(phi))
    return Failed(ncf, nef, h_fail, k_fail, psi_fail, phi_fail, jnp.where(shrink1, rr_f, 1.0))
