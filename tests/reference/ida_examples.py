"""Three of SUNDIALS IDA's and IDAS's serial examples, posed for `pdesolve` exactly as their .c
files pose them, and readers for the outputs they print.

Source: github.com/LLNL/sundials, examples/ida/serial/ (commit
c8dabcea90ca8bf195474da120e4f3dd39aa711f): idaRoberts_dns.c / .out and idaHeat2D_klu.c / .out
(BSD-3-Clause). data/ida/ holds the printed tables of the two .out files, unchanged.

- idaRoberts_dns: Robertson's kinetics, ``y1' = -0.04 y1 + 1e4 y2 y3``,
  ``y2' = 0.04 y1 - 1e4 y2 y3 - 3e7 y2^2``, ``0 = y1 + y2 + y3 - 1``; y0 = (1, 0, 0),
  y'0 = (-0.04, 0.04, 0) given (no IDACalcIC), rtol = 1e-4, atol = (1e-8, 1e-6, 1e-6)
  (IDASVtolerances), dense linear solver, output at t = 0.4 * 10^k; root functions
  ``grob``: ``g = (y1 - 1e-4, y3 - 0.01)`` (IDARootInit), whose returns IDA prints too.
- idaHeat2D_klu: the heat equation ``u_t = u_xx + u_yy`` on the unit square, central differences
  on a 10 x 10 grid (100 unknowns), boundary values algebraic (u = 0), u0 = 16 x (1-x) y (1-y),
  u'0 from the interior equations; rtol = 0, atol = 1e-8, constraints u >= 0 everywhere
  (IDASetConstraints), IDACalcIC(IDA_YA_YDP_INIT), KLU, output at t = 0.01 * 2^k up to 10.24;
  ``umax`` is the max norm of u.
- idasRoberts_FSA_dns (examples/idas/serial/, same commit; data/idas/ holds its output for
  ``-sensi stg t``, unchanged): Robertson's kinetics with parameters p = (0.04, 1e4, 3e7),
  ``res = (y1' + p1 y1 - p2 y2 y3, y2' - p1 y1 + p2 y2 y3 + p3 y2^2, y1 + y2 + y3 - 1)``;
  y0 = (1, 0, 0) and the inconsistent y'0 = (0.1, 0, 0), corrected by
  IDACalcIC(IDA_YA_YDP_INIT, tout1 = 0.4); rtol = 1e-6, atol = (1e-8, 1e-14, 1e-6); dense
  linear solver; output at t = 0.4 * 10^k, k = 0..11, with the forward sensitivities
  d y / d p (staggered, in the error test) and a quadrature (not posed here).
"""

from __future__ import annotations

import functools
import itertools
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


def _resrob(t, y, yp, args, squared_first=False):
    """``resrob`` of idaRoberts_dns.c, operation for operation; ``squared_first`` rounds its
    ``3e7 y2^2`` as ``3e7 * (y2 * y2)``, one rounding apart from the C file's."""
    quad = 3.0e7 * (y[1] * y[1]) if squared_first else 3.0e7 * y[1] * y[1]
    r0 = -0.04 * y[0] + 1.0e4 * y[1] * y[2]
    r1 = -r0 - quad - yp[1]
    return jnp.stack([r0 - yp[0], r1, y[0] + y[1] + y[2] - 1.0])


@functools.cache
def roberts_problem(squared_first: bool = False) -> DAEProblem:
    """idaRoberts_dns's residual; ``squared_first`` rounds its ``3e7 y2^2`` term the other way.

    The two roundings take two branches of the same step-size history, in IDA as in JIDA: a
    Newton convergence test near step 231 (t = 1.46e6) passes on one and fails by 0.07 % on the
    other. Past that, the steps differ and the solutions agree to the tolerances only (the second
    root, 2.0788e+07 or 2.0801e+07; see test_ida_roots.py)."""
    res = functools.partial(_resrob, squared_first=True) if squared_first else _resrob
    return DAEProblem(res, np.ones((3, 3), bool), algebraic=[2], name="idaRoberts_dns")


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


def roberts_roots() -> list[tuple[float, float, float, float, int, tuple[int, ...]]]:
    """IDA's printed root returns (the rows followed by ``rootsfound[] = ...``): (t, y1, y2, y3,
    nst, rootsfound), rootsfound one entry per component of ``grob``'s ``g = (y1 - 1e-4,
    y3 - 0.01)``: +1 rising, -1 falling, 0 no root."""
    lines = (DATA / "idaRoberts_dns.out").read_text().splitlines()
    found = []
    for line, after in itertools.pairwise(lines):
        if after.split()[:1] == ["rootsfound[]"]:
            t, y1, y2, y3, nst = line.replace("|", " ").split()[:5]
            signs = tuple(int(v) for v in after.split()[2:])
            found.append((float(t), float(y1), float(y2), float(y3), int(nst), signs))
    return found


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


# --- idasRoberts_FSA_dns ---------------------------------------------------------------------

FSA_RTOL = 1e-6
FSA_ATOL = (1e-8, 1e-14, 1e-6)
FSA_P = np.array([0.04, 1.0e4, 3.0e7])
FSA_Y0 = np.array([1.0, 0.0, 0.0])
FSA_YP0 = np.array([0.1, 0.0, 0.0])   # not consistent: IDACalcIC corrects it
FSA_TS = 0.4 * 10.0 ** np.arange(12)
FSA_OUT = Path(__file__).resolve().parent / "data" / "idas" / "idasRoberts_FSA_dns_-sensi_stg_t.out"


def _res_fsa(t, y, yp, p):
    """``res`` of idasRoberts_FSA_dns.c, operation for operation."""
    return jnp.stack([yp[0] + p[0] * y[0] - p[1] * y[1] * y[2],
                      yp[1] - p[0] * y[0] + p[1] * y[1] * y[2] + p[2] * y[1] * y[1],
                      y[0] + y[1] + y[2] - 1.0])


@functools.cache
def fsa_problem() -> DAEProblem:
    return DAEProblem(_res_fsa, np.ones((3, 3), bool), algebraic=[2], name="idasRoberts_FSA_dns")


def fsa_output() -> list[tuple[float, int, np.ndarray, np.ndarray]]:
    """IDAS's printed rows: (t, nst, y (3,), sensitivities (3 parameters, 3 unknowns))."""
    lines = FSA_OUT.read_text().splitlines()
    rows = []
    for i, line in enumerate(lines):
        parts = line.split()
        if len(parts) == 4 and lines[i + 1].split()[:1] == ["Solution"]:
            y = np.array([float(v) for v in lines[i + 1].split()[1:]])
            s = np.array([[float(v) for v in lines[i + 2 + j].split()[2:]] for j in range(3)])
            rows.append((float(parts[0]), int(parts[3]), y, s))
    return rows


def fsa_quadrature_output() -> tuple[float, np.ndarray]:
    """IDAS's printed quadrature G = int_0^4e10 y3 dt and its sensitivities dG/dp (3,)."""
    lines = FSA_OUT.read_text().splitlines()
    (g,) = [float(line.split()[1]) for line in lines if line.startswith("G:")]
    dg = np.array([float(line.split()[1]) for line in lines if line.startswith("dG/dp")])
    assert dg.shape == (3,), dg
    return g, dg
