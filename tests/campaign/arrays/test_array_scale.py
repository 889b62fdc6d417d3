"""Many array workers claiming from one ledger at once: no task runs twice.

20 `campaign worker` claim loops (`campaign._array._worker.run_worker` with a function that only
notes the task it was given) over one submission of 2,000 zero-time tasks, as threads of one process
and as separate processes. Every task runs exactly once and, once the fragments are merged,
the ledger holds every task accepted after one attempt. A worker keeps running tasks while
another process holds the ledger's lock (merging): its merges between tasks do not wait for it.
benchmarks/array_claims.py measures the same at 200 claimers (claims per second, merge time,
files per directory, lease renewals per second); nothing here is timed.
"""

from __future__ import annotations

import subprocess
import threading
from collections import Counter
from pathlib import Path

import orjson
import pytest
from testkit import PYTHON, child_env, in_threads, wait_until

from campaign import read_ledger
from campaign._array._plan import plan_submission
from campaign._array._workdir import fragment_files, merge_fragments
from campaign._array._worker import run_worker
from campaign._ledger._paths import LedgerPaths

CLAIMERS = 20
TASKS = 2000

_CHILD = """
import sys
from pathlib import Path
import orjson
from campaign._array._worker import run_worker
ledger, submission, out, name = sys.argv[1:5]
ran = []
owner = {"worker": name, "job": None, "array_task": None, "host": "here", "pid": 0}
run_worker(lambda item: ran.append(item["task_id"]) or {"ok": True}, Path(ledger), submission,
           owner=owner, merge_every=3600.0)
Path(out).write_bytes(orjson.dumps(ran))
"""


def submit(tmp_path: Path) -> tuple[Path, str]:
    ledger = tmp_path / "ledger.json"
    items = [{"task_id": f"t{i:05d}", "x": i} for i in range(TASKS)]
    sub = plan_submission(items, ledger_path=ledger).record()
    assert len(sub.plan.to_run) == TASKS
    return ledger, sub.id


def assert_each_ran_once(ledger: Path, ran: list[str]) -> None:
    twice = {tid: n for tid, n in Counter(ran).items() if n > 1}
    assert not twice, f"tasks run more than once: {dict(list(twice.items())[:10])}"
    assert len(ran) == TASKS
    merge_fragments(ledger)  # every worker merged at its end; one more finds nothing new
    tasks = read_ledger(ledger)["tasks"]
    assert {rec["status"] for rec in tasks.values()} == {"accepted"}
    assert {rec["attempts"] for rec in tasks.values()} == {1}
    assert len({rec["worker"] for rec in tasks.values()}) > 1  # the work was shared
    assert not fragment_files(ledger)  # all settled, then removed


@pytest.mark.slow
def test_claimers_in_threads_run_each_task_once(tmp_path):
    ledger, submission = submit(tmp_path)
    ran: list[str] = []
    start = threading.Barrier(CLAIMERS)

    def note(item: dict) -> dict:
        ran.append(item["task_id"])
        return {"ok": True}

    def claimer(index: int) -> None:
        owner = {"worker": f"w{index}", "job": None, "array_task": None, "host": "here",
                 "pid": index}
        start.wait()
        run_worker(note, ledger, submission, owner=owner, merge_every=3600.0)

    errors = in_threads(claimer, CLAIMERS)
    assert not errors, errors
    assert_each_ran_once(ledger, ran)


@pytest.mark.slow
def test_claimers_in_processes_run_each_task_once(tmp_path):
    ledger, submission = submit(tmp_path)
    outs = [tmp_path / f"ran-{i}.json" for i in range(CLAIMERS)]
    procs = [subprocess.Popen([PYTHON, "-c", _CHILD, str(ledger), submission, str(out),
                               f"p{i}"], env=child_env(), stderr=subprocess.PIPE, text=True)
             for i, out in enumerate(outs)]
    for proc in procs:
        _, err = proc.communicate()
        assert proc.returncode == 0, err
    ran = [tid for out in outs for tid in orjson.loads(out.read_bytes())]
    assert_each_ran_once(ledger, ran)


