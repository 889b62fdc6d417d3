"""Every solver agrees with numpy.linalg.lstsq (and ridge with its closed form); TSQR stays
accurate where the normal equations lose their digits."""

from __future__ import annotations

import numpy as np
import pytest

from lsq_rows import COLS, exact, stacked
from solvers.lsq import METHODS, BlockStore, solve

N = 12


def rows(item):
    return exact(item["i"])


@pytest.fixture(scope="module")
def system(tmp_path_factory):
    store = BlockStore(tmp_path_factory.mktemp("blocks"), group_names=("energy", "force"))
    task = store.task(rows)
    return store.system([task({"task_id": f"b{i}", "i": i}) for i in range(N)])


def rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


@pytest.mark.parametrize("method", METHODS)
def test_weighted_fit_equals_lstsq(system, method):
    A, y, w, groups = stacked(N)
    s = np.sqrt(w)
    want = np.linalg.lstsq(A * s[:, None], y * s, rcond=None)[0]
    sol = solve(system, method, tol=1e-15)
    assert rel(sol.coefficients, want) < 1e-10
    r = A @ want - y
    assert sol.residuals.rows == {"energy": 4 * N, "force": 16 * N}
    assert sol.residuals.rmse["energy"] == pytest.approx(np.sqrt(np.mean(r[groups == 0] ** 2)),
                                                         rel=1e-9)
    assert sol.residuals.rmse["force"] == pytest.approx(np.sqrt(np.mean(r[groups == 1] ** 2)),
                                                        rel=1e-9)
    assert sol.residuals.weighted_norm == pytest.approx(np.sqrt(np.sum(w * r * r)), rel=1e-9)
    if method != "lsqr":
        assert sol.rank == COLS
        assert sol.cond == pytest.approx(np.linalg.cond(A * s[:, None]), rel=1e-6)


@pytest.mark.parametrize("method", METHODS)
def test_ridge_scalar_and_matrix_and_group_weights_equal_closed_form(system, method):
    A, y, w, groups = stacked(N)
    w = w * np.where(groups == 1, 2.5, 1.0)  # group_weights below
    L = np.diag(np.arange(1.0, COLS + 1)) + np.eye(COLS, k=1)
    for lam, Lm in ((0.3, None), (0.05, L)):
        P = lam * (np.eye(COLS) if Lm is None else Lm.T @ Lm)
        want = np.linalg.solve((A * w[:, None]).T @ A + P, (A * w[:, None]).T @ y)
        sol = solve(system, method, ridge=lam, ridge_matrix=Lm, group_weights={"force": 2.5},
                    tol=1e-15)
        assert rel(sol.coefficients, want) < 1e-10, (lam, Lm is None)


def test_held_out_blocks_give_the_validation_error(system):
    train, held = system.split(["b3", "b7"])
    assert (len(train), len(held)) == (N - 2, 2)
    sol = solve(train, "qr", validation=held)
    A, y, _, _ = stacked(N)
    held_rows = np.r_[3 * 20:4 * 20, 7 * 20:8 * 20]
    r = A[held_rows] @ sol.coefficients - y[held_rows]
    assert sol.validation.rmse_all == pytest.approx(np.sqrt(np.mean(r * r)), rel=1e-12)
    assert sol.validation.rows == {"energy": 8, "force": 32}
    with pytest.raises(ValueError, match="no blocks for task ids \\['nope'\\]"):
        system.split(["nope"])


def vandermonde_system(tmp_path, degree):
    t = np.linspace(0.0, 1.0, 400)
    A = np.vander(t, degree, increasing=True)
    truth = np.ones(degree)
    y = A @ truth

    def rows(item):
        part = slice(40 * item["i"], 40 * item["i"] + 40)
        return A[part], y[part], 1.0

    store = BlockStore(tmp_path / f"v{degree}")
    task = store.task(rows)
    return store.system([task({"task_id": f"v{i}", "i": i} ) for i in range(10)]), A, truth


def test_qr_stays_accurate_where_normal_equations_lose_digits(tmp_path):
    system, A, truth = vandermonde_system(tmp_path, 12)  # cond(A) ~ 1.3e8
    assert 1e7 < np.linalg.cond(A) < 1e9
    qr = rel(solve(system, "qr").coefficients, truth)
    normal = rel(solve(system, "normal").coefficients, truth)
    assert qr < 1e-7
    assert normal > 1e-3 and normal > 1e4 * qr, (qr, normal)

    system, A, truth = vandermonde_system(tmp_path, 14)  # cond(A) ~ 4e9: normal matrix ~ 1e19
    assert 1e9 < np.linalg.cond(A) < 1e11
    sol = solve(system, "qr")
    assert rel(sol.coefficients, truth) < 1e-5 and sol.cond > 1e9
    with pytest.raises(np.linalg.LinAlgError, match="use method='qr'"):
        solve(system, "normal")


def test_rank_deficient_qr_gives_the_minimum_norm_solution(tmp_path):
    rng = np.random.default_rng(5)
    A = rng.standard_normal((120, 5))
    A = np.hstack([A, A[:, :1] + A[:, 1:2]])  # column 5 = column 0 + column 1
    y = rng.standard_normal(120)

    def rows(item):
        return A[30 * item["i"]:30 * item["i"] + 30], y[30 * item["i"]:30 * item["i"] + 30], 1.0

    store = BlockStore(tmp_path)
    system = store.system([store.task(rows)({"task_id": f"r{i}", "i": i}) for i in range(4)])
    sol = solve(system, "qr")
    assert sol.rank == 5
    assert rel(sol.coefficients, np.linalg.lstsq(A, y, rcond=None)[0]) < 1e-10


def test_bad_options_say_what_to_do(system):
    with pytest.raises(ValueError, match="method must be one of"):
        solve(system, "svd")
    with pytest.raises(ValueError, match="ridge must be a number >= 0"):
        solve(system, ridge=-1.0)
    with pytest.raises(ValueError, match=r"ridge_matrix must have shape \(k, 6\)"):
        solve(system, ridge=1.0, ridge_matrix=np.eye(3))
    with pytest.raises(ValueError, match="group_weights key 'stress' is not a group"):
        solve(system, group_weights={"stress": 2.0})
