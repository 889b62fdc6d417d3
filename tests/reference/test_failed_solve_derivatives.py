"""Derivatives of a solve that failed are NaN, never silent zeros; a solve that succeeds keeps its
finite derivatives.

The problem really fails: ``y' = k y^2``, ``y(0) = y0``, whose solution ``y0 / (1 - k y0 t)``
blows up at ``t = 1 / (k y0)``. Saved at t = 0.5, 1, 1.5, 2: with ``k = 0.8`` the step collapses
near t = 1.25 (``STEP_TOO_SMALL``, the rows for 1.5 and 2 are NaN); with ``k = 0.3`` the solve
succeeds, and ``max_steps=5`` stops it (``MAX_STEPS``) before the first save time. The exact
sensitivity is ``d y / d k = y0^2 t / (1 - k y0 t)^2``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from solvers.dae import JIDA, DAEProblem, SaveAt, Status, pdesolve

jax.config.update("jax_enable_x64", True)

TS = np.array([0.5, 1.0, 1.5, 2.0])
SOLVER = JIDA(linear="dense", rtol=1e-8, atol=1e-10)
SHORT = JIDA(linear="dense", rtol=1e-8, atol=1e-10, max_steps=5)


def _blowup(t, y, yp, args):
    return yp - args["k"] * y**2


@functools.cache
def _problem() -> DAEProblem:
    return DAEProblem(_blowup, np.ones((1, 1), bool), name="blow-up")


def _solve(k, y0=1.0, solver=SOLVER):
    return pdesolve(_problem(), solver, (0.0, 2.0), jnp.reshape(jnp.asarray(y0, float), (1,)),
                    saveat=SaveAt(ts=TS), args={"k": k})


def ys(k, y0=1.0, solver=SOLVER):
    return _solve(k, y0, solver).ys[:, 0]


def exact_dk(k, y0=1.0):
    return y0**2 * TS / (1.0 - k * y0 * TS) ** 2


def test_a_solve_stopped_by_max_steps_has_nan_derivatives_in_both_modes():
    sol = _solve(0.3, solver=SHORT)
    assert sol.status is Status.MAX_STEPS
    assert np.all(np.isnan(sol.ys))
    f = functools.partial(ys, solver=SHORT)
    dk, dy0 = jax.jit(jax.jacfwd(f, argnums=(0, 1)))(0.3, 1.0)
    assert np.all(np.isnan(dk)) and np.all(np.isnan(dy0)), (dk, dy0)
    _, tangent = jax.jvp(f, (0.3, 1.0), (1.0, 0.0))
    assert np.all(np.isnan(tangent)), tangent
    gk, gy0 = jax.jit(jax.grad(lambda k, y0: jnp.sum(f(k, y0) ** 2), argnums=(0, 1)))(0.3, 1.0)
    assert np.isnan(gk) and np.isnan(gy0), (gk, gy0)


def test_a_solve_whose_step_collapses_has_nan_derivatives_from_the_failure_on():
    sol = _solve(0.8)
    assert sol.status is Status.STEP_TOO_SMALL
    y = np.asarray(sol.ys[:, 0])
    assert np.all(np.isfinite(y[:2])) and np.all(np.isnan(y[2:])), y
    jac = np.asarray(jax.jit(jax.jacfwd(ys))(0.8))
    # The rows it reached keep their (right) derivatives; the rest are NaN.
    np.testing.assert_allclose(jac[:2], exact_dk(0.8)[:2], rtol=1e-5)
    assert np.all(np.isnan(jac[2:])), jac
    g = jax.jit(jax.grad(lambda k: jnp.sum(ys(k))))(0.8)
    assert np.isnan(g), g


def test_in_a_vmapped_batch_only_the_failing_member_has_nan_derivatives():
    ks = jnp.array([0.3, 0.8])
    codes = np.asarray(jax.jit(jax.vmap(lambda k: _solve(k).code))(ks))
    assert [Status.of(int(c)) for c in codes] == [Status.SUCCESS, Status.STEP_TOO_SMALL]
    jac = np.asarray(jax.jit(jax.vmap(jax.jacfwd(ys)))(ks))
    np.testing.assert_allclose(jac[0], exact_dk(0.3), rtol=1e-5)
    np.testing.assert_allclose(jac[1, :2], exact_dk(0.8)[:2], rtol=1e-5)
    assert np.all(np.isnan(jac[1, 2:])), jac
    g = np.asarray(jax.jit(jax.vmap(jax.grad(lambda k: jnp.sum(ys(k)))))(ks))
    assert np.isfinite(g[0]) and np.isnan(g[1]), g
    np.testing.assert_allclose(g[0], exact_dk(0.3).sum(), rtol=1e-5)


def test_a_succeeding_solve_has_a_finite_gradient_that_matches_finite_differences():
    def loss(k, y0):
        return jnp.sum(ys(k, y0) ** 2)

    assert _solve(0.3).status is Status.SUCCESS
    gk, gy0 = jax.jit(jax.grad(loss, argnums=(0, 1)))(0.3, 1.0)
    value = jax.jit(loss)
    eps = 1e-3  # the differences of an adaptive solve are only as good as rtol / eps
    fd_k = (value(0.3 + eps, 1.0) - value(0.3 - eps, 1.0)) / (2 * eps)
    fd_y0 = (value(0.3, 1.0 + eps) - value(0.3, 1.0 - eps)) / (2 * eps)
    assert np.isfinite(gk) and np.isfinite(gy0)
    np.testing.assert_allclose([gk, gy0], [fd_k, fd_y0], rtol=1e-4)
    y = 1.0 / (1.0 - 0.3 * TS)
    np.testing.assert_allclose(gk, np.sum(2 * y * exact_dk(0.3)), rtol=1e-5)
