"""What the several-node tests share: the 3-node cluster of scripts/slurm-cluster.sh (where it
is, whether it answers, starting and stopping it, killing a node), `campaign` commands and the
run notes of node_task.py.

The cluster is found by ``$DIFFSOUP_SLURM_CLUSTER`` (the path of its slurm.conf, which
scripts/slurm-cluster.sh prints), else at the script's default place.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import orjson

from testkit import PATIENCE, PYTHON, ROOT, child_env

NODES = ("node1", "node2", "node3")
DEFAULT_CONF = Path("/tmp/diffsoup-slurm3/etc/slurm.conf")
TASK = Path(__file__).resolve().with_name("node_task.py")
START = ROOT / "scripts" / "slurm-cluster.sh"
STOP = ROOT / "scripts" / "slurm-cluster-stop.sh"


def cluster_conf() -> Path:
    return Path(os.environ.get("DIFFSOUP_SLURM_CLUSTER") or DEFAULT_CONF)


def state_dir(conf: Path) -> Path:
    return conf.parent.parent


def shared_dir(conf: Path) -> Path:
    """The cluster's shared folder: the host's own, seen by each node through a FUSE view of its
    own (scripts/slurm-cluster.sh)."""
    return state_dir(conf) / "shared"


def netns(node: str) -> str:
    return f"diffsoup-{node}"


def node_states(conf: Path) -> dict[str, str]:
    """node -> Slurm state (sinfo), or {} when the cluster does not answer."""
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True,
                             text=True, timeout=30, env=dict(os.environ, SLURM_CONF=str(conf)))
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if out.returncode != 0:
        return {}
    return dict(line.split() for line in out.stdout.splitlines() if line.strip())


def run_script(script: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                          timeout=PATIENCE + 60)
    assert proc.returncode == 0, f"{script.name} exited {proc.returncode}:\n{proc.stderr}"
    return proc


def kill_node(conf: Path, node: str) -> list[int]:
    """SIGKILL the node's slurmd and every process in its network namespace, as a node that
    loses its power loses them. Returns the pids killed."""
    pids = set()
    pidfile = state_dir(conf) / "run" / f"slurmd-{node}.pid"
    if pidfile.exists():
        pids.add(int(pidfile.read_text().strip()))
    listed = subprocess.run(["ip", "netns", "pids", netns(node)], capture_output=True,
                            text=True, check=True)
    pids.update(int(pid) for pid in listed.stdout.split())
    for pid in sorted(pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return sorted(pids)


def campaign(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "campaign._cli", *args], cwd=cwd, env=child_env(),
                          capture_output=True, text=True, timeout=120)


def make_campaign(folder: Path, marks: Path, n: int, sleep: float, *, lease: int = 60,
                  **extra) -> tuple[Path, Path, Path]:
    """A campaign of ``n`` node_task.py tasks in ``folder`` (the shared folder's), whose runs
    leave their notes in ``marks`` (made here; outside the nodes' views): (spec, ledger, marks)."""
    marks.mkdir()
    items = [{"task_id": f"t{i:03d}", "x": i, "sleep": sleep, "marks": str(marks), **extra}
             for i in range(n)]
    (folder / "items.json").write_bytes(orjson.dumps(items))
    spec = folder / "campaign.toml"
    spec.write_text(f'target = "{TASK}:run"\nitems = "items.json"\nledger = "ledger.json"\n'
                    f"[array]\nlease_seconds = {lease}\n")
    return spec, folder / "ledger.json", marks


def submit(spec: Path, *args: str) -> str:
    proc = campaign("submit", str(spec), *args, cwd=spec.parent)
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip().splitlines()[0]
    assert job.isdigit(), proc.stdout
    return job


def runs_of(marks: Path) -> dict[str, list[dict]]:
    """task -> its runs, each {"host", "element", "pid", "start", "end" (None: never ended)}."""
    found: dict[tuple, dict] = {}
    for mark in marks.iterdir():
        tid, host, element, pid, ns, kind = mark.name.split(".")
        run = found.setdefault((tid, host, element, pid), {"task": tid, "host": host,
                                                           "element": element, "pid": int(pid),
                                                           "start": None, "end": None})
        run[kind] = int(ns) / 1e9
    runs: dict[str, list[dict]] = {}
    for run in sorted(found.values(), key=lambda r: r["start"]):
        runs.setdefault(run.pop("task"), []).append(run)
    return runs


def assert_never_twice_at_once(runs: dict[str, list[dict]]) -> None:
    for tid, attempts in runs.items():
        for first, second in zip(attempts, attempts[1:]):
            assert first["end"] is None or first["end"] <= second["start"], \
                f"{tid} ran on {first['host']} and {second['host']} at once"


def element_nodes(job: str) -> dict[str, str]:
    """Array element ("<job>_<index>") -> the node Slurm ran it on."""
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", job, "-o", "%i %N"],
                         capture_output=True, text=True, check=True, timeout=30)
    return {element: node for element, node in (line.split() for line in out.stdout.splitlines()
                                                if len(line.split()) == 2)}
