"""What a least-squares solve returns: coefficients, residual statistics, diagnostics."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from ._block import Block
from ._reduce import map_reduce
from ._system import BlockSystem


@dataclass(frozen=True)
class Residuals:
    """Residual statistics of coefficients ``x`` over a system's rows (``r = A x - y``).

    Attributes:
        rmse: root-mean-square residual per row group (by group name), unweighted.
        rows: number of rows per row group.
        rmse_all: root-mean-square residual over all rows, unweighted.
        weighted_norm: ``sqrt(sum w * r**2)``, the objective's data term (without ridge).
        weighted_rows: the number of rows with a positive weight (the observations).
    """

    rmse: dict[str, float]
    rows: dict[str, int]
    rmse_all: float
    weighted_norm: float
    weighted_rows: int = 0


@dataclass(frozen=True)
class Solution:
    """The result of `solve`.

    Attributes:
        coefficients: the fitted ``x`` (cols,).
        method: ``"normal"``, ``"qr"`` or ``"lsqr"``.
        residuals: residual statistics on the fitted system's rows.
        validation: residual statistics on held-out blocks, when given.
        rank: the numerical rank (``"qr"``: decided by the pivoted QR of the column-scaled R at
            ``rank_tol``, always; ``"normal"``: from the eigenvalues of the normal matrix, with
            ``diagnostics``; ``"lsqr"``: None).
        cond: the 2-norm condition number of the weighted (and regularized) design matrix as
            given, unscaled (the direct methods with ``diagnostics``; ``"lsqr"``: LSQR's own
            estimate for the column-scaled operator).
        iterations: LSQR iterations (None for the direct methods).
        stop_reason: LSQR's stop reason (``istop`` explained), or ``""``.
        rank_deficient: the rank decision found fewer independent columns than ``cols``: the
            coefficients are the least-scaled-norm solution of the kept columns (``"qr"``).
        converged: LSQR's stopping test held on the column-scaled problem (always True for the
            direct methods).
        scaled_cond: the condition estimate (1-norm) of the column-equilibrated matrix the
            method works on: what limits its accuracy.
        digits: the digits the method's factorization or iteration can be trusted to:
            ``-log10(eps * scaled_cond)`` (``"qr"``), ``-log10(eps * scaled_cond**2)``
            (``"normal"``), ``-log10(max(tol, eps) * scaled_cond)`` (``"lsqr"``), between 0 and
            16. Iterative refinement usually does better.
        refinement_steps: the steps of iterative refinement applied.
        standard_errors: ``residual_sd * sqrt(diag((A^T W A)^-1))``, the standard deviations
            of the coefficients when the weights are inverse variances up to a common factor
            (direct methods, full rank, no ridge; else None).
        residual_sd: ``sqrt(sum w r^2 / (weighted_rows - cols))`` (the same cases; else None).
        warnings: every warning logged about this solution (rank deficiency, no convergence,
            few trusted digits); empty when none.
    """

    coefficients: np.ndarray
    method: str
    residuals: Residuals
    validation: Residuals | None = None
    rank: int | None = None
    cond: float | None = None
    iterations: int | None = None
    stop_reason: str = ""
    rank_deficient: bool = False
    converged: bool = True
    scaled_cond: float | None = None
    digits: float | None = None
    refinement_steps: int = 0
    standard_errors: np.ndarray | None = None
    residual_sd: float | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)


def residuals(system: BlockSystem, x: np.ndarray, group_weights: np.ndarray | None, *,
              client: Any = None) -> Residuals:
    """One pass over the blocks: residual statistics of ``x``."""
    sums = map_reduce(system, partial(_block_sums, x=x, group_weights=group_weights),
                      _merge, client=client)
    codes = sorted(sums)
    count = sum(sums[c][0] for c in codes)
    total = sum(sums[c][1] for c in codes)
    return Residuals(
        rmse={system.group_name(c): float(np.sqrt(sums[c][1] / sums[c][0])) for c in codes},
        rows={system.group_name(c): int(sums[c][0]) for c in codes},
        rmse_all=float(np.sqrt(total / count)),
        weighted_norm=float(np.sqrt(sum(sums[c][2] for c in codes))),
        weighted_rows=int(sum(sums[c][3] for c in codes)))


def _block_sums(block: Block, *, x: np.ndarray,
                group_weights: np.ndarray | None) -> dict[int, tuple[float, ...]]:
    r2 = (block.A @ x - block.y) ** 2
    w = block.weights(group_weights)
    out: dict[int, tuple[float, ...]] = {}
    for code in np.unique(block.groups):
        rows = block.groups == code
        r2g = r2[rows]
        out[int(code)] = (float(rows.sum()), float(r2g.sum()), float((w[rows] * r2g).sum()),
                          float(np.count_nonzero(w[rows] > 0)))
    return out


def _merge(a: dict[int, tuple[float, ...]],
           b: dict[int, tuple[float, ...]]) -> dict[int, tuple[float, ...]]:
    out = dict(a)
    for code, v in b.items():
        out[code] = tuple(p + q for p, q in zip(out[code], v)) if code in out else v
    return out
