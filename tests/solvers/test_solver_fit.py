"""Fits recover known parameters, respect bounds, and report failure honestly."""

from __future__ import annotations

import logging
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from fit_checks import assert_same_fit
from solver_models import (
    NOISE,
    OSC_TIMES,
    OSC_TRUTH,
    OSCILLATOR,
    PARTICLES,
    TRUTH,
    decay,
    particle_experiments,
    particle_problem,
    simulate,
    three_particles,
)

import solvers as ds

inference = ds.inference
METHODS = [inference.TrustRegion(), inference.LevenbergMarquardt(),
           inference.NewtonTrustRegion(grad_tol=1e-9)]
METHOD_IDS = ["trust-region", "levenberg-marquardt", "newton"]


@pytest.mark.parametrize("noise", [NOISE, None], ids=["known-noise", "unknown-noise"])
def test_standard_errors_cover_the_truth(noise):
    """Over 40 data sets the truth lies within 1.96 standard errors about 95% of the time."""
    z = []
    for seed in range(40):
        res = inference.optsolve(particle_problem(7, seed=seed, noise=noise))
        assert res.converged, res
        z += [(res[name] - true) / res.standard_error(name) for name, true in TRUTH.items()]
    zs = np.asarray(z)
    inside = np.mean(np.abs(zs) < 1.96)
    assert 0.88 <= inside <= 1.0, inside
    assert 0.6 <= np.mean(zs**2) <= 1.5, np.mean(zs**2)


@pytest.mark.parametrize("method", METHODS, ids=METHOD_IDS)
@pytest.mark.parametrize("initial", [50.0, 0.005], ids=["100x-high", "100x-low"])
def test_poor_initial_guesses_reach_the_truth(method, initial):
    res = inference.optsolve(particle_problem(7, seed=3, initial=initial), method)
    assert res.converged, res
    for name, true in TRUTH.items():
        assert abs(res[name] - true) < 4 * res.standard_error(name), (name, res)
    assert res.iterations >= 3 and res.nfev >= res.iterations + 1


def _bounded_problem(**bounds):
    # the same structure as particle_problem (log D), so the compiled fits are reused
    D = inference.Parameter("D", 0.25, lower=0.0, upper=bounds.get("D_upper", np.inf), log=True)
    k = inference.Parameter("k", 0.6, lower=bounds.get("k_lower", 0.0))
    a = inference.Parameter("a", 1.0)
    return inference.InferenceProblem(particle_experiments(7, seed=1), parameters=(D, k),
                                      per_experiment=(a,), groups=lambda e: e.id[0])


@pytest.mark.parametrize("method", METHODS, ids=METHOD_IDS)
def test_bounds_are_respected_and_reported(method):
    """The optimum lies outside the box (D = 0.5 > 0.3, k = 0.2 < 0.4): the fit stops on it."""
    res = inference.optsolve(_bounded_problem(D_upper=0.3, k_lower=0.4), method)
    assert res.converged, res
    assert res["D"] == 0.3 and res["k"] == 0.4
    assert set(res.at_bound) == {"D", "k"}
    errors = res.standard_errors
    assert np.isnan(errors["D"]) and np.isnan(errors["k"])
    assert all(np.isfinite(errors[f"a[{p}]"]) for p in "ABC")


