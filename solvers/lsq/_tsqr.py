"""Tall-skinny QR over row blocks: the R of ``[sqrt(W) A | sqrt(W) y]`` without Q, block by block
or as a tree on dask workers; then a triangular solve. Stays accurate where the normal equations
square the condition number."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import scipy.linalg

from ._block import Block
from ._reduce import map_reduce
from ._system import BlockSystem


def tsqr_r(system: BlockSystem, *, group_weights: np.ndarray | None = None,
           client: Any = None) -> np.ndarray:
    """The (cols + 1) x (cols + 1) triangular R of ``[sqrt(W) A | sqrt(W) y]``: its last column
    holds ``Q^T sqrt(W) y`` above the corner and the weighted residual norm in the corner."""
    fn = partial(_r_of_block, group_weights=group_weights)
    fold = partial(_fold, group_weights=group_weights)
    R = map_reduce(system, fn, _stack_r, client=client, fold=fold)
    n1 = system.shape[1] + 1
    if R.shape[0] < n1:
        R = np.vstack([R, np.zeros((n1 - R.shape[0], n1))])
    return R


def solve_qr(system: BlockSystem, penalty_rows: np.ndarray | None,
             group_weights: np.ndarray | None, *, client: Any = None,
             diagnostics: bool = True) -> tuple[np.ndarray, int | None, float | None]:
    """(x, rank, cond) minimizing ``sum w (A x - y)^2 + ||L x||^2``, ``L = penalty_rows``
    (appended as rows with target 0). A rank-deficient system gets the minimum-norm solution."""
    R = tsqr_r(system, group_weights=group_weights, client=client)
    n = system.shape[1]
    if penalty_rows is not None:
        R = _stack_r(R, np.hstack([penalty_rows, np.zeros((penalty_rows.shape[0], 1))]))
    Rx, z = R[:n, :n], R[:n, n]
    rank = cond = None
    full = True
    if diagnostics:
        sv = np.linalg.svd(Rx, compute_uv=False)
        tol = (sv[0] if sv[0] > 0 else 1.0) * n * np.finfo(float).eps
        rank = int(np.sum(sv > tol))
        cond = float(sv[0] / sv[-1]) if sv[-1] > 0 else float("inf")
        full = rank == n
    else:
        d = np.abs(np.diag(Rx))
        full = bool(d.min() > d.max() * n * np.finfo(float).eps)
    if full:
        x = scipy.linalg.solve_triangular(Rx, z, check_finite=False)
    else:  # the least-squares solutions are those of R x = z; take the one of least norm
        x = np.linalg.lstsq(Rx, z, rcond=None)[0]
    return x, rank, cond


def _scaled(block: Block, group_weights: np.ndarray | None) -> np.ndarray:
    s = np.sqrt(block.weights(group_weights))
    M = np.empty((block.A.shape[0], block.A.shape[1] + 1))
    np.multiply(block.A, s[:, None], out=M[:, :-1])
    np.multiply(block.y, s, out=M[:, -1])
    return M


def _r(M: np.ndarray) -> np.ndarray:
    return np.linalg.qr(M, mode="r")


def _r_of_block(block: Block, *, group_weights: np.ndarray | None) -> np.ndarray:
    return _r(_scaled(block, group_weights))


def _stack_r(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _r(np.vstack([a, b]))


def _fold(acc: np.ndarray | None, block: Block, *, group_weights: np.ndarray | None) -> np.ndarray:
    M = _scaled(block, group_weights)
    return _r(M if acc is None else np.vstack([acc, M]))
