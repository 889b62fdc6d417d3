"""execution="slurm" against a real Slurm (scripts/slurm-start.sh): dask workers as Slurm jobs.

Each task leaves a marker file per run (task, pid, Slurm job, start time), so that the tests
compare what really ran with what the ledger accepted.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from testkit import PATIENCE, require, wait_until

from campaign import checkpointed_map, read_ledger
from schedulers import SlurmScheduler, make_scheduler
from schedulers.slurm import ENDED_STATES, default_prologue, job_states, scancel, slurm_available


def jobs_begun(marks: Path) -> set[str]:
    """The Slurm jobs whose workers have begun a task."""
    return {mark.name.split(".")[2] for mark in marks.iterdir()}


def mark_then_sleep(item):
    """Leave ``<task>.<pid>.<slurm job>.<ns>`` in the item's folder, then work ``sleep`` seconds.

    ``wait_for``: first wait until that file exists (the test lets the tasks go on once it
    has seen what it needs). ``fast_from_jobs``: no work once that many jobs have begun tasks.
    """
    job = os.environ.get("SLURM_JOB_ID", "none")
    marks = Path(item["folder"])
    (marks / f"{item['task_id']}.{os.getpid()}.{job}.{time.time_ns()}").touch()
    if item.get("wait_for"):
        deadline = time.monotonic() + 300  # only a hung test waits this long
        while not Path(item["wait_for"]).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{item['wait_for']} did not appear in 300 s")
            time.sleep(0.02)
    if len(jobs_begun(marks)) < item.get("fast_from_jobs", float("inf")):
        time.sleep(item["sleep"])
    return {"pid": os.getpid(), "job": job}


@pytest.fixture
def slurm(tmp_path):
    """Options of a small SLURMCluster on this host. The workers import this module from
    tests/, which is on this process's sys.path only: the default job_script_prologue puts it
    on theirs."""
    require(slurm_available(), "no Slurm answers (start it with scripts/slurm-start.sh)")
    return {"interface": "lo", "memory": "1GB", "log_directory": tmp_path / "logs",
            "start_timeout": 120, "job_name": f"test-{os.getpid()}-{tmp_path.name}"}


def test_execution_slurm_starts_its_own_cluster_never_local_workers(monkeypatch):
    """`DaskScheduler.start` builds the cluster it owns through the method the Slurm backend
    overrides: a Slurm scheduler asks Slurm for worker jobs, never starts local workers (whose
    tasks would complete as well, on the wrong machine)."""
    class Asked(Exception):
        pass

    asked = []

    def slurm_cluster(self):
        asked.append(self)
        raise Asked

    monkeypatch.setattr(SlurmScheduler, "_embedded_cluster", slurm_cluster)
    scheduler = SlurmScheduler(memory="1GB")
    with pytest.raises(Asked):
        scheduler.start(lambda item: item, lambda *event: None)
    assert asked == [scheduler]


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
    for line in default_prologue():  # this interpreter's environment, whichever it is
        assert line + "\n" in script, line
    assert scheduler.slots >= 2 * 8


def fake_python(root: Path, *, venv: bool) -> Path:
    """A Python installation's folders under ``root`` (a venv has bin/activate)."""
    (root / "bin").mkdir(parents=True)
    (root / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    if venv:
        (root / "bin" / "activate").write_text("# activate\n")
    return root


@pytest.mark.parametrize("kind", ["venv", "conda", "plain"])
def test_the_default_prologue_gives_the_workers_the_environment_it_is_given(tmp_path, kind):
    base = fake_python(tmp_path / "base", venv=False)
    if kind == "venv":  # python3 -m venv: its own prefix, the base interpreter beneath
        prefix = fake_python(tmp_path / "my env", venv=True)
    elif kind == "conda":  # a conda environment is an installation of its own
        prefix = base = fake_python(tmp_path / "conda" / "envs" / "fits", venv=False)
    else:
        prefix = base
    code = tmp_path / "code"
    code.mkdir()
    path = ["", str(code), str(prefix / "lib" / "python3.11" / "site-packages"),
            str(base / "lib" / "python3.11"), str(tmp_path / "missing"), str(code)]
    lines = default_prologue(prefix=prefix, base_prefix=base, exec_prefix=base,
                             executable=prefix / "bin" / "python3", path=path)
    if kind == "venv":
        assert lines[0] == f"source {shlex.quote(str(prefix / 'bin' / 'activate'))}"
        assert "'" in lines[0]  # the space in its path is quoted
    else:
        assert lines[0] == f'export PATH={shlex.quote(str(prefix / "bin"))}:"$PATH"'
    # the folders it imports from outside its installation, once each; nothing of its own
    assert lines[1:] == [f'export PYTHONPATH={code}${{PYTHONPATH:+:"$PYTHONPATH"}}']


def test_the_default_prologue_is_this_interpreters_environment():
    lines = default_prologue()
    assert lines == default_prologue(prefix=sys.prefix, base_prefix=sys.base_prefix,
                                     exec_prefix=sys.exec_prefix, executable=sys.executable,
                                     path=sys.path)
    if sys.prefix != sys.base_prefix:  # in a virtual environment, as most users install
        assert lines[0] == f"source {shlex.quote(str(Path(sys.prefix) / 'bin' / 'activate'))}"
    else:
        assert lines[0] == f'export PATH={shlex.quote(str(Path(sys.executable).parent))}:"$PATH"'
    tests = str(Path(__file__).parent.resolve())
    assert any(line.startswith("export PYTHONPATH=") and tests in line for line in lines)


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


@pytest.mark.parametrize("options, requested", [
    (dict(), {"cpus": 1, "memory_bytes": 2 * 10**9}),                    # the defaults: 2GB
    (dict(cores=4, memory="8GiB", processes=2), {"cpus": 2, "memory_bytes": 4 << 30}),
    (dict(cores=3, memory="1.5 GB"), {"cpus": 3, "memory_bytes": 1_500_000_000}),
])
def test_each_worker_process_is_said_to_have_its_share_of_the_job(options, requested):
    assert make_scheduler("slurm", **options).requested() == requested


def test_a_local_scheduler_requests_nothing():
    assert make_scheduler("serial").requested() is None
    assert make_scheduler("processes").requested() is None


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


def wait_ended(jobs: set[str], timeout: float = PATIENCE) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        states = job_states(sorted(jobs))
        if all(states.get(j) in ENDED_STATES for j in jobs) or time.monotonic() > deadline:
            return states
        time.sleep(0.5)


@pytest.mark.slow
def test_every_task_runs_on_slurm_job_workers_and_the_jobs_end(slurm, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    items = [{"task_id": f"t{i:03d}", "folder": str(marks), "sleep": 0.01} for i in range(200)]
    camp = checkpointed_map(mark_then_sleep, items, ledger_path=tmp_path / "l.json",
                            execution="slurm", min_jobs=2, max_jobs=4, **slurm)
    assert camp.complete and len(camp.results) == 200
    # each worker process's share of its job (memory="1GB", dask's units), for the report
    assert read_ledger(tmp_path / "l.json")["runs"][-1]["requested"] == {
        "cpus": 1, "memory_bytes": 10**9}
    runs = check_nothing_ran_after_acceptance(tmp_path / "l.json", marks)
    jobs = {r["job"] for r in camp.results}
    assert len(jobs) <= 4 and "none" not in jobs  # how many of them ran tasks is dask's choice
    assert sum(len(r) for r in runs.values()) == 200  # no worker was lost: each task ran once
    # the worker jobs are cancelled when the campaign ends
    states = wait_ended(jobs)
    assert all(states[j] in {"CANCELLED", "COMPLETED"} for j in jobs), states
    assert list((tmp_path / "logs").glob("*.err")), "the worker jobs' logs are in log_directory"


def cluster_jobs(name: str) -> set[str]:
    """The ids of the pending and running Slurm jobs named ``name``."""
    out = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True,
                         text=True, check=True).stdout
    return set(out.split())


@pytest.mark.slow
def test_cancelled_worker_job_its_tasks_rerun_elsewhere_none_after_acceptance(slurm, tmp_path):
    """Every task waits until a worker job has been cancelled (so it held one then) and its
    replacement submitted; then they all run."""
    marks, go = tmp_path / "marks", tmp_path / "go"
    marks.mkdir()
    items = [{"task_id": f"t{i:03d}", "folder": str(marks), "sleep": 0.1, "wait_for": str(go)}
             for i in range(40)]
    seen: dict[str, Any] = {}

    def cancel_a_worker_job():
        try:
            victim = min(wait_until(lambda: jobs_begun(marks), "a worker job's first task"))
            before = cluster_jobs(slurm["job_name"])
            scancel(victim)
            seen["victim"] = victim
            seen["replacement"] = wait_until(
                lambda: cluster_jobs(slurm["job_name"]) - before - {victim},
                "a job that replaces the cancelled one")
        except BaseException as exc:  # noqa: BLE001 -- reported by the test, not lost here
            seen["error"] = exc
        finally:
            go.touch()

    killer = threading.Thread(target=cancel_a_worker_job, daemon=True)
    killer.start()
    camp = checkpointed_map(mark_then_sleep, items, ledger_path=tmp_path / "l.json",
                            execution="slurm", min_jobs=2, **slurm)
    killer.join()
    assert "error" not in seen, seen["error"]
    victim = seen["victim"]
    assert camp.complete
    runs = check_nothing_ran_after_acceptance(tmp_path / "l.json", marks)
    records = camp.records
    ran_on_victim = [t for t, r in runs.items() if any(j == victim for _, j, _ in r)]
    rerun = [t for t in ran_on_victim if records[t]["result"]["job"] != victim]
    assert rerun, f"the task(s) in flight on job {victim} had to run again elsewhere"
    assert all(len(runs[t]) >= 2 for t in rerun)
    assert job_states(victim).get(victim) in {"CANCELLED", "COMPLETING"}
    assert seen["replacement"], "the cancelled job was replaced"


@pytest.mark.slow
def test_workers_retire_before_walltime_and_are_replaced_no_task_lost(slurm, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    scheduler = make_scheduler("slurm", walltime="00:01:00", min_jobs=2, **slurm)
    assert isinstance(scheduler, SlurmScheduler)
    # margin 30 s: drain from 22.5-37.5 s on, closed by dask's lifetime at 37.5-52.5 s
    assert (scheduler.lifetime, scheduler.stagger, scheduler.drain) == (45.0, 7.5, 15.0)
    # 0.4 s a task until both first jobs have retired and their replacements run tasks: they
    # (2 workers, one task each at a time) finish at most 52.5 s / 0.4 s * 2 = 262 of them, and
    # the first replacement a few dozen while the second first job drains
    items = [{"task_id": f"t{i:03d}", "folder": str(marks), "sleep": 0.4, "fast_from_jobs": 4}
             for i in range(600)]
    camp = checkpointed_map(mark_then_sleep, items, ledger_path=tmp_path / "l.json",
                            execution=scheduler)
    assert camp.complete
    runs = check_nothing_ran_after_acceptance(tmp_path / "l.json", marks)
    by_job: dict[str, list[float]] = {}
    for r in runs.values():
        for _, job, at in r:
            by_job.setdefault(job, []).append(at)
    assert len(by_job) >= 3, f"retired workers were replaced by new jobs: {sorted(by_job)}"
    first = sorted(by_job, key=lambda j: min(by_job[j]))[:2]
    states = wait_ended(set(by_job))
    assert not [j for j, s in states.items() if s == "TIMEOUT"], states
    assert all(states[j] == "COMPLETED" for j in first), states  # retired, not killed
    assert all(rec["interruptions"] == 0 for rec in camp.records.values())
