"""JIDA (`solvers.pdesolve`) against scipy's BDF and SUNDIALS IDA on the same stiff DAE, same run.

The problem: the radial diffusion-reaction model of the examples (`solvers.dae.ParticleSpec`: a
sphere, ``c_t = D (c_rr + 2 c_r / r) - k c``, finite volumes plus an algebraic surface node set
by film transfer), with D = 1, k = 10, transfer 5, c_b = 1, integrated over [0, 2] from an empty
particle, saved at 21 times; 1,000 / 10,000 / 100,000 unknowns. All three solvers use
rtol = 1e-6, atol = 1e-9 and a sparse direct solver:

* JIDA: ``JIDA(linear="klu")``, the iteration matrix from the residual by compressed
  forward-mode differentiation (3 colours), KLU refactorization.
* scipy: ``solve_ivp(method="BDF")`` on the ODE left after eliminating the surface node (scipy
  has no DAE solver), with the exact sparse Jacobian (constant: the problem is linear), SuperLU.
* IDA: scikit-sundae's ``IDA(linsolver="sparse")`` (SuperLU_MT, 1 thread) with the exact
  Jacobian in CSC order, started from consistent values computed here (IDA's own
  ``calc_initcond`` fails at 100,000 unknowns).

Accuracy is checked, not assumed: each solver's uptake (the volume-averaged concentration) at the
save times is compared with a reference solve (JIDA at rtol = 1e-10, atol = 1e-13).

Printed per size (medians of --repeats warm runs; JIDA's first call, which compiles, apart):
    time_ratio_scipy_bdf_n<N>: scipy BDF time / JIDA time   (> 1: JIDA faster; target > 1)
    time_ratio_ida_n<N>:       IDA time / JIDA time         (target >= 0.5 at 100,000: within 2x)
and a table of times, errors, steps and factorizations (IDA's step count from a second,
untimed run that records every internal step).

Then ``pdesolve(first_output=)`` on Robertson (idaRoberts_dns's residual and tolerances, rtol
1e-4, atol (1e-8, 1e-6, 1e-6), y'0 from the initialization, 12 outputs 0.4 ... 4e10): the warm
time with the initialization's step and the first step sized from the first output time (IDA's
``tout1``, the default) against sizing them from the span (``first_output=4e10``, the former
default), one compiled solve for both (``first_output`` is traced):
    time_ratio_first_output_robertson: span-sized time / tout1-sized time

    python benchmarks/dae.py [--repeats 3] [--sizes 1000 10000 100000]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")       # pinned before numpy loads BLAS: with two
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # BLAS threads scipy's BDF ran 100x slower

import argparse
import statistics
import time
import warnings

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from scipy.integrate import solve_ivp  # noqa: E402

import solvers.dae as dae  # noqa: E402

PARAMS = {"D": 1.0, "k": 10.0, "c_b": 1.0}
T1 = 2.0
TS = np.linspace(0.0, T1, 21)
RTOL, ATOL = 1e-6, 1e-9


class Particle:
    """The model in numpy: residual, Jacobian diagonals, and the reduced ODE for scipy."""

    def __init__(self, n: int):
        self.spec = dae.ParticleSpec(cells=n - 1)
        self.n = n
        dr, area, volume = self.spec.geometry()
        D, k, R = PARAMS["D"], PARAMS["k"], self.spec.radius
        self.kappa, self.cb, self.k, self.D, self.dr = self.spec.transfer, PARAMS["c_b"], k, D, dr
        self.a = D * np.concatenate([area / dr, [R**2 / (0.5 * dr)]])  # face i + 1/2, i < N
        self.volume = volume
        self.pattern = self.spec.pattern()
        N = n - 1
        a, v = self.a, volume
        diag = np.empty(n)
        diag[:N] = (a + np.concatenate([[0.0], a[:-1]])) / v + k
        diag[N] = D / (0.5 * dr) + self.kappa
        upper = np.empty(n - 1)          # (i, i + 1)
        upper[:N] = -a / v
        lower = np.empty(n - 1)          # (i + 1, i)
        lower[:N - 1] = -a[:-1] / v[1:]
        lower[N - 1] = -D / (0.5 * dr)
        rows, cols = self.pattern.rows, self.pattern.cols
        self.dfdy = np.where(rows == cols, diag[rows],
                             np.where(rows == cols + 1, lower[np.minimum(cols, n - 2)],
                                      upper[np.minimum(rows, n - 2)]))
        self.dfdyp = np.where((rows == cols) & (rows < N), 1.0, 0.0)
        # Reduced ODE: c_s = (g c_{N-1} + kappa c_b) / (g + kappa), g = D / (dr / 2).
        g = D / (0.5 * dr)
        self.surface = (g / (g + self.kappa), self.kappa * self.cb / (g + self.kappa))
        main = -diag[:N].copy()
        main[N - 1] += a[N - 1] * self.surface[0] / v[N - 1]
        self.ode_jac = sp.diags([lower[:N - 1] * -1.0, main, upper[:N - 1] * -1.0],
                                [-1, 0, 1], format="csc")

    def residual(self, t, y, yp, res):
        N = self.n - 1
        q = self.a * (y[1:] - y[:-1])
        res[:N] = yp[:N] - (q - np.concatenate([[0.0], q[:-1]])) / self.volume + self.k * y[:N]
        res[N] = self.D * (y[N] - y[N - 1]) / (0.5 * self.dr) - self.kappa * (self.cb - y[N])

    def jacobian(self, t, y, yp, res, cj, JJ):
        JJ[:] = self.dfdy + cj * self.dfdyp

    def ode(self, t, c):
        cs = self.surface[0] * c[-1] + self.surface[1]
        y = np.concatenate([c, [cs]])
        q = self.a * (y[1:] - y[:-1])
        return (q - np.concatenate([[0.0], q[:-1]])) / self.volume - self.k * c

    def consistent(self) -> tuple[np.ndarray, np.ndarray]:
        """Consistent ``(y0, y'0)`` for an empty particle: the surface node from its equation,
        the derivatives from the cell balances (IDA's own initialization fails at 100,000)."""
        y0 = np.zeros(self.n)
        y0[-1] = self.surface[1]
        res = np.empty(self.n)
        self.residual(0.0, y0, np.zeros(self.n), res)
        yp0 = -res
        yp0[-1] = 0.0
        return y0, yp0

    def uptake(self, c):
        return c[..., :self.n - 1] @ self.volume / (self.spec.radius**3 / 3.0)


def run_jida(p: Particle, rtol=RTOL, atol=ATOL):
    sol = dae.pdesolve(p.spec.build(), dae.JIDA(linear="klu", rtol=rtol, atol=atol), (0.0, T1),
                       p.spec.initial_state(), saveat=dae.SaveAt(ts=TS), args=PARAMS)
    ys = np.asarray(sol.ys)
    return ys, sol


def run_scipy(p: Particle):
    out = solve_ivp(p.ode, (0.0, T1), np.zeros(p.n - 1), method="BDF", t_eval=TS, rtol=RTOL,
                    atol=ATOL, jac=p.ode_jac)
    assert out.success, out.message
    return out.y.T, out


def run_ida(p: Particle, tspan=TS):
    import sksundae as sun

    with warnings.catch_warnings():  # "sparse approximation ignored in favour of jacfn": wanted
        warnings.simplefilter("ignore", UserWarning)
        solver = sun.ida.IDA(p.residual, rtol=RTOL, atol=ATOL, algebraic_idx=[p.n - 1],
                             linsolver="sparse",
                             sparsity=p.pattern.to_scipy(np.ones(p.pattern.nnz)),
                             jacfn=p.jacobian, nthreads=1, max_num_steps=1_000_000)
    out = solver.solve(tspan, *p.consistent())
    assert out.success, out.message
    return out.y, out


def _robertson(t, y, yp, args):
    """``resrob`` of SUNDIALS' idaRoberts_dns.c."""
    r0 = -0.04 * y[0] + 1.0e4 * y[1] * y[2]
    return jnp.stack([r0 - yp[0], -r0 - 3.0e7 * y[1] * y[1] - yp[1], y[0] + y[1] + y[2] - 1.0])


def robertson_first_output(repeats: int) -> None:
    """Warm Robertson solves with ``first_output`` at the first save time and at the span."""
    problem = dae.DAEProblem(_robertson, np.ones((3, 3), bool), algebraic=[2], name="robertson")
    solver = dae.JIDA(linear="klu", rtol=1e-4, atol=np.array([1e-8, 1e-6, 1e-6]))
    ts = 0.4 * 10.0 ** np.arange(12)

    def run(first_output):
        sol = dae.pdesolve(problem, solver, (0.0, 4e10), np.array([1.0, 0.0, 0.0]),
                           saveat=dae.SaveAt(ts=ts), first_output=first_output)
        jax.block_until_ready(sol.ys)
        return sol

    times = {}
    for label, first in (("tout1", None), ("span", 4e10)):
        run(first)  # compiles (once: first_output is traced)
        times[label], sol = timed(lambda first=first: run(first), max(repeats, 5))
        print(f"  robertson first_output={first}: {1e3 * times[label]:.2f} ms, "
              f"{sol.summary()}", flush=True)
    print(f"time_ratio_first_output_robertson: {times['span'] / times['tout1']:.2f}")


def timed(fn, repeats):
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--skip-robertson", action="store_true",
                        help="skip the first_output comparison on Robertson")
    opts = parser.parse_args()
    if not opts.skip_robertson:
        robertson_first_output(opts.repeats)
    try:
        import sksundae  # noqa: F401
        have_ida = True
    except ImportError:
        have_ida = False
        print("scikit-sundae is not installed: IDA is skipped (pip install scikit-sundae)")
    rows = []
    for n in opts.sizes:
        p = Particle(n)
        start = time.perf_counter()
        run_jida(p)
        first = time.perf_counter() - start
        t_jida, (ys, sol) = timed(lambda p=p: run_jida(p), opts.repeats)
        ref = p.uptake(run_jida(p, rtol=1e-10, atol=1e-13)[0])
        st = {k: int(v) for k, v in sol.stats.items()}
        row = {"n": n, "jida": t_jida, "first": first, "err_jida": np.abs(p.uptake(ys) - ref).max(),
               "steps": st["steps"], "fact": st["factorizations"]}
        print(f"  n={n}: JIDA {t_jida:.3f} s (first call {first:.1f} s), {row['steps']} steps, "
              f"{row['fact']} factorizations ({row['fact'] / row['steps']:.3f}/step), max uptake "
              f"error {row['err_jida']:.1e}", flush=True)
        t_bdf, (cs, out) = timed(lambda p=p: run_scipy(p), opts.repeats)
        row.update(scipy=t_bdf, err_scipy=np.abs(p.uptake(cs) - ref).max())
        print(f"  n={n}: scipy BDF {t_bdf:.3f} s, {out.nlu} LU factorizations, {out.nfev} rhs "
              f"evaluations, max uptake error {row['err_scipy']:.1e}", flush=True)
        if have_ida:
            t_ida, (yi, out) = timed(lambda p=p: run_ida(p), opts.repeats)
            steps = len(run_ida(p, np.array([0.0, T1]))[1].t) - 1
            row.update(ida=t_ida, err_ida=np.abs(p.uptake(yi) - ref).max())
            print(f"  n={n}: IDA {t_ida:.3f} s, {steps} steps, {out.njev} factorizations "
                  f"({out.njev / steps:.3f}/step), max uptake error {row['err_ida']:.1e}",
                  flush=True)
        rows.append(row)
        print(f"time_ratio_scipy_bdf_n{n}: {t_bdf / t_jida:.2f}")
        if have_ida:
            print(f"time_ratio_ida_n{n}: {row['ida'] / t_jida:.2f}", flush=True)


if __name__ == "__main__":
    main()