def test_a_linear_parameter_above_709_neither_overflows_nor_warns():
    """Only log parameters are exponentiated (exp(800) overflows); under warnings-as-errors."""
    truth = {"D": 0.5, "k": 0.2, "a[A]": 1000.0, "a[B]": 900.0, "a[C]": 1100.0}
    D = inference.Parameter("D", 1.0, lower=0.0, log=True)
    k = inference.Parameter("k", 1.0, lower=0.0)
    a = inference.Parameter("a", 800.0, lower=0.0)
    problem = inference.InferenceProblem(particle_experiments(7, seed=4, truth=truth),
                                         parameters=(D, k), per_experiment=(a,),
                                         groups=lambda e: e.id[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lowered = ds.lower(problem)
        res = inference.optsolve(lowered)
    assert float(lowered.x0[2]) == 800.0
    assert res.converged, res
    for name, true in truth.items():
        assert abs(res[name] - true) < 4 * res.standard_error(name), (name, res)


def test_trial_points_never_leave_the_bounds():
    seen = []

    def watched(params, conditions, times):
        jax.debug.callback(lambda d, k: seen.append((float(d), float(k))), params["D"],
                           params["k"])
        return decay(params, conditions, times)

    experiments = [inference.Experiment(e.id, watched, e.conditions, e.measurements)
                   for e in particle_experiments(3, seed=2)]
    D = inference.Parameter("D", 0.25, lower=0.2, upper=0.3)
    k = inference.Parameter("k", 0.3, lower=0.25, upper=2.0)
    a = inference.Parameter("a", 1.0, lower=0.5, upper=1.5)
    res = inference.optsolve(inference.InferenceProblem(experiments, parameters=(D, k, a)))
    assert res.converged and seen
    d, k = np.asarray(seen).T
    assert d.min() >= 0.2 and d.max() <= 0.3 and k.min() >= 0.25 and k.max() <= 2.0


def test_max_steps_is_not_convergence(caplog):
    with caplog.at_level(logging.WARNING, logger="solvers.inference._solve"):
        res = inference.optsolve(particle_problem(7, initial=50.0),
                                 inference.TrustRegion(max_steps=3))
    assert not res.converged
    assert res.termination == "max_steps" and "max_steps" in res.message
    assert res.nfev == 4
    assert "did not converge" in caplog.text


def test_nonfinite_start_is_not_convergence():
    def broken(params, conditions, times):
        return jnp.sqrt(params["k"] - 2.0) * jnp.exp(-params["D"] * times)   # NaN for k < 2

    experiments = [inference.Experiment(e.id, broken, e.conditions, e.measurements)
                   for e in particle_experiments(3)]
    res = inference.optsolve(inference.InferenceProblem(
        experiments, parameters=(inference.Parameter("D", 1.0), inference.Parameter("k", 1.0))))
    assert not res.converged and res.termination == "nonfinite"
    assert res.iterations == 0


def test_undetermined_parameters_are_not_convergence(caplog):
    def product(params, conditions, times):   # only D * k is determined
        return jnp.exp(-params["D"] * params["k"] * conditions["q"] * times)

    experiments = [inference.Experiment(e.id, product, e.conditions, e.measurements)
                   for e in particle_experiments(3)]
    with caplog.at_level(logging.WARNING, logger="solvers.inference._solve"):
        res = inference.optsolve(inference.InferenceProblem(
            experiments, parameters=(inference.Parameter("D", 1.0),
                                     inference.Parameter("k", 1.0))))
    assert not res.converged and res.termination == "singular"
    assert "do not determine" in res.message
    assert np.all(np.isnan(res.covariance)) and "singular" in caplog.text


def test_a_plateau_is_not_convergence():
    """Started where every prediction underflows to 0, the gradient is 0 but nothing is fitted."""
    res = inference.optsolve(particle_problem(7, initial=500.0))
    assert not res.converged and res.termination == "singular"


def test_per_group_parameters_are_reported_by_group():
    res = inference.optsolve(particle_problem(7))
    a = inference.Parameter("a", 1.0, lower=0.0)
    assert res.names == ("D", "k", "a[A]", "a[B]", "a[C]")
    assert res[a, "B"] == res["a", "B"] == res.values["a[B]"]
    assert res[inference.Parameter("D", 1.0, lower=0.0, log=True)] == res["D"]
    with pytest.raises(KeyError, match=r"per group: use res\['a', group\].*'A', 'B', 'C'"):
        res[a]
    with pytest.raises(KeyError, match="no fitted parameter 'x'"):
        res["x"]
    assert res.covariance.shape == (5, 5) and np.allclose(res.covariance, res.covariance.T)


def test_values_loaded_by_a_function_fit_like_arrays():
    eager = particle_experiments(4, seed=5)
    calls = []

    def loader(values, i):
        def load():
            calls.append(i)
            return values
        return load

    lazy = tuple(inference.Experiment(e.id, e.model, e.conditions, inference.Measurement(
        e.measurements[0].times, loader(e.measurements[0].values, i), noise=NOISE))
        for i, e in enumerate(eager))
    params = particle_problem(4).parameters
    res = inference.optsolve(inference.InferenceProblem(lazy, parameters=params + (
        inference.Parameter("a", 1.0),)))
    ref = inference.optsolve(inference.InferenceProblem(eager, parameters=params + (
        inference.Parameter("a", 1.0),)))
    assert sorted(calls) == [0, 1, 2, 3]
    assert_same_fit(res, ref, rtol=1e-14)


def test_several_observables_and_times_per_experiment():
    """An ODE model with a mapping output; measurements of both outputs at different times."""
    def observe(y, params, conditions):
        return {"x": y[0], "x2": 2.0 * y[0]}

    model = inference.ODEModel(OSCILLATOR.rhs, OSCILLATOR.initial, observe=observe,
                               rtol=1e-9, atol=1e-11)
    rng = np.random.default_rng(0)
    factors = np.array([0.7, 1.0, 1.4])
    clean = simulate(model, factors, OSC_TIMES)
    experiments = []
    for i, f in enumerate(factors):
        t1, t2 = OSC_TIMES[::2], OSC_TIMES[1::3]
        x1 = np.asarray(clean["x"][i, ::2]) + 0.01 * rng.standard_normal(t1.size)
        x2 = np.asarray(clean["x2"][i, 1::3]) + 0.02 * rng.standard_normal(t2.size)
        experiments.append(inference.Experiment(f"osc-{i}", model, {"f": f}, [
            inference.Measurement(t1, x1, noise=0.01, observable="x"),
            inference.Measurement(t2, x2, noise=0.02, observable="x2")]))
    params = (inference.Parameter("w", 1.0, lower=0.1, log=True),
              inference.Parameter("c", 0.5, lower=0.0), inference.Parameter("y0", 0.8))
    res = inference.optsolve(inference.InferenceProblem(experiments, parameters=params))
    assert res.converged and res.n_residuals == 3 * (20 + 13)
    for name, true in OSC_TRUTH.items():
        assert abs(res[name] - true) < 4 * res.standard_error(name), (name, res)


def test_seed_data_parallel_snippet():
    """The seed's "Data parallelism" snippet, with `import solvers as ds`."""
    study = particle_problem(8)

    mesh = ds.global_mesh(("data",))
    layout = ds.Layout(mesh=mesh)

    lowered = ds.lower(study, layout=layout)
    result = ds.inference.optsolve(lowered, ds.inference.TrustRegion())

    assert result.converged
    assert_same_fit(result, ds.inference.optsolve(study))


def test_seed_checkpointing_snippet(tmp_path):
    """The seed's checkpointing function, run by campaign.checkpointed_map."""
    from campaign import checkpointed_map

    experiments = three_particles()
    D = ds.inference.Parameter("D", 1.0)
    k = ds.inference.Parameter("k", 1.0)

    def fit_particle(item):
        mine = tuple(e for e in experiments if e.id.startswith(item["task_id"]))
        problem = ds.inference.InferenceProblem(mine, parameters=(D, k))
        res = ds.inference.optsolve(problem, ds.inference.NewtonTrustRegion(grad_tol=1e-5))
        return {"D": float(res[D]), "k": float(res[k]), "converged": bool(res.converged)}

    items = [{"task_id": "A"}, {"task_id": "B"}, {"task_id": "C"}]
    campaign = checkpointed_map(fit_particle, items, ledger_path=tmp_path / "particles.json")
    assert not campaign.failures
    for result, (d, kk) in zip(campaign.results, PARTICLES.values()):
        assert result["converged"] is True
        assert abs(result["D"] - d) < 0.01 and abs(result["k"] - kk) < 0.01
