"""Every solver agrees with numpy.linalg.lstsq (and ridge with its closed form); TSQR stays
accurate where the normal equations lose their digits, and every rank-deficient, unconverged or
untrustworthy answer is flagged and logged; arrays in memory solve through the blocks' code."""

from __future__ import annotations

from fractions import Fraction

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
    assert sol.validation is not None
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


def normal_is_refused_or_untrusted(system, caplog):
    """The normal equations on a system too ill-conditioned for them either refuse with a
    LinAlgError that names method='qr', or return a solution whose digit estimate is below 4
    and whose logged warning names method='qr': never an unmarked wrong answer."""
    caplog.clear()
    try:
        sol = solve(system, "normal")
    except np.linalg.LinAlgError as exc:
        assert "use method='qr'" in str(exc)
        return None
    assert sol.digits is not None
    assert sol.digits < 4 and sol.warnings
    assert any("method='qr'" in w for w in sol.warnings)
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == \
        list(sol.warnings)
    return sol


def test_qr_stays_accurate_where_normal_equations_lose_digits(tmp_path, caplog):
    system, A, truth = vandermonde_system(tmp_path, 12)  # cond(A) ~ 1.3e8
    assert 1e7 < np.linalg.cond(A) < 1e9
    qr = solve(system, "qr")
    assert qr.digits is not None
    assert rel(qr.coefficients, truth) < 1e-8 and not qr.warnings and qr.digits > 6
    assert rel(qr.coefficients, truth) < 10 ** -qr.digits  # the estimate is honest
    normal = normal_is_refused_or_untrusted(system, caplog)
    if normal is not None:  # the untrusted answer is indeed worse than qr's by far
        assert rel(normal.coefficients, truth) > 1e3 * rel(qr.coefficients, truth)

    system, A, truth = vandermonde_system(tmp_path, 14)  # cond(A) ~ 4e9: normal matrix ~ 1e19
    assert 1e9 < np.linalg.cond(A) < 1e11
    sol = solve(system, "qr")
    assert sol.cond is not None
    assert rel(sol.coefficients, truth) < 1e-6 and sol.cond > 1e9 and not sol.warnings
    normal_is_refused_or_untrusted(system, caplog)


def exact_lstsq(A, y):
    """The least-squares solution of the float64 data A, y in rational arithmetic (the normal
    equations solved exactly), rounded to float64."""
    n = A.shape[1]
    Af = [[Fraction(v) for v in row] for row in A.tolist()]
    yf = [Fraction(v) for v in y.tolist()]
    zero = Fraction(0)
    G = [[sum((r[i] * r[j] for r in Af), zero) for j in range(n)]
         + [sum((r[i] * v for r, v in zip(Af, yf)), zero)] for i in range(n)]
    for k in range(n):
        for i in range(k + 1, n):
            f = G[i][k] / G[k][k]
            G[i] = [a - f * b for a, b in zip(G[i], G[k])]
    x = [Fraction(0)] * n
    for i in reversed(range(n)):
        x[i] = (G[i][n] - sum(G[i][j] * x[j] for j in range(i + 1, n))) / G[i][i]
    return np.array([float(v) for v in x])


def test_refinement_reaches_the_exact_solution_and_diagnostics_never_change_it(tmp_path):
    system, A, truth = vandermonde_system(tmp_path, 12)  # cond ~ 1e8 also with scaled columns
    exact = exact_lstsq(A, A @ truth)
    plain = solve(system, "qr", refine=0)
    refined = solve(system, "qr")  # one step by default
    assert plain.refinement_steps == 0 and refined.refinement_steps == 1
    assert plain.digits is not None
    assert rel(plain.coefficients, exact) < 10 ** -plain.digits  # about 8 digits
    assert rel(refined.coefficients, exact) < 1e-14  # all of them
    for method in METHODS:
        try:
            full = solve(system, method)
        except np.linalg.LinAlgError:
            with pytest.raises(np.linalg.LinAlgError):
                solve(system, method, diagnostics=False)
            continue
        lean = solve(system, method, diagnostics=False)
        assert np.array_equal(full.coefficients, lean.coefficients), method
        assert (full.rank_deficient, full.converged, full.warnings) == \
            (lean.rank_deficient, lean.converged, lean.warnings)


def test_rank_deficient_qr_is_flagged_and_warned(tmp_path, caplog):
    rng = np.random.default_rng(5)
    A = rng.standard_normal((120, 5)) * [1.0, 1e3, 1.0, 1e-2, 1.0]
    A = np.hstack([A, A[:, :1] + A[:, 1:2]])  # column 5 = column 0 + column 1
    y = rng.standard_normal(120)

    def rows(item):
        return A[30 * item["i"]:30 * item["i"] + 30], y[30 * item["i"]:30 * item["i"] + 30], 1.0

    store = BlockStore(tmp_path)
    system = store.system([store.task(rows)({"task_id": f"r{i}", "i": i}) for i in range(4)])
    for diagnostics in (True, False):
        caplog.clear()
        sol = solve(system, "qr", diagnostics=diagnostics)
        assert sol.rank == 5 and sol.rank_deficient and sol.refinement_steps == 0
        [warning] = sol.warnings
        assert "rank-deficient: rank 5 of 6" in warning and "rank_tol=1e-12" in warning
        assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [warning]
        assert sol.standard_errors is None and sol.residual_sd is None
        # a least-squares solution: the residual of lstsq's ...
        best = np.linalg.lstsq(A, y, rcond=None)[0]
        assert sol.residuals.weighted_norm == pytest.approx(np.linalg.norm(A @ best - y),
                                                            rel=1e-10)
        # ... and the one of least norm in the scaled columns (independent of column units)
        d = np.linalg.norm(A, axis=0)
        assert rel(sol.coefficients, np.linalg.lstsq(A / d, y, rcond=None)[0] / d) < 1e-10
    assert not solve(system, "qr", ridge=1e-6).rank_deficient  # the ridge determines it


