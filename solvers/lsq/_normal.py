"""Normal equations: ``A^T W A`` and ``A^T W y`` summed over blocks, then a Cholesky solve of the
column-equilibrated normal matrix."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from ._block import Block
from ._factor import Factor, cholesky_factor
from ._reduce import map_reduce
from ._system import BlockSystem


def normal_equations(system: BlockSystem, *, group_weights: np.ndarray | None = None,
                     client: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """``(A^T W A, A^T W y)`` of the whole system, summed block by block (on the workers of
    ``client`` when given). Memory: two cols x cols arrays and one block."""
    return map_reduce(system, partial(_gram, group_weights=group_weights), _add, client=client)


def solve_normal(system: BlockSystem, penalty: np.ndarray | None,
                 group_weights: np.ndarray | None, *, client: Any = None,
                 diagnostics: bool = True
                 ) -> tuple[np.ndarray, Factor, int | None, float | None]:
    """(x, factor, rank, cond) minimizing ``sum w (A x - y)^2 + x^T P x`` for the penalty
    matrix P: Cholesky of the column-equilibrated normal matrix (`cholesky_factor`). ``rank``
    and ``cond`` (of the unscaled weighted matrix, from the eigenvalues of the normal matrix) only
    with ``diagnostics``; they never change the answer.

    Raises `numpy.linalg.LinAlgError`, naming ``method='qr'`` as the fix, where the Cholesky
    factorization fails.
    """
    G, b = normal_equations(system, group_weights=group_weights, client=client)
    if penalty is not None:
        G = G + penalty
    rank = cond = None
    if diagnostics:
        eig = np.linalg.eigvalsh(G)
        sv = np.sqrt(np.clip(eig, 0.0, None))
        top = sv[-1] if sv[-1] > 0 else 1.0
        rank = int(np.sum(sv > top * np.sqrt(len(sv) * np.finfo(float).eps)))
        cond = float(top / sv[0]) if sv[0] > 0 else float("inf")
    try:
        factor = cholesky_factor(G)
    except np.linalg.LinAlgError:
        raise np.linalg.LinAlgError(
            f"the normal matrix A^T W A ({G.shape[0]} x {G.shape[0]}) is not positive definite "
            f"even with its columns scaled: the weighted design matrix is rank-deficient or too "
            f"ill-conditioned for the normal equations (condition estimate "
            f"{cond if cond is not None else 'not computed'}); use method='qr' (or 'lsqr'), or "
            "add ridge=... (e.g. 1e-8 times the largest weight)") from None
    return factor.solve_gram(b), factor, rank, cond


def _gram(block: Block, *, group_weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    s = np.sqrt(block.weights(group_weights))
    As = block.A * s[:, None]
    return As.T @ As, As.T @ (block.y * s)


def _add(a: tuple[np.ndarray, np.ndarray],
         b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    return a[0] + b[0], a[1] + b[1]
