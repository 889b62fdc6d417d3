"""NIST StRD's nonlinear datasets of higher difficulty: fits from NIST's starts, standard errors.

The datasets are NIST's of higher difficulty (MGH09, MGH10, Thurber, BoxBOD, Rat42, Rat43,
Eckerle4, Bennett5) and a few of average difficulty with condition numbers of the Jacobian up to
about 1e9 (Lanczos2, Lanczos3, Misra1a, Kirby2, Hahn1). Starting values, certified values and
certified standard deviations are read from NIST's files (data/nist-nonlinear/).

From NIST's own starts (both of them, 16 fits), the default `optsolve` must reach 6 digits (LRE,
minimum over the parameters) of every parameter and of every standard error; observed on the
development machine 6.9 to 10.7 (parameters) and 6.8 to 11.0 (standard errors); MGH09 is the
lowest (its cost is flat to 1e-14 relative within 1e-7 of the optimum). `TrustRegion.tight()`
must reach 8.5 digits of the parameters and of the standard errors everywhere and a median of 10
for the parameters (observed 9.1 to 11.8, median 10.6; standard errors 9.2 to 11.0).
benchmarks/nist_fits.py prints both against scipy.

From the certified values, the standard errors are computed at the certified optimum from the
residual variance ``RSS / (m - n)``, as NIST's are. Lanczos1 is left out: its residuals are at
the rounding level of its data (RSS 1.4e-25), so its certified standard errors cannot be
reproduced in float64 by anyone. Digits agreeing with the certified standard errors from there
on the development machine: MGH09 10.4, MGH10 9.7, Thurber 9.3, BoxBOD 10.4, Rat42 10.6, Rat43
10.6, Eckerle4 10.5, Bennett5 10.4, Lanczos2 9.9, Lanczos3 10.4, Misra1a 11.1, Kirby2 10.2, Hahn1
10.4. The test asks for 8.5 everywhere.
"""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from nist_nonlinear import fit_model, load, lre

import solvers as ds

jax.config.update("jax_enable_x64", True)
inference = ds.inference

DATASETS = ["MGH09", "MGH10", "Thurber", "BoxBOD", "Rat42", "Rat43", "Eckerle4", "Bennett5",
            "Lanczos2", "Lanczos3", "Misra1a", "Kirby2", "Hahn1"]
HARD = ["MGH09", "Thurber", "BoxBOD", "Rat42", "MGH10", "Eckerle4", "Rat43", "Bennett5"]
#: Digits of the certified standard errors every dataset must reach from the certified values
#: (observed: 9.3 to 11.1).
SE_DIGITS = 8.5
#: Digits of the parameters and standard errors the default fit must reach from NIST's starts.
START_DIGITS = 6.0


_MODELS: dict[str, object] = {}


def _shared_model(name: str, k: int):
    """One model function per dataset, so both starts reuse one compiled fit."""
    if name not in _MODELS:
        _MODELS[name] = fit_model(name, k)
    return _MODELS[name]


def _experiment(name: str, model) -> inference.Experiment:
    d = load(name)
    # The x values repeat in some datasets: they are a condition, the "times" only index rows.
    return inference.Experiment(name, model, {"x": d.x},
                                inference.Measurement(np.arange(d.x.size, dtype=float), d.y))


@pytest.mark.parametrize("name", DATASETS)
def test_standard_errors_match_the_certified_values(name):
    d = load(name)
    k = len(d.certified)
    params = tuple(inference.Parameter(f"b{i + 1}", v) for i, v in enumerate(d.certified))
    res = inference.optsolve(inference.InferenceProblem([_experiment(name, fit_model(name, k))],
                                                        parameters=params))
    assert res.converged, res
    errors = res.standard_errors
    assert np.all(np.isfinite(res.covariance)), res.covariance
    digits = [lre(errors[f"b{i + 1}"], sd) for i, sd in enumerate(d.certified_sd)]
    assert min(digits) >= SE_DIGITS, dict(zip(res.names, np.round(digits, 1)))
    assert min(lre(res[f"b{i + 1}"], c) for i, c in enumerate(d.certified)) >= 9
    assert lre(2 * res.cost, d.residual_ss) >= 9


