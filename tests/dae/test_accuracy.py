"""Problems with known solutions meet the tolerances; dense and KLU agree; statuses are honest."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from problems import (
    decay_exact,
    decay_problem,
    heat_exact,
    heat_problem,
    robertson_problem,
    robertson_reference,
)

from solvers.dae import JIDA, DAEProblem, SaveAt, Status, pdesolve

TIGHT: dict[str, Any] = {"rtol": 1e-8, "atol": 1e-10}
DECAY_TS = np.linspace(0.0, 2.0, 9)
ROBERTSON_TS = np.array([0.0, 0.4, 4.0, 40.0, 400.0, 4e3, 4e4])
HEAT_TS = np.linspace(0.0, 0.2, 5)


def decay(linear: str, **kw):
    return pdesolve(decay_problem(), JIDA(linear=linear, **TIGHT), (0.0, 2.0),
                    np.array([1.0, 1.0, 0.0]), saveat=SaveAt(ts=DECAY_TS), **kw)


@pytest.mark.parametrize("linear", ["dense", "klu"])
def test_linear_system_meets_tolerance(linear):
    sol = decay(linear)
    assert sol.status is Status.SUCCESS, sol.message
    err = np.abs(np.asarray(sol.ys) - decay_exact(DECAY_TS, 1.0)).max()
    assert err < 50 * TIGHT["rtol"], err
    # The algebraic unknown started wrong (0 instead of 2) and was made consistent.
    np.testing.assert_allclose(sol.ys[0], [1.0, 1.0, 2.0], atol=1e-12)


def test_robertson_as_a_dae():
    sol = pdesolve(robertson_problem(), JIDA(linear="klu", rtol=1e-6, atol=1e-10),
                   (0.0, 4e4), np.array([1.0, 0.0, 0.0]), saveat=SaveAt(ts=ROBERTSON_TS))
    assert sol.status is Status.SUCCESS, sol.message
    ref = robertson_reference(ROBERTSON_TS)
    ys = np.asarray(sol.ys)
    rel = np.abs(ys - ref).max(axis=0) / np.abs(ref).max(axis=0)
    assert np.all(rel < 2e-5), rel
    np.testing.assert_allclose(ys.sum(axis=1), 1.0, atol=1e-12)  # the algebraic constraint
    stats = {k: int(v) for k, v in sol.stats.items()}
    assert stats["factorizations"] < 0.3 * stats["steps"], stats   # the factor is reused
    assert stats["rejected_steps"] < 0.1 * stats["steps"], stats


def test_heat_equation_meets_tolerance():
    sol = pdesolve(heat_problem(), JIDA(linear="klu", **TIGHT), (0.0, 0.2),
                   heat_exact(np.zeros(1))[0], saveat=SaveAt(ts=HEAT_TS))
    assert sol.status is Status.SUCCESS, sol.message
    err = np.abs(np.asarray(sol.ys) - heat_exact(HEAT_TS)).max()
    assert err < 50 * TIGHT["rtol"], err


def test_dense_and_klu_give_the_same_answer():
    a, b = decay("dense"), decay("klu")
    np.testing.assert_allclose(a.ys, b.ys, rtol=1e-9, atol=1e-12)
    assert int(a.stats["steps"]) == int(b.stats["steps"])


def test_vmap_over_parameters_matches_one_by_one():
    ks = jnp.array([0.5, 1.0, 2.0])

    def final(k):
        return decay("klu", args={"k": k}).ys[-1]

    batched = jax.jit(jax.vmap(final))(ks)
    for k, row in zip(np.asarray(ks), np.asarray(batched)):
        np.testing.assert_allclose(row, decay_exact(DECAY_TS[-1:], k)[0], rtol=1e-6)


def test_failure_is_reported_not_hidden():
    # The residual stops being finite at t = 1: the solve must say it failed and leave the
    # times it did not reach as NaN.
    def res(t, y, yp, a):
        blow = jnp.where(t > 1.0, jnp.nan, 0.0)
        return jnp.stack([yp[0] + y[0] + blow, y[1] - 2.0 * y[0]])

    problem = DAEProblem(res, np.ones((2, 2), bool), algebraic=[1])
    sol = pdesolve(problem, JIDA(linear="dense"), (0.0, 2.0), np.array([1.0, 0.0]),
                   saveat=SaveAt(ts=np.array([0.5, 1.5])))
    assert sol.status in (Status.CONVERGENCE, Status.STEP_TOO_SMALL), sol.status
    assert not sol.success
    np.testing.assert_allclose(sol.ys[0], [np.exp(-0.5), 2 * np.exp(-0.5)], rtol=1e-4)
    assert np.all(np.isnan(sol.ys[1]))


def test_max_steps_and_impossible_initialization():
    sol = pdesolve(decay_problem(), JIDA(linear="dense", max_steps=5, **TIGHT), (0.0, 2.0),
                   np.array([1.0, 1.0, 0.0]), saveat=SaveAt(ts=DECAY_TS))
    assert sol.status is Status.MAX_STEPS
    assert int(sol.stats["steps"]) == 5

    def res(t, y, yp, a):  # y1^2 + 1 = 0 has no real solution
        return jnp.stack([yp[0] + y[0], y[1] ** 2 + 1.0])

    problem = DAEProblem(res, np.ones((2, 2), bool), algebraic=[1])
    sol = pdesolve(problem, JIDA(linear="dense"), (0.0, 1.0), np.array([1.0, 0.5]))
    assert sol.status is Status.INITIALIZATION
    assert np.all(np.isnan(sol.ys))


def test_bad_calls_say_what_is_wrong():
    problem = decay_problem()
    with pytest.raises(ValueError, match=r"y0 has shape \(2,\) but .* has 3 unknowns"):
        pdesolve(problem, JIDA(), (0.0, 1.0), np.zeros(2))
    with pytest.raises(ValueError, match="needs t1 > t0"):
        pdesolve(problem, JIDA(), (1.0, 1.0), np.zeros(3))
    with pytest.raises(ValueError, match="outside the span"):
        pdesolve(problem, JIDA(), (0.0, 1.0), np.zeros(3), saveat=SaveAt(ts=[0.5, 2.0]))
    with pytest.raises(ValueError, match=r"max_order.*got 6"):
        JIDA(max_order=6)
    with pytest.raises(ValueError, match="unknown linear solver 'lu'"):
        pdesolve(problem, JIDA(linear="lu"), (0.0, 1.0), np.zeros(3))
