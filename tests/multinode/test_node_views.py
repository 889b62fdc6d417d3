"""The nodes of scripts/slurm-cluster.sh see the shared folder as a cluster's nodes see its shared
file system: each through a FUSE view of its own (bindfs, attributes cached), whose locks exclude
neither the host's nor another node's, while the host (the login node) sees the folder itself.
The other several-node tests keep their campaigns there."""

from __future__ import annotations

import fcntl
import os
import subprocess

from clusterkit import NODES, shared_dir


def on_nodes(*command: str, nodes: int = 3) -> dict[str, str]:
    """node -> what ``command`` printed there, run once on each of ``nodes`` nodes."""
    out = subprocess.run(["srun", f"-N{nodes}", "--ntasks-per-node=1", "--time=2", "sh", "-c",
                          'printf "%s %s\\n" "$(hostname)" "$(' + " ".join(command) + ')"'],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if line.strip())


def test_each_node_sees_the_shared_folder_through_a_fuse_view_of_its_own(cluster):
    shared = str(shared_dir(cluster))
    mounts = on_nodes("awk", f"'$2 == \"{shared}\" {{ print $3 }}'", "/proc/self/mounts")
    assert mounts == {node: "fuse" for node in NODES}, mounts
    assert not os.path.ismount(shared), "the host should see the folder itself"


def test_a_lock_the_host_holds_does_not_exclude_a_node(shared, cluster):
    """As NFS with local locks or Lustre's localflock: `flock` alone is no exclusion here, which
    is what the ledger's exclusive-create owner files are for (docs/ledger.md)."""
    lock = shared / "held.lock"
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        got = on_nodes(f"flock -n -E 7 {lock} true; echo $?", nodes=1)
    assert list(got.values()) == ["0"], f"a node's flock of a file the host holds: {got}"
