"""Factor / refactor / solve times of one linear backend, and a particle-model pdesolve.

    python scripts/gpu/bench_cudss.py cudss --poisson 100 --cells 100000
    JAX_PLATFORMS=cpu python scripts/gpu/bench_cudss.py klu --poisson 40 --cells 100000

Prints ``name: value`` lines (medians of ``--repeats`` runs, seconds). gpu-check.sh runs the
cuDSS and the KLU side and prints both.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "cudss"))

from cudss_support import poisson3d  # noqa: E402 -- found through the sys.path entry above

from solvers.linear import Pattern, linear_solver  # noqa: E402 -- the checkout's, per sys.path


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def linear(name: str, m: int, repeats: int) -> None:
    backend = linear_solver(name)
    matrix = poisson3d(m)
    pattern = Pattern.from_scipy(matrix)
    values = np.asarray(matrix[pattern.rows, pattern.cols]).ravel()
    values_dev, b = jax.device_put(values), jax.device_put(np.ones(pattern.n))
    tag = f"{name} poisson3d n={pattern.n}"
    start = time.perf_counter()
    sym = backend.analyse(pattern)
    num = jax.block_until_ready(backend.factor(sym, values_dev))  # first: analysis + compile
    print(f"{tag} first factor (analysis, compile): {time.perf_counter() - start:.3f}", flush=True)
    factor = jax.jit(lambda v: backend.factor(sym, v))
    refactor = jax.jit(lambda n, v: backend.refactor(sym, n, v))
    solve = jax.jit(lambda n, b: backend.solve(sym, n, b))
    free = jax.jit(lambda n: backend.free(sym, n))

    def factor_free():
        new = factor(values_dev)
        jax.block_until_ready(new)
        free(new)
        return new

    factor_free()
    print(f"{tag} factor: {median_time(factor_free, repeats):.4f}", flush=True)
    refactor(num, values_dev)
    print(f"{tag} refactor: {median_time(lambda: refactor(num, values_dev), repeats):.4f}",
          flush=True)
    solve(num, b)
    print(f"{tag} solve: {median_time(lambda: solve(num, b), repeats):.4f}", flush=True)
    x = np.asarray(solve(num, b))
    print(f"{tag} residual: {np.abs(matrix @ x - 1.0).max():.2e}", flush=True)
    free(num)


def particle(name: str, cells: int, repeats: int) -> None:
    from solvers import dae

    spec = dae.ParticleSpec(cells=cells)
    problem = spec.build()
    args = {"D": 0.5, "k": 0.2, "c_b": 1.0}
    ts = np.linspace(0.0, 2.0, 11)

    def run():
        return dae.pdesolve(problem, dae.JIDA(linear=name), (0.0, 2.0), spec.initial_state(),
                            saveat=dae.SaveAt(ts=ts), args=args).ys

    start = time.perf_counter()
    jax.block_until_ready(run())
    print(f"{name} particle cells={cells} first solve (compile): "
          f"{time.perf_counter() - start:.3f}", flush=True)
    print(f"{name} particle cells={cells} pdesolve: {median_time(run, repeats):.4f}", flush=True)
    sol = dae.pdesolve(problem, dae.JIDA(linear=name), (0.0, 2.0), spec.initial_state(),
                       saveat=dae.SaveAt(ts=ts), args=args)
    print(f"{name} particle cells={cells} stats: {sol.summary()}", flush=True)
    print(f"{name} particle cells={cells} uptake(t=2): {float(spec.uptake(sol.ys)[-1]):.10f}",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("backend", choices=["cudss", "klu", "dense"])
    parser.add_argument("--poisson", type=int, default=0, help="grid side m (m^3 unknowns)")
    parser.add_argument("--cells", type=int, default=0, help="particle radial cells")
    parser.add_argument("--repeats", type=int, default=3)
    opts = parser.parse_args()
    print(f"platform: {jax.default_backend()} ({jax.devices()[0].device_kind})", flush=True)
    if opts.poisson:
        linear(opts.backend, opts.poisson, opts.repeats)
    if opts.cells:
        particle(opts.backend, opts.cells, opts.repeats)


if __name__ == "__main__":
    main()
