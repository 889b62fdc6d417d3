"""Two of SUNDIALS IDA's serial examples, posed for `pdesolve` exactly as their .c files pose them,
and readers for the outputs IDA prints for them.

Source: github.com/LLNL/sundials, examples/ida/serial/ (commit
c8dabcea90ca8bf195474da120e4f3dd39aa711f): idaRoberts_dns.c / .out and idaHeat2D_klu.c / .out
(BSD-3-Clause). data/ida/ holds the printed tables of the two .out files, unchanged.

- idaRoberts_dns: Robertson's kinetics, ``y1' = -0.04 y1 + 1e4 y2 y3``,
  ``y2' = 0.04 y1 - 1e4 y2 y3 - 3e7 y2^2``, ``0 = y1 + y2 + y3 - 1``; y0 = (1, 0, 0),
  y'0 = (-0.04, 0.04, 0) given (no IDACalcIC), rtol = 1e-4, atol = (1e-8, 1e-6, 1e-6)
  (IDASVtolerances), dense linear solver, output at t = 0.4 * 10^k.
- idaHeat2D_klu: the heat equation ``u_t = u_xx + u_yy`` on the unit square, central differences
  on a 10 x 10 grid (100 unknowns), boundary values algebraic (u = 0), u0 = 16 x (1-x) y (1-y),
  u'0 from the interior equations; rtol = 0, atol = 1e-8, constraints u >= 0 everywhere
  (IDASetConstraints), IDACalcIC(IDA_YA_YDP_INIT), KLU, output at t = 0.01 * 2^k up to 10.24;
  ``umax`` is the max norm of u.
"""

from __future__ import annotations

import functools
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from solvers.dae import DAEProblem

DATA = Path(__file__).resolve().parent / "data" / "ida"

# --- idaRoberts_dns --------------------------------------------------------------------------

ROBERTS_RTOL = 1e-4
ROBERTS_ATOL = (1e-8, 1e-6, 1e-6)
ROBERTS_Y0 = np.array([1.0, 0.0, 0.0])
ROBERTS_YP0 = np.array([-0.04, 0.04, 0.0])


def _resrob(t, y, yp, args):
    """``resrob`` of idaRoberts_dns.c, operation for operation."""
    r0 = -0.04 * y[0] + 1.0e4 * y[1] * y[2]
    r1 = -r0 - 3.0e7 * y[1] * y[1] - yp[1]
    return jnp.stack([r0 - yp[0], r1, y[0] + y[1] + y[2] - 1.0])


@functools.cache
def roberts_problem() -> DAEProblem:
    return DAEProblem(_resrob, np.ones((3, 3), bool), algebraic=[2], name="idaRoberts_dns")


def roberts_output() -> list[tuple[float, float, float, float, int, int, float]]:
    """IDA's printed rows: (t, y1, y2, y3, nst, k, h)."""
    rows = []
    for line in (DATA / "idaRoberts_dns.out").read_text().splitlines():
        parts = line.replace("|", " ").split()
        if len(parts) == 7 and not line.lstrip().startswith("#"):
            try:
                t, y1, y2, y3, nst, k, h = parts
                rows.append((float(t), float(y1), float(y2), float(y3), int(nst), int(k),
                             float(h)))
            except ValueError:
                continue
    return rows


# --- idaHeat2D_klu ---------------------------------------------------------------------------

MGRID = 10
HEAT_ATOL = 1e-8


def _boundary() -> np.ndarray:
    i, j = np.meshgrid(np.arange(MGRID), np.arange(MGRID))   # loc = MGRID j + i
    return ((i == 0) | (j == 0) | (i == MGRID - 1) | (j == MGRID - 1)).ravel()


def _heatres(t, u, up, args):
    """``heatres`` of idaHeat2D_klu.c: ``u' - coeff * (5-point Laplacian)`` inside; on the
    boundary ``u`` (IDA's file returns 0 there and puts 1 in the Jacobian; ``u`` gives the same
    Newton iteration with the Jacobian computed from the residual)."""
    dx = 1.0 / (MGRID - 1)
    coeff = 1.0 / (dx * dx)
    g = u.reshape(MGRID, MGRID)
    lap = g[1:-1, :-2] + g[1:-1, 2:] + g[:-2, 1:-1] + g[2:, 1:-1] - 4.0 * g[1:-1, 1:-1]
    inner = up.reshape(MGRID, MGRID)[1:-1, 1:-1] - coeff * lap
    return u.reshape(MGRID, MGRID).at[1:-1, 1:-1].set(inner).ravel()


@functools.cache
def heat_problem() -> DAEProblem:
    n = MGRID * MGRID
    rows, cols = [], []
    for loc in range(n):
        rows.append(loc)
        cols.append(loc)
        if not _boundary()[loc]:
            for d in (-1, 1, -MGRID, MGRID):
                rows.append(loc)
                cols.append(loc + d)
    return DAEProblem(_heatres, (np.array(rows), np.array(cols)), n=n,
                      algebraic=np.flatnonzero(_boundary()), name="idaHeat2D_klu")


def heat_initial() -> tuple[np.ndarray, np.ndarray]:
    """``SetInitialProfile``: u0 and u'0 (boundary values 0)."""
    x = np.arange(MGRID) / (MGRID - 1)
    u = (16.0 * x[None, :] * (1 - x[None, :]) * x[:, None] * (1 - x[:, None])).ravel()
    up = -np.asarray(_heatres(0.0, jnp.asarray(u), jnp.zeros(MGRID * MGRID), None))
    boundary = _boundary()
    u[boundary], up[boundary] = 0.0, 0.0
    return u, up


def heat_output() -> list[tuple[float, float, int, int, int]]:
    """IDA's printed rows: (t, umax, k, nst, nni)."""
    rows = []
    for line in (DATA / "idaHeat2D_klu.out").read_text().splitlines():
        parts = line.split()
        if len(parts) == 8 and not line.lstrip().startswith("#"):
            try:
                rows.append((float(parts[0]), float(parts[1]), int(parts[2]), int(parts[3]),
                             int(parts[4])))
            except ValueError:
                continue
    return rows
