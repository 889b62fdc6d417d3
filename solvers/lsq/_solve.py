"""`solve`: weighted, regularized linear least squares on a `BlockSystem`, by normal equations,
TSQR or LSQR, never holding the whole matrix in one process."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from ._lsqr import solve_lsqr
from ._normal import solve_normal
from ._solution import Solution, residuals
from ._system import BlockSystem
from ._tsqr import solve_qr

logger = logging.getLogger(__name__)

METHODS = ("qr", "normal", "lsqr")
#: Row-group codes run from 0 to MAX_GROUPS - 1.
MAX_GROUPS = 256


def solve(system: BlockSystem, method: str = "qr", *, ridge: float = 0.0,
          ridge_matrix: np.ndarray | None = None,
          group_weights: Mapping[str | int, float] | None = None, client: Any = None,
          validation: BlockSystem | None = None, tol: float = 1e-12,
          max_iterations: int | None = None, diagnostics: bool = True) -> Solution:
    """Minimize ``sum_i w_i (a_i . x - y_i)^2 + ridge * ||L x||^2`` over the system's rows.

    Args:
        system: the row blocks (`BlockStore.system`).
        method: ``"qr"`` (TSQR: accurate also for ill-conditioned systems; the default),
            ``"normal"`` (normal equations and Cholesky: fastest, but squares the condition
            number), ``"lsqr"`` (iterative; for very many columns: no cols x cols matrix).
        ridge: the Tikhonov weight (>= 0).
        ridge_matrix: ``L`` (k x cols) in the penalty; default the identity.
        group_weights: factors on the rows' weights by row group (name or code), e.g.
            ``{"energy": 30.0, "force": 1.0}``: reweight without assembling again.
        client: a dask ``distributed.Client``: blocks are read and reduced on its workers (which
            must see the store's folder at the same path); default: streamed through this
            process one block at a time.
        validation: held-out blocks (`BlockSystem.split`) whose residuals are reported.
        tol: LSQR's ``atol`` and ``btol``.
        max_iterations: LSQR's iteration limit (default ``max(100, 4 * cols)``).
        diagnostics: compute rank and condition estimates (one cols x cols SVD or eigenvalue
            problem for the direct methods).

    Returns:
        a `Solution`.

    Raises:
        BlockError: a block is missing or changed since it was written (says how to recompute it).
        numpy.linalg.LinAlgError: ``"normal"`` on a system too ill-conditioned for it.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if not (isinstance(ridge, (int, float)) and ridge >= 0):
        raise ValueError(f"ridge must be a number >= 0, got {ridge!r}")
    rows, cols = system.shape
    if validation is not None and validation.shape[1] != cols:
        raise ValueError(f"validation blocks have {validation.shape[1]} columns, the system "
                         f"has {cols}; hold out blocks of the same assembly")
    L = _ridge_matrix(ridge_matrix, cols)
    gw = _group_weights(group_weights, system)
    begun = time.perf_counter()
    rank = cond = iterations = None
    stop = ""
    if method == "normal":
        penalty = None
        if ridge:
            penalty = ridge * (np.eye(cols) if L is None else L.T @ L)
        x, rank, cond = solve_normal(system, penalty, gw, client=client, diagnostics=diagnostics)
    elif method == "qr":
        rows_ = None
        if ridge:
            rows_ = np.sqrt(ridge) * (np.eye(cols) if L is None else L)
        x, rank, cond = solve_qr(system, rows_, gw, client=client, diagnostics=diagnostics)
    else:
        rows_ = None if L is None or not ridge else np.sqrt(ridge) * L
        damp = float(np.sqrt(ridge)) if L is None else 0.0
        x, iterations, cond, stop = solve_lsqr(system, rows_, damp, gw, client=client, tol=tol,
                                               max_iterations=max_iterations)
    logger.info("%s solve of %d x %d in %d blocks: %.3f s", method, rows, cols, len(system),
                time.perf_counter() - begun)
    return Solution(
        coefficients=x, method=method, residuals=residuals(system, x, gw, client=client),
        validation=None if validation is None else residuals(validation, x, gw, client=client),
        rank=rank, cond=cond, iterations=iterations, stop_reason=stop)


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
        code = names.get(key, key)
        if not isinstance(code, int) or not 0 <= code < MAX_GROUPS:
            known = ", ".join(repr(n) for n in names) or "none; the store has no group_names"
            raise ValueError(f"group_weights key {key!r} is not a group (names: {known}; or "
                             f"an integer code 0..{MAX_GROUPS - 1})")
        if not factor >= 0:
            raise ValueError(f"group_weights[{key!r}] must be >= 0, got {factor!r}")
        out[code] = factor
    return out
