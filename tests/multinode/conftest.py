"""The several-node tests run on the 3-node Slurm of scripts/slurm-cluster.sh (CI starts it)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from clusterkit import NODES, cluster_conf, node_states, shared_dir

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


@pytest.fixture
def shared(cluster):
    """A folder of this test's own in the cluster's shared folder, which each node sees through a
    FUSE view of its own (scripts/slurm-cluster.sh): the campaign's ledger, spec and items go
    there, as on a cluster's shared file system. Removed after the test."""
    base = shared_dir(cluster)
    require(base.is_dir(), f"the cluster has no shared folder {base}: restart it with "
            "scripts/slurm-cluster-stop.sh && scripts/slurm-cluster.sh")
    folder = Path(tempfile.mkdtemp(prefix="test-", dir=base))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
