"""Fit the diffusion coefficient D and the reaction rate k of three particles from uptake data.

The model (`solvers.dae.ParticleModel`) is a sphere discretized radially with an algebraic
surface node, solved by `pdesolve` with `JIDA` (a sparse index-1 DAE); the six experiments (two
solution concentrations per particle A, B, C) are synthetic, made from known D, k with seeded
noise (`solvers.dae.particle_experiments`). First each particle is fitted on its own, recorded in
a checkpointed campaign (the solver page's ``fit_particle``). Then all six experiments are
fitted jointly, data-parallel over the devices (D and k per particle), as one more task of the
same ledger. Both are printed against the truth with standard errors. Run it again and nothing
is fitted again: every fit is kept from the ledger (a change of PARTICLES_CELLS or
PARTICLES_TIMES changes the items, so the ledger refuses the old fits: `campaign forget LEDGER
--refused`, or another LEDGER).

    python examples/three_particles.py [LEDGER]        # default: three_particles.json

Environment: PARTICLES_CELLS (radial cells, default 40), PARTICLES_TIMES (measurement times,
default 30), PARTICLES_DEVICES (emulated CPU devices for the joint fit, default 3).
"""

from __future__ import annotations

import logging
import os
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_num_cpu_devices", int(os.environ.get("PARTICLES_DEVICES", "3")))

import numpy as np  # noqa: E402

import solvers as ds  # noqa: E402
from campaign import checkpointed_map  # noqa: E402
from solvers.dae import (  # noqa: E402
    PARTICLES,
    SOLUTIONS,
    TIMES,
    ParticleModel,
    ParticleSpec,
    particle_experiments,
)

CELLS = int(os.environ.get("PARTICLES_CELLS", "40"))
N_TIMES = int(os.environ.get("PARTICLES_TIMES", str(TIMES.size)))

solver = ds.dae.JIDA(rtol=1e-10, atol=1e-12)  # tight: a fit needs a smooth cost (GRAD_TOL)
model = ParticleModel(ParticleSpec(cells=CELLS), solver)
truth = model  # makes the data (at the true D, k), with the same compiled solve
times = np.linspace(TIMES[0], TIMES[-1], N_TIMES)
experiments = particle_experiments(model, seed=0, noise=0.01, times=times, truth=truth)
D = ds.inference.Parameter("D", 0.6, lower=1e-3, upper=10.0, log=True)
k = ds.inference.Parameter("k", 0.3, lower=1e-3, upper=10.0, log=True)
#: The gradient test. The residuals are divided by the noise (1 % of the signal), so the cost's
#: curvature is ~1e3-1e4 in log D, log k, and the solver's tolerance moves the gradient by
#: ~1e-4 at rtol 1e-10 (~1e-2 at rtol 1e-8): a much smaller grad_tol cannot be verified, and the
#: trust region collapses trying. At 1e-2 the remaining Newton step is ~1e-5 in log D, log k: a
#: thousandth of the standard errors (2-5 %).
GRAD_TOL = 1e-2


def fit_particle(item):
    mine = tuple(e for e in experiments if e.id.startswith(item["task_id"]))
    problem = ds.inference.InferenceProblem(mine, parameters=(D, k))
    res = ds.inference.optsolve(problem, ds.inference.NewtonTrustRegion(grad_tol=GRAD_TOL))
    return {"D": float(res[D]), "k": float(res[k]), "converged": bool(res.converged),
            "D_se": res.standard_error(D), "k_se": res.standard_error(k)}


def fit_jointly(item):
    """All six experiments at once, split over the devices; D and k per particle."""
    problem = ds.inference.InferenceProblem(experiments, per_experiment=(D, k),
                                            groups=lambda e: e.id.split("-")[0])
    layout = ds.Layout(mesh=ds.global_mesh(("data",)))
    lowered = ds.lower(problem, layout=layout)
    res = ds.inference.optsolve(lowered, ds.inference.TrustRegion(grad_tol=GRAD_TOL))
    fits = {}  # a result is flat: "A D", "A D_se", ...
    for name in PARTICLES:
        fits |= {f"{name} D": float(res[D, name]), f"{name} k": float(res[k, name]),
                 f"{name} D_se": res.standard_error((D, name)),
                 f"{name} k_se": res.standard_error((k, name))}
    return {"converged": bool(res.converged), "cost": float(res.cost), **fits,
            "devices": len(jax.devices()),
            "per_device": str([len(a) for a in lowered.assignment])}


def report(name: str, fitted: dict[str, float]) -> str:
    """One line: fitted values, standard errors, and how many of them from the truth."""
    parts = []
    for p, true_value in zip(("D", "k"), PARTICLES[name]):
        z = abs(fitted[p] - true_value) / fitted[f"{p}_se"]
        parts.append(f"{p} = {fitted[p]:.4f} ± {fitted[f'{p}_se']:.4f} (truth {true_value}, "
                     f"{z:.1f} SE)")
    return f"  {name}: " + ", ".join(parts)


def main(ledger_path: str = "three_particles.json") -> None:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    start = time.perf_counter()
    size = {"cells": CELLS, "times": N_TIMES}  # in the items: other sizes are other fits
    items = [{"task_id": name, **size} for name in PARTICLES]
    campaign = checkpointed_map(fit_particle, items, ledger_path=ledger_path)
    print(f"per-particle fits (checkpointed in {ledger_path}): {campaign}; {campaign.summary} "
          f"({campaign.elapsed:.1f} s)")
    for task_id in campaign.task_ids:
        result = campaign.result(task_id)
        if result is not None:
            print(report(task_id, result) + f", converged = {result['converged']}")
    for failure in campaign.failures:
        print(f"  {failure}")

    joint = checkpointed_map(fit_jointly, [{"task_id": "joint", **size}],
                             ledger_path=ledger_path)
    res = joint.result("joint")
    if res is None:
        print(f"joint fit: {joint.failures[0] if joint.failures else joint}")
    else:
        print(f"joint fit of {len(experiments)} experiments on {res['devices']} devices "
              f"(experiments per device: {res['per_device']}), checkpointed in {ledger_path}: "
              f"{joint.summary}; converged = {res['converged']}, cost = {res['cost']:.4g}")
        for name in PARTICLES:
            print(report(name, {key.split()[1]: value for key, value in res.items()
                                if key.startswith(f"{name} ")}))

    # What the solver does for one experiment (the solve that made the data of A-1: the same
    # compiled program, so this costs no compilation).
    sol = truth.solve(dict(zip(("D", "k"), PARTICLES["A"])), {"c_b": SOLUTIONS[0]}, times)
    print(f"solver (particle A, {CELLS + 1} unknowns, rtol {solver.rtol:g}): {sol.summary()}")
    print(f"done in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main(*sys.argv[1:2])
