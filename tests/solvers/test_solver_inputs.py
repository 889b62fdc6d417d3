"""Bad input is a clear error, raised before anything is compiled."""

from __future__ import annotations

import contextlib
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from fit_checks import mesh
from solver_models import TIMES, decay, particle_experiments, particle_problem

import solvers as ds

inference = ds.inference
D, k, a = (inference.Parameter("D", 1.0), inference.Parameter("k", 1.0),
           inference.Parameter("a", 1.0))


@contextlib.contextmanager
def no_compilation(caplog):
    """Fail if JAX compiles anything inside the block (JAX logs each compile)."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="jax"), jax.log_compiles():
        yield
    compiles = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Compiling")]
    assert not compiles, compiles


def test_the_compile_detector_sees_a_compile(caplog):
    with pytest.raises(AssertionError, match="Compiling"), no_compilation(caplog):
        jax.jit(lambda x: x * 3.0 + 1.0)(np.arange(7.0))


def _experiment(model=decay, values=None, **kwargs):
    values = np.exp(-TIMES) if values is None else values
    return inference.Experiment("A-1", model, {"q": 1.0},
                                inference.Measurement(TIMES, values, **kwargs))


def test_a_parameter_the_model_reads_but_the_problem_lacks(caplog):
    problem = inference.InferenceProblem([_experiment()], parameters=(D, k))
    with no_compilation(caplog), pytest.raises(
            ValueError, match=r"experiment 'A-1' reads parameter 'a'.*declared: D, k.*"
                              r"add Parameter\('a', initial\)"):
        inference.optsolve(problem)


def test_a_parameter_no_model_reads(caplog):
    problem = inference.InferenceProblem([_experiment()], parameters=(
        D, k, a, inference.Parameter("unused", 1.0)))
    with no_compilation(caplog), pytest.raises(
            ValueError, match=r"parameter 'unused' is not read by any experiment's model"):
        ds.lower(problem)


def test_a_per_group_parameter_a_group_never_reads(caplog):
    def only_a(params, conditions, times):
        return decay(params, conditions, times)

    def without_a(params, conditions, times):
        return jnp.exp(-params["k"] * times) + 0.0 * params["D"]

    experiments = [inference.Experiment("A-1", only_a, {"q": 1.0},
                                        inference.Measurement(TIMES, np.exp(-TIMES))),
                   inference.Experiment("B-1", without_a, {"q": 1.0},
                                        inference.Measurement(TIMES, np.exp(-TIMES)))]
    problem = inference.InferenceProblem(experiments, parameters=(D, k), per_experiment=(a,))
    with no_compilation(caplog), pytest.raises(
            ValueError, match=r"'a\[B-1\]' is not read by the model of any experiment in group "
                              r"'B-1'"):
        ds.lower(problem)


def test_an_experiment_without_measurements():
    with pytest.raises(ValueError, match=r"experiment 'A-1' has no measurements"):
        inference.Experiment("A-1", decay, {"q": 1.0}, [])


@pytest.mark.parametrize("where, kwargs, match", [
    ("values", {}, r"experiment 'A-1', measurement 0: values contain 1 non-finite entries, the "
                   r"first nan at index 3 \(time 0\.68"),
    ("noise", {"noise": np.where(np.arange(16) == 2, np.nan, 0.1)},
     r"noise must be positive and finite, got nan at index 2"),
])
def test_nan_in_data(where, kwargs, match):
    values = np.exp(-TIMES)
    if where == "values":
        values[3] = np.nan
    with pytest.raises(ValueError, match=match):
        _experiment(values=values, **kwargs)


def test_nan_in_data_loaded_by_a_function(caplog):
    values = np.exp(-TIMES)
    values[5] = np.inf
    problem = inference.InferenceProblem([_experiment(values=lambda: values)],
                                         parameters=(D, k, a))
    with no_compilation(caplog), pytest.raises(
            ValueError, match=r"experiment 'A-1', measurement 0: values contain 1 non-finite "
                              r"entries, the first inf at index 5"):
        ds.lower(problem)


def test_a_mesh_without_a_data_axis(caplog):
    problem = particle_problem(4)
    layout = ds.Layout(mesh=mesh((8,), ("model",)))
    with no_compilation(caplog), pytest.raises(
            ValueError, match=r"axes \('model',\) and no 'data' axis.*global_mesh\(\('data',\)\)"):
        inference.optsolve(problem, layout=layout)


@pytest.mark.parametrize("build, match", [
    (lambda: inference.Parameter("k", 5.0, lower=0.0, upper=1.0),
     r"initial value 5\.0 lies outside its bounds \[0\.0, 1\.0\]"),
    (lambda: inference.Parameter("k", -1.0, log=True), r"log=True, which needs lower >= 0"),
    (lambda: inference.Parameter("k", 1.0, lower=2.0, upper=1.0), r"needs lower < upper"),
    (lambda: inference.InferenceProblem(particle_experiments(2), parameters=(D, D)),
     r"parameter name 'D' appears twice"),
    (lambda: inference.InferenceProblem(particle_experiments(2) * 2, parameters=(D,)),
     r"experiment id 'A-1' appears twice"),
    (lambda: inference.InferenceProblem([], parameters=(D,)), r"at least one experiment"),
    (lambda: inference.Measurement(TIMES, np.ones(3)).check("m"),
     r"values have shape \(3,\) but times have shape \(16,\)"),
    (lambda: inference.Experiment("A-1", decay, {"q": "hot"}, inference.Measurement(
        TIMES, np.ones(16))), r"condition 'q' must be numeric"),
    (lambda: inference.Experiment("A-1", "decay", {},  # type: ignore[arg-type]  # under test
                                  inference.Measurement(TIMES, np.ones(16))),
     r"model must be callable"),
])
def test_malformed_objects(build, match):
    with pytest.raises((ValueError, TypeError), match=match):
        build()


def test_an_observable_the_model_lacks(caplog):
    def two(params, conditions, times):
        return {"B": decay(params, conditions, times), "C": 1.0 - decay(params, conditions, times)}

    for observable, match in ((None, r"returns 2 observables \(\['B', 'C'\]\); say which"),
                              ("D", r"observable 'D' is not an output of the model")):
        experiment = inference.Experiment("A-1", two, {"q": 1.0}, inference.Measurement(
            TIMES, np.ones(16), observable=observable))
        problem = inference.InferenceProblem([experiment], parameters=(D, k, a))
        with no_compilation(caplog), pytest.raises(ValueError, match=match):
            ds.lower(problem)


def test_a_model_returning_the_wrong_shape(caplog):
    def wrong(params, conditions, times):
        return decay(params, conditions, times)[:-1]

    problem = inference.InferenceProblem([_experiment(model=wrong)], parameters=(D, k, a))
    with no_compilation(caplog), pytest.raises(ValueError, match=r"returned \(15,\) for 16 times"):
        ds.lower(problem)


def test_a_failing_model_names_the_experiment(caplog):
    def failing(params, conditions, times):
        return params["a"] * conditions["temperature"] * times

    problem = inference.InferenceProblem([_experiment(model=failing)], parameters=(a,))
    with no_compilation(caplog), pytest.raises(KeyError) as info:
        ds.lower(problem)
    assert "while tracing the model of experiment 'A-1'" in "".join(info.value.__notes__)


def test_wrong_arguments_to_optsolve():
    with pytest.raises(TypeError, match="method must be TrustRegion"):
        inference.optsolve(particle_problem(2), "trf")  # type: ignore[arg-type]  # the wrong type under test
    with pytest.raises(ValueError, match="already lowered"):
        inference.optsolve(ds.lower(particle_problem(2)), layout=ds.Layout())
    with pytest.raises(ValueError, match=r"max_steps=\.\.\.\) must be a positive int"):
        inference.TrustRegion(max_steps=0)
