"""The cost of root functions: idaRoberts_dns (Robertson, rtol 1e-4, atol (1e-8, 1e-6, 1e-6),
y'0 given, dense LU, 12 outputs 0.4 ... 4e10) solved with IDA's ``grob`` roots
(``g = (y1 - 1e-4, y3 - 0.01)``, two roots found) against the same solve without roots, same
run. Both compiled first (apart); then medians of --repeats warm runs, alternating.

Printed:
    time_without_roots_s, time_with_roots_s: warm medians
    time_ratio_roots: with / without (1: free)

    python benchmarks/dae_roots.py [--repeats 15]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reference"))
from ida_examples import (  # noqa: E402
    ROBERTS_ATOL,
    ROBERTS_RTOL,
    ROBERTS_Y0,
    ROBERTS_YP0,
    roberts_problem,
)

import solvers.dae as dae  # noqa: E402

TS = 0.4 * 10.0 ** np.arange(12)


def grob(t, y, yp, args):
    return jnp.stack([y[0] - 1.0e-4, y[2] - 0.01])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    opts = parser.parse_args()
    solver = dae.JIDA(linear="dense", rtol=ROBERTS_RTOL, atol=np.array(ROBERTS_ATOL),
                      initialize=False)
    roots = dae.Roots(grob, max_roots=4)

    def solve(r):
        sol = dae.pdesolve(roberts_problem(), solver, (0.0, 4e10), ROBERTS_Y0, ROBERTS_YP0,
                           saveat=dae.SaveAt(ts=TS), roots=r)
        jax.block_until_ready(sol.ys)
        return sol

    for r in (None, roots):
        start = time.perf_counter()
        sol = solve(r)
        assert sol.success, sol.message
        print(f"first call (compiles), {'with' if r else 'without'} roots: "
              f"{time.perf_counter() - start:.2f} s, {sol.summary()}")
    print("roots found:", np.asarray(sol.root_ts)[:2], "components", np.asarray(sol.root_index)[:2])
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(opts.repeats):
        for with_roots in (False, True):
            start = time.perf_counter()
            solve(roots if with_roots else None)
            times[with_roots].append(time.perf_counter() - start)
    without, with_ = statistics.median(times[False]), statistics.median(times[True])
    print(f"time_without_roots_s: {without:.4f}")
    print(f"time_with_roots_s: {with_:.4f}")
    print(f"time_ratio_roots: {with_ / without:.3f}")


if __name__ == "__main__":
    main()
