"""The factor that the direct methods leave behind: a triangular ``R`` of the column-equilibrated
(and, for QR, column-pivoted) weighted design matrix. It solves with ``A^T W A`` (iterative
refinement), gives the condition estimate and the standard errors."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.linalg.lapack

EPS = float(np.finfo(np.float64).eps)
#: The default rank tolerance: a pivot of the column-scaled R below this fraction of the largest
#: one counts as zero.
RANK_TOL = 1e-12


@dataclass(frozen=True)
class Factor:
    """``A_s[:, perm] = Q R`` for ``A_s = sqrt(W) A diag(1/scale)`` (its columns of unit norm),
    with the ridge rows included; ``R[:rank, :rank]`` is the part the rank decision kept.

    Attributes:
        scale: the column norms of ``sqrt(W) A`` (with the ridge rows); 1 for a zero column.
        perm: the column order of ``R`` (the identity for the normal equations).
        R: upper triangular, cols x cols.
        rank: the numerical rank decided on the scaled problem.
    """

    scale: np.ndarray
    perm: np.ndarray
    R: np.ndarray
    rank: int

    @property
    def full_rank(self) -> bool:
        return self.rank == self.R.shape[0]

    def solve_gram(self, g: np.ndarray) -> np.ndarray:
        """``(A^T W A + P)^{-1} g`` (full rank only): the step of iterative refinement."""
        h = (g / self.scale)[self.perm]
        u = scipy.linalg.solve_triangular(self.R, h, trans="T", check_finite=False)
        u = scipy.linalg.solve_triangular(self.R, u, check_finite=False)
        out = np.empty_like(u)
        out[self.perm] = u
        return out / self.scale

    def scaled_cond(self) -> float:
        """LAPACK's estimate (``trcon``, 1-norm) of the condition number of the kept part of R:
        that of the column-scaled matrix the method works on."""
        k = self.rank
        if k == 0:
            return float("inf")
        rcond, info = scipy.linalg.lapack.dtrcon(np.asfortranarray(self.R[:k, :k]), norm="1",
                                                 uplo="U", diag="N")
        return float("inf") if info != 0 or rcond <= 0 else float(1.0 / rcond)

    def inverse_gram_diagonal(self) -> np.ndarray:
        """The diagonal of ``(A^T W A)^{-1}`` (full rank only), for the standard errors."""
        n = self.R.shape[0]
        Rinv = scipy.linalg.solve_triangular(self.R, np.eye(n), check_finite=False)
        out = np.empty(n)
        out[self.perm] = np.sum(Rinv * Rinv, axis=1)
        return out / self.scale ** 2


def column_scale(norms: np.ndarray) -> np.ndarray:
    """Column norms as scale factors: a zero (or non-finite) norm gives 1."""
    norms = np.asarray(norms, dtype=np.float64)
    return np.where((norms > 0) & np.isfinite(norms), norms, 1.0)


def qr_factor(Rx: np.ndarray, z: np.ndarray, rank_tol: float
              ) -> tuple[np.ndarray, Factor]:
    """The solution of ``R_x x = z`` in the least-squares sense, and its `Factor`.

    ``R_x`` is the combined TSQR factor of the weighted matrix (with the ridge rows). Its columns
    have the norms of the matrix's, so scaling them to 1 here equilibrates the problem without
    another pass over the blocks; a column-pivoted QR of the scaled R decides the rank: pivots
    below ``rank_tol`` times the largest count as zero. A rank-deficient system gets the
    solution of least scaled norm ``||diag(scale) x||`` among those of the kept columns'
    equations (the complete orthogonal decomposition of LAPACK's ``gelsy``).
    """
    n = Rx.shape[1]
    scale = column_scale(np.linalg.norm(Rx, axis=0))
    Q, R, perm = scipy.linalg.qr(Rx / scale, pivoting=True, check_finite=False)
    c = Q.T @ z
    pivots = np.abs(np.diag(R))
    rank = int(np.sum(pivots > rank_tol * pivots[0])) if n and pivots[0] > 0 else 0
    if rank == n:
        w = scipy.linalg.solve_triangular(R, c, check_finite=False)
    elif rank == 0:
        w = np.zeros(n)
    else:  # least-norm w with R[:rank] w = c[:rank]: a QR of R[:rank]^T (rank columns)
        Q2, R2 = np.linalg.qr(R[:rank].T)
        w = Q2 @ scipy.linalg.solve_triangular(R2, c[:rank], trans="T", check_finite=False)
    x = np.empty(n)
    x[perm] = w
    return x / scale, Factor(scale, perm, R, rank)


def cholesky_factor(G: np.ndarray) -> Factor:
    """The `Factor` of the normal matrix ``G = A^T W A (+ P)``: ``G_s = D^-1 G D^-1 = R^T R``
    with ``D = sqrt(diag G)`` (the column norms). Raises `numpy.linalg.LinAlgError` where the
    Cholesky factorization fails."""
    scale = column_scale(np.sqrt(np.clip(np.diag(G), 0.0, None)))
    Gs = G / scale[:, None] / scale[None, :]
    R = scipy.linalg.cholesky(Gs, lower=False, check_finite=False)
    n = G.shape[0]
    return Factor(scale, np.arange(n), R, n)
