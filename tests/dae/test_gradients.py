"""Derivatives of solves: forward (jacfwd) and reverse (grad) against exact derivatives and
finite differences, with respect to parameters and initial values; dense and KLU agree."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from problems import decay_problem, robertson_problem, robertson_reference

from solvers.dae import JIDA, ParticleModel, ParticleSpec, SaveAt, pdesolve

TS = np.array([0.5, 1.0, 2.0])
SOLVER = JIDA(linear="klu", rtol=1e-10, atol=1e-12)


def decay(k, y0):
    return pdesolve(decay_problem(), SOLVER, (0.0, 2.0), y0, saveat=SaveAt(ts=TS),
                    args={"k": k}).ys


def test_jacfwd_matches_exact_sensitivities():
    k, y0 = 0.7, jnp.array([1.0, 2.0, 0.0])
    dk, dy0 = jax.jit(jax.jacfwd(decay, argnums=(0, 1)))(k, y0)
    e1, e2 = np.exp(-k * TS), np.exp(-2 * k * TS)
    exact_dk = np.stack([-TS * e1, -2 * 2.0 * TS * e2, -TS * e1 - 4.0 * TS * e2], axis=1)
    np.testing.assert_allclose(dk, exact_dk, rtol=1e-6, atol=1e-9)
    exact_dy0 = np.zeros((TS.size, 3, 3))
    exact_dy0[:, 0, 0] = exact_dy0[:, 2, 0] = e1
    exact_dy0[:, 1, 1] = exact_dy0[:, 2, 1] = e2
    # The algebraic initial value is recomputed, so its derivative is zero.
    np.testing.assert_allclose(dy0, exact_dy0, rtol=1e-6, atol=1e-9)


def test_grad_matches_finite_differences():
    y0 = jnp.array([1.0, 2.0, 0.0])

    def loss(k, y00):
        return jnp.sum(decay(k, y0.at[0].set(y00))[:, 2] ** 2)

    g = jax.jit(jax.grad(loss, argnums=(0, 1)))(0.7, 1.0)
    value = jax.jit(loss)
    eps = 1e-5
    fd_k = (value(0.7 + eps, 1.0) - value(0.7 - eps, 1.0)) / (2 * eps)
    fd_y = (value(0.7, 1.0 + eps) - value(0.7, 1.0 - eps)) / (2 * eps)
    np.testing.assert_allclose(g, (fd_k, fd_y), rtol=1e-5)


def test_robertson_parameter_gradient_matches_reference_differences():
    ts = np.array([0.4, 4.0, 40.0])

    def final(k1):
        args = {"k1": k1, "k2": 3e7, "k3": 1e4}
        return pdesolve(robertson_problem(), JIDA(linear="klu", rtol=1e-9, atol=1e-12),
                        (0.0, 40.0), jnp.array([1.0, 0.0, 0.0]), saveat=SaveAt(ts=ts),
                        args=args).ys

    jac = jax.jit(jax.jacfwd(final))(0.04)
    eps = 1e-4 * 0.04
    fd = (robertson_reference(ts, 0.04 + eps) - robertson_reference(ts, 0.04 - eps)) / (2 * eps)
    rel = np.abs(np.asarray(jac) - fd).max() / np.abs(fd).max()
    assert rel < 1e-5, rel


def test_particle_sensitivities_agree_between_backends():
    # The three-particle model (tridiagonal, an algebraic surface node): the sensitivities by
    # KLU equal those by dense LU (the two take different steps, so up to the tolerance), and
    # KLU's second derivatives equal differences of its first ones.
    times = np.linspace(0.1, 3.0, 8)
    x = jnp.log(jnp.array([1.0, 0.1]))
    def uptake_of(linear):
        model = ParticleModel(ParticleSpec(cells=6), JIDA(linear=linear, rtol=1e-11, atol=1e-13))
        return lambda x: model({"D": jnp.exp(x[0]), "k": jnp.exp(x[1])}, {"c_b": 1.0},
                               times)["uptake"]

    uptake = uptake_of("klu")
    jac = {"dense": jax.jit(jax.jacfwd(uptake_of("dense"))), "klu": jax.jit(jax.jacfwd(uptake))}
    np.testing.assert_allclose(jac["dense"](x), jac["klu"](x), rtol=1e-6, atol=1e-9)
    hess = jax.jit(jax.jacfwd(jax.jacfwd(uptake)))(x)
    eps = 1e-3  # smaller steps drown in the solver's tolerance (the steps taken change)
    fd = np.stack([(jac["klu"](x + eps * e) - jac["klu"](x - eps * e)) / (2 * eps)
                   for e in np.eye(2)], axis=-1)
    np.testing.assert_allclose(hess, fd, rtol=1e-4, atol=1e-6)
