"""One outcome policy for every path: the engine (serial, processes) and array workers record an
outcome alike, and ``max_interruptions`` counts the losses of one run only.

Real components: drivers and array workers are real processes killed with SIGKILL; workers of
``execution="processes"`` kill themselves.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from testkit import PATIENCE, PYTHON, child_env

from campaign import checkpointed_map, read_ledger
from campaign._array._plan import plan_submission
from campaign._array._worker import run_worker

LOST_PREFIX = "lost {n} times in this run (max_interruptions={m}); last cause: "


# ---------------------------------------------------------------- task functions (importable)
def bad_result(item):
    return {"a": [1, 2]}


def raise_value(item):
    raise ValueError(f"task {item['task_id']} diverged")


def kill_my_worker(item):
    os.kill(os.getpid(), signal.SIGKILL)


def kill_my_worker_once(item):
    """SIGKILLs its worker the first time it runs (marker file), then returns."""
    marker = Path(item["marker"])
    if not marker.exists():
        marker.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return {"ok": True}


#: A target of `campaign worker` subprocesses: notes its start, then hangs until killed.
HANG = textwrap.dedent("""
    import os, pathlib, time

    def run(item):
        marks = pathlib.Path(item["marks"])
        (marks / f"{os.getpid()}.start").touch()
        while True:
            time.sleep(3600)
""")


# ---------------------------------------------------------------- helpers
def engine_outcome(ledger: Path, fn, execution: str, **options) -> dict:
    camp = checkpointed_map(fn, [{"task_id": "t0"}], ledger_path=ledger, execution=execution,
                            **options)
    return camp.records["t0"]


def array_outcome(ledger: Path, fn, **options) -> dict:
    sub = plan_submission([{"task_id": "t0"}], ledger_path=ledger).record()
    summary = run_worker(fn, ledger, sub.id, owner=_owner("in-test"), merge_every=0, **options)
    assert summary.ran >= 1
    return read_ledger(ledger)["tasks"]["t0"]


def _owner(name: str) -> dict:
    return {"worker": name, "job": None, "array_task": None, "host": os.uname().nodename,
            "pid": os.getpid()}


def wait_until(predicate, what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


PATHS = ["serial", "processes", "array"]


def outcome_on(path: str, ledger: Path, fn, **options) -> dict:
    if path == "array":
        return array_outcome(ledger, fn, **options)
    extra = {"workers": 1} if path == "processes" else {}
    return engine_outcome(ledger, fn, path, **extra, **options)


# ---------------------------------------------------------------- one record for one outcome
@pytest.mark.parametrize("path", PATHS)
def test_an_invalid_result_fails_with_a_result_error_and_no_traceback(tmp_path, path):
    rec = outcome_on(path, tmp_path / "l.json", bad_result)
    assert rec["status"] == "failed" and rec["attempts"] == 1 and rec["interruptions"] == 0
    error = rec["error"]
    assert error["type"] == "ResultError" and error["traceback"] == ""
    assert "'a'" in error["message"] and ": a list;" in error["message"]


def test_the_result_error_reads_the_same_on_every_path(tmp_path):
    messages = {path: outcome_on(path, tmp_path / f"{path}.json", bad_result)["error"]
                for path in PATHS}
    assert len({(e["type"], e["message"], e["traceback"]) for e in messages.values()}) == 1


@pytest.mark.parametrize("path", PATHS)
def test_an_error_keeps_its_type_message_and_traceback_and_retries_alike(tmp_path, path):
    rec = outcome_on(path, tmp_path / "l.json", raise_value, retries=1)
    assert rec["status"] == "failed" and rec["attempts"] == 2  # retried once in this run
    assert rec["history"][-1]["status"] == "failed"
    error = rec["error"]
    assert error["type"] == "ValueError" and error["message"] == "task t0 diverged"
    assert "in raise_value" in error["traceback"] and "ValueError" in error["traceback"]


def test_a_task_lost_too_often_in_one_run_fails_alike_in_the_engine_and_an_array_worker(
        tmp_path):
    # the engine: the task kills its worker process every time
    rec = engine_outcome(tmp_path / "engine.json", kill_my_worker, "processes", workers=1,
                         max_interruptions=1)
    assert rec["status"] == "failed" and rec["attempts"] == 2 and rec["interruptions"] == 2
    engine_error = rec["error"]
    assert engine_error["type"] == "WorkerLost"
    assert engine_error["message"].startswith(LOST_PREFIX.format(n=2, m=1))
    assert "SIGKILL" in engine_error["message"]

    # an array worker: two array workers SIGKILLed while holding the task, then a third
    ledger = tmp_path / "array.json"
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "hang.py").write_text(HANG)
    spec = tmp_path / "spec.toml"
    spec.write_text('target = "hang.py:run"\nitems = "items.json"\nledger = "array.json"\n')
    (tmp_path / "items.json").write_text("[]")
    sub = plan_submission([{"task_id": "t0", "marks": str(marks)}], ledger_path=ledger).record()
    for index in range(2):
        env = dict(child_env(), SLURM_ARRAY_JOB_ID="900", SLURM_ARRAY_TASK_ID=str(index))
        proc = subprocess.Popen([PYTHON, "-m", "campaign._cli", "worker", str(spec),
                                 "--submission", sub.id, "--lease-seconds", "1",
                                 "--merge-every", "0"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda index=index: len(list(marks.glob("*.start"))) == index + 1,
                       f"array worker {index} to start the task")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    calls = []
    summary = run_worker(lambda item: calls.append(item) or {"ok": True}, ledger, sub.id,
                         owner=_owner("in-test"), lease_seconds=1, merge_every=0,
                         max_interruptions=1)
    assert calls == [] and summary.failed == 1  # lost twice: failed, not run a third time
    rec = read_ledger(ledger)["tasks"]["t0"]
    assert rec["status"] == "failed" and rec["interruptions"] == 2
    assert rec["history"][-1]["error"]["type"] == "WorkerLost"  # the first loss: retried
    array_error = rec["error"]
    assert array_error["type"] == engine_error["type"]
    assert array_error["message"].startswith(LOST_PREFIX.format(n=2, m=1))
    assert "900_1" in array_error["message"]  # the last cause: the second worker's lease


# ---------------------------------------------------------------- per run, take-overs not counted
DRIVER = textwrap.dedent("""
    import faulthandler, json, signal, sys, time
    from campaign import checkpointed_map

    faulthandler.register(signal.SIGUSR2, all_threads=True)  # the test's stack dump on a hang
    print("SIGINT was", signal.getsignal(signal.SIGINT), file=sys.stderr, flush=True)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as in a terminal

    def hang(item):
        time.sleep(3600)

    checkpointed_map(hang, [json.loads(sys.argv[2])], ledger_path=sys.argv[1])
