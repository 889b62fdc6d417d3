"""`pdesolve(quadrature=...)`: integrals of the solution computed with the steps (IDAS's
quadratures), against closed forms, their derivatives, and what they leave unchanged."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from problems import decay_problem

import solvers as ds
from solvers.dae import JIDA, Quadrature, Roots, SaveAt, Status, pdesolve

TS = np.array([0.0, 0.5, 1.0, 2.0])
SOLVER = JIDA(linear="klu", rtol=1e-10, atol=1e-12)
Y0 = jnp.array([1.0, 2.0, 3.0])


def integrand(t, y, yp, args):
    """y0 and y1 of the decay problem, and a function of t and y' too."""
    return jnp.stack([y[0], y[1], t * yp[0]])


QUAD = Quadrature(integrand)


def exact(k, ts=TS):
    """int_0^t of e^{-k s}, 2 e^{-2 k s} and s (-k e^{-k s})."""
    e1, e2 = np.exp(-k * ts), np.exp(-2 * k * ts)
    return np.stack([(1 - e1) / k, (1 - e2) / k, ts * e1 - (1 - e1) / k], axis=1)


def decay(k, quadrature=QUAD, solver=SOLVER, span=(0.0, 2.0), ts=TS, roots=None):
    return pdesolve(decay_problem(), solver, span, Y0, saveat=SaveAt(ts=ts), args={"k": k},
                    quadrature=quadrature, roots=roots)


def test_quadratures_match_their_closed_forms_at_every_save_time():
    sol = decay(0.7)
    assert sol.status is Status.SUCCESS
    assert sol.qs.shape == (TS.size, 3)
    np.testing.assert_array_equal(sol.qs[0], 0.0)   # nothing is integrated at t0
    np.testing.assert_allclose(sol.qs, exact(0.7), rtol=1e-7, atol=1e-10)


def test_a_quadrature_outside_the_error_test_leaves_the_solve_bit_for_bit_unchanged():
    with_q, without = decay(0.7), decay(0.7, quadrature=None)
    np.testing.assert_array_equal(with_q.ys, without.ys)
    assert {k: int(v) for k, v in with_q.stats.items()} == \
        {k: int(v) for k, v in without.stats.items()}
    assert without.qs.shape == (TS.size, 0)


def test_a_bare_callable_is_a_quadrature_and_ds_exports_the_class():
    np.testing.assert_array_equal(decay(0.7, quadrature=integrand).qs, decay(0.7).qs)
    assert ds.Quadrature is Quadrature


def test_quadrature_derivatives_forward_and_reverse_match_the_exact_ones():
    def total(k):
        return decay(k).qs

    def dexact(k, ts=TS):
        e1, e2 = np.exp(-k * ts), np.exp(-2 * k * ts)
        d0 = (k * ts * e1 - (1 - e1)) / k**2
        d1 = (2 * k * ts * e2 - (1 - e2)) / k**2
        d2 = -ts**2 * e1 - d0
        return np.stack([d0, d1, d2], axis=1)

    jac = jax.jit(jax.jacfwd(total))(0.7)
    np.testing.assert_allclose(jac, dexact(0.7), rtol=1e-6, atol=1e-9)
    g = jax.jit(jax.grad(lambda k: total(k)[-1, 0] + total(k)[2, 2]))(0.7)
    np.testing.assert_allclose(g, dexact(0.7)[-1, 0] + dexact(0.7)[2, 2], rtol=1e-6)


def test_under_error_control_the_quadrature_sets_steps_and_stays_accurate():
    loose = JIDA(linear="klu", rtol=1e-5, atol=1e-8)
    free = decay(0.7, solver=loose)
    tight = decay(0.7, solver=loose, quadrature=Quadrature(integrand, error_control=True,
                                                           rtol=1e-10, atol=1e-12))
    assert int(tight.stats["steps"]) > int(free.stats["steps"])
    err_free = np.abs(np.asarray(free.qs) - exact(0.7)).max()
    err_tight = np.abs(np.asarray(tight.qs) - exact(0.7)).max()
    assert err_tight < err_free / 10, (err_tight, err_free)


def test_a_failed_solve_leaves_the_quadrature_nan_where_it_did_not_reach():
    sol = decay(0.7, solver=JIDA(linear="klu", rtol=1e-10, atol=1e-12, max_steps=5))
    assert sol.status is Status.MAX_STEPS
    unreached = np.isnan(np.asarray(sol.ys)).any(axis=1)
    assert unreached.any()
    assert np.isnan(np.asarray(sol.qs)[unreached]).all()
    assert np.isfinite(np.asarray(sol.qs)[~unreached]).all()
    d = jax.jacfwd(lambda k: decay(k, solver=JIDA(linear="klu", max_steps=5)).qs)(0.7)
    assert np.isnan(np.asarray(d)[unreached]).all()


def test_a_terminal_root_ends_the_quadrature_there():
    # y0 = e^{-k t} falls through 0.5 at ln 2 / k; the save times after it are not reached
    k = 0.7
    stop = Roots(lambda t, y, yp, args: y[:1] - 0.5, terminal=True)
    sol = decay(k, roots=stop)
    assert sol.status is Status.ROOT
    after = TS > np.log(2) / k
    assert np.isnan(np.asarray(sol.qs)[after]).all()
    np.testing.assert_allclose(sol.qs[~after], exact(k)[~after], rtol=1e-7, atol=1e-10)


def test_bad_quadratures_are_refused_with_the_fix():
    with pytest.raises(TypeError, match="callable q"):
        Quadrature(3.0)
    with pytest.raises(TypeError, match="quadrature must be"):
        decay(0.7, quadrature="y")
    with pytest.raises(ValueError, match="non-empty 1-D"):
        decay(0.7, quadrature=lambda t, y, yp, a: jnp.ones((2, 2)))
    with pytest.raises(ValueError, match="one per component of q"):
        decay(0.7, quadrature=Quadrature(integrand, error_control=True, atol=(1e-6, 1e-6)))
    with pytest.raises(ValueError, match="needs its own atol"):
        decay(0.7, solver=JIDA(atol=(1e-9, 1e-9, 1e-9)),
              quadrature=Quadrature(integrand, error_control=True))
    with pytest.raises(ValueError, match="rtol"):
        Quadrature(integrand, rtol=-1.0)
