"""Data parallelism: on 1, 2, 4 and 8 emulated devices the fit equals the one-device fit."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from fit_checks import assert_same_fit, mesh
from solver_models import oscillator_problem, particle_problem

import solvers as ds

inference = ds.inference

MESHES = {
    "1": ((1,), ("data",)),
    "2": ((2,), ("data",)),
    "4": ((4,), ("data",)),
    "8": ((8,), ("data",)),
    "4x2": ((4, 2), ("data", "model")),
}


@pytest.fixture(scope="module")
def particle_reference():
    problems = {n: particle_problem(n) for n in (7, 8)}
    return problems, {n: inference.optsolve(p) for n, p in problems.items()}


@pytest.mark.parametrize("n_experiments", [7, 8])
@pytest.mark.parametrize("mesh_name", ["1", "2", "4", "8", "4x2"])
def test_particle_fit_equals_one_device_fit(particle_reference, n_experiments, mesh_name):
    problems, refs = particle_reference
    shape, axes = MESHES[mesh_name]
    lowered = ds.lower(problems[n_experiments], ds.Layout(mesh=mesh(shape, axes)))
    n_data = shape[0]
    slots = -(-n_experiments // n_data)
    assert len(lowered.assignment) == n_data
    assert sorted(i for ids in lowered.assignment for i in ids) == sorted(
        e.id for e in problems[n_experiments].experiments)
    assert all(len(ids) <= slots for ids in lowered.assignment)
    res = inference.optsolve(lowered, inference.TrustRegion())
    assert_same_fit(res, refs[n_experiments])
    assert res.nfev == refs[n_experiments].nfev


def test_padding_copies_carry_no_weight(particle_reference):
    """3 experiments on 8 devices: 5 devices hold only zero-weight padding."""
    problem = particle_problem(3)
    ref = inference.optsolve(problem)
    lowered = ds.lower(problem, ds.Layout(mesh=mesh((8,))))
    assert [len(ids) for ids in lowered.assignment] == [1, 1, 1, 0, 0, 0, 0, 0]
    res = inference.optsolve(lowered)
    assert_same_fit(res, ref)
    assert res.n_residuals == ref.n_residuals == 3 * 16


@pytest.mark.parametrize("method", [inference.LevenbergMarquardt(),
                                    inference.NewtonTrustRegion(grad_tol=1e-10)],
                         ids=["levenberg-marquardt", "newton"])
def test_other_methods_equal_one_device(particle_reference, method):
    problem = particle_reference[0][7]
    ref = inference.optsolve(problem, method)
    res = inference.optsolve(problem, method, layout=ds.Layout(mesh=mesh((4,))))
    assert_same_fit(res, ref)
    # and all methods find the same optimum
    assert_same_fit(ref, particle_reference[1][7], rtol=1e-7)


@pytest.fixture(scope="module")
def oscillator_reference():
    problem = oscillator_problem(10)
    return problem, inference.optsolve(problem)


@pytest.fixture(scope="module")
def oscillator_steps(oscillator_reference):
    """Each experiment's ODE steps at the initial parameters, counted here independently."""
    problem, _ = oscillator_reference
    model = problem.experiments[0].model
    params = {p.name: p.initial for p in problem.parameters}
    count = jax.jit(jax.vmap(lambda f, t: model.steps(params, {"f": f}, t)))
    steps = count(np.array([e.conditions["f"] for e in problem.experiments]),
                  np.stack([e.measurements[0].times for e in problem.experiments]))
    return {e.id: float(s) for e, s in zip(problem.experiments, steps)}


@pytest.mark.parametrize("balance", [None, True, False], ids=["default", "on", "off"])
@pytest.mark.parametrize("mesh_name", ["4", "4x2"])
def test_balance_steps_keeps_the_fit(oscillator_reference, oscillator_steps, balance,
                                     mesh_name):
    problem, ref = oscillator_reference
    shape, axes = MESHES[mesh_name]
    lowered = ds.lower(problem, ds.Layout(mesh=mesh(shape, axes), balance_steps=balance))
    ids = [e.id for e in problem.experiments]
    contiguous = (tuple(ids[0:3]), tuple(ids[3:6]), tuple(ids[6:9]), tuple(ids[9:]))
    if balance is False:
        assert lowered.assignment == contiguous and not lowered.balanced and lowered.work is None
    else:
        steps = oscillator_steps
        assert lowered.experiment_work == steps
        assert len(set(steps.values())) > 5  # the step counts differ between experiments
        before = [sum(steps[i] for i in group) for group in contiguous]
        after = [sum(steps[i] for i in group) for group in lowered.assignment]
        assert lowered.balanced and lowered.work is not None and list(lowered.work) == after
        assert max(after) < max(before)
        assert max(after) - min(after) <= max(steps.values())
    assert_same_fit(inference.optsolve(lowered), ref)


def test_no_balancing_with_one_experiment_per_device(oscillator_reference):
    problem, _ = oscillator_reference
    lowered = ds.lower(problem, ds.Layout(mesh=mesh((8,)), balance_steps=None))
    assert lowered.balanced  # 10 experiments on 8 devices: some hold two
    lowered = ds.lower(particle_problem(8), ds.Layout(mesh=mesh((8,))))
    assert not lowered.balanced and lowered.assignment == tuple(
        (e,) for e in ("A-1", "B-1", "C-1", "A-2", "B-2", "C-2", "A-3", "B-3"))


def test_work_estimates_balance_closed_form_models():
    problem = particle_problem(8)
    work = {e.id: 10.0 * (i + 1) for i, e in enumerate(problem.experiments)}
    weighted = inference.InferenceProblem(
        [inference.Experiment(e.id, e.model, e.conditions, e.measurements, work=work[e.id])
         for e in problem.experiments], parameters=problem.parameters,
        per_experiment=problem.per_experiment, groups=problem.groups)
    lowered = ds.lower(weighted, ds.Layout(mesh=mesh((2,))))
    assert lowered.balanced and lowered.work is not None
    assert list(lowered.work) == [180.0, 180.0]
    assert_same_fit(inference.optsolve(lowered), inference.optsolve(problem))
