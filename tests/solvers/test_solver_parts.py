"""The pieces under the fit: the trust-region subproblem, the ODE model, the balancing."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from solvers.inference import ODEModel
from solvers.inference._balance import contiguous, loads, longest_first
from solvers.inference._subproblem import scaled_eigen, trust_region_step


def _subproblem_cases():
    rng = np.random.default_rng(0)
    for i in range(12):
        n = 2 + i % 4
        a = rng.standard_normal((n, n))
        h = a + a.T if i % 2 else a @ a.T          # indefinite / positive semi-definite
        g = rng.standard_normal(n)
        yield h, g, float(10.0 ** rng.uniform(-2, 1))
    h = np.diag([-2.0, 1.0, 3.0])                  # the hard case: no gradient along the
    yield h, np.array([0.0, 1.0, 1.0]), 2.0        # direction of negative curvature


@pytest.mark.parametrize("case", list(_subproblem_cases()))
def test_trust_region_step_is_optimal(case):
    """Moré-Sorensen conditions: (H + lam I) q = -g, H + lam I >= 0, lam (radius - |q|) = 0."""
    h, g, radius = case
    n = len(g)
    e = scaled_eigen(jnp.asarray(h), jnp.asarray(g), jnp.ones(n), jnp.ones(n, bool))
    q = np.asarray(jax.jit(trust_region_step)(e, jnp.asarray(radius)))
    assert np.linalg.norm(q) <= radius * (1 + 1e-9)
    model = g @ q + 0.5 * q @ h @ q
    rng = np.random.default_rng(1)
    for _ in range(2000):  # no feasible point does better
        z = rng.standard_normal(n)
        z *= radius * rng.uniform() ** (1 / n) / np.linalg.norm(z)
        assert model <= g @ z + 0.5 * z @ h @ z + 1e-9 * (1 + abs(model))
    lam_min = max(0.0, -np.linalg.eigvalsh(h)[0])
    if lam_min > 0 or np.linalg.norm(np.linalg.solve(h, g)) > radius:
        assert abs(np.linalg.norm(q) - radius) <= 1e-7 * radius   # on the boundary


def _oscillator(w_factor):
    return ODEModel(lambda t, y, p, c: jnp.stack([y[1], -(p["w"] * c["f"]) ** 2 * y[0]]),
                    lambda p, c: jnp.stack([1.0, 0.0 * p["w"]]), rtol=1e-10, atol=1e-12)


OSC = _oscillator(1.0)


@jax.jit
def _solve(w, f, times):
    return OSC({"w": w}, {"f": f}, times), OSC.steps({"w": w}, {"f": f}, times)


@jax.jit
def _derivative(w, f, times):
    return jax.jacfwd(lambda w: OSC({"w": w}, {"f": f}, times)[:, 0])(w)


def test_ode_model_matches_the_exact_solution_and_its_derivative():
    times = jnp.linspace(0.0, 8.0, 120)
    y, steps = _solve(1.3, 1.0, times)
    assert np.max(np.abs(np.asarray(y[:, 0]) - np.cos(1.3 * times))) < 1e-8
    assert np.max(np.abs(np.asarray(y[:, 1]) + 1.3 * np.sin(1.3 * times))) < 1e-8
    exact = -times * np.sin(1.3 * times)
    assert np.max(np.abs(np.asarray(_derivative(1.3, 1.0, times)) - exact)) < 1e-6
    _, more = _solve(1.3, 3.0, times)
    assert int(more) > int(steps) > 10   # faster oscillation, more steps


def test_ode_model_out_of_steps_gives_nan():
    model = ODEModel(lambda t, y, p, c: -p["k"] * y, lambda p, c: jnp.ones(1), max_steps=3)
    y = jax.jit(lambda k: model({"k": k}, {}, jnp.linspace(0.0, 10.0, 5)))(1.0)
    assert np.isnan(np.asarray(y)[-1]).all() and np.asarray(y)[0, 0] == 1.0


def test_longest_first_balances_the_sums():
    work = [5.0, 4.0, 3.0, 3.0, 3.0, 2.0]
    assert contiguous(6, 2) == [[0, 1, 2], [3, 4, 5]]
    assert loads(contiguous(6, 2), work) == [12.0, 8.0]
    groups = longest_first(work, 2)
    assert loads(groups, work) == [10.0, 10.0] and all(len(g) == 3 for g in groups)
    # 7 experiments on 4 devices: 2 slots each, every experiment placed once
    groups = longest_first([1, 9, 2, 8, 3, 7, 4], 4)
    assert sorted(i for g in groups for i in g) == list(range(7))
    assert max(len(g) for g in groups) == 2
    assert max(loads(groups, [1, 9, 2, 8, 3, 7, 4])) == 9   # the optimum (sum 34 over 4)
