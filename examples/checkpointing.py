"""Checkpointed fits of three particles: the solver page's checkpointing example.

Run it, stop it (Ctrl-C, or kill it), run it again: finished fits are kept and not run again.

    python examples/checkpointing.py [LEDGER]       # default: particles.json

`fit_particle` and the `checkpointed_map` call are the seed's, with `import solvers as ds` and
`from campaign import checkpointed_map` as the only substitutions. The model here is the
closed-form decay of a tracer in a particle, c(t) = exp(-(k + D q^2) t), measured at two
conditions q per particle: six experiments A-1 ... C-2 with seeded noise.
"""

from __future__ import annotations

import logging
import os
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import solvers as ds  # noqa: E402
from campaign import checkpointed_map  # noqa: E402

TRUTH = {"A": (0.5, 0.2), "B": (1.0, 0.1), "C": (0.3, 0.6)}  # D, k of each particle
#: Seconds each fit also sleeps, so that a demo (or a test) can interrupt the campaign.
EXTRA_SECONDS = float(os.environ.get("PARTICLES_EXTRA_SECONDS", "0"))


def decay(params, conditions, times):
    return jnp.exp(-(params["k"] + params["D"] * conditions["q"] ** 2) * times)


def three_particles(seed: int = 0):
    rng, times = np.random.default_rng(seed), np.linspace(0.1, 2.0, 20)
    out = []
    for name, (d, k) in TRUTH.items():
        for n, q in enumerate((0.5, 1.5), start=1):
            values = np.exp(-(k + d * q * q) * times) + 0.002 * rng.standard_normal(times.size)
            out.append(ds.inference.Experiment(
                f"{name}-{n}", decay, {"q": q},
                ds.inference.Measurement(times, values, noise=0.002)))
    return tuple(out)


experiments = three_particles()
D = ds.inference.Parameter("D", 1.0, lower=0.0)
k = ds.inference.Parameter("k", 1.0, lower=0.0)


def fit_particle(item):
    mine = tuple(e for e in experiments if e.id.startswith(item["task_id"]))
    problem = ds.inference.InferenceProblem(mine, parameters=(D, k))
    res = ds.inference.optsolve(problem, ds.inference.NewtonTrustRegion(grad_tol=1e-5))
    time.sleep(EXTRA_SECONDS)
    return {"D": float(res[D]), "k": float(res[k]), "converged": bool(res.converged)}


def main(ledger_path: str = "particles.json") -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    items = [{"task_id": "A"}, {"task_id": "B"}, {"task_id": "C"}]
    campaign = checkpointed_map(fit_particle, items, ledger_path=ledger_path)
    print(f"{campaign}: {campaign.summary} ({campaign.elapsed:.1f} s)")
    for task_id in campaign.task_ids:
        result = campaign.result(task_id)
        if result is not None:
            d, kk = TRUTH[task_id]
            print(f"  {task_id}: D = {result['D']:.4f} (truth {d}), k = {result['k']:.4f} "
                  f"(truth {kk}), converged = {result['converged']}")
    for failure in campaign.failures:
        print(f"  {failure}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