def test_lsqr_flags_an_unconverged_solution(system, caplog):
    sol = solve(system, "lsqr", max_iterations=2)
    assert not sol.converged and sol.iterations == 2
    assert "iteration limit" in sol.stop_reason
    assert any("LSQR did not converge on the column-scaled problem" in w for w in sol.warnings)
    assert any("LSQR did not converge" in r.getMessage() for r in caplog.records
               if r.levelname == "WARNING")
    ok = solve(system, "lsqr", tol=1e-14)
    assert ok.scaled_cond is not None
    assert ok.converged and not ok.warnings and ok.scaled_cond < 100


def test_standard_errors_equal_the_weighted_covariance(system):
    A, y, w, _ = stacked(N)
    s = np.sqrt(w)
    x = np.linalg.lstsq(A * s[:, None], y * s, rcond=None)[0]
    r = (A @ x - y) * s
    sd = np.sqrt(r @ r / (len(y) - COLS))
    se = sd * np.sqrt(np.diag(np.linalg.inv((A * w[:, None]).T @ A)))
    for method in ("qr", "normal"):
        sol = solve(system, method)
        assert sol.residual_sd == pytest.approx(sd, rel=1e-10)
        assert sol.standard_errors is not None
        assert np.allclose(sol.standard_errors, se, rtol=1e-9, atol=0), method
        assert solve(system, method, ridge=0.1).standard_errors is None
    assert solve(system, "lsqr").standard_errors is None


def test_arrays_in_memory_solve_as_their_blocks_do(system):
    A, y, w, _groups = stacked(N)
    for method in METHODS:
        blocks = solve(system, method=method, ridge=0.2, tol=1e-15)
        arrays = solve(A, y, method=method, weights=w, ridge=0.2, tol=1e-15,
                       validation=(A[:40], y[:40]))
        assert rel(arrays.coefficients, blocks.coefficients) < 1e-12, method
        assert arrays.residuals.weighted_norm == pytest.approx(blocks.residuals.weighted_norm,
                                                               rel=1e-12)
        r = A[:40] @ arrays.coefficients - y[:40]
        assert arrays.validation is not None
        assert arrays.validation.rmse_all == pytest.approx(np.sqrt(np.mean(r * r)), rel=1e-12)
    unweighted = solve(A.tolist(), y.tolist())  # any array-like; weights default to 1
    assert rel(unweighted.coefficients, np.linalg.lstsq(A, y, rcond=None)[0]) < 1e-12
    with pytest.raises(TypeError, match=r"solve\(A, b, method=\.\.\.\) needs the targets b"):
        solve(A, "qr")
    with pytest.raises(ValueError, match=r"weights must be a number or have shape \(240,\)"):
        solve(A, y, weights=np.ones(3))
    with pytest.raises(ValueError, match=r"b has non-finite values \(first at index \[2\]\)"):
        solve(A, np.where(np.arange(len(y)) == 2, np.nan, y))
    with pytest.raises(ValueError, match="group_weights= are for block systems"):
        solve(A, y, group_weights={"force": 2.0})  # type: ignore[call-overload]  # misuse
    with pytest.raises(TypeError, match="takes the method as its second argument"):
        solve(system, y)
    with pytest.raises(ValueError, match="weights= is for arrays"):
        solve(system, weights=w)  # type: ignore[call-overload]  # the misuse under test


class FolderPath:
    """A path type of a user's own: only os.PathLike."""

    def __init__(self, path):
        self.path = str(path)

    def __fspath__(self):
        return self.path


@pytest.mark.parametrize("kind", [str, FolderPath])
def test_store_paths_may_be_str_or_pathlike(tmp_path, kind):
    folder = tmp_path / "blocks"
    store = BlockStore(kind(folder), group_names=("energy", "force"))
    assert store.path == folder
    results = [store.task(rows)({"task_id": f"b{i}", "i": i}) for i in range(3)]
    assert sorted(p.name for p in folder.iterdir()) == sorted(r["file"] for r in results)
    assert store.verify(results) == []
    A, y, w, _ = stacked(3)
    got = solve(store.system(results)).coefficients
    s = np.sqrt(w)
    assert rel(got, np.linalg.lstsq(A * s[:, None], y * s, rcond=None)[0]) < 1e-12


def test_bad_options_say_what_to_do(system):
    with pytest.raises(ValueError, match="method must be one of"):
        solve(system, "svd")
    with pytest.raises(ValueError, match="ridge must be a number >= 0"):
        solve(system, ridge=-1.0)
    with pytest.raises(ValueError, match=r"ridge_matrix must have shape \(k, 6\)"):
        solve(system, ridge=1.0, ridge_matrix=np.eye(3))
    with pytest.raises(ValueError, match="group_weights key 'stress' is not a group"):
        solve(system, group_weights={"stress": 2.0})
    with pytest.raises(ValueError, match=r"rank_tol must be a number in \[0, 1\)"):
        solve(system, rank_tol=2.0)
    with pytest.raises(ValueError, match="refine=2 applies to method='qr' and 'normal' only"):
        solve(system, "lsqr", refine=2)
    with pytest.raises(TypeError, match=r"the method is given twice \('qr' and method='lsqr'\)"):
        solve(system, "qr", method="lsqr")
