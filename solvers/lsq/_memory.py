"""Arrays in memory as a `BlockSystem`: ``solve(A, b)`` runs the blocks' own code path."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._block import Block, BlockRef
from ._system import BlockSystem

#: Rows per in-memory block times columns: blocks of about 64 MB, so the temporaries of a
#: block's QR stay small beside the matrix.
BLOCK_ELEMENTS = 1 << 23


class ArraySystem(BlockSystem):
    """The rows ``(A, y, weights)`` of arrays in this process, as row blocks (views, no copy)."""

    def __init__(self, refs: Sequence[BlockRef], blocks: dict[str, Block]):
        super().__init__(refs, verify="never")
        self._blocks = blocks

    @classmethod
    def from_arrays(cls, A: Any, b: Any, weights: Any = None, *,
                    what: str = "A") -> ArraySystem:
        """The system of ``A x ~ b`` with row weights ``weights`` (a number or one per row;
        default 1). Raises ValueError, naming the argument, for bad shapes or values."""
        A = np.asarray(A, dtype=np.float64)
        y = np.asarray(b, dtype=np.float64)
        if A.ndim != 2 or y.shape != (A.shape[0],) or A.shape[0] == 0:
            raise ValueError(f"{what} must be a (rows, cols) array and b a (rows,) array with "
                             f"rows >= 1; got shapes {A.shape} and {y.shape}")
        w = np.asarray(1.0 if weights is None else weights, dtype=np.float64)
        if w.ndim != 0 and w.shape != y.shape:
            raise ValueError(f"weights must be a number or have shape {y.shape} (one per row "
                             f"of {what}), got shape {w.shape}")
        w = np.broadcast_to(w, y.shape)
        for name, value in ((what, A), ("b", y), ("weights", w)):
            if not np.all(np.isfinite(value)):
                raise ValueError(f"{name} has non-finite values (first at index "
                                 f"{np.argwhere(~np.isfinite(value))[0].tolist()})")
        if np.any(w < 0):
            raise ValueError(f"weights must be >= 0 (they multiply squared residuals), got min "
                             f"{w.min()!r}")
        rows, cols = A.shape
        step = max(1, BLOCK_ELEMENTS // max(cols, 1))
        groups = np.zeros(rows, dtype=np.intp)
        refs, blocks = [], {}
        for i, lo in enumerate(range(0, rows, step)):
            part = slice(lo, lo + step)
            ref = BlockRef(f"rows {lo}:{min(lo + step, rows)}", f"<memory block {i}>",
                           len(y[part]), cols, "")
            refs.append(ref)
            blocks[ref.path] = Block(A[part], y[part], w[part], groups[part])
        return cls(refs, blocks)

    def read(self, ref: BlockRef) -> Block:
        return self._blocks[ref.path]

    def __repr__(self) -> str:
        rows, cols = self.shape
        return f"<ArraySystem {rows} x {cols} in memory>"

    def _with(self, refs: Sequence[BlockRef]) -> BlockSystem:
        return ArraySystem(refs, self._blocks)
