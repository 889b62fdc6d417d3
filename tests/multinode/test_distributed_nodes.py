"""distributed.initialize and distributed.run under `srun -N2` on the 3-node cluster: two
processes on two nodes (two network namespaces: they can only meet over the cluster's subnet)
form one JAX process group and give the one-process fit."""

from __future__ import annotations

import secrets
import sys

import pytest
from clusterkit import NODES

from testkit import PYTHON, ROOT

sys.path.insert(0, str(ROOT / "tests" / "distributed"))  # the fit script's helpers
from distkit import FIT, assert_same_fit, env, launches, loads, owner_of, read, run  # noqa: E402


@pytest.mark.slow
def test_srun_over_two_nodes_forms_one_jax_process_group(shared, tmp_path, cluster):
    one, two = tmp_path / "one", shared / "two"  # the nodes' run in the shared folder
    one.mkdir()
    two.mkdir()
    run([PYTHON, str(FIT), str(one), "--init"])  # the one-process reference
    job_env = env(secrets.token_hex(32))  # the job's secret, exported as a user would
    job_env["SLURM_CONF"] = str(cluster)
    run(["srun", "-N2", "-n2", "--time=5", "sh", "-c",
         'hostname >"$1/host.$SLURM_PROCID" && exec "$2" "$3" "$1" --init',
         "sh", str(two), PYTHON, str(FIT)], env=job_env)
    hosts = {rank: (two / f"host.{rank}").read_text().strip() for rank in (0, 1)}
    assert hosts[0] != hosts[1] and set(hosts.values()) <= set(NODES), hosts
    fit, reference = read(two / "fit.json"), read(one / "fit.json")
    assert_same_fit(fit["tr"], reference["tr"])
    assert loads(two) == owner_of(fit["assignment"]) and len(fit["assignment"]) == 2
    for rank, launch in launches(two).items():
        assert launch == {"source": "slurm", "process_id": rank, "num_processes": 2,
                          "initialized": True, "jax_process_count": 2, "jax_process_index": rank}
    assert sorted(launches(two)) == [0, 1]
    print(f"\nprocess 0 on {hosts[0]}, process 1 on {hosts[1]}: one JAX process group")