_HOLDER = """
import sys
from campaign._ledger import _document
lock = _document.file_lock(sys.argv[1])
lock.acquire()
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin
lock.release()
"""

_MARKING = """
import sys
from pathlib import Path
from campaign._array._worker import run_worker
ledger, submission, marks = sys.argv[1:4]
def note(item):
    (Path(marks) / item["task_id"]).touch(exist_ok=False)  # a second run raises
    return {"ok": True}
owner = {"worker": "m", "job": None, "array_task": None, "host": "here", "pid": 0}
run_worker(note, Path(ledger), submission, owner=owner, merge_every=0.0)
"""


def test_a_worker_runs_its_tasks_while_another_holds_the_ledger_lock(tmp_path):
    """A merge between tasks skips a lock that another worker holds (it is merging), instead
    of stopping the claim loop until the lock comes free (200 workers did little else)."""
    ledger = tmp_path / "ledger.json"
    sub = plan_submission([{"task_id": f"t{i:02d}", "x": i} for i in range(40)],
                          ledger_path=ledger).record()
    marks = tmp_path / "marks"
    marks.mkdir()
    holder = subprocess.Popen([PYTHON, "-c", _HOLDER, str(ledger)], env=child_env(),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    worker = None
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        worker = subprocess.Popen([PYTHON, "-c", _MARKING, str(ledger), sub.id, str(marks)],
                                  env=child_env(), stderr=subprocess.PIPE, text=True)
        wait_until(lambda: len(list(marks.iterdir())) == 40,
                   "the worker to run all 40 tasks while the ledger's lock is held")
    finally:
        holder.communicate("", timeout=60)  # release the lock
        if worker is not None:
            _, err = worker.communicate(timeout=120)
    assert worker.returncode == 0, err
    tasks = read_ledger(ledger)["tasks"]  # the last merge wrote every outcome
    assert {(rec["status"], rec["attempts"]) for rec in tasks.values()} == {("accepted", 1)}
    assert sorted(p.name for p in marks.iterdir()) == sorted(tasks)


def test_a_fragment_merged_away_before_its_write_returns_does_not_stop_the_worker(
        tmp_path, monkeypatch):
    """Other workers' merges may apply and then remove a fragment between its rename and the
    end of its write (seen at 100 claimers): the worker goes on, and each task runs once."""
    from campaign._ledger import _atomic

    ledger = tmp_path / "ledger.json"
    sub = plan_submission([{"task_id": f"t{i:02d}", "x": i} for i in range(5)],
                          ledger_path=ledger).record()
    real_fsync_dir = _atomic.fsync_dir
    removed: list[str] = []

    def then_merged_twice(folder: Path) -> None:  # as two merges of other workers would
        real_fsync_dir(folder)
        if folder.name == "fragments":
            merge_fragments(ledger)  # applies the new fragment
            merge_fragments(ledger)  # finds it applied and removes it
            removed.append(folder.name)

    monkeypatch.setattr(_atomic, "fsync_dir", then_merged_twice)
    ran: list[str] = []

    def note(item: dict) -> dict:
        ran.append(item["task_id"])
        return {"ok": True}

    owner = {"worker": "w", "job": None, "array_task": None, "host": "here", "pid": 0}
    summary = run_worker(note, ledger, sub.id, owner=owner, merge_every=3600.0)
    assert len(removed) == 5 and not fragment_files(ledger)
    assert (summary.ran, summary.accepted) == (5, 5) and sorted(ran) == sorted(set(ran))
    tasks = read_ledger(ledger)["tasks"]
    assert {(rec["status"], rec["attempts"]) for rec in tasks.values()} == {("accepted", 1)}
    assert not list(LedgerPaths.of(ledger).work.glob("leases/*.json"))  # every lease released
