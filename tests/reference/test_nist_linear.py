"""solvers.lsq against the eleven NIST StRD linear regression datasets and their certified
values (data/nist-linear/, NIST's files unchanged). Digits are LRE, the log relative error
(nist_linear.lre). The default solver must be at least as good as numpy.linalg.lstsq (less
0.3 digits) everywhere and reach 7 digits on Filip (condition number 1.8e15 on the raw
columns); no method may report success on an answer with few correct digits."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from nist_linear import NAMES, load, lre

from solvers.lsq import BlockStore, solve


@pytest.fixture(scope="module", params=NAMES)
def dataset(request):
    return load(request.param)


def baseline_digits(d) -> float:
    return lre(np.linalg.lstsq(d.A, d.y, rcond=None)[0], d.coefficients)


def assert_default_solver_is_right(d, sol) -> None:
    digits = lre(sol.coefficients, d.coefficients)
    if d.name == "Filip":
        assert digits >= 7, digits
    assert digits >= baseline_digits(d) - 0.3, (digits, baseline_digits(d))
    assert not sol.rank_deficient and sol.converged and not sol.warnings, sol.warnings
    # the statistics NIST certifies with them
    assert lre(sol.standard_errors, d.standard_errors) >= 6
    assert lre(sol.residual_sd, d.residual_sd) >= 6


def test_default_solver_on_arrays(dataset, caplog):
    sol = solve(dataset.A, dataset.y)
    assert sol.method == "qr"
    assert_default_solver_is_right(dataset, sol)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_default_solver_on_stored_blocks(dataset, tmp_path):
    """The same through a BlockStore: three row blocks streamed from disk."""
    rows = len(dataset.y)
    cuts = [0, rows // 3, 2 * rows // 3, rows]

    def block(item):
        part = slice(cuts[item["i"]], cuts[item["i"] + 1])
        return dataset.A[part], dataset.y[part], 1.0

    store = BlockStore(str(tmp_path / "blocks"))
    results = [store.task(block)({"task_id": f"part{i}", "i": i}) for i in range(3)
               if cuts[i + 1] > cuts[i]]
    assert_default_solver_is_right(dataset, solve(store.system(results)))


@pytest.mark.parametrize("method", ["lsqr", "normal"])
def test_other_methods_are_right_or_say_so(dataset, method, caplog):
    """Either 5 digits, or a refusal naming method='qr', or a flag and a logged warning."""
    try:
        sol = solve(dataset.A, dataset.y, method=method)
    except np.linalg.LinAlgError as exc:
        assert method == "normal" and "use method='qr'" in str(exc)
        return
    digits = lre(sol.coefficients, dataset.coefficients)
    if digits < 5:
        trusted = sol.digits is not None and sol.digits < 4
        assert sol.warnings and (not sol.converged or trusted), (digits, sol)
        logged = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert logged == list(sol.warnings)


def test_filip_is_determined_once_its_columns_are_scaled():
    """The issue's case: unscaled, Filip's columns look rank 10 of 11 at any usual tolerance;
    scaled they are full rank, and the answer does not depend on the diagnostics."""
    d = load("Filip")
    sv = np.linalg.svd(d.A, compute_uv=False)
    assert sv[-1] / sv[0] < max(d.A.shape) * np.finfo(float).eps  # numpy.linalg.lstsq's cut-off
    full, lean = solve(d.A, d.y), solve(d.A, d.y, diagnostics=False)
    assert full.cond is not None and full.scaled_cond is not None and full.digits is not None
    assert full.rank == lean.rank == 11 and full.cond > 1e15
    assert np.array_equal(full.coefficients, lean.coefficients)
    assert 1e9 < full.scaled_cond < 1e11 and full.digits > 4
