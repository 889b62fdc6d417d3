"""The cost of sensitivity error control: the forward sensitivities of idasRoberts_FSA_dns
(Robertson from IDAS's inputs: rtol 1e-6, atol (1e-8, 1e-14, 1e-6), the inconsistent y'0 that
the initialization corrects, dense LU, 12 outputs 0.4 ... 4e10) with respect to its three
parameters, ``jax.jacfwd`` of the states, with ``JIDA(sensitivity_error_control=True)`` (one
solve of the state and its 3 sensitivity blocks, all in the error test) against the default
(the steps' own derivatives), and the undifferentiated solve; same run. Each compiled first
(apart); then medians of --repeats warm runs, alternating.

Printed:
    the steps of each
    time_solve_s, time_jacfwd_s, time_jacfwd_error_control_s: warm medians
    time_ratio_error_control: jacfwd with the option over jacfwd without it
    time_ratio_jacfwd_error_control_to_solve: jacfwd with the option over the solve alone

    python benchmarks/dae_sensitivity_error_control.py [--repeats 15]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import dataclasses
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
    FSA_ATOL,
    FSA_P,
    FSA_RTOL,
    FSA_TS,
    FSA_Y0,
    FSA_YP0,
    fsa_problem,
)

import solvers.dae as dae  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    opts = parser.parse_args()
    own = dae.JIDA(linear="dense", rtol=FSA_RTOL, atol=np.array(FSA_ATOL))
    controlled = dataclasses.replace(own, sensitivity_error_control=True)

    def states(solver):
        def run(p):
            sol = dae.pdesolve(fsa_problem(), solver, (0.0, 4e10), FSA_Y0, FSA_YP0,
                               saveat=dae.SaveAt(ts=FSA_TS), args=p)
            return sol.ys, sol
        return run

    p = jnp.asarray(FSA_P)
    cases = {
        "solve": jax.jit(lambda q: states(own)(q)),
        "jacfwd": jax.jit(jax.jacfwd(states(own), has_aux=True)),
        "jacfwd_error_control": jax.jit(jax.jacfwd(states(controlled), has_aux=True)),
    }
    for name, fn in cases.items():
        start = time.perf_counter()
        _, sol = jax.block_until_ready(fn(p))
        assert sol.success, sol.message
        print(f"first call (compiles), {name}: {time.perf_counter() - start:.2f} s, "
              f"{int(sol.stats['steps'])} steps")
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(opts.repeats):
        for name, fn in cases.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(p))
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    for name, m in medians.items():
        print(f"time_{name}_s: {m:.4f}")
    print(f"time_ratio_error_control: "
          f"{medians['jacfwd_error_control'] / medians['jacfwd']:.3f}")
    print(f"time_ratio_jacfwd_error_control_to_solve: "
          f"{medians['jacfwd_error_control'] / medians['solve']:.3f}")


if __name__ == "__main__":
    main()