def _fit_from_start(name: str, start: int, method=None):
    """The fit of ``name`` from NIST's start 1 or 2 (as its file gives it): the result, the
    digits of the parameters and of the standard errors (minimum over the parameters)."""
    d = load(name)
    k = len(d.certified)
    params = tuple(inference.Parameter(f"b{i + 1}", v) for i, v in enumerate(d.starts[start - 1]))
    res = inference.optsolve(inference.InferenceProblem(
        [_experiment(name, _shared_model(name, k))], parameters=params), method)
    errors = res.standard_errors
    digits = min(lre(res[f"b{i + 1}"], c) for i, c in enumerate(d.certified))
    se_digits = min(lre(errors[f"b{i + 1}"], sd) for i, sd in enumerate(d.certified_sd))
    return res, digits, se_digits


@pytest.mark.parametrize("start", [1, 2], ids=["start1", "start2"])
@pytest.mark.parametrize("name", HARD)
def test_the_default_fit_from_nist_starts(name, start):
    """6 digits of every parameter and standard error from both of NIST's starts (before the
    trust region limited its sensitive parameters and its radius: MGH10, Eckerle4 and Bennett5
    from start 1 ran out of 200 steps with 0 to 0.4 digits)."""
    res, digits, se_digits = _fit_from_start(name, start)
    assert res.converged, res
    assert digits >= START_DIGITS, (digits, res)
    assert se_digits >= START_DIGITS, (se_digits, res.standard_errors)


def test_the_tight_fit_from_nist_starts():
    """`TrustRegion.tight()` from all 16 starts: 8.5 digits of the parameters and standard
    errors everywhere, 10 in the median of the parameters (before steps below the cost's
    resolution were judged by the gradient: MGH09 7.3, Thurber 7.6)."""
    digits, se_digits = {}, {}
    for name in HARD:
        for start in (1, 2):
            res, p, se = _fit_from_start(name, start, inference.TrustRegion.tight())
            assert res.converged, (name, start, res)
            digits[f"{name} start {start}"] = round(p, 2)
            se_digits[f"{name} start {start}"] = round(se, 2)
    assert min(digits.values()) >= 8.5, digits
    assert min(se_digits.values()) >= 8.5, se_digits
    assert np.median(list(digits.values())) >= 10.0, digits


def test_an_undetermined_combination_is_named_and_the_rest_stays_exact(caplog):
    """BoxBOD with its rate split into a product ``b2 * b3``: only the product is determined.

    b1's standard error is unchanged by the split (the model's column space is the same), so it
    keeps its certified value; b2 and b3 are NaN, and the warning names the combination.
    """
    d = load("BoxBOD")

    def split(params, conditions, times):
        return params["b1"] * (1.0 - jnp.exp(-params["b2"] * params["b3"] * conditions["x"]))

    params = (inference.Parameter("b1", d.certified[0]),
              inference.Parameter("b2", d.certified[1]), inference.Parameter("b3", 1.0))
    with caplog.at_level(logging.WARNING, logger="solvers.inference._covariance"):
        res = inference.optsolve(inference.InferenceProblem([_experiment("BoxBOD", split)],
                                                            parameters=params))
    errors = res.standard_errors
    assert lre(errors["b1"], d.certified_sd[0]) >= SE_DIGITS, errors
    assert np.isnan(errors["b2"]) and np.isnan(errors["b3"])
    assert np.isfinite(res.covariance[0, 0]) and np.all(np.isnan(res.covariance[1:, :]))
    assert "do not determine" in caplog.text
    assert "δb2/b2" in caplog.text and "δb3/b3" in caplog.text, caplog.text
    assert "covariance of b2, b3 is NaN" in caplog.text
