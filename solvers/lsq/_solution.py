"""What a least-squares solve returns: coefficients, residual statistics, diagnostics."""

from __future__ import annotations

from dataclasses import dataclass
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
    """

    rmse: dict[str, float]
    rows: dict[str, int]
    rmse_all: float
    weighted_norm: float


@dataclass(frozen=True)
class Solution:
    """The result of `solve`.

    Attributes:
        coefficients: the fitted ``x`` (cols,).
        method: ``"normal"``, ``"qr"`` or ``"lsqr"``.
        residuals: residual statistics on the fitted system's rows.
        validation: residual statistics on held-out blocks, when given.
        rank: numerical rank of the (weighted, regularized) design matrix where cheap to tell
            (``"qr"``: from the singular values of R; ``"normal"``: as far as the normal matrix
            can tell), else None.
        cond: condition-number estimate of the same matrix (``"lsqr"``: LSQR's estimate).
        iterations: LSQR iterations (None for the direct methods).
        stop_reason: LSQR's stop reason (``istop`` explained), or ``""``.
    """

    coefficients: np.ndarray
    method: str
    residuals: Residuals
    validation: Residuals | None = None
    rank: int | None = None
    cond: float | None = None
    iterations: int | None = None
    stop_reason: str = ""


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
        weighted_norm=float(np.sqrt(sum(sums[c][2] for c in codes))))


def _block_sums(block: Block, *, x: np.ndarray,
                group_weights: np.ndarray | None) -> dict[int, tuple[float, float, float]]:
    r2 = (block.A @ x - block.y) ** 2
    w = block.weights(group_weights)
    out = {}
    for code in np.unique(block.groups):
        rows = block.groups == code
        r2g = r2[rows]
        out[int(code)] = (float(rows.sum()), float(r2g.sum()), float((w[rows] * r2g).sum()))
    return out


def _merge(a: dict[int, tuple[float, float, float]],
           b: dict[int, tuple[float, float, float]]) -> dict[int, tuple[float, float, float]]:
    out = dict(a)
    for code, v in b.items():
        out[code] = tuple(p + q for p, q in zip(out[code], v)) if code in out else v
    return out
