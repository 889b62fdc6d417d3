"""The sparsity pattern of a square matrix, in the order every backend uses (CSC: by column, then
row), and a column colouring that compresses a Jacobian into a few directional derivatives."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = ["Pattern"]


@dataclass(frozen=True, eq=False)
class Pattern:
    """Where an ``n x n`` matrix may be non-zero.

    Build it with `Pattern.from_coo(rows, cols, n)`, `Pattern.from_dense(mask)` or
    `Pattern.from_scipy(matrix)`; the diagonal is always included (iteration matrices of DAEs need
    it, and KLU's refactorization falls back to it). Entries are kept sorted by column, then row
    (compressed sparse column order), without duplicates; a matrix's ``values`` are given in this
    order.

    Attributes:
        n: the matrix is ``n x n``.
        rows, cols: int32 arrays of the ``nnz`` structural entries.
    """

    n: int
    rows: np.ndarray
    cols: np.ndarray
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = int(self.n)
        rows = np.asarray(self.rows).ravel()
        cols = np.asarray(self.cols).ravel()
        if n < 1:
            raise ValueError(f"Pattern needs n >= 1, got n={self.n!r}")
        if rows.shape != cols.shape:
            raise ValueError(f"Pattern rows and cols differ in length: {rows.size} != {cols.size}")
        if rows.size and (rows.min() < 0 or cols.min() < 0 or rows.max() >= n or cols.max() >= n):
            bad = int(np.flatnonzero((rows < 0) | (rows >= n) | (cols < 0) | (cols >= n))[0])
            raise ValueError(f"Pattern entry {bad} = ({int(rows[bad])}, {int(cols[bad])}) lies "
                             f"outside the {n} x {n} matrix")
        diag = np.arange(n)
        key = np.unique(np.concatenate([cols, diag]).astype(np.int64) * n
                        + np.concatenate([rows, diag]))
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "rows", (key % n).astype(np.int32))
        object.__setattr__(self, "cols", (key // n).astype(np.int32))
        for a in (self.rows, self.cols):
            a.flags.writeable = False

    @classmethod
    def from_coo(cls, rows: Any, cols: Any, n: int) -> Pattern:
        """From row and column indices (any order; duplicates are merged)."""
        return cls(int(n), np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64))

    @classmethod
    def from_dense(cls, mask: Any) -> Pattern:
        """From a square boolean (or numeric: non-zero) array."""
        mask = np.asarray(mask)
        if mask.ndim != 2 or mask.shape[0] != mask.shape[1]:
            raise ValueError(f"Pattern.from_dense needs a square 2-D mask, got shape {mask.shape}")
        rows, cols = np.nonzero(mask)
        return cls(mask.shape[0], rows, cols)

    @classmethod
    def from_scipy(cls, matrix: Any) -> Pattern:
        """From a square scipy.sparse matrix or array (its stored entries)."""
        coo = sp.coo_array(matrix)
        if coo.shape[0] != coo.shape[1]:
            raise ValueError(f"Pattern.from_scipy needs a square matrix, got shape {coo.shape}")
        return cls(coo.shape[0], coo.row, coo.col)

    @property
    def nnz(self) -> int:
        return int(self.rows.size)

    @property
    def key(self) -> str:
        """A digest of the structure: equal patterns share a symbolic analysis."""
        if "key" not in self._cache:
            h = hashlib.sha256(np.int64(self.n).tobytes())
            h.update(self.rows.tobytes())
            h.update(self.cols.tobytes())
            self._cache["key"] = h.hexdigest()
        return self._cache["key"]

    @property
    def diagonal_index(self) -> np.ndarray:
        """Position of each diagonal entry ``(i, i)`` in the entry order."""
        if "diag" not in self._cache:
            self._cache["diag"] = np.flatnonzero(self.rows == self.cols).astype(np.int32)
        return self._cache["diag"]

    def to_scipy(self, values: Any) -> sp.csc_array:
        """The matrix with these ``values`` as a scipy CSC array."""
        return sp.csc_array((np.asarray(values), (self.rows, self.cols)), shape=(self.n, self.n))

    def coloring(self) -> tuple[int, np.ndarray]:
        """A colouring of the columns such that no two columns of one colour share a row.

        Returns ``(n_colors, color)``: the Jacobian is then recovered from ``n_colors``
        directional derivatives (Curtis, Powell and Reid), each along the sum of the unit vectors
        of one colour. Banded patterns (half-bandwidth up to 7) are coloured modulo
        ``2 band + 1`` (tridiagonal: 3 colours); others greedily in column order (dense: ``n``).
        """
        if "coloring" not in self._cache:
            band = int(np.abs(self.rows.astype(np.int64) - self.cols).max(initial=0))
            if 2 * band + 1 <= 16:
                # Banded: columns more than 2 * band apart share no row, so ``j mod (2 band + 1)``
                # is a valid colouring (what greedy finds for such patterns), without a loop.
                colors = min(2 * band + 1, self.n)
                self._cache["coloring"] = (colors, (np.arange(self.n) % colors).astype(np.int32))
                return self._cache["coloring"]
            a = sp.csc_array((np.ones(self.nnz, dtype=np.int8), (self.rows, self.cols)),
                             shape=(self.n, self.n))
            conflict = sp.csr_array(a.T @ a)  # columns sharing a row
            indptr, indices = conflict.indptr, conflict.indices
            color = np.full(self.n, -1, dtype=np.int64)
            for j in range(self.n):
                used = color[indices[indptr[j]:indptr[j + 1]]]
                taken = np.zeros(used.size + 2, dtype=bool)
                taken[used[(used >= 0) & (used < taken.size)]] = True
                color[j] = int(np.argmin(taken))
            self._cache["coloring"] = (int(color.max()) + 1, color.astype(np.int32))
        return self._cache["coloring"]

    def __repr__(self) -> str:
        return f"Pattern(n={self.n}, nnz={self.nnz})"
