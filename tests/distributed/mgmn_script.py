"""The multi-node snippets on emulated CPU devices: run by the launcher with 2 processes.

    python -m solvers.distributed.launch -n 2 mgmn_script.py OUT_DIR

initialize(), a "model" mesh over the devices of both processes, arrays placed replicated on the
layout's mesh, a collective across the processes, and pdesolve of the particle built on that
layout. cuDSS (GPU only) is replaced by the dense CPU backend, which on CPUs factors the whole
matrix in each process. Each process writes ``mgmn.<rank>.json``.
"""

import json
import sys
from pathlib import Path

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import solvers as ds
import solvers.distributed
from solvers._compat import shard_map
from solvers.dae import JIDA, ParticleSpec, SaveAt, pdesolve

launch = ds.distributed.initialize(cpu_devices=2)   # before any array is created
jax.config.update("jax_enable_x64", True)

mesh = ds.global_mesh(("model",))
layout = ds.Layout(mesh=mesh)
assert layout.mesh is not None
spec = ParticleSpec(cells=20)
problem = spec.build(layout=layout)
ts = np.linspace(0.1, 2.0, 5)
y0 = jax.device_put(spec.initial_state(), NamedSharding(layout.mesh, P()))
args = jax.device_put({"D": 0.5, "k": 0.2, "c_b": 1.0}, NamedSharding(layout.mesh, P()))
sol = pdesolve(problem, JIDA(linear="dense"), (0.0, 2.0), y0, saveat=SaveAt(ts=ts), args=args)
ys = np.asarray(jax.device_get(sol.ys.addressable_data(0)))

# a reduction across the processes of the mesh: each device adds its global index
ids = jax.device_put(np.arange(len(mesh.devices), dtype=np.float64),
                     NamedSharding(mesh, P("model")))
total = jax.jit(shard_map(lambda a: jax.lax.psum(a, "model"), mesh, P("model"), P()))(ids)

Path(sys.argv[1], f"mgmn.{launch.process_id}.json").write_text(json.dumps({
    "initialized": launch.initialized, "devices": len(mesh.devices),
    "local": len(jax.local_devices()), "processes": sorted({d.process_index for d in
                                                            mesh.devices.flat}),
    "uptake": np.asarray(spec.uptake(ys)).tolist(), "sum": float(total.addressable_data(0)[0])}))
