"""Iterative refinement of a direct solution on the residual.

Each step is one pass over the blocks: the gradient ``A^T W (y - A x)`` is computed in
double-double arithmetic (error-free products and sums, about 106 bits, in plain float64
operations, the same on every platform), then the correction solves ``A^T W A dx = g`` with the
factor the method already has. With the QR factor a step gains about ``-log10(eps * cond)``
digits while ``eps * cond < 1`` (the corrected semi-normal equations); because the residual and
the gradient are exact to far below float64 rounding, the refined solution is the least-squares
solution of the float64 data to about full precision, also for large residuals.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

import numpy as np

from ._block import Block
from ._factor import EPS, Factor
from ._reduce import map_reduce
from ._system import BlockSystem

logger = logging.getLogger(__name__)

_SPLITTER = 134217729.0  # 2**27 + 1: Dekker's split of a float64 into two 26-bit halves
#: Rows per chunk times columns: bounds the temporaries of one block's gradient (~1 MB each).
_CHUNK = 1 << 17

DD = tuple[np.ndarray, np.ndarray]  # (high, low) parts of double-double numbers


def refine(system: BlockSystem, x: np.ndarray, factor: Factor, penalty: np.ndarray | None,
           group_weights: np.ndarray | None, steps: int, *, client: Any = None
           ) -> tuple[np.ndarray, int]:
    """(refined x, steps applied). ``penalty`` is the ridge term's matrix ``P`` (cols x cols) of
    the objective ``sum w (A x - y)^2 + x^T P x``. A step is applied only where it shrinks the
    correction (the iteration converges); refinement stops once the correction is below
    float64 rounding."""
    applied, previous = 0, None
    xs_norm = np.linalg.norm(factor.scale * x)
    for _ in range(steps):
        g = gradient(system, x, group_weights, client=client)
        if penalty is not None:
            g = g - penalty @ x
        dx = factor.solve_gram(g)
        size = float(np.linalg.norm(factor.scale * dx) / xs_norm) if xs_norm > 0 else 0.0
        if not np.isfinite(size) or size > 1.0 or (previous is not None and size > previous / 2):
            logger.info("iterative refinement stopped after %d steps: the correction %.1e "
                        "(relative) does not converge", applied, size)
            break
        x, applied, previous = x + dx, applied + 1, size
        logger.debug("refinement step %d: relative correction %.1e", applied, size)
        if size <= EPS:
            break
    return x, applied


def gradient(system: BlockSystem, x: np.ndarray, group_weights: np.ndarray | None, *,
             client: Any = None) -> np.ndarray:
    """``A^T W (y - A x)`` over all blocks, summed in double-double, rounded to float64."""
    hi, lo = map_reduce(system, partial(_block_gradient, x=x, group_weights=group_weights),
                        add, client=client)
    return hi + lo


def _block_gradient(block: Block, *, x: np.ndarray, group_weights: np.ndarray | None) -> DD:
    rows, cols = block.A.shape
    w = block.weights(group_weights)
    step = max(1, _CHUNK // max(cols, 1))
    acc: DD = (np.zeros(cols), np.zeros(cols))
    # Dekker's split overflows above ~1e300: the step is then not finite and `refine` drops it
    with np.errstate(over="ignore", invalid="ignore"):
        for lo in range(0, rows, step):
            part = slice(lo, lo + step)
            acc = add(acc, _chunk_gradient(block.A[part], block.y[part], w[part], x))
    return acc


def _chunk_gradient(A: np.ndarray, y: np.ndarray, w: np.ndarray, x: np.ndarray) -> DD:
    p, e = two_prod(A, -x[None, :])  # the terms of y - A x, each exact as p + e
    r_hi, r_lo = tree_sum(np.column_stack([y, p]),
                          np.column_stack([np.zeros_like(y), e]), axis=1)
    v_hi, v_lo = two_prod(w, r_hi)  # w * r, exact but for w * r_lo's rounding
    v_lo = v_lo + w * r_lo
    q, f = two_prod(A, v_hi[:, None])
    return tree_sum(q, f + A * v_lo[:, None], axis=0)


def two_sum(a: np.ndarray, b: np.ndarray) -> DD:
    """``a + b = s + e`` exactly (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a: np.ndarray) -> DD:
    c = _SPLITTER * a
    hi = c - (c - a)
    return hi, a - hi


def two_prod(a: np.ndarray, b: np.ndarray) -> DD:
    """``a * b = p + e`` exactly (Dekker; no FMA needed)."""
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def tree_sum(hi: np.ndarray, lo: np.ndarray, axis: int) -> DD:
    """Pairwise sums of double-double numbers ``hi + lo`` along ``axis``, each pair added by
    `two_sum`: as accurate as summing in twice the precision."""
    hi, lo = np.moveaxis(hi, axis, 0), np.moveaxis(lo, axis, 0)
    while hi.shape[0] > 1:
        half = hi.shape[0] // 2
        s, e = two_sum(hi[:half], hi[half:2 * half])
        low = lo[:half] + lo[half:2 * half] + e
        if hi.shape[0] % 2:
            s, low = np.concatenate([s, hi[-1:]]), np.concatenate([low, lo[-1:]])
        hi, lo = s, low
    return hi[0], lo[0]


def add(a: DD, b: DD) -> DD:
    """The sum of two double-double numbers (arrays)."""
    s, e = two_sum(a[0], b[0])
    return s, e + a[1] + b[1]
