"""Checkpointed fits of three particles: the solver page's checkpointing example.

Run it, stop it (Ctrl-C, or kill it), run it again: finished fits are kept and not run again.

    python examples/checkpointing.py [LEDGER]       # default: particles.json

Until the solver core lands, `standin_solvers` plays `solvers` (`import solvers as ds`); the
function and the call below are the seed's, with only the import changed.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import standin_solvers as ds  # noqa: E402  (later: import solvers as ds)
from campaign import checkpointed_map  # noqa: E402

experiments = ds.three_particles()
D = ds.inference.Parameter("D", 1.0)
k = ds.inference.Parameter("k", 1.0)
#: Seconds each fit also sleeps, so that a demo (or a test) can interrupt the campaign.
EXTRA_SECONDS = float(os.environ.get("PARTICLES_EXTRA_SECONDS", "0"))


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
    print(campaign)
    for task_id in campaign.task_ids:
        result = campaign.result(task_id)
        if result is None:
            continue
        print(f"  {task_id}: D = {result['D']:.4f}, k = {result['k']:.4f}, "
              f"converged = {result['converged']}")
    for failure in campaign.failures:
        print(f"  {failure}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
