"""A fit split over processes by distributed.run; process 0 writes the result as JSON.

    python fit_script.py OUT_DIR [--init] [--newton] [--repeat]

Five experiments of a decay with a shared amplitude and rate and a per-experiment offset. Every
experiment's values are loaded by a function that leaves ``OUT_DIR/loads/<id>.<rank>``, so a test
sees which process loaded what. Each process writes ``pid.<rank>``, and with ``--init`` calls
`distributed.initialize()` first and writes what it returned to ``launch.<rank>.json``. Process 0
writes ``fit.json`` (``tr``, and ``newton`` with ``--newton``). With ``--repeat`` process 0 then
writes ``ready`` and fits again and again (for a test that kills a worker meanwhile).
Warnings (e.g. a refused connection) go to stderr.
"""

import json
import logging
import os
import sys
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402 -- after jax_enable_x64, as a user's script does
import numpy as np  # noqa: E402 -- with the imports it belongs to

import solvers as ds  # noqa: E402 -- after jax_enable_x64, as a user's script does
from solvers import distributed  # noqa: E402 -- after jax_enable_x64
from solvers.inference import Experiment, Measurement, Parameter, Study  # noqa: E402 -- same


def decay(params, conditions, t):
    return params["A"] * jnp.exp(-params["k"] * conditions["scale"] * t) + params["b"]


def rank() -> str:
    for name in ("DIFFSOUP_PROCESS_ID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        if name in os.environ:
            return os.environ[name]
    return "0"


def loader(eid, values, loads):
    def load():
        if loads is not None:
            (loads / f"{eid}.{rank()}").touch()
        return values
    return load


def study(loads):
    rng = np.random.default_rng(3)
    experiments = []
    for i in range(5):
        t = np.linspace(0.0, 4.0, 12 + i)
        scale = 1.0 + 0.3 * i
        y = 2.0 * np.exp(-0.7 * scale * t) + 0.1 * i + 0.01 * rng.standard_normal(t.size)
        eid = f"E{i}"
        experiments.append(Experiment(eid, decay, {"scale": scale},
                                      Measurement(t, loader(eid, y, loads), noise=0.01)))
    return Study(experiments, parameters=(Parameter("A", 1.0, 0.0, 10.0),
                                          Parameter("k", 0.3, 0.0, 10.0, log=True)),
                 per_experiment=(Parameter("b", 0.0),))


def summary(result):
    return {"values": dict(result.values), "cost": result.cost,
            "converged": bool(result.converged), "iterations": result.iterations}


def main():
    out, flags = Path(sys.argv[1]), set(sys.argv[2:])
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    (out / "loads").mkdir(parents=True, exist_ok=True)
    (out / f"pid.{rank()}").write_text(str(os.getpid()))
    if "--init" in flags:
        launch = distributed.initialize()
        (out / f"launch.{rank()}.json").write_text(json.dumps({
            "source": launch.source, "process_id": launch.process_id,
            "num_processes": launch.num_processes, "initialized": launch.initialized,
            "jax_process_count": jax.process_count(), "jax_process_index": jax.process_index()}))
    with distributed.run(study(out / "loads")) as lowered:
        fits = {"tr": summary(ds.inference.optsolve(lowered, ds.inference.TrustRegion()))}
        if "--newton" in flags:
            fits["newton"] = summary(ds.inference.optsolve(
                lowered, ds.inference.NewtonTrustRegion(grad_tol=1e-9)))
        fits["assignment"] = [list(a) for a in lowered.assignment]
        (out / "fit.json").write_text(json.dumps(fits))
        if "--repeat" in flags:
            (out / "ready").touch()
            for _ in range(1000):
                ds.inference.optsolve(lowered, ds.inference.TrustRegion())


if __name__ == "__main__":
    main()
