"""A worker whose clock runs ahead of the file server's by twice the bound the leases tolerate
(``lease_seconds / 4``: `campaign._array._skew.FRACTION`) measures the skew on the leases it
writes and warns, once, with the figure; a worker on the server's clock does not warn. The
clock is moved by libfaketime on the worker process alone. (Under libfaketime 0.9.10 a thread's
timed wait never ends, so these workers' leases are never renewed: what is checked is measured
on the claims.)"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess

import pytest
from testkit import PYTHON, ROOT, child_env, require, wait_until

from campaign import read_ledger
from campaign._array._plan import plan_submission

TASK = ROOT / "tests" / "array_data" / "array_task.py"
LEASE = 8.0  # so the bound is 2 s
AHEAD = 4.0  # twice it


def spec_in(view):
    """The spec file of the campaign in ``view`` (its ledger beside it)."""
    (view / "spec.toml").write_text(f'target = "{TASK}:run"\nitems = "items.json"\n'
                                    'ledger = "ledger.json"\n')
    (view / "items.json").write_text("[]")


def worker(spec, sub, index, *, ahead=None):
    env = dict(child_env(), SLURM_ARRAY_JOB_ID=str(3000 + index), SLURM_ARRAY_TASK_ID="0",
               SLURM_ARRAY_TASK_COUNT="1")
    command = [PYTHON, "-m", "campaign._cli", "worker", str(spec), "--submission", sub,
               "--lease-seconds", str(LEASE), "--merge-every", "0.5"]
    if ahead is not None:
        command = ["faketime", "-f", f"+{ahead:g}s", *command]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.parametrize("kind", ["sshfs", "bindfs-nolock"])
def test_a_worker_whose_clock_runs_ahead_warns_once(views, tmp_path, kind):
    require(shutil.which("faketime") is not None, "faketime not found (apt-get install faketime)")
    a, _, _ = views(kind)
    marks = tmp_path / "marks"
    marks.mkdir()
    spec_in(a)
    items = [{"task_id": f"t{i}", "x": i, "sleep": 0.05, "marks": str(marks)} for i in range(6)]
    sub = plan_submission(items, ledger_path=a / "ledger.json").record().id
    ahead = worker(a / "spec.toml", sub, 0, ahead=AHEAD)
    assert ahead.returncode == 0, ahead.stderr
    warnings = re.findall(r"this host's clock is \+(\d+\.\d) s .* off the file server's",
                          ahead.stderr)
    assert len(warnings) == 1, ahead.stderr
    assert AHEAD - 1.5 <= float(warnings[0]) <= AHEAD + 1.5  # the skew, as measured
    assert "lease_seconds" in ahead.stderr
    tasks = read_ledger(a / "ledger.json")["tasks"]
    assert {rec["status"] for rec in tasks.values()} == {"accepted"}

    items = [dict(item, task_id=f"u{i}") for i, item in enumerate(items)]
    sub = plan_submission(items, ledger_path=a / "ledger.json").record().id
    on_time = worker(a / "spec.toml", sub, 1)
    assert on_time.returncode == 0, on_time.stderr
    assert "clock is" not in on_time.stderr


def test_campaign_status_shows_a_skewed_worker(views, tmp_path):
    require(shutil.which("faketime") is not None, "faketime not found (apt-get install faketime)")
    a, b, _ = views("sshfs")
    marks = tmp_path / "marks"
    marks.mkdir()
    spec_in(a)
    items = [{"task_id": "held", "x": 0, "sleep": 0, "marks": str(marks), "hang_in": "0"}]
    sub = plan_submission(items, ledger_path=a / "ledger.json").record().id
    env = dict(child_env(), SLURM_ARRAY_JOB_ID="3100", SLURM_ARRAY_TASK_ID="0",
               SLURM_ARRAY_TASK_COUNT="1")
    proc = subprocess.Popen(
        ["faketime", "-f", f"+{AHEAD:g}s", PYTHON, "-m", "campaign._cli", "worker",
         str(a / "spec.toml"), "--submission", sub, "--lease-seconds", str(LEASE)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True)  # faketime runs the worker as its child: both are killed
    try:
        leases = a / "ledger.json.work" / "leases"
        # a skew past the bound, measured on the claim, is written into the lease at once
        wait_until(lambda: any(b"clock_skew" in p.read_bytes() for p in leases.glob("*.json")),
                   "the lease with its clock_skew")
        status = subprocess.run(
            [PYTHON, "-m", "campaign._cli", "status", str(b / "ledger.json")],
            env=child_env(), capture_output=True, text=True, timeout=120)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
    assert status.returncode == 0, status.stderr
    (line,) = [ln for ln in status.stdout.splitlines() if ln.startswith("clock ")]
    seconds = float(re.search(r" is \+(\d+\.\d) s off the file server's", line).group(1))
    assert AHEAD - 1.5 <= seconds <= AHEAD + 1.5, line


FAR = 1.5 * LEASE  # twice the 3/4 x lease_seconds two workers' clocks may differ by


def real_times(marks, task_id):
    """(worker element, start, end) of each run of ``task_id``, by the file system's clock
    (the marks' mtimes: libfaketime moves what the worker reads, not what the kernel stamps)."""
    runs = {}
    for mark in marks.glob(f"{task_id}.*"):
        _, element, pid, _, kind = mark.name.split(".")
        runs.setdefault((element, pid), {})[kind] = mark.stat().st_mtime
    return [(element, r["start"], r.get("end")) for (element, _), r in runs.items()]


@pytest.mark.parametrize("kind", ["bindfs-nolock", "sshfs"])
def test_every_run_that_overlapped_is_in_the_ledger_as_superseded(views, tmp_path, kind):
    """A worker whose clock is far ahead takes over the live lease of a worker on the file
    server's clock: the task runs twice at once. Both runs are in the ledger: the taker's as
    the task's outcome, the other's as a superseded attempt in its history; and the skewed
    worker warned."""
    require(shutil.which("faketime") is not None, "faketime not found (apt-get install faketime)")
    a, b, _ = views(kind)
    marks = tmp_path / "marks"
    marks.mkdir()
    spec_in(a)
    items = [{"task_id": "t0", "x": 0, "sleep": 3 * LEASE, "marks": str(marks)}]
    sub = plan_submission(items, ledger_path=a / "ledger.json").record().id
    env = dict(child_env(), SLURM_ARRAY_TASK_ID="0", SLURM_ARRAY_TASK_COUNT="1")
    command = [PYTHON, "-m", "campaign._cli", "worker", "--submission", sub,
               "--lease-seconds", str(LEASE), "--merge-every", "0.5"]
    on_time = subprocess.Popen([*command[:4], str(a / "spec.toml"), *command[4:]],
                               env=dict(env, SLURM_ARRAY_JOB_ID="4000"), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    wait_until(lambda: list(marks.glob("t0.0.*.start")), "the first worker to begin t0")
    ahead = subprocess.run(["faketime", "-f", f"+{FAR:g}s", *command[:4], str(b / "spec.toml"),
                            *command[4:]], env=dict(env, SLURM_ARRAY_JOB_ID="4001"),
                           capture_output=True, text=True, timeout=300)
    _, err = on_time.communicate(timeout=300)
    assert on_time.returncode == 0, err
    assert ahead.returncode == 0, ahead.stderr
    assert len(re.findall(r"this host's clock is \+\d+\.\d s", ahead.stderr)) == 1, ahead.stderr

    runs = real_times(marks, "t0")
    assert len(runs) == 2 and all(end is not None for _, _, end in runs), runs
    (_, s1, e1), (_, s2, e2) = runs
    assert s1 < e2 and s2 < e1  # they overlapped: the lease was taken over while it was live
    rec = read_ledger(a / "ledger.json")["tasks"]["t0"]
    assert rec["status"] == "accepted" and rec["worker"] == "4001_0", rec
    superseded = [e for e in rec["history"] if (e.get("error") or {}).get("type") == "WorkerLost"
                  and "so it ran twice" in e["error"]["message"]]
    assert len(superseded) == 1 and superseded[0]["worker"] == "4000_0", rec["history"]