""")


def kill_the_driver_three_times(tmp_path: Path, ledger: Path, item: dict,
                                signum: int = signal.SIGKILL) -> None:
    """Three real driver processes running ``item``, each sent ``signum`` while it runs the
    task (SIGKILL: the next driver takes its task over; SIGINT: Ctrl-C)."""
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    for n in range(1, 4):
        said = tmp_path / f"driver{n}.err"
        with said.open("w") as err:
            proc = subprocess.Popen([PYTHON, str(script), str(ledger), json.dumps(item)],
                                    env=child_env(), stderr=err)
        try:
            def running(n: int = n) -> bool:
                if not ledger.exists():
                    return False
                rec = read_ledger(ledger)["tasks"].get("t0")
                return rec is not None and rec["status"] == "running" and rec["attempts"] == n
            wait_until(running, f"driver {n} to record the task running")
        finally:
            proc.send_signal(signum)
            try:
                proc.wait(timeout=PATIENCE)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGUSR2)  # its threads' stacks, into its stderr
                time.sleep(2)
                proc.kill()
                proc.wait()
                pytest.fail(f"driver {n} did not end within {PATIENCE:.0f} s of "
                            f"{signal.Signals(signum).name}; its stderr:\n{said.read_text()}")


@pytest.mark.parametrize("signum, cause", [(signal.SIGKILL, "DriverLost"),
                                           (signal.SIGINT, "KeyboardInterrupt")])
def test_three_driver_kills_then_one_lost_worker_retries_the_task(tmp_path, signum, cause):
    ledger, item = tmp_path / "l.json", {"task_id": "t0", "marker": str(tmp_path / "killed")}
    kill_the_driver_three_times(tmp_path, ledger, item, signum)
    camp = checkpointed_map(kill_my_worker_once, [item], ledger_path=ledger,
                            execution="processes", workers=1)
    rec = camp.records["t0"]
    assert camp.complete and rec["status"] == "accepted", rec["error"]
    assert rec["attempts"] == 5 and rec["interruptions"] == 4  # every interruption on record
    causes = [h["error"]["type"] for h in rec["history"]]
    assert causes == [cause, cause, cause, "WorkerLost"]


def test_three_driver_kills_then_one_lost_array_worker_retries_the_task(tmp_path):
    ledger, marks = tmp_path / "l.json", tmp_path / "marks"
    marks.mkdir()
    item = {"task_id": "t0", "marks": str(marks)}
    kill_the_driver_three_times(tmp_path, ledger, item)
    (tmp_path / "hang.py").write_text(HANG)
    spec = tmp_path / "spec.toml"
    spec.write_text('target = "hang.py:run"\nitems = "items.json"\nledger = "l.json"\n')
    (tmp_path / "items.json").write_text("[]")
    sub = plan_submission([item], ledger_path=ledger).record()
    assert read_ledger(ledger)["tasks"]["t0"]["interruptions"] == 3
    env = dict(child_env(), SLURM_ARRAY_JOB_ID="901", SLURM_ARRAY_TASK_ID="0")
    proc = subprocess.Popen([PYTHON, "-m", "campaign._cli", "worker", str(spec), "--submission",
                             sub.id, "--lease-seconds", "1", "--merge-every", "0"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: list(marks.glob("*.start")), "the array worker to start the task")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    summary = run_worker(lambda item: {"ok": True}, ledger, sub.id, owner=_owner("in-test"),
                         lease_seconds=1, merge_every=0)
    assert summary.accepted == 1
    rec = read_ledger(ledger)["tasks"]["t0"]
    assert rec["status"] == "accepted" and rec["interruptions"] == 4
    assert [h["error"]["type"] for h in rec["history"]][-1] == "WorkerLost"


def test_signal_stops_of_array_workers_are_not_counted(tmp_path):
    """Two array workers stopped by SIGTERM (scancel, the time limit), one SIGKILLed: with
    max_interruptions=1 the task still runs again (one loss in this submission)."""
    ledger, marks = tmp_path / "l.json", tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "hang.py").write_text(HANG)
    spec = tmp_path / "spec.toml"
    spec.write_text('target = "hang.py:run"\nitems = "items.json"\nledger = "l.json"\n')
    (tmp_path / "items.json").write_text("[]")
    sub = plan_submission([{"task_id": "t0", "marks": str(marks)}], ledger_path=ledger).record()
    for index, signum in enumerate((signal.SIGTERM, signal.SIGTERM, signal.SIGKILL)):
        env = dict(child_env(), SLURM_ARRAY_JOB_ID="902", SLURM_ARRAY_TASK_ID=str(index))
        proc = subprocess.Popen([PYTHON, "-m", "campaign._cli", "worker", str(spec),
                                 "--submission", sub.id, "--lease-seconds", "1",
                                 "--merge-every", "0"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda index=index: len(list(marks.glob("*.start"))) == index + 1,
                       f"array worker {index} to start the task")
        finally:
            proc.send_signal(signum)
            proc.wait(timeout=PATIENCE)
    summary = run_worker(lambda item: {"ok": True}, ledger, sub.id, owner=_owner("in-test"),
                         lease_seconds=1, merge_every=0, max_interruptions=1)
    assert summary.accepted == 1
    rec = read_ledger(ledger)["tasks"]["t0"]
    assert rec["status"] == "accepted" and rec["interruptions"] == 3
    causes = [h["error"]["type"] for h in rec["history"]]
    assert causes == ["Interrupted", "Interrupted", "WorkerLost"]
