"""Problems with known solutions, shared by the DAE tests (built once: solves compile once)."""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
from scipy.integrate import solve_ivp

from solvers.dae import DAEProblem

ROBERTSON_ARGS = {"k1": 0.04, "k2": 3e7, "k3": 1e4}


def _decay(t, y, yp, a):
    """y0' = -k y0, y1' = -2 k y1, and the algebraic z = y0 + y1."""
    k = a["k"]
    return jnp.stack([yp[0] + k * y[0], yp[1] + 2.0 * k * y[1], y[2] - y[0] - y[1]])


def decay_exact(ts, k, y0=(1.0, 1.0)):
    a, b = y0[0] * np.exp(-k * ts), y0[1] * np.exp(-2 * k * ts)
    return np.stack([a, b, a + b], axis=1)


def _robertson(t, y, yp, a):
    return jnp.stack([yp[0] + a["k1"] * y[0] - a["k3"] * y[1] * y[2],
                      yp[1] - a["k1"] * y[0] + a["k3"] * y[1] * y[2] + a["k2"] * y[1] ** 2,
                      y[0] + y[1] + y[2] - 1.0])


def robertson_reference(ts, k1=0.04):
    """Robertson as an ODE, solved by scipy's Radau to 1e-12."""
    def f(t, y):
        return [-k1 * y[0] + 1e4 * y[1] * y[2], k1 * y[0] - 1e4 * y[1] * y[2] - 3e7 * y[1] ** 2,
                3e7 * y[1] ** 2]

    out = solve_ivp(f, (0.0, float(ts[-1])), [1.0, 0.0, 0.0], method="Radau", rtol=1e-12,
                    atol=1e-16, t_eval=ts)
    return out.y.T


HEAT_NODES = 41


def _heat(t, y, yp, a):
    """u_t = nu u_xx on [0, 1], the boundary values as algebraic equations u = 0."""
    h = 1.0 / (HEAT_NODES - 1)
    lap = (y[:-2] - 2.0 * y[1:-1] + y[2:]) / h**2
    return jnp.concatenate([y[:1], yp[1:-1] - a["nu"] * lap, y[-1:]])


def heat_exact(ts, nu=1.0):
    """The exact solution of the semi-discrete system from sin(pi x) (a discrete eigenvector)."""
    h = 1.0 / (HEAT_NODES - 1)
    x = np.linspace(0.0, 1.0, HEAT_NODES)
    lam = 4.0 / h**2 * np.sin(np.pi * h / 2) ** 2
    return np.exp(-nu * lam * ts)[:, None] * np.sin(np.pi * x)[None, :]


@functools.cache
def decay_problem() -> DAEProblem:
    return DAEProblem(_decay, np.ones((3, 3), bool), algebraic=[2], args={"k": 1.0},
                      name="decay")


@functools.cache
def robertson_problem() -> DAEProblem:
    return DAEProblem(_robertson, np.ones((3, 3), bool), algebraic=[2], args=ROBERTSON_ARGS,
                      name="robertson")


@functools.cache
def heat_problem() -> DAEProblem:
    n = HEAT_NODES
    i = np.arange(n)
    rows = np.concatenate([i, i[1:-1], i[1:-1]])
    cols = np.concatenate([i, i[1:-1] - 1, i[1:-1] + 1])
    return DAEProblem(_heat, (rows, cols), n=n, algebraic=[0, n - 1], args={"nu": 1.0},
                      name="heat")
