"""A user Jacobian (``DAEProblem(jacobian=J)``, IDA's ``IDASetJacFn``) against the default, the
iteration matrix by coloured forward-mode differentiation of the residual, same run, same solves.

* Robertson: idaRoberts_dns's residual, tolerances (rtol 1e-4, atol (1e-8, 1e-6, 1e-6)), y'0 and
  its ``jacrob`` (a dense 3 x 3 array), 12 outputs 0.4 ... 4e10; dense LU and KLU.
* The 2-D heat equation of idaHeat2D_klu on an ``m x m`` grid (``m = 10`` is IDA's example; the
  boundary algebraic, rtol 0, atol 1e-8, constraints u >= 0, 11 outputs to 10.24), KLU, with
  its ``jacHeat`` as the pattern's values (``solvers.dae.jacobian_entries`` order); the
  differentiated matrix needs one directional derivative per colour of the 5-point pattern.

Printed per problem (medians of --repeats warm runs, each compiled once before, the two timed
alternately; the two runs' steps and factorizations, which are the same when J is exact):
    time_ratio_user_jacobian_<problem>: AD time / user-J time   (> 1: the user J is faster)

    python benchmarks/dae_user_jacobian.py [--repeats 15] [--grids 10 50 150]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import dataclasses
import statistics
import time

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import solvers.dae as dae  # noqa: E402


def _resrob(t, y, yp, args):
    """``resrob`` of SUNDIALS' idaRoberts_dns.c."""
    r0 = -0.04 * y[0] + 1.0e4 * y[1] * y[2]
    return jnp.stack([r0 - yp[0], -r0 - 3.0e7 * y[1] * y[1] - yp[1], y[0] + y[1] + y[2] - 1.0])


def _jacrob(t, y, yp, c, args):
    """``jacrob`` of idaRoberts_dns.c."""
    return jnp.array([[-0.04 - c, 1.0e4 * y[2], 1.0e4 * y[1]],
                      [0.04, -1.0e4 * y[2] - 6.0e7 * y[1] - c, -1.0e4 * y[1]],
                      [1.0, 1.0, 1.0]])


class Heat:
    """idaHeat2D_klu's problem on an ``m x m`` grid: residual, pattern, ``jacHeat``, u0, u'0."""

    def __init__(self, m: int):
        self.m = m
        n = m * m
        i, j = np.meshgrid(np.arange(m), np.arange(m))
        self.boundary = ((i == 0) | (j == 0) | (i == m - 1) | (j == m - 1)).ravel()
        self.coeff = float((m - 1) ** 2)
        rows, cols = [np.arange(n)], [np.arange(n)]
        inner = np.flatnonzero(~self.boundary)
        for d in (-1, 1, -m, m):
            rows.append(inner)
            cols.append(inner + d)
        self.problem = dae.DAEProblem(self.residual, (np.concatenate(rows), np.concatenate(cols)),
                                      n=n, algebraic=np.flatnonzero(self.boundary),
                                      name=f"heat2d m={m}")
        r, c = dae.jacobian_entries(self.problem)
        self.diag = jnp.asarray(r == c)
        self.on_boundary = jnp.asarray(self.boundary[r])
        self.user = dataclasses.replace(self.problem, jacobian=self.jacobian,
                                        name=f"heat2d m={m} user J")
        x = np.arange(m) / (m - 1)
        u = (16.0 * x[None, :] * (1 - x[None, :]) * x[:, None] * (1 - x[:, None])).ravel()
        up = -np.asarray(self.residual(0.0, jnp.asarray(u), jnp.zeros(n), None))
        u[self.boundary], up[self.boundary] = 0.0, 0.0
        self.u0, self.up0 = u, up

    def residual(self, t, u, up, args):
        m = self.m
        g = u.reshape(m, m)
        lap = g[1:-1, :-2] + g[1:-1, 2:] + g[:-2, 1:-1] + g[2:, 1:-1] - 4.0 * g[1:-1, 1:-1]
        inner = up.reshape(m, m)[1:-1, 1:-1] - self.coeff * lap
        return g.at[1:-1, 1:-1].set(inner).ravel()

    def jacobian(self, t, u, up, c, args):
        inside = jnp.where(self.diag, c + 4.0 * self.coeff, -self.coeff)
        return jnp.where(self.on_boundary, jnp.where(self.diag, 1.0, 0.0), inside)


def compare(label: str, problems: dict, solve, repeats: int) -> None:
    """Compile both, then time them alternately (AD, user J, AD, ...), so that the machine's
    load falls on both alike; the medians, steps and factorizations, the ratio."""
    first, times, sols = {}, {kind: [] for kind in problems}, {}
    for kind, problem in problems.items():
        start = time.perf_counter()
        jax.block_until_ready(solve(problem).ys)
        first[kind] = time.perf_counter() - start
    for _ in range(repeats):
        for kind, problem in problems.items():
            start = time.perf_counter()
            sols[kind] = solve(problem)
            jax.block_until_ready(sols[kind].ys)
            times[kind].append(time.perf_counter() - start)
    median = {kind: statistics.median(t) for kind, t in times.items()}
    for kind, sol in sols.items():
        st = {k: int(v) for k, v in sol.stats.items()}
        print(f"  {label} {kind}: {1e3 * median[kind]:.2f} ms (first call {first[kind]:.1f} s), "
              f"{st['steps']} steps, {st['factorizations']} factorizations "
              f"({st['factorizations'] / st['steps']:.3f}/step)", flush=True)
    diff = float(np.abs(np.asarray(sols["AD"].ys) - np.asarray(sols["user J"].ys)).max())
    print(f"  {label}: max |ys(AD) - ys(user J)| = {diff:.1e}")
    print(f"time_ratio_user_jacobian_{label}: {median['AD'] / median['user J']:.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--grids", type=int, nargs="+", default=[10, 50, 150])
    opts = parser.parse_args()

    ad = dae.DAEProblem(_resrob, np.ones((3, 3), bool), algebraic=[2], name="robertson")
    robertson = {"AD": ad, "user J": dataclasses.replace(ad, jacobian=_jacrob,
                                                          name="robertson user J")}
    ts = 0.4 * 10.0 ** np.arange(12)
    for linear in ("dense", "klu"):
        solver = dae.JIDA(linear=linear, rtol=1e-4, atol=np.array([1e-8, 1e-6, 1e-6]),
                          initialize=False)
        compare(f"robertson_{linear}", robertson,
                lambda p, solver=solver: dae.pdesolve(
                    p, solver, (0.0, 4e10), np.array([1.0, 0.0, 0.0]),
                    np.array([-0.04, 0.04, 0.0]), saveat=dae.SaveAt(ts=ts)),
                opts.repeats)

    heat_ts = 0.01 * 2.0 ** np.arange(11)
    for m in opts.grids:
        heat = Heat(m)
        n_colors = heat.problem.pattern.coloring()[0]
        print(f"  heat2d m={m}: {m * m} unknowns, {heat.problem.pattern.nnz} entries, "
              f"{n_colors} colours")
        solver = dae.JIDA(linear="klu", rtol=0.0, atol=1e-8, constraints=np.ones(m * m, int))
        compare(f"heat2d_m{m}", {"AD": heat.problem, "user J": heat.user},
                lambda p, heat=heat, solver=solver: dae.pdesolve(
                    p, solver, (0.0, heat_ts[-1]), heat.u0, heat.up0,
                    saveat=dae.SaveAt(ts=heat_ts)),
                max(3, opts.repeats // 3) if m >= 100 else opts.repeats)


if __name__ == "__main__":
    main()
