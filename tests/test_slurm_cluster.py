"""execution="slurm" against a real Slurm (scripts/slurm-start.sh): dask workers as Slurm jobs.

Each task leaves a marker file per run (task, pid, Slurm job, start time), so that the tests
compare what really ran with what the ledger accepted.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from campaign import checkpointed_map, read_ledger
from schedulers import SlurmScheduler, make_scheduler
from schedulers.slurm import (ENDED_STATES, default_prologue, job_states, scancel,
                              slurm_available)
from testkit import require

pytest.importorskip("dask_jobqueue")
pytestmark = pytest.mark.slow


def mark_then_sleep(item):
    """Leave ``<task>.<pid>.<slurm job>.<ns>`` in the item's folder, then sleep."""
    job = os.environ.get("SLURM_JOB_ID", "none")
    (Path(item["folder"]) / f"{item['task_id']}.{os.getpid()}.{job}.{time.time_ns()}").touch()
    time.sleep(item["sleep"])
    return {"pid": os.getpid(), "job": job}


@pytest.fixture
def slurm(tmp_path):
    """Options of a small SLURMCluster on this host. The workers import this module from
    tests/, which is on this process's sys.path only: the default job_script_prologue puts it
    on theirs."""
    require(slurm_available(), "no Slurm answers (start it with scripts/slurm-start.sh)")
    return {"interface": "lo", "memory": "1GB", "log_directory": tmp_path / "logs",
            "start_timeout": 120, "job_name": f"test-{os.getpid()}"}


def test_the_worker_job_script_says_what_each_option_does(tmp_path):
    scheduler = SlurmScheduler(partition="gpu", account="proj42", walltime="02:00:00",
                               cores=8, processes=2, memory="32GB", gpus_per_job=2,
                               job_extra_directives=["--qos=long"], interface="lo",
                               log_directory=tmp_path / "logs", job_name="fits")
    script = scheduler.job_script()
    for line in ["#SBATCH -J fits", "#SBATCH -p gpu", "#SBATCH -A proj42", "#SBATCH -t 02:00:00",
                 "#SBATCH --cpus-per-task=8", "#SBATCH --mem=30G", "#SBATCH --gres=gpu:2",
                 "#SBATCH --qos=long", f"#SBATCH -o {tmp_path}/logs/fits-%J.out"]:
        assert line + "\n" in script, line
    # margin 720 s (10 %): drain from 6480 s, dask's lifetime at 6840 s, +- 180 s
    assert "--lifetime 6840s --lifetime-stagger 180s" in script
    assert (scheduler.lifetime, scheduler.stagger, scheduler.drain) == (6840, 180, 360)
    assert "--nworkers 2" in script and "--nthreads 4" in script and "--interface lo" in script
    assert f'export PATH={Path(sys.executable).parent}:"$PATH"' in script
    tests = str(Path(__file__).parent.resolve())
    assert any(line.startswith("export PYTHONPATH=") and tests in line
               for line in default_prologue())
    assert scheduler.slots >= 2 * 8


@pytest.mark.parametrize("options, message", [
    (dict(queue="a", partition="b"), "give one of them"),
    (dict(cores=3, processes=2), "not a multiple of processes"),
    (dict(min_jobs=3, max_jobs=2), "max_jobs=2 must be an integer >= min_jobs=3"),
    (dict(memory="lots"), "not a memory size"),
    (dict(walltime="soon"), "not a Slurm time"),
    (dict(walltime="00:10:00", lifetime_margin=600), "less than the walltime"),
    (dict(job_extra_directives="--qos=long"), "must be a list of strings"),
    (dict(gpus_per_job=0), "gpus_per_job=0"),
])
def test_bad_slurm_options_are_clear_errors(options, message):
    with pytest.raises(ValueError, match=message):
        make_scheduler("slurm", **options)


def runs_by_task(marks: Path) -> dict[str, list[tuple[int, str, float]]]:
    runs: dict[str, list[tuple[int, str, float]]] = {}
    for mark in marks.iterdir():
        tid, pid, job, ns = mark.name.split(".")
        runs.setdefault(tid, []).append((int(pid), job, int(ns) / 1e9))
    return runs


def check_nothing_ran_after_acceptance(ledger: Path, marks: Path) -> dict[str, list]:
    """Every task accepted, by one of its runs, and no run of it began after that one ended."""
    tasks = read_ledger(ledger)["tasks"]
    runs = runs_by_task(marks)
    for tid, rec in tasks.items():
        assert rec["status"] == "accepted", (tid, rec["status"], rec["error"])
        assert (rec["pid"], rec["result"]["job"]) in {(p, j) for p, j, _ in runs[tid]}, tid
        assert all(begun <= rec["ended"] for _, _, begun in runs[tid]), tid
        assert rec["worker"].startswith(f"slurm-job-{rec['result']['job']}/"), rec["worker"]
    return runs


