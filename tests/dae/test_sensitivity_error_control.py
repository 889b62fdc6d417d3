"""`JIDA(sensitivity_error_control=True)` (IDAS's IDASetSensErrCon): derivatives from one solve
of the state with its sensitivities in the error test, against closed forms; what it leaves
unchanged, and what it refuses."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from problems import HEAT_NODES, decay_exact, decay_problem, heat_exact, heat_problem

from solvers.dae import JIDA, Quadrature, Roots, SaveAt, Status, pdesolve

TS = np.array([0.0, 0.5, 1.0, 2.0, 4.0])
LOOSE = JIDA(linear="klu", rtol=1e-4, atol=1e-8)
CONTROLLED = dataclasses.replace(LOOSE, sensitivity_error_control=True)
Y0 = jnp.array([1.0, 1.0, 0.3])   # the algebraic z is only a guess: made consistent (2.0)


def solve(k, y0=Y0, solver=CONTROLLED, **kw):
    return pdesolve(decay_problem(), solver, (0.0, 4.0), y0, saveat=SaveAt(ts=TS),
                    args={"k": k}, **kw)


def dexact_dk(k, ts=TS):
    a, b = -ts * np.exp(-k * ts), -2 * ts * np.exp(-2 * k * ts)
    return np.stack([a, b, a + b], axis=1)


def test_controlled_sensitivities_are_closer_to_the_exact_ones_than_the_steps_own():
    k = 0.7
    errors = {}
    for name, solver in (("own", LOOSE), ("controlled", CONTROLLED)):
        d = jax.jacfwd(lambda q, s=solver: solve(q, solver=s).ys)(k)
        errors[name] = np.abs(np.asarray(d) - dexact_dk(k)).max()
    assert errors["controlled"] < errors["own"] / 3, errors
    assert errors["controlled"] < 1e-4, errors


def test_sensitivities_to_the_initial_state_are_the_exact_ones():
    k = 0.7
    jac = np.asarray(jax.jacfwd(lambda y: solve(k, y).ys)(Y0))   # (m, 3 states, 3 inputs)
    e1, e2 = np.exp(-k * TS), np.exp(-2 * k * TS)
    want = np.zeros_like(jac)
    want[:, 0, 0], want[:, 1, 1] = e1, e2
    want[:, 2, 0], want[:, 2, 1] = e1, e2        # z = y0 + y1; z's guess has no effect
    np.testing.assert_allclose(jac, want, atol=1e-4)


def test_a_sparse_problem_with_klu_gets_the_exact_sensitivity():
    # the heat equation's 41 unknowns on a tridiagonal pattern: the system's pattern has the
    # state's in each block and in the block's coupling to y
    ts = np.array([0.0, 0.01, 0.05, 0.1])
    x = np.linspace(0.0, 1.0, HEAT_NODES)
    h = 1.0 / (HEAT_NODES - 1)
    lam = 4.0 / h**2 * np.sin(np.pi * h / 2) ** 2

    def u(nu):
        return pdesolve(heat_problem(), CONTROLLED, (0.0, 0.1), jnp.asarray(np.sin(np.pi * x)),
                        saveat=SaveAt(ts=ts), args={"nu": nu}).ys

    d = np.asarray(jax.jacfwd(u)(1.0))
    want = -lam * ts[:, None] * heat_exact(ts, 1.0)
    np.testing.assert_allclose(d, want, atol=2e-4 * np.abs(want).max())


def test_reverse_mode_gives_the_forward_mode_derivative_inside_jit():
    def total(k):
        return jnp.sum(solve(k).ys[:, :2] ** 2)

    fwd = jax.jacfwd(total)(0.7)
    rev = jax.jit(jax.grad(total))(jnp.asarray(0.7))
    np.testing.assert_allclose(rev, fwd, rtol=1e-10)


def test_a_solve_that_is_not_differentiated_is_unchanged():
    a, b = solve(0.7), solve(0.7, solver=LOOSE)
    np.testing.assert_array_equal(a.ys, b.ys)
    assert {k: int(v) for k, v in a.stats.items()} == {k: int(v) for k, v in b.stats.items()}


def test_the_values_returned_with_the_derivative_are_within_the_tolerances():
    (ys, _), _ = jax.jvp(lambda k: (solve(k).ys, 0.0), (0.7,), (1.0,))
    np.testing.assert_allclose(ys, decay_exact(TS, 0.7), rtol=1e-3, atol=1e-6)


def test_quadrature_derivatives_come_from_the_controlled_solve():
    k = 0.7
    quad = Quadrature(lambda t, y, yp, a: y[:1])   # int e^{-ks} = (1 - e^{-kt}) / k
    d = jax.jacfwd(lambda q: solve(q, quadrature=quad).qs[:, 0])(k)
    e = np.exp(-k * TS)
    want = (k * TS * e - (1 - e)) / k**2
    np.testing.assert_allclose(d, want, atol=1e-4)


def test_a_failed_solve_still_has_nan_derivatives():
    failing = dataclasses.replace(CONTROLLED, max_steps=3)
    sol = solve(0.7, solver=failing)
    assert sol.status is Status.MAX_STEPS
    unreached = np.isnan(np.asarray(sol.ys)).any(axis=1)
    d = np.asarray(jax.jacfwd(lambda q: solve(q, solver=failing).ys)(0.7))
    assert np.isnan(d[unreached]).all()
    assert np.isfinite(d[~unreached]).all()


def test_roots_and_bad_values_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="does not take roots"):
        solve(0.7, roots=Roots(lambda t, y, yp, a: y[:1] - 0.5))
    with pytest.raises(TypeError, match="sensitivity_error_control"):
        JIDA(sensitivity_error_control="yes")
