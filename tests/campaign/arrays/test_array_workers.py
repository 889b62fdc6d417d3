"""Array workers (`campaign worker`) sharing one ledger by leases and fragments, run as real
processes: all tasks accepted once, a SIGKILLed worker's task, and the rest of its share, reclaimed
after their leases expire, SIGUSR1/SIGTERM release the running task as interrupted.

A worker that must hold a task when the test kills or signals it runs one that never ends
(``hang_in``), and workers that must all take part wait for each other (``together``): what the
tests assert never depends on how fast the workers start."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import orjson
import pytest
from testkit import PYTHON, ROOT, child_env, wait_until

from campaign import read_ledger
from campaign._array._plan import plan_submission
from campaign._array._workdir import merge_fragments
from campaign._ledger._paths import LedgerPaths

TASK = ROOT / "tests" / "array_data" / "array_task.py"


def setup(tmp_path: Path, n: int, sleep: float, elements: int | None = None,
          **extra) -> tuple[Path, Path, str]:
    marks = tmp_path / "marks"
    marks.mkdir()
    ledger = tmp_path / "ledger.json"
    spec = tmp_path / "spec.toml"
    spec.write_text(f'target = "{TASK}:run"\nitems = "items.json"\nledger = "ledger.json"\n')
    (tmp_path / "items.json").write_text("[]")
    items = [{"task_id": f"t{i:03d}", "x": i, "sleep": sleep, "marks": str(marks), **extra}
             for i in range(n)]
    sub = plan_submission(items, ledger_path=ledger).record(elements=elements)
    assert len(sub.plan.to_run) == n
    return ledger, spec, sub.id


def start_worker(spec: Path, submission: str, index: int, lease: float = 60.0) -> subprocess.Popen:
    env = dict(child_env(), SLURM_ARRAY_JOB_ID="777", SLURM_ARRAY_TASK_ID=str(index))
    return subprocess.Popen([PYTHON, "-m", "campaign._cli", "worker", str(spec), "--submission",
                             submission, "--lease-seconds", str(lease), "--merge-every", "0.5"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def runs_of(marks: Path) -> dict[str, list[tuple[str, float]]]:
    runs: dict[str, list[tuple[str, float]]] = {}
    for mark in marks.glob("*.start"):
        tid, worker, _, ns, _ = mark.name.split(".")
        runs.setdefault(tid, []).append((worker, int(ns) / 1e9))
    return runs


def began_a_task(marks: Path, worker: str = "") -> list[Path]:
    """The start marks (of one worker's runs, if given)."""
    return [m for m in marks.glob("*.start") if not worker or m.name.split(".")[1] == worker]


def lease_of(ledger: Path, worker: str) -> dict:
    """The lease a worker holds (exactly one)."""
    folder = LedgerPaths.of(ledger).work / "leases"
    leases = [orjson.loads(p.read_bytes()) for p in folder.glob("*.json")]
    (held,) = [lease for lease in leases if lease["owner"]["worker"] == worker]
    return held


def finish(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err


def test_three_workers_share_a_submission(tmp_path):
    ledger, spec, sid = setup(tmp_path, 120, 0.01, together=3)  # each waits for the others
    procs = [start_worker(spec, sid, i) for i in range(3)]
    finish(procs)
    tasks = read_ledger(ledger)["tasks"]
    assert all(rec["status"] == "accepted" for rec in tasks.values())
    assert [rec["result"]["x2"] for rec in tasks.values()] == [2 * i for i in range(120)]
    runs = runs_of(tmp_path / "marks")
    assert all(len(runs[tid]) == 1 for tid in tasks)  # each task ran once, in one element
    workers = {rec["worker"] for rec in tasks.values()}
    assert workers == {"777_0", "777_1", "777_2"}
    assert not list(LedgerPaths.of(ledger).work.glob("leases/*.json"))  # every lease released
    assert merge_fragments(ledger) == 0  # everything already merged


def test_a_killed_workers_task_is_reclaimed_after_its_lease_expires(tmp_path):
    ledger, spec, sid = setup(tmp_path, 40, 0.01, hang_in="0")  # element 0 holds its task
    marks = tmp_path / "marks"
    victim = start_worker(spec, sid, 0, lease=1.5)
    wait_until(lambda: began_a_task(marks, "0"), "worker 0 to begin a task")
    victim.send_signal(signal.SIGKILL)
    victim.communicate()
    expired = lease_of(ledger, "777_0")["expires"]  # dead: nobody renews or takes it yet
    finish([start_worker(spec, sid, i, lease=1.5) for i in (1, 2)])
    tasks = read_ledger(ledger)["tasks"]
    assert all(rec["status"] == "accepted" for rec in tasks.values())
    lost = [tid for tid, rec in tasks.items() if rec["interruptions"]]
    assert len(lost) == 1
    rec = tasks[lost[0]]
    assert rec["history"][-1]["error"]["type"] == "WorkerLost"
    assert "777_0" in rec["history"][-1]["error"]["message"] and rec["worker"] != "777_0"
    runs = runs_of(marks)
    assert sorted(w for w, _ in runs[lost[0]])[0] == "0" and len(runs[lost[0]]) == 2
    # the reclaimed run began only after the dead worker's lease had expired
    first, second = sorted(runs[lost[0]], key=lambda r: r[1])
    assert first[0] == "0" and second[1] >= expired


def test_a_killed_elements_share_finishes_elsewhere_after_its_lease_expires(tmp_path):
    """Shares of 5 tasks (one element planned): element 0 is killed in the first task of its
    share; the others take the share over once its lease expires and run its other tasks, each
    once, never before."""
    ledger, spec, sid = setup(tmp_path, 40, 0.01, elements=1, hang_in="0")
    marks, work = tmp_path / "marks", LedgerPaths.of(ledger).work / sid
    assert orjson.loads((work / "shares.json").read_bytes())["size"] == 5
    victim = start_worker(spec, sid, 0, lease=1.5)
    wait_until(lambda: began_a_task(marks, "0"), "worker 0 to begin a task")
    victim.send_signal(signal.SIGKILL)
    victim.communicate()
    (share,) = [p for p in (work / "shares").glob("*.json")
                if orjson.loads(p.read_bytes())["owner"]["worker"] == "777_0"]
    expired = orjson.loads(share.read_bytes())["expires"]
    ids = list(orjson.loads((work / "items" / share.name).read_bytes()))
    finish([start_worker(spec, sid, i, lease=1.5) for i in (1, 2)])
    tasks = read_ledger(ledger)["tasks"]
    assert len(tasks) == 40 and all(rec["status"] == "accepted" for rec in tasks.values())
    runs = runs_of(marks)
    (held,) = [tid for tid in ids if any(w == "0" for w, _ in runs[tid])]
    assert tasks[held]["interruptions"] == 1 and len(runs[held]) == 2
    for tid in ids:
        later = [r for r in runs[tid] if r[0] != "0"]
        assert len(later) == 1 and later[0][1] >= expired, (tid, runs[tid])
    assert all(len(runs[tid]) == 1 for tid in tasks if tid != held)
    assert (work / "shares" / share.name.replace(".json", ".done")).exists()


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGTERM])
def test_a_signal_releases_the_running_task_as_interrupted(tmp_path, signum):
    ledger, spec, sid = setup(tmp_path, 6, 0.01, hang_in="0")  # element 0 holds its task
    proc = start_worker(spec, sid, 0)
    (mark,) = wait_until(lambda: began_a_task(tmp_path / "marks"), "the worker to begin a task")
    held = mark.name.split(".")[0]  # the task it hangs in (where it starts: its first share)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and f"stopped by signal {int(signum)}" in err
    tasks = read_ledger(ledger)["tasks"]
    assert tasks[held]["status"] == "interrupted"
    assert signal.Signals(signum).name in tasks[held]["error"]["message"]
    assert not list(LedgerPaths.of(ledger).work.glob("leases/*.json"))  # released at once
    finish([start_worker(spec, sid, 1)])
    tasks = read_ledger(ledger)["tasks"]
    assert all(rec["status"] == "accepted" for rec in tasks.values())
    assert tasks[held]["attempts"] == 2 and tasks[held]["worker"] == "777_1"


def test_a_driver_is_refused_while_workers_hold_leases(tmp_path):
    from campaign import DriverBusyError, checkpointed_map

    ledger, spec, sid = setup(tmp_path, 4, 0.01, hang_in="0")  # element 0 holds its task
    proc = start_worker(spec, sid, 0)
    (mark,) = wait_until(lambda: began_a_task(tmp_path / "marks"), "the worker to begin a task")
    held = mark.name.split(".")[0]
    with pytest.raises(DriverBusyError, match="array worker"):
        checkpointed_map(lambda it: {}, [{"task_id": "t000"}], ledger_path=ledger)
    status = subprocess.run([PYTHON, "-m", "campaign._cli", "status", str(ledger)],
                            env=child_env(), capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    line = next(x for x in status.stdout.splitlines() if x.strip().startswith(held))
    assert "worker 777_0" in line  # which array element holds which task
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert os.path.exists(ledger)
