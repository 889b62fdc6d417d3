"""`campaign submit` job arrays on the real test Slurm (scripts/slurm-start.sh; CI starts it).

Every task run leaves marker files (task, array element, pid, start and end times), so the tests
check what really ran where and when against the ledger. Elements that must run at once wait for
each other (``together``), and an element the test kills holds a task that never ends
(``hang_in``): what the tests assert never depends on when Slurm starts each element."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
from pathlib import Path

import orjson
import pytest
from testkit import PATIENCE, PYTHON, ROOT, child_env, require, wait_until

from campaign import SubmitError, read_ledger, submit_array
from campaign._ledger._paths import LedgerPaths
from schedulers import slurm

TASK = ROOT / "tests" / "array_data" / "array_task.py"


@pytest.fixture(autouse=True)
def _need_slurm():
    require(slurm.slurm_available(), "no Slurm answers (start one with scripts/slurm-start.sh)")


def campaign(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "campaign._cli", *args], cwd=cwd, env=child_env(),
                          capture_output=True, text=True, timeout=120)


def make_campaign(tmp_path: Path, n: int, sleep: float, *, long_task: float | None = None,
                  lease: int = 60, **extra) -> tuple[Path, Path]:
    marks = tmp_path / "marks"
    marks.mkdir()
    items = [{"task_id": f"t{i:03d}", "x": i, "sleep": sleep, "marks": str(marks), **extra}
             for i in range(n)]
    if long_task is not None:
        items[0]["sleep"] = long_task
    (tmp_path / "items.json").write_bytes(orjson.dumps(items))
    spec = tmp_path / "campaign.toml"
    spec.write_text(f'target = "{TASK}:run"\nitems = "items.json"\nledger = "ledger.json"\n'
                    f"[array]\nlease_seconds = {lease}\n")
    return spec, tmp_path / "ledger.json"


def submit(spec: Path, *args: str) -> str:
    proc = campaign("submit", str(spec), *args, cwd=spec.parent)
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip().splitlines()[0]
    assert job.isdigit(), proc.stdout
    return job


def wait_for_job(job: str, timeout: float = PATIENCE + 60) -> dict[str, str]:
    watcher = slurm.JobWatcher(job, backoff=slurm.Backoff(0.2, cap=1.0))
    return watcher.wait(timeout=timeout)


def runs_of(marks: Path) -> dict[str, list[tuple[str, float, float | None]]]:
    """task -> [(element, start, end or None)]."""
    starts: dict[tuple[str, str, str], float] = {}
    ends: dict[tuple[str, str, str], float] = {}
    for mark in marks.iterdir():
        tid, element, pid, ns, kind = mark.name.split(".")
        (starts if kind == "start" else ends)[(tid, element, pid)] = int(ns) / 1e9
    runs: dict[str, list] = {}
    for (tid, element, pid), begun in starts.items():
        runs.setdefault(tid, []).append((element, begun, ends.get((tid, element, pid))))
    return runs


def assert_never_in_two_elements_at_once(runs) -> None:
    for tid, attempts in runs.items():
        attempts = sorted(attempts, key=lambda r: r[1])
        for (e1, _, end1), (e2, b2, _) in itertools.pairwise(attempts):
            assert end1 is None or end1 <= b2, f"{tid} ran in elements {e1} and {e2} at once"


@pytest.mark.slow
def test_500_tasks_on_a_4_element_array(tmp_path):
    spec, ledger = make_campaign(tmp_path, 500, 0.01, together=2)  # 2 elements at least
    job = submit(spec, "--array", "4", "--time", "5:00")
    states = wait_for_job(job)
    assert set(states.values()) == {"COMPLETED"}, states
    tasks = read_ledger(ledger)["tasks"]
    assert len(tasks) == 500 and all(r["status"] == "accepted" for r in tasks.values())
    assert {r["worker"] for r in tasks.values()} <= {f"{job}_{i}" for i in range(4)}
    assert len({r["worker"] for r in tasks.values()}) >= 2
    runs = runs_of(tmp_path / "marks")
    assert all(len(runs[tid]) == 1 for tid in tasks)
    run = next(r for r in read_ledger(ledger)["runs"] if r.get("job") == job)
    assert run["status"] == "submitted" and run["to_run"] == 500
    again = campaign("submit", str(spec), "--array", "2", cwd=tmp_path)  # nothing left
    assert again.returncode == 0 and "nothing to run" in again.stderr


def wait_for_element(marks: Path, element: str) -> int:
    """The pid of the worker of an array element, once it has started a task."""
    def pid() -> int:
        for mark in marks.iterdir():
            _, index, pid, _, _ = mark.name.split(".")
            if index == element:
                return int(pid)
        return 0

    return wait_until(pid, f"array element {element} to begin a task", interval=0.05)


def lease_of(ledger: Path, worker: str) -> dict:
    """The lease an array element holds (exactly one)."""
    folder = LedgerPaths.of(ledger).work / "leases"
    leases = [orjson.loads(p.read_bytes()) for p in folder.glob("*.json")]
    (held,) = [lease for lease in leases if lease["owner"]["worker"] == worker]
    return held


@pytest.mark.slow
@pytest.mark.parametrize("how", ["scancel", "SIGKILL"])
def test_a_lost_element_loses_nothing_and_no_task_runs_twice_at_once(tmp_path, how):
    spec, ledger = make_campaign(tmp_path, 60, 0.05, lease=3, hang_in="1")  # 1 holds its task
    job = submit(spec, "--array", "4")
    marks = tmp_path / "marks"
    pid = wait_for_element(marks, "1")
    if how == "scancel":  # SIGTERM: the worker releases its task at once
        slurm.scancel(f"{job}_1")
    else:  # killed outright (OOM killer, lost node): its lease must expire first
        expires = lease_of(ledger, f"{job}_1")["expires"]  # at least; heartbeats extend it
        os.kill(pid, signal.SIGKILL)
    states = wait_for_job(job)
    assert states[f"{job}_1"] in {"CANCELLED", "FAILED"}, states
    tasks = read_ledger(ledger)["tasks"]
    assert all(r["status"] == "accepted" for r in tasks.values())
    runs = runs_of(marks)
    assert_never_in_two_elements_at_once(runs)
    lost = [tid for tid, r in tasks.items() if r["interruptions"]]
    assert len(lost) == 1, "the lost element held one task"
    rec = tasks[lost[0]]
    last = rec["history"][-1]
    assert last["status"] == "interrupted" and last["worker"] == f"{job}_1"
    assert rec["worker"] != f"{job}_1" and len(runs[lost[0]]) == 2
    if how == "SIGKILL":
        assert last["error"]["type"] == "WorkerLost"
        first, second = sorted(runs[lost[0]], key=lambda r: r[1])
        assert first[0] == "1" and second[1] >= expires  # claimed again once the lease expired
    else:
        assert "SIGTERM" in last["error"]["message"]


@pytest.mark.slow
def test_array_throttle_runs_at_most_two_at_once(tmp_path):
    spec, ledger = make_campaign(tmp_path, 40, 0.05, together=2)  # two run at once, at least
    job = submit(spec, "--array", "4%2")
    most = 0

    def ended() -> bool:
        nonlocal most
        states = slurm.job_states(job)
        elements = {k: v for k, v in states.items() if "_" in k and "[" not in k}
        most = max(most, sum(v == "RUNNING" for v in elements.values()))
        return bool(states) and slurm.all_ended(states)

    wait_until(ended, f"array job {job} to end", interval=0.2)
    assert most <= 2  # never more than the throttle (polls may miss a moment, never add one)
    tasks = read_ledger(ledger)["tasks"]
    assert all(r["status"] == "accepted" for r in tasks.values())
    assert len({r["worker"] for r in tasks.values()}) >= 2


@pytest.mark.slow
def test_the_end_of_an_elements_time_records_interrupted_not_failed(tmp_path):
    spec, ledger = make_campaign(tmp_path, 3, 0.01, long_task=120)
    # one minute of walltime, SIGUSR1 45 s before its end: after about 15 s, when Slurm looks;
    # the worker must have begun t000 by then (the one time-bound left: Slurm sends the signal)
    job = submit(spec, "--array", "1", "--time", "1", "--signal-before-end", "45")
    states = wait_for_job(job)
    assert set(states.values()) == {"COMPLETED"}, states  # it stopped in good order
    rec = read_ledger(ledger)["tasks"]["t000"]
    assert rec["status"] == "interrupted" and rec["interruptions"] == 1
    assert "SIGUSR1" in rec["error"]["message"]
    tasks = read_ledger(ledger)["tasks"]
    assert {tasks[t]["status"] for t in ("t001", "t002")} == {"pending"}
    log = next((tmp_path / "slurm-logs").glob(f"{job}_0.out")).read_text()
    assert f"stopped by signal {int(signal.SIGUSR1)}" in log


def test_dry_run_prints_the_script_and_writes_nothing(tmp_path):
    spec, ledger = make_campaign(tmp_path, 3, 0.01)
    proc = campaign("submit", str(spec), "--array", "8%3", "--time", "10:00", "--dry-run",
                    cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --array=0-7%3" in proc.stdout and "--signal=B:USR1@120" in proc.stdout
    assert "campaign._cli worker" in proc.stdout and not ledger.exists()
    bad = campaign("submit", str(spec), "--array", "0", cwd=tmp_path)
    assert bad.returncode == 2 and "--array" in bad.stderr


def worker_script(tmp_path: Path) -> Path:
    """A user's own worker: `run_worker` over the ledger, for the submission in argv[1]."""
    path = tmp_path / "worker.py"
    path.write_text(f"import sys\nsys.path.insert(0, {str(TASK.parent)!r})\n"
                    "from array_task import run\nfrom campaign import run_worker\n"
                    "run_worker(run, 'ledger.json', sys.argv[1])\n")
    return path


