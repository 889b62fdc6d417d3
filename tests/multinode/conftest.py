"""The several-node tests run on the 3-node Slurm of scripts/slurm-cluster.sh (CI starts it)."""

from __future__ import annotations

import os

import pytest
from clusterkit import NODES, cluster_conf, node_states

from testkit import require


@pytest.fixture(autouse=True)
def cluster(monkeypatch):
    """The cluster's slurm.conf, made this test's SLURM_CONF (sbatch, squeue and the jobs
    use it; the one-node cluster's /etc/slurm/slurm.conf stays the default elsewhere)."""
    conf = cluster_conf()
    require(os.geteuid() == 0, "the several-node tests kill and restart nodes: run them as root")
    states = node_states(conf) if conf.exists() else {}
    require(set(states) == set(NODES),
            f"no 3-node Slurm answers with SLURM_CONF={conf} (nodes {states or 'none'}); "
            "start it with `export DIFFSOUP_SLURM_CLUSTER=$(scripts/slurm-cluster.sh)`")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    return conf
