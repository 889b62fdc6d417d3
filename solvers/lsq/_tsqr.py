"""Tall-skinny QR over row blocks: the R of ``[sqrt(W) A | sqrt(W) y]`` without Q, block by block
or as a tree on dask workers; then a column-pivoted QR of the column-scaled R decides the rank and
solves. Stays accurate where the normal equations square the condition number."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from ._block import Block
from ._factor import RANK_TOL, Factor, qr_factor
from ._reduce import map_reduce
from ._system import BlockSystem


def tsqr_r(system: BlockSystem, *, group_weights: np.ndarray | None = None,
           client: Any = None) -> np.ndarray:
    """The (cols + 1) x (cols + 1) triangular R of ``[sqrt(W) A | sqrt(W) y]``: its last column
    holds ``Q^T sqrt(W) y`` above the corner and the weighted residual norm in the corner.

    Householder QR is (to rounding) invariant under column scaling, so the columns are
    equilibrated afterwards, on this small R, which has the column norms of the matrix."""
    fn = partial(_r_of_block, group_weights=group_weights)
    fold = partial(_fold, group_weights=group_weights)
    R = map_reduce(system, fn, _stack_r, client=client, fold=fold)
    n1 = system.shape[1] + 1
    if R.shape[0] < n1:
        R = np.vstack([R, np.zeros((n1 - R.shape[0], n1))])
    return R


def solve_qr(system: BlockSystem, penalty_rows: np.ndarray | None,
             group_weights: np.ndarray | None, *, client: Any = None,
             rank_tol: float = RANK_TOL, diagnostics: bool = True
             ) -> tuple[np.ndarray, Factor, float | None]:
    """(x, factor, cond) minimizing ``sum w (A x - y)^2 + ||L x||^2``, ``L = penalty_rows``
    (appended as rows with target 0), from the combined R: columns equilibrated, a pivoted QR
    deciding the rank on the scaled problem (`qr_factor`). ``cond`` is the 2-norm condition
    number of the unscaled weighted matrix (an SVD of R) with ``diagnostics``, else None; it
    never changes the answer."""
    R = tsqr_r(system, group_weights=group_weights, client=client)
    n = system.shape[1]
    if penalty_rows is not None:
        R = _stack_r(R, np.hstack([penalty_rows, np.zeros((penalty_rows.shape[0], 1))]))
    Rx, z = R[:n, :n], R[:n, n]
    x, factor = qr_factor(Rx, z, rank_tol)
    cond = None
    if diagnostics:
        sv = np.linalg.svd(Rx, compute_uv=False)
        cond = float(sv[0] / sv[-1]) if sv[-1] > 0 else float("inf")
    return x, factor, cond


def _scaled(block: Block, group_weights: np.ndarray | None) -> np.ndarray:
    s = np.sqrt(block.weights(group_weights))
    M = np.empty((block.A.shape[0], block.A.shape[1] + 1))
    np.multiply(block.A, s[:, None], out=M[:, :-1])
    np.multiply(block.y, s, out=M[:, -1])
    return M


def _r(M: np.ndarray) -> np.ndarray:
    # numpy's stubs give every mode the (Q, R) result; mode="r" returns R alone
    return np.linalg.qr(M, mode="r")  # type: ignore[return-value]


def _r_of_block(block: Block, *, group_weights: np.ndarray | None) -> np.ndarray:
    return _r(_scaled(block, group_weights))


def _stack_r(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _r(np.vstack([a, b]))


def _fold(acc: np.ndarray | None, block: Block, *, group_weights: np.ndarray | None) -> np.ndarray:
    M = _scaled(block, group_weights)
    return _r(M if acc is None else np.vstack([acc, M]))
