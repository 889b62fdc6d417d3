"""The covariance of a fit, from an SVD of the column-scaled Jacobian.

``J^T J`` is never inverted: its condition number is the square of ``J``'s, so a problem with
``cond(J) = 1e9`` (ill-conditioned but well determined, e.g. NIST StRD's MGH09 or Bennett5) would
look singular in float64. Instead the fit returns ``R`` with ``R^T R = J^T J`` (a QR of the
Jacobian rows, see `jacobian_factor`), its columns are scaled to unit norm (``J D^-1`` with ``D``
the columns' norms, which removes the parameters' units), and its SVD ``U S V^T`` gives
``(J^T J)^-1 = D^-1 V S^-2 V^T D^-1``.

A direction is undetermined when its singular value is at most ``RCOND * max(m, n) * eps`` times
the largest (``m`` residuals, ``n`` free parameters: the rounding level of a Jacobian computed in
float64; NumPy's ``matrix_rank`` default times ``RCOND``), or when a parameter's column is zero.
A parameter whose component along an undetermined direction (unit vector, scaled coordinates)
exceeds ``INVOLVED`` has an infinite variance: its rows and columns are NaN and a warning names the
combination. The other entries are those of the pseudo-inverse, which are exact for parameters
orthogonal to every undetermined direction.
"""

from __future__ import annotations

import logging

import numpy as np

__all__ = ["INVOLVED", "RCOND", "covariance"]

logger = logging.getLogger(__name__)

#: Singular values at most ``RCOND * max(m, n) * eps * s_max`` count as zero.
RCOND = 10.0
#: A parameter is part of an undetermined direction when its component exceeds this.
INVOLVED = 1e-6


def _combination(v: np.ndarray, names: list[str], log: np.ndarray, theta: np.ndarray) -> str:
    """A direction in fitted coordinates as relative changes: ``+1 δD/D - 1 δk/k``."""
    linear = ~log & (theta != 0)
    rel = np.where(linear, v / np.where(linear, np.abs(theta), 1.0), v)
    rel = rel / np.max(np.abs(rel))
    terms = []
    for c, name, lg, t in zip(rel, names, log, theta):
        if abs(c) >= 1e-3:
            unit = f"δ{name}" if (t == 0 and not lg) else f"δ{name}/{name}"
            terms.append(f"{'-' if c < 0 else '+'}{abs(c):.3g} {unit}")
    return " ".join(terms)


def covariance(r: np.ndarray, theta: np.ndarray, log: np.ndarray, fixed: np.ndarray,
               names: tuple[str, ...], m: int, cost: float, noise_known: bool) -> np.ndarray:
    """The covariance in natural units.

    Arguments:
        r: ``(n, n)`` with ``r^T r = J^T J``, ``J`` the Jacobian of the weighted residuals in the
            fitted coordinates (``log`` for log parameters).
        theta: the fitted values, natural units; ``log``: which are fitted in ``log``.
        fixed: parameters held at a bound (their rows and columns are NaN).
        names: the parameters' names (for the warning); ``m``: the number of residuals.
        cost: ``0.5 * sum(r^2)`` at the solution; noise_known: whether the residuals are
            weighted by given noise. When not, the covariance is scaled by the residual variance
            ``2 cost / (m - p)``, ``p`` the number of determined directions (the rank).
    """
    n = len(theta)
    cov = np.full((n, n), np.nan)
    keep = np.flatnonzero(~fixed)
    if not keep.size:
        return cov
    a = r[:, keep]
    if not np.all(np.isfinite(a)):
        logger.warning("the Jacobian at the solution is not finite (the model gives NaN or "
                       "infinity there, or its derivatives do); the covariance is NaN")
        return cov
    d = np.linalg.norm(a, axis=0)
    zero = ~(d > 0)
    d = np.where(zero, 1.0, d)
    _, s, vt = np.linalg.svd(a / d, full_matrices=False)
    tol = RCOND * max(m, keep.size) * np.finfo(float).eps * (s[0] if s.size else 0.0)
    null = ~(s > tol)
    v = vt.T
    involved = zero | np.any(np.abs(v[:, null]) > INVOLVED, axis=1)
    inner = (v[:, ~null] / s[~null] ** 2) @ v[:, ~null].T / np.outer(d, d)
    rank = int((~null).sum())
    scale = 1.0 if noise_known else (2.0 * cost / (m - rank) if m > rank else np.nan)
    t = np.where(log, theta, 1.0)[keep]
    block = t[:, None] * inner * t[None, :] * scale
    block[involved, :] = np.nan
    block[:, involved] = np.nan
    cov[np.ix_(keep, keep)] = block
    if involved.any():
        kept_names = [names[i] for i in keep]
        combos = "; ".join(_combination(v[:, j] / d, kept_names, log[keep], theta[keep])
                           for j in np.flatnonzero(null))
        top = s[0] if s[0] > 0 else 1.0
        logger.warning(
            "the column-scaled Jacobian is singular at the solution (singular values relative "
            "to the largest %s, tolerance %.2g): the data do not determine %s (a change along "
            "it leaves the fit unchanged); the covariance of %s is NaN. Fix or remove one of "
            "them, or add data that separate them", np.array2string(s / top, precision=3),
            tol / top, combos, ", ".join(kept_names[i] for i in np.flatnonzero(involved)))
    return cov
