"""IDA's per-unknown options: a vector ``atol`` and ``constraints`` (SUNDIALS' published examples
are reproduced with them in tests/reference/test_ida_examples.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from problems import decay_exact, decay_problem

from solvers.dae import JIDA, DAEProblem, SaveAt, Status, pdesolve

TS = np.array([0.5, 1.0, 2.0])
Y0 = np.array([1.0, 1.0, 2.0])


def _decay(solver: JIDA, k=1.0):
    return pdesolve(decay_problem(), solver, (0.0, 2.0), Y0, saveat=SaveAt(ts=TS),
                    args={"k": k})


def test_a_vector_atol_of_equal_entries_is_the_scalar_atol():
    scalar = _decay(JIDA(linear="dense", rtol=1e-6, atol=1e-9))
    vector = _decay(JIDA(linear="dense", rtol=1e-6, atol=np.full(3, 1e-9)))
    np.testing.assert_array_equal(vector.ys, scalar.ys)
    assert {k: int(v) for k, v in vector.stats.items()} == \
        {k: int(v) for k, v in scalar.stats.items()}


def _two_decays(t, y, yp, args):
    return yp + jnp.array([1.0, 2.0]) * y


def test_a_vector_atol_weights_each_unknown():
    """An unknown a million times smaller than the other needs its own atol (as Robertson's y2):
    with one atol for both, the large unknown alone chooses the steps; with its own, the small
    one's error counts too: more steps, and a smaller error for it (6x here)."""
    problem = DAEProblem(_two_decays, np.eye(2, dtype=bool), name="two decays")
    y0 = np.array([1.0, 1e-6])

    def relative_error(atol):
        sol = pdesolve(problem, JIDA(linear="dense", rtol=1e-6, atol=atol), (0.0, 2.0), y0,
                       saveat=SaveAt(ts=TS))
        assert sol.status is Status.SUCCESS
        exact = y0 * np.exp(-np.outer(TS, [1.0, 2.0]))
        return (np.abs(np.asarray(sol.ys) - exact) / exact).max(axis=0), int(sol.stats["steps"])

    (shared, n_shared), (own, n_own) = relative_error(1e-6), relative_error(np.array([1e-6,
                                                                                       1e-12]))
    assert shared[1] > 3 * own[1] and n_own > n_shared, (shared, own, n_shared, n_own)
    assert own[0] <= shared[0]


def test_inactive_constraints_change_nothing_and_keep_derivatives():
    free = JIDA(linear="dense", rtol=1e-8, atol=1e-10)
    bound = JIDA(linear="dense", rtol=1e-8, atol=1e-10, constraints=(2, 1, 0))

    def ys(solver, k):
        return _decay(solver, k).ys

    np.testing.assert_array_equal(ys(bound, 0.7), ys(free, 0.7))
    d_free = jax.jacfwd(lambda k: ys(free, k))(0.7)
    d_bound = jax.jacfwd(lambda k: ys(bound, k))(0.7)
    np.testing.assert_array_equal(d_bound, d_free)


def _drain(t, y, yp, args):
    """``y0' = -1`` (crosses 0 at t = 1) beside ``y1' = -y1``."""
    return jnp.stack([yp[0] + 1.0, yp[1] + y[1]])


def test_a_constraint_the_solution_cannot_meet_fails_the_solve_honestly():
    problem = DAEProblem(_drain, np.eye(2, dtype=bool), name="drain")
    ts = np.array([0.5, 0.99, 1.5])
    free = pdesolve(problem, JIDA(linear="dense"), (0.0, 2.0), np.ones(2), saveat=SaveAt(ts=ts))
    assert free.status is Status.SUCCESS and float(free.ys[2, 0]) == pytest.approx(-0.5)
    sol = pdesolve(problem, JIDA(linear="dense", constraints=(1, 0), max_steps=300),
                   (0.0, 2.0), np.ones(2), saveat=SaveAt(ts=ts))
    # Steps that would cross 0 are rejected and shortened until the solver runs out of steps.
    assert not sol.success and sol.status in (Status.MAX_STEPS, Status.CONSTRAINTS)
    assert int(sol.stats["convergence_failures"]) > 10
    np.testing.assert_allclose(sol.ys[:2, 0], [0.5, 0.01], rtol=1e-6)
    np.testing.assert_allclose(sol.ys[:2, 1], np.exp(-ts[:2]), rtol=1e-5)
    assert np.all(np.isnan(sol.ys[2]))


def test_bad_option_values_say_what_is_wrong():
    problem = decay_problem()
    with pytest.raises(ValueError, match=r"atol=\.\.\.\) has 2 entries but .* has 3 unknowns"):
        pdesolve(problem, JIDA(atol=[1e-8, 1e-8]), (0.0, 1.0), Y0)
    with pytest.raises(ValueError, match=r"constraints=\.\.\.\) has 1 entries"):
        pdesolve(problem, JIDA(constraints=[1]), (0.0, 1.0), Y0)
    with pytest.raises(ValueError, match=r"y0 violates the constraints .* y0\[1\] = -1.0 with "
                                         r"code 2"):
        pdesolve(problem, JIDA(constraints=[0, 2, 0]), (0.0, 1.0), np.array([1.0, -1.0, 0.0]))
    with pytest.raises(ValueError, match="entries must be finite and >= 0"):
        JIDA(atol=[1e-8, -1.0])
    with pytest.raises(ValueError, match="1-D array shaped like y0"):
        JIDA(atol=np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"one code per unknown from 0 \(none\)"):
        JIDA(constraints=[0, 3])
    with pytest.raises(ValueError, match="rtol > 0 or every atol > 0"):
        JIDA(rtol=0.0, atol=[1e-8, 0.0])
    assert hash(JIDA(atol=np.array([1e-8, 1e-6]))) == hash(JIDA(atol=(1e-8, 1e-6)))


def test_initialize_y_solves_all_of_y_from_the_given_derivatives():
    # IDA_Y_INIT: y'0 of y0 = (1, 3, 4) given, y0 guessed as zeros; y'0's algebraic entry is
    # unused. Then y(t) = (e^{-kt}, 3 e^{-2kt}, ...) and d y / d y'0 = (-e^{-kt} / k, ...).
    k = 0.5
    ts = np.concatenate([[0.0], TS])
    solver = JIDA(linear="dense", rtol=1e-10, atol=1e-12, initialize="y")

    def ys(yp0):
        return pdesolve(decay_problem(), solver, (0.0, 2.0), np.zeros(3), yp0,
                        saveat=SaveAt(ts=ts), args={"k": k}).ys

    yp0 = jnp.array([-k * 1.0, -2.0 * k * 3.0, 7.0])
    exact = decay_exact(ts, k, (1.0, 3.0))
    np.testing.assert_allclose(ys(yp0), exact, rtol=1e-7)
    jac = np.asarray(jax.jit(jax.jacfwd(ys))(yp0))   # (times, unknowns, y'0 entries)
    d0, d1 = -np.exp(-k * ts) / k, -np.exp(-2.0 * k * ts) / (2.0 * k)
    np.testing.assert_allclose(jac[:, 0, 0], d0, rtol=1e-6)
    np.testing.assert_allclose(jac[:, 1, 1], d1, rtol=1e-6)
    np.testing.assert_allclose(jac[:, 2, :2], np.stack([d0, d1], axis=1), rtol=1e-6)
    np.testing.assert_allclose(jac[:, :, 2], 0.0, atol=1e-12)


def test_first_output_sizes_the_first_steps_as_idas_tout1():
    # Loose tolerances, so that 0.001 (first_output - t0) is not cut by |y'0|.
    solver = JIDA(linear="dense", rtol=1e-2, atol=1e-2)

    def solve(**kw):
        sol = pdesolve(decay_problem(), solver, (0.0, 2.0), Y0, saveat=SaveAt(ts=TS),
                       args={"k": 1.0}, **kw)
        assert sol.status is Status.SUCCESS
        return np.asarray(sol.ys), {k: int(v) for k, v in sol.stats.items()}

    default, explicit, span = solve(), solve(first_output=TS[0]), solve(first_output=2.0)
    np.testing.assert_array_equal(default[0], explicit[0])
    assert default[1] == explicit[1]
    assert not np.array_equal(default[0], span[0])


def test_initialization_options_say_what_is_wrong():
    with pytest.raises(ValueError, match=r"initialize=\.\.\.\) takes 'ya_ydp' .* got 'yp'"):
        JIDA(initialize="yp")
    assert JIDA(initialize=True) == JIDA(initialize="ya_ydp") == JIDA()
    assert JIDA(initialize=True).initialize == "ya_ydp"
    with pytest.raises(ValueError, match=r"initialize='y'\) solves .* pass yp0="):
        pdesolve(decay_problem(), JIDA(initialize="y"), (0.0, 1.0), Y0)
    with pytest.raises(ValueError, match=r"first_output=0.0 must be after t0=0.0"):
        pdesolve(decay_problem(), JIDA(), (0.0, 1.0), Y0, first_output=0.0)
