"""The cost of a quadrature: idasRoberts_FSA_dns (Robertson from IDAS's inputs: rtol 1e-6,
atol (1e-8, 1e-14, 1e-6), the inconsistent y'0 that the initialization corrects, dense LU, 12
outputs 0.4 ... 4e10) with IDAS's quadrature G = int y3 dt, outside the error test (IDAS's
default) and inside it (``error_control=True``, atol 1e-6), against the same solve without a
quadrature, same run. Each compiled first (apart); then medians of --repeats warm runs,
alternating.

Printed:
    G and the steps of each solve
    time_without_s, time_quadrature_s, time_quadrature_error_control_s: warm medians
    time_ratio_quadrature, time_ratio_quadrature_error_control: each over the solve without

    python benchmarks/dae_quadrature.py [--repeats 15]
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

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reference"))
from ida_examples import (  # noqa: E402
    FSA_ATOL,
    FSA_P,
    FSA_RTOL,
    FSA_TS,
    FSA_Y0,
    FSA_YP0,
    fsa_problem,
)

import solvers.dae as dae  # noqa: E402


def rhs_q(t, y, yp, p):
    """idasRoberts_FSA_dns.c's rhsQ: G' = y3."""
    return y[2:3]


CASES = {"without": None,
         "quadrature": dae.Quadrature(rhs_q),
         "quadrature_error_control": dae.Quadrature(rhs_q, error_control=True, atol=1e-6)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    opts = parser.parse_args()
    solver = dae.JIDA(linear="dense", rtol=FSA_RTOL, atol=np.array(FSA_ATOL))

    def solve(q):
        sol = dae.pdesolve(fsa_problem(), solver, (0.0, 4e10), FSA_Y0, FSA_YP0,
                           saveat=dae.SaveAt(ts=FSA_TS), args=FSA_P, quadrature=q)
        jax.block_until_ready(sol.ys)
        return sol

    for name, q in CASES.items():
        start = time.perf_counter()
        sol = solve(q)
        assert sol.success, sol.message
        g = f", G = {float(sol.qs[-1, 0]):.8e}" if q is not None else ""
        print(f"first call (compiles), {name}: {time.perf_counter() - start:.2f} s, "
              f"{int(sol.stats['steps'])} steps{g}")
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(opts.repeats):
        for name, q in CASES.items():
            start = time.perf_counter()
            solve(q)
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    for name, m in medians.items():
        print(f"time_{name}_s: {m:.4f}")
    for name in ("quadrature", "quadrature_error_control"):
        print(f"time_ratio_{name}: {medians[name] / medians['without']:.3f}")


if __name__ == "__main__":
    main()
