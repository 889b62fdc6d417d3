"""Models and synthetic data for the solver tests (small, so compiles stay cheap)."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

import solvers as ds

inference = ds.inference

#: True values of the particle problem: shared D and k, one amplitude per particle.
TRUTH = {"D": 0.5, "k": 0.2, "a[A]": 1.0, "a[B]": 0.8, "a[C]": 1.3}
TIMES = np.linspace(0.1, 3.0, 16)
NOISE = 0.01


def decay(params, conditions, times):
    """A tracer decaying in a particle: ``a * exp(-(k + D q^2) t)``."""
    rate = params["k"] + params["D"] * conditions["q"] ** 2
    return params["a"] * jnp.exp(-rate * times)


def particle_experiments(n: int, seed: int = 0, noise: float | None = NOISE,
                         truth: dict[str, float] = TRUTH) -> tuple:
    """``n`` experiments on particles A, B, C in turn (ids "A-1", "B-1", "C-1", "A-2", ...)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        particle, number = "ABC"[i % 3], i // 3 + 1
        q = 0.4 + 0.25 * i
        rate = truth["k"] + truth["D"] * q * q
        clean = truth[f"a[{particle}]"] * np.exp(-rate * TIMES)
        values = clean + (noise or NOISE) * rng.standard_normal(TIMES.size)
        out.append(inference.Experiment(
            f"{particle}-{number}", decay, {"q": q},
            inference.Measurement(TIMES, values, noise=noise)))
    return tuple(out)


def particle_problem(n: int, seed: int = 0, noise: float | None = NOISE, initial: float = 1.0):
    D = inference.Parameter("D", initial, lower=0.0, log=True)
    k = inference.Parameter("k", initial, lower=0.0)
    a = inference.Parameter("a", 1.0, lower=0.0)
    return inference.InferenceProblem(particle_experiments(n, seed, noise), parameters=(D, k),
                                      per_experiment=(a,), groups=lambda e: e.id[0])


# --- an explicit ODE model whose step count depends on the experiment --------------------------

def _oscillator_rhs(t, y, params, conditions):
    w = params["w"] * conditions["f"]
    return jnp.stack([y[1], -(w**2) * y[0] - params["c"] * y[1]])


def _oscillator_initial(params, conditions):
    return jnp.stack([params["y0"], jnp.zeros_like(params["y0"])])


OSCILLATOR = inference.ODEModel(_oscillator_rhs, _oscillator_initial,
                                observe=lambda y, params, conditions: y[0], rtol=1e-9, atol=1e-11)
OSC_TRUTH = {"w": 1.3, "c": 0.3, "y0": 1.0}
OSC_TIMES = np.linspace(0.0, 6.0, 40)


@partial(jax.jit, static_argnums=0)
def simulate(model, factors, times):
    """The model at the true parameters for several frequency factors (compiled once)."""
    truth = {k: jnp.asarray(v) for k, v in OSC_TRUTH.items()}
    return jax.vmap(lambda f: model(truth, {"f": f}, times))(factors)


def oscillator_experiments(n: int, seed: int = 0, noise: float = 0.01) -> tuple:
    """``n`` damped oscillators whose frequency factor grows with the index (so do their steps)."""
    rng = np.random.default_rng(seed)
    factors = [0.5 + 0.6 * ((7 * i) % n) for i in range(n)]  # frequencies shuffled
    clean = np.asarray(simulate(OSCILLATOR, np.asarray(factors), OSC_TIMES))
    out = []
    for i, f in enumerate(factors):
        values = clean[i] + noise * rng.standard_normal(OSC_TIMES.size)
        out.append(inference.Experiment(f"osc-{i}", OSCILLATOR, {"f": f},
                                        inference.Measurement(OSC_TIMES, values, noise=noise)))
    return tuple(out)


def oscillator_problem(n: int, seed: int = 0):
    params = (inference.Parameter("w", 1.0, lower=0.1, log=True),
              inference.Parameter("c", 0.5, lower=0.0),
              inference.Parameter("y0", 0.8))
    return inference.InferenceProblem(oscillator_experiments(n, seed), parameters=params)


# --- the seed's three particles, fitted one particle at a time ----------------------------------

PARTICLES = {"A": (0.5, 0.2), "B": (1.0, 0.1), "C": (0.3, 0.6)}


def unit_decay(params, conditions, times):
    """``exp(-(k + D q^2) t)``, the seed's particle model."""
    return jnp.exp(-(params["k"] + params["D"] * conditions["q"] ** 2) * times)


def three_particles(seed: int = 0) -> tuple:
    """Six experiments "A-1", "A-2", "B-1", ...: each particle at two conditions q."""
    rng = np.random.default_rng(seed)
    times = 0.1 * np.arange(1, 21)
    out = []
    for name, (d, k) in PARTICLES.items():
        for n, q in enumerate((0.5, 1.5), start=1):
            values = np.exp(-(k + d * q * q) * times) * (1 + 0.002 * rng.standard_normal(20))
            out.append(inference.Experiment(f"{name}-{n}", unit_decay, {"q": q},
                                            inference.Measurement(times, values)))
    return tuple(out)
