"""Non-finite residuals or Jacobians (a failed ODE/DAE solve, sqrt or log of a negative number).

A trial point where one experiment's model gives NaN is a failed evaluation: rejected, the trust
region shrunk, never convergence. A fit that cannot get past such points ends ``nonfinite`` and
names the experiments that gave them.
"""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from solver_models import TRUTH, decay, particle_experiments

import solvers as ds

inference = ds.inference


def _nan_below(edge: float):
    """``decay`` where ``k > edge``; NaN (values and derivatives) where ``k < edge``."""
    def model(params, conditions, times):
        return decay(params, conditions, times) + 0.0 * jnp.sqrt(params["k"] - edge)

    model.__name__ = f"nan_below_{edge}"
    return model


def _nan_everywhere(params, conditions, times):
    return decay(params, conditions, times) + jnp.log(-1.0 - params["k"] ** 2)


def _problem(model_of_particle, k0: float = 1.0):
    experiments = [inference.Experiment(e.id, model_of_particle.get(e.id[0], decay),
                                        e.conditions, e.measurements)
                   for e in particle_experiments(7, seed=4)]
    D = inference.Parameter("D", k0, lower=0.0, log=True)
    k = inference.Parameter("k", k0)
    a = inference.Parameter("a", 1.0, lower=0.0)
    return inference.InferenceProblem(experiments, parameters=(D, k), per_experiment=(a,),
                                      groups=lambda e: e.id[0])


def test_a_nan_region_on_the_way_is_stepped_around():
    """Particle B's model is NaN for k < 0.15; from k = 3 the finite model's fit steps to
    k = -0.10 and 0.13 on its way to the optimum (k = 0.2) beyond the edge: with the NaN model
    those points are rejected and the fit converges to the same optimum."""
    res = inference.optsolve(_problem({"B": _nan_below(0.15)}, k0=3.0))
    assert res.converged, res
    assert res.nonfinite_trials > 0, "the fit never met the NaN region: the test tests nothing"
    assert res.nonfinite_experiments == ()
    plain = inference.optsolve(_problem({}, k0=3.0))
    assert plain.converged and plain.nonfinite_trials == 0
    for name in TRUTH:
        assert res[name] == pytest.approx(plain[name], rel=1e-7), name
    assert abs(res["k"] - TRUTH["k"]) < 4 * res.standard_error("k")


def test_an_experiment_nan_everywhere_is_named(caplog):
    with caplog.at_level(logging.WARNING, logger="solvers.inference._solve"):
        res = inference.optsolve(_problem({"C": _nan_everywhere}))
    assert not res.converged and res.termination == "nonfinite"
    assert res.nonfinite_experiments == ("C-1", "C-2"), res.nonfinite_experiments
    assert "'C-1', 'C-2'" in caplog.text and "did not converge" in caplog.text


@pytest.mark.parametrize("devices", [1, 4], ids=["one-device", "four-devices"])
def test_an_optimum_inside_the_nan_region_is_a_named_failure(devices):
    """The data want k = 0.2 but particle A's model is NaN below k = 0.3: the fit presses against
    the edge, every trial beyond it fails, and it ends unconverged naming A's experiments (on
    four devices too, where 7 experiments leave padding slots)."""
    layout = None if devices == 1 else ds.Layout(
        mesh=jax.sharding.Mesh(np.array(jax.devices()[:devices]), ("data",)))
    res = inference.optsolve(_problem({"A": _nan_below(0.3)}), layout=layout)
    assert not res.converged, res
    assert res.termination == "nonfinite", res
    assert res.nonfinite_experiments == ("A-1", "A-2", "A-3"), res.nonfinite_experiments
    assert res["k"] >= 0.3