def wait_ended(jobs: set[str], timeout: float = 30) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        states = job_states(sorted(jobs))
        if all(states.get(j) in ENDED_STATES for j in jobs) or time.monotonic() > deadline:
            return states
        time.sleep(0.5)


def test_every_task_runs_on_slurm_job_workers_and_the_jobs_end(slurm, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    items = [{"task_id": f"t{i:03d}", "folder": str(marks), "sleep": 0.01} for i in range(200)]
    camp = checkpointed_map(mark_then_sleep, items, ledger_path=tmp_path / "l.json",
                            execution="slurm", min_jobs=2, max_jobs=4, **slurm)
    assert camp.complete and len(camp.results) == 200
    runs = check_nothing_ran_after_acceptance(tmp_path / "l.json", marks)
    jobs = {r["job"] for r in camp.results}
    assert 2 <= len(jobs) <= 4 and "none" not in jobs
    assert sum(len(r) for r in runs.values()) == 200  # no worker was lost: each task ran once
    # the worker jobs are cancelled when the campaign ends
    states = wait_ended(jobs)
    assert all(states[j] in {"CANCELLED", "COMPLETED"} for j in jobs), states
    assert list((tmp_path / "logs").glob("*.err")), "the worker jobs' logs are in log_directory"


def test_cancelled_worker_job_its_tasks_rerun_elsewhere_none_after_acceptance(slurm, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    items = [{"task_id": f"t{i:03d}", "folder": str(marks), "sleep": 0.3} for i in range(120)]
    victim: dict[str, str] = {}

    def cancel_a_worker_job():  # as soon as one job has run a few tasks
        deadline = time.monotonic() + 120
        while not victim and time.monotonic() < deadline:
            jobs = [m.name.split(".")[2] for m in marks.iterdir()]
            if len(jobs) >= 10:
                victim["job"] = jobs[-1]
                victim["runs"] = str(sum(j == jobs[-1] for j in jobs))
                scancel(jobs[-1])
            time.sleep(0.02)

    killer = threading.Thread(target=cancel_a_worker_job, daemon=True)
    killer.start()
    camp = checkpointed_map(mark_then_sleep, items, ledger_path=tmp_path / "l.json",
                            execution="slurm", min_jobs=2, **slurm)
    killer.join(timeout=5)
    assert victim, "no worker job was cancelled"
    assert camp.complete
    runs = check_nothing_ran_after_acceptance(tmp_path / "l.json", marks)
    records = camp.records
    ran_on_victim = [t for t, r in runs.items() if any(j == victim["job"] for _, j, _ in r)]
    rerun = [t for t in ran_on_victim if records[t]["result"]["job"] != victim["job"]]
    assert rerun, f"the task(s) in flight on job {victim['job']} had to run again elsewhere"
    assert all(len(runs[t]) >= 2 for t in rerun)
    assert job_states(victim["job"]).get(victim["job"]) in {"CANCELLED", "COMPLETING"}
    # the cancelled job was replaced: a third job ran tasks after it
    jobs = {j for r in runs.values() for _, j, _ in r}
    assert len(jobs) >= 3, jobs


def test_workers_retire_before_walltime_and_are_replaced_no_task_lost(slurm, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    scheduler = make_scheduler("slurm", walltime="00:01:00", min_jobs=2, **slurm)
    # margin 30 s: drain from 22.5-37.5 s on, closed by dask's lifetime at 37.5-52.5 s
    assert (scheduler.lifetime, scheduler.stagger, scheduler.drain) == (45.0, 7.5, 15.0)
    items = [{"task_id": f"t{i:03d}", "folder": str(marks), "sleep": 0.4} for i in range(200)]
    camp = checkpointed_map(mark_then_sleep, items, ledger_path=tmp_path / "l.json",
                            execution=scheduler)  # about 40 s of work for 2 workers
    assert camp.complete
    runs = check_nothing_ran_after_acceptance(tmp_path / "l.json", marks)
    by_job: dict[str, list[float]] = {}
    for r in runs.values():
        for _, job, at in r:
            by_job.setdefault(job, []).append(at)
    assert len(by_job) >= 3, f"retired workers were replaced by new jobs: {sorted(by_job)}"
    first = sorted(by_job, key=lambda j: min(by_job[j]))[:2]
    for job in first:  # ran at most the lifetime (+ stagger), well before the walltime
        assert max(by_job[job]) - min(by_job[job]) < 40, (job, by_job[job])
    states = wait_ended(set(by_job))
    assert not [j for j, s in states.items() if s == "TIMEOUT"], states
    assert all(states[j] == "COMPLETED" for j in first), states  # retired, not killed
    assert all(rec["interruptions"] == 0 for rec in camp.records.values())