def test_submit_array_runs_the_workers_it_is_given_and_returns_what_it_did(tmp_path):
    _, ledger = make_campaign(tmp_path, 4, 0.01)
    items = orjson.loads((tmp_path / "items.json").read_bytes())
    worker = worker_script(tmp_path)
    done = submit_array(items, ledger_path=ledger, array="0-1", workdir=tmp_path,
                        command=lambda submission: [PYTHON, str(worker), submission],
                        mem="200M")
    assert done.job is not None and done.job.isdigit()
    assert (done.to_run, done.kept, done.refused) == (4, 0, 0)
    assert done.script is not None and "#SBATCH --array=0-1" in done.script
    assert f"worker.py {done.submission}" in done.script and "#SBATCH --hold" in done.script
    run = read_ledger(ledger)["runs"][-1]
    assert (run["id"], run["job"], run["status"]) == (done.submission, done.job, "submitted")
    assert "#SBATCH --mem=200M" in done.script
    # what each element asked for, for the report (one CPU: Slurm's default)
    assert run["requested"] == {"cpus": 1, "memory_bytes": 200 << 20}
    wait_for_job(done.job)
    assert {r["status"] for r in read_ledger(ledger)["tasks"].values()} == {"accepted"}
    again = submit_array(items, ledger_path=ledger, array="0-1", workdir=tmp_path,
                         command=lambda submission: [PYTHON, str(worker), submission])
    assert (again.job, again.submission, again.to_run, again.kept) == (None, None, 0, 4)


