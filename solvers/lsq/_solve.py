"""`solve`: weighted, regularized linear least squares on a `BlockSystem` (or arrays in memory),
by normal equations, TSQR or LSQR, never holding the whole matrix in one process; every
rank-deficient, unconverged or poorly conditioned answer says so."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any, overload

import numpy as np
from numpy.typing import ArrayLike

from ._factor import EPS, RANK_TOL, Factor
from ._lsqr import solve_lsqr
from ._memory import ArraySystem
from ._normal import solve_normal
from ._refine import refine as refine_solution
from ._solution import Solution, residuals
from ._system import BlockSystem
from ._tsqr import solve_qr

logger = logging.getLogger(__name__)

METHODS = ("qr", "normal", "lsqr")
#: Row-group codes run from 0 to MAX_GROUPS - 1.
MAX_GROUPS = 256
#: A solution the condition estimate trusts to fewer digits than this comes with a warning.
MIN_DIGITS = 4.0
#: Steps of iterative refinement when ``refine`` is not given.
REFINE = {"qr": 1, "normal": 0, "lsqr": 0}
_FIX = {
    "qr": "the columns are nearly dependent: remove or combine some, or add ridge=...",
    "normal": "use method='qr', whose error grows with the condition number, not its square",
    "lsqr": "lower tol, or use method='qr' where a cols x cols matrix fits in memory",
}


@overload
def solve(system: BlockSystem, method: str = "qr", /, *, ridge: float = 0.0,
          ridge_matrix: ArrayLike | None = None,
          group_weights: Mapping[str | int, float] | None = None, client: Any = None,
          validation: BlockSystem | None = None, tol: float = 1e-12,
          max_iterations: int | None = None, diagnostics: bool = True,
          refine: int | None = None, rank_tol: float = RANK_TOL) -> Solution: ...


@overload
def solve(system: BlockSystem, /, *, method: str = "qr", ridge: float = 0.0,
          ridge_matrix: ArrayLike | None = None,
          group_weights: Mapping[str | int, float] | None = None, client: Any = None,
          validation: BlockSystem | None = None, tol: float = 1e-12,
          max_iterations: int | None = None, diagnostics: bool = True,
          refine: int | None = None, rank_tol: float = RANK_TOL) -> Solution: ...


@overload
def solve(A: ArrayLike, b: ArrayLike, /, *, method: str = "qr", weights: ArrayLike | None = None,
          ridge: float = 0.0, ridge_matrix: ArrayLike | None = None,
          validation: tuple[ArrayLike, ...] | None = None, tol: float = 1e-12,
          max_iterations: int | None = None, diagnostics: bool = True,
          refine: int | None = None, rank_tol: float = RANK_TOL) -> Solution: ...


def solve(system: Any, b: Any = None, *, method: str | None = None, weights: Any = None,
          ridge: float = 0.0, ridge_matrix: Any = None,
          group_weights: Mapping[str | int, float] | None = None, client: Any = None,
          validation: Any = None, tol: float = 1e-12, max_iterations: int | None = None,
          diagnostics: bool = True, refine: int | None = None,
          rank_tol: float = RANK_TOL) -> Solution:
    """Minimize ``sum_i w_i (a_i . x - y_i)^2 + ridge * ||L x||^2``.

    ``solve(system, method)`` fits the row blocks of a `BlockSystem` (`BlockStore.system`);
    ``solve(A, b, method=..., weights=...)`` fits arrays in memory through the same code (the
    arrays are cut into row blocks, views without copies).

    Args:
        system: the row blocks, or the design matrix ``A`` (rows, cols).
        b: with ``A``: the targets (rows,). With a system: the method (positional).
        method: ``"qr"`` (TSQR with equilibrated columns and a pivoted, rank-revealing QR;
            accurate also for ill-conditioned systems; the default), ``"normal"`` (normal
            equations and Cholesky: fastest, but squares the condition number), ``"lsqr"``
            (iterative on the column-scaled operator; for very many columns).
        weights: with ``A``: row weights, a number or (rows,); default 1.
        ridge: the Tikhonov weight (>= 0).
        ridge_matrix: ``L`` (k x cols) in the penalty; default the identity.
        group_weights: factors on the rows' weights by row group (name or code), e.g.
            ``{"energy": 30.0, "force": 1.0}``: reweight without assembling again.
        client: a dask ``distributed.Client``: blocks are read and reduced on its workers (which
            must see the store's folder at the same path); default: streamed through this
            process one block at a time.
        validation: held-out blocks (`BlockSystem.split`), or with ``A`` a tuple ``(A, b)`` or
            ``(A, b, weights)``, whose residuals are reported.
        tol: LSQR's ``atol`` and ``btol`` (on the column-scaled problem).
        max_iterations: LSQR's iteration limit (default ``max(100, 4 * cols)``).
        diagnostics: also compute the unscaled ``rank`` (``"normal"``) and ``cond`` (one cols x
            cols SVD or eigenvalue problem). Never changes the answer.
        refine: steps of iterative refinement (``"qr"``, ``"normal"``): each is one pass over
            the blocks computing ``A^T W (y - A x)`` in double-double arithmetic. Default 1 for
            ``"qr"``, 0 for ``"normal"``; skipped where the rank is deficient.
        rank_tol: ``"qr"``: a pivot of the column-scaled R below ``rank_tol`` times the largest
            counts as zero (the rank decision); ``"lsqr"``: stop, not converged, once the
            condition estimate passes ``1 / rank_tol``. Default 1e-12.

    Returns:
        a `Solution`. A rank-deficient, unconverged or poorly conditioned answer is flagged
        (``rank_deficient``, ``converged``, ``digits``) and each problem is logged as a warning
        and listed in ``Solution.warnings``.

    Raises:
        BlockError: a block is missing or changed since it was written (says how to recompute it).
        numpy.linalg.LinAlgError: ``"normal"`` where the Cholesky factorization fails.
        ValueError, TypeError: bad arguments (the message says which and what to pass).
    """
    if isinstance(system, BlockSystem):
        if b is not None and not isinstance(b, str):
            raise TypeError(f"solve(system, ...) takes the method as its second argument, got "
                            f"{type(b).__name__}: a BlockSystem holds its own targets "
                            "(solve(A, b) is for arrays)")
        if b is not None and method is not None:
            raise TypeError(f"the method is given twice ({b!r} and method={method!r})")
        if weights is not None:
            raise ValueError("weights= is for arrays: a system's weights are in its blocks; "
                             "scale row groups with group_weights=...")
        method = b if b is not None else method
    else:
        if b is None or isinstance(b, str):
            raise TypeError("solve(A, b, method=...) needs the targets b (one per row of A); "
                            "to fit stored blocks pass a BlockSystem (BlockStore.system)")
        if client is not None or group_weights:
            raise ValueError("client= and group_weights= are for block systems; arrays are "
                             "solved in this process: store them as blocks (BlockStore) to "
                             "solve on dask workers")
        system = ArraySystem.from_arrays(system, b, weights)
        if validation is not None:
            validation = ArraySystem.from_arrays(*validation, what="validation A")
    return _solve(system, "qr" if method is None else method, ridge=ridge,
                  ridge_matrix=ridge_matrix, group_weights=group_weights, client=client,
                  validation=validation, tol=tol, max_iterations=max_iterations,
                  diagnostics=diagnostics, refine=refine, rank_tol=rank_tol)


def _solve(system: BlockSystem, method: str, *, ridge: float, ridge_matrix: Any,
           group_weights: Mapping[str | int, float] | None, client: Any,
           validation: BlockSystem | None, tol: float, max_iterations: int | None,
           diagnostics: bool, refine: int | None, rank_tol: float) -> Solution:
    """`solve` on a system, its arguments resolved."""
    _check_options(method, ridge, refine, rank_tol)
    rows, cols = system.shape
    if validation is not None and validation.shape[1] != cols:
        raise ValueError(f"validation blocks have {validation.shape[1]} columns, the system "
                         f"has {cols}; hold out blocks of the same assembly")
    L = _ridge_matrix(ridge_matrix, cols)
    gw = _group_weights(group_weights, system)
    begun = time.perf_counter()
    if method == "lsqr":
        pen = None if not ridge else (np.full(cols, np.sqrt(ridge)) if L is None
                                      else np.sqrt(ridge) * L)
        out = solve_lsqr(system, pen, gw, client=client, tol=tol, max_iterations=max_iterations,
                         conlim=1.0 / rank_tol if rank_tol > 0 else 0.0)
        fit: dict[str, Any] = {"coefficients": out.x, "cond": out.cond, "scaled_cond": out.cond,
               "digits": _digits(max(tol, EPS) * out.cond), "iterations": out.iterations,
               "stop_reason": out.stop_reason, "converged": out.converged}
        factor = None
    else:
        fit, factor = _direct(system, method, ridge, L, gw, client=client,
                              diagnostics=diagnostics, rank_tol=rank_tol,
                              refine=REFINE[method] if refine is None else refine)
    logger.info("%s solve of %d x %d in %d blocks: %.3f s", method, rows, cols, len(system),
                time.perf_counter() - begun)
    fitted = residuals(system, fit["coefficients"], gw, client=client)
    if factor is not None and factor.full_rank and not ridge and fitted.weighted_rows > cols:
        sd = fitted.weighted_norm / np.sqrt(fitted.weighted_rows - cols)
        fit["residual_sd"] = float(sd)
        fit["standard_errors"] = sd * np.sqrt(factor.inverse_gram_diagonal())
    notes = _warnings(method, fit, factor, (rows, cols), rank_tol)
    for note in notes:
        logger.warning("%s", note)
    return Solution(
        method=method, residuals=fitted, warnings=notes,
        validation=None if validation is None else residuals(validation, fit["coefficients"],
                                                             gw, client=client), **fit)


def _direct(system: BlockSystem, method: str, ridge: float, L: np.ndarray | None,
            gw: np.ndarray | None, *, client: Any, diagnostics: bool, rank_tol: float,
            refine: int) -> tuple[dict[str, Any], Factor]:
    """The fields of the `Solution` of ``"qr"`` or ``"normal"``, and the factor."""
    cols = system.shape[1]
    penalty = None if not ridge else ridge * (np.eye(cols) if L is None else L.T @ L)
    if method == "normal":
        x, factor, rank, cond = solve_normal(system, penalty, gw, client=client,
                                             diagnostics=diagnostics)
        scaled = factor.scaled_cond() ** 2
    else:
        rows_ = None if not ridge else np.sqrt(ridge) * (np.eye(cols) if L is None else L)
        x, factor, cond = solve_qr(system, rows_, gw, client=client, rank_tol=rank_tol,
                                   diagnostics=diagnostics)
        rank, scaled = factor.rank, factor.scaled_cond()
    steps = 0
    if refine and factor.full_rank:
        x, steps = refine_solution(system, x, factor, penalty, gw, refine, client=client)
    return {"coefficients": x, "rank": rank, "cond": cond, "scaled_cond": scaled,
            "digits": _digits(EPS * scaled), "refinement_steps": steps,
            "rank_deficient": not factor.full_rank}, factor


def _warnings(method: str, fit: dict[str, Any], factor: Factor | None, shape: tuple[int, int],
              rank_tol: float) -> tuple[str, ...]:
    """What is wrong with a solution, one sentence each (logged, and kept on the Solution)."""
    rows, cols = shape
    notes = []
    if fit.get("rank_deficient"):
        assert factor is not None
        dropped = sorted(int(c) for c in factor.perm[factor.rank:])
        notes.append(
            f"the weighted {rows} x {cols} design matrix is rank-deficient: rank {factor.rank} "
            f"of {cols} with its columns scaled to unit norm (pivots below rank_tol="
            f"{rank_tol:g} times the largest): columns {dropped} are, within that tolerance, "
            "combinations of the others; the coefficients are the solution of least norm in "
            "the scaled columns, not refined. Remove or combine dependent columns, add "
            "ridge=..., or give a smaller rank_tol if the columns are meant to be independent")
    if not fit.get("converged", True):
        notes.append(
            f"LSQR did not converge on the column-scaled problem: {fit['stop_reason']} after "
            f"{fit['iterations']} iterations (condition estimate {fit['cond']:.1e}); raise "
            "max_iterations, or use method='qr' where a cols x cols matrix fits in memory")
    if fit["digits"] < MIN_DIGITS:
        notes.append(
            f"{method}: the condition estimate {fit['scaled_cond']:.1e} of the column-scaled "
            f"problem leaves about {fit['digits']:.1f} digits of the coefficients to trust; "
            f"{_FIX[method]}")
    return tuple(notes)


def _digits(relative_error: float) -> float:
    """``-log10`` of an error bound, between 0 and 16."""
    if not relative_error > 0:
        return 16.0 if relative_error == 0 else 0.0
    return float(np.clip(-np.log10(relative_error), 0.0, 16.0))


def _check_options(method: str, ridge: Any, refine: Any, rank_tol: Any) -> None:
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if not (isinstance(ridge, (int, float)) and ridge >= 0):
        raise ValueError(f"ridge must be a number >= 0, got {ridge!r}")
    if refine is not None and not (isinstance(refine, int) and refine >= 0):
        raise ValueError(f"refine must be a number of steps >= 0 (or None), got {refine!r}")
    if refine and method == "lsqr":
        raise ValueError(f"refine={refine!r} applies to method='qr' and 'normal' only; LSQR "
                         "iterates to tol itself")
    if not (isinstance(rank_tol, (int, float)) and 0 <= rank_tol < 1):
        raise ValueError(f"rank_tol must be a number in [0, 1), got {rank_tol!r} (e.g. 1e-12)")


def _ridge_matrix(L: Any, cols: int) -> np.ndarray | None:
    if L is None:
        return None
    L = np.asarray(L, dtype=np.float64)
    if L.ndim != 2 or L.shape[1] != cols:
        raise ValueError(f"ridge_matrix must have shape (k, {cols}), got {L.shape}")
    return L


def _group_weights(weights: Mapping[str | int, float] | None,
                   system: BlockSystem) -> np.ndarray | None:
    if not weights:
        return None
    names = {name: code for code, name in enumerate(system.group_names or ())}
    out = np.ones(MAX_GROUPS)
    for key, factor in weights.items():
        code = names.get(key, key) if isinstance(key, str) else key
        if not isinstance(code, int) or not 0 <= code < MAX_GROUPS:
            known = ", ".join(repr(n) for n in names) or "none; the store has no group_names"
            raise ValueError(f"group_weights key {key!r} is not a group (names: {known}; or "
                             f"an integer code 0..{MAX_GROUPS - 1})")
        if not factor >= 0:
            raise ValueError(f"group_weights[{key!r}] must be >= 0, got {factor!r}")
        out[code] = factor
    return out
