"""scripts/slurm-cluster-stop.sh leaves nothing behind, and scripts/slurm-cluster.sh brings the
same cluster back: a real stop and start (about 5 s together), then the cluster is as the other
tests found it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from clusterkit import NODES, START, STOP, netns, node_states, run_script, state_dir

LINKS = ("ds3-br", *(f"ds3-{node}" for node in NODES))


def live_processes() -> dict[int, tuple[int, str]]:
    """pid -> (its network namespace's inode, its command line), zombies left out."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            os.readlink(entry / "exe")  # fails for a zombie
            ns = os.stat(entry / "ns" / "net").st_ino
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        found[int(entry.name)] = (ns, cmdline)
    return found


def ip(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout


@pytest.mark.slow
def test_the_stop_script_removes_every_namespace_link_mount_and_daemon(cluster):
    state = state_dir(cluster)
    namespaces = {os.stat(f"/run/netns/{netns(node)}").st_ino for node in NODES}
    before = live_processes()
    ours = {pid for pid, (ns, cmd) in before.items() if ns in namespaces or str(state) in cmd}
    assert len(ours) >= 4, "slurmctld and three slurmd should be running"
    one_node = subprocess.run(["sinfo", "-h", "-o", "%P %D"], capture_output=True, text=True,
                              env={k: v for k, v in os.environ.items() if k != "SLURM_CONF"})
    try:
        run_script(STOP)
        names = ip("netns", "list")
        assert not [n for n in NODES if netns(n) in names], names
        links = ip("-o", "link", "show")
        assert not [link for link in LINKS if f" {link}:" in links or f" {link}@" in links], links
        after = live_processes()
        left = {pid: cmd for pid, (ns, cmd) in after.items()
                if ns in namespaces or str(state) in cmd or pid in ours and cmd == before[pid][1]}
        assert not left, f"still running after the stop script: {left}"
        mounts = Path("/proc/mounts").read_text()
        assert str(state) not in mounts
        if (state / "run" / "netns-mount").exists():
            pytest.fail("the stop script kept its note of the /run/netns mount")
        assert node_states(cluster) == {}
        # the one-node cluster of scripts/slurm-start.sh is untouched
        again = subprocess.run(["sinfo", "-h", "-o", "%P %D"], capture_output=True, text=True,
                               env={k: v for k, v in os.environ.items() if k != "SLURM_CONF"})
        assert (again.returncode, again.stdout) == (one_node.returncode, one_node.stdout)
    finally:
        run_script(START)
    assert node_states(cluster) == {node: "idle" for node in NODES}
    hosts = subprocess.run(["srun", "-N3", "hostname"], capture_output=True, text=True,
                           timeout=120, check=True).stdout.split()
    assert sorted(hosts) == list(NODES)