def test_submit_array_refuses_what_slurm_would_and_writes_nothing(tmp_path):
    _, ledger = make_campaign(tmp_path, 2, 0.01)
    items = orjson.loads((tmp_path / "items.json").read_bytes())
    before = sorted(tmp_path.rglob("*"))

    def submit_with(**options):
        return submit_array(items, ledger_path=ledger, array="0-1", workdir=tmp_path,
                            command=lambda submission: ["true", submission], **options)

    with pytest.raises(SubmitError, match=r"^sbatch failed, nothing was submitted or written"):
        submit_with(partition="no_such_partition")
    with pytest.raises(SubmitError, match="mem='lots' is not a Slurm memory size"):
        submit_with(mem="lots")
    with pytest.raises(TypeError, match="'qos'"):
        submit_with(qos="long")
    dry = submit_with(time="10:00", dry_run=True)
    assert dry.job is None and dry.script is not None
    assert "--signal=B:USR1@120" in dry.script and "true '<submission>'" in dry.script
    assert sorted(tmp_path.rglob("*")) == before and not ledger.exists()


KILLED_AFTER_SBATCH = """
import os, signal, sys
from campaign import submit_array
items = [{"task_id": "t0", "x": 0, "sleep": 0.0, "marks": sys.argv[2]}]

def killed(job):
    print(job, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # between sbatch and the ledger's record

submit_array(items, ledger_path=sys.argv[1], command=lambda s: ["true"], array="1",
             on_submitted=killed)
"""


@pytest.mark.slow
def test_a_submit_killed_after_sbatch_is_told_the_job_to_cancel(tmp_path):
    spec, ledger = make_campaign(tmp_path, 3, 0.0)
    proc = campaign("submit", str(spec), "--array", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip()
    told = f"campaign: sbatch accepted job {job}, held until the ledger records it"
    assert told in proc.stderr and f"`scancel {job}`" in proc.stderr  # said before the record
    assert wait_for_job(job) == {f"{job}_0": "COMPLETED"}

    other = tmp_path / "killed.json"
    child = subprocess.run([PYTHON, "-c", KILLED_AFTER_SBATCH, str(other), str(tmp_path)],
                           env=child_env(), capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL
    held = child.stdout.strip()
    assert held.isdigit()
    queued = subprocess.run(["squeue", "-h", "-j", held, "-o", "%T %r"], capture_output=True,
                            text=True, check=True).stdout
    assert queued.startswith("PENDING") and "Held" in queued, queued  # nothing of it runs
    assert not other.exists() or held not in other.read_text()  # the ledger never knew it
    subprocess.run(["scancel", held], check=True)  # the advice, as printed
    assert wait_for_job(held) == {held: "CANCELLED"} or not subprocess.run(
        ["squeue", "-h", "-j", held], capture_output=True, text=True).stdout.strip()
