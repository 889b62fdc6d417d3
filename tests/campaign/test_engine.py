"""checkpointed_map's semantics: resume, refusal, retries, results, errors, drivers, signals."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import deque
from pathlib import Path

import numpy as np
import pytest
from testkit import PATIENCE, PYTHON, child_env, wait_until

from campaign import DriverBusyError, Interrupted, LedgerError, checkpointed_map, read_ledger
from campaign._ledger._records import new_record
from schedulers import Outcome, OutcomeKind, Placement, Scheduler, Started


def square(item):
    return {"y": item["x"] ** 2}


def items_of(n, **extra):
    return [{"task_id": f"t{i}", "x": i, **extra} for i in range(n)]


def test_results_in_item_order_and_ledger_is_standard_json(ledger):
    camp = checkpointed_map(square, items_of(5)[::-1], ledger_path=ledger)
    assert camp.results == [{"y": x * x} for x in range(4, -1, -1)]
    assert camp.task_ids == tuple(f"t{i}" for i in range(4, -1, -1))
    doc = json.loads(ledger.read_text())  # the stdlib reads it
    assert list(doc["tasks"]) == list(camp.task_ids)
    assert doc["format"] == "diffsoup-campaign-ledger" and doc["version"] == 2
    rec = doc["tasks"]["t2"]
    assert rec["status"] == "accepted" and rec["attempts"] == 1 and rec["pid"] == os.getpid()
    assert rec["fingerprint"].startswith("sha256:") and rec["duration"] >= 0
    assert camp.complete and camp.counts["accepted"] == 5


def test_resume_keeps_accepted_and_does_not_call_fn(ledger):
    checkpointed_map(square, items_of(3), ledger_path=ledger)
    calls = []
    camp = checkpointed_map(lambda it: calls.append(it) or {"y": -1}, items_of(5),
                            ledger_path=ledger)
    assert [c["task_id"] for c in calls] == ["t3", "t4"]
    assert camp.results == [{"y": 0}, {"y": 1}, {"y": 4}, {"y": -1}, {"y": -1}]


def test_failures_are_recorded_and_rerun_on_resume(ledger):
    def flaky(item):
        if item["x"] == 1:
            raise ValueError(f"x={item['x']} is odd")
        return square(item)

    camp = checkpointed_map(flaky, items_of(3), ledger_path=ledger)
    (failure,) = camp.failures
    assert (failure.task_id, failure.status, failure.error_type) == ("t1", "failed", "ValueError")
    assert "x=1 is odd" in failure.message and "in flaky" in failure.traceback
    assert "_serial.py" not in failure.traceback
    assert camp.records["t1"]["attempts"] == 1 and not camp.complete

    camp = checkpointed_map(square, items_of(3), ledger_path=ledger)
    rec = camp.records["t1"]
    assert camp.complete and rec["attempts"] == 2 and rec["error"] is None
    assert rec["history"][0]["status"] == "failed"
    assert rec["history"][0]["error"]["type"] == "ValueError"


def test_retries_rerun_a_raising_task_in_the_same_run(ledger):
    seen = []

    def twice_bad(item):
        seen.append(item["task_id"])
        if seen.count(item["task_id"]) <= 2:
            raise RuntimeError("not yet")
        return {"ok": True}

    camp = checkpointed_map(twice_bad, items_of(1), ledger_path=ledger, retries=1)
    assert not camp.complete and camp.records["t0"]["attempts"] == 2
    camp = checkpointed_map(twice_bad, items_of(1), ledger_path=ledger, retries=5)
    assert camp.complete and camp.records["t0"]["attempts"] == 3 and seen == ["t0"] * 3
    assert [h["status"] for h in camp.records["t0"]["history"]] == ["failed", "failed"]


def test_changed_item_is_refused_untouched_and_reported(ledger):
    checkpointed_map(square, items_of(3), ledger_path=ledger)
    before = read_ledger(ledger)["tasks"]["t1"]
    items = items_of(3)
    items[1]["x"] = 10
    items[1]["new"] = "field"
    camp = checkpointed_map(square, items, ledger_path=ledger)
    (failure,) = camp.failures
    assert failure.status == "refused" and failure.task_id == "t1"
    assert {c["field"] for c in failure.changed} == {"x", "new"}
    assert "'x': 1 -> 10" in failure.message and f"campaign forget {ledger} t1" in failure.message
    doc = read_ledger(ledger)
    assert doc["tasks"]["t1"] == before
    assert doc["runs"][-1]["refused"][0]["task_id"] == "t1"
    assert camp.results == [{"y": 0}, {"y": 4}] and camp.result("t1") is None


def test_resume_false_keeps_the_old_file_beside(ledger):
    checkpointed_map(square, items_of(2), ledger_path=ledger)
    calls = []
    checkpointed_map(lambda it: calls.append(1) or {"y": 0}, items_of(2), ledger_path=ledger,
                     resume=False)
    assert len(calls) == 2
    (old,) = ledger.parent.glob("campaign.replaced-*.json")
    assert read_ledger(old)["tasks"]["t1"]["result"] == {"y": 1}
    assert read_ledger(ledger)["tasks"]["t1"]["result"] == {"y": 0}


def test_results_are_checked_and_numpy_scalars_converted(ledger):
    def fn(item):
        kind = item["kind"]
        if kind == "np":
            return {"a": np.float64(1.5), "b": np.int32(2), "c": np.bool_(True), "n": math.nan}
        if kind == "array":
            return {"a": np.ones(3)}
        if kind == "nested":
            return {"a": {"b": 1}}
        return [1, 2]

    items = [{"task_id": k, "kind": k} for k in ["np", "array", "nested", "list"]]
    camp = checkpointed_map(fn, items, ledger_path=ledger)
    res = camp.result("np")
    assert res["a"] == 1.5 and res["b"] == 2 and res["c"] is True and math.isnan(res["n"])
    assert type(res["b"]) is int
    raw = json.loads(ledger.read_text())["tasks"]["np"]["result"]
    assert raw["n"] == {"$float": "nan"}
    errors = {f.task_id: f for f in camp.failures}
    assert errors["array"].error_type == "ResultError"
    assert "'a'" in errors["array"].message
    assert "numpy.ndarray of shape (3,)" in errors["array"].message
    assert "'a'" in errors["nested"].message and "'a': a dict;" in errors["nested"].message
    assert "fn returned a list;" in errors["list"].message


@pytest.mark.parametrize(
    "content, words",
    [
        (b"", ["empty"]),
        (b'{"format": "diffsoup-campaign-ledger", "version": 1, "tasks": {', ["not valid JSON"]),
        (b'{"format": "something-else", "version": 1}',
         ["not a campaign ledger", "something-else"]),
        (b"[1, 2]", ["not a campaign ledger"]),
        (b'{"format": "diffsoup-campaign-ledger", "version": 99, "runs": [], "tasks": {}}',
         ["version 99", "upgrade"]),
        (json.dumps({"format": "diffsoup-campaign-ledger", "version": 1, "created": 1.0,
                     "updated": 1.0, "runs": [], "tasks": {"a": dict(
                         new_record({"task_id": "a", "x": 0}, "sha256:0"), status="weird")}}
                    ).encode(), ["'a'", "weird"]),
    ],
)
def test_bad_ledgers_are_never_overwritten(ledger, content, words):
    ledger.write_bytes(content)
    with pytest.raises(LedgerError) as info:
        checkpointed_map(square, items_of(1), ledger_path=ledger)
    assert str(ledger) in str(info.value)
    for word in words:
        assert word in str(info.value)
    assert ledger.read_bytes() == content


def test_a_second_live_driver_is_refused(ledger):
    def nested(item):
        with pytest.raises(DriverBusyError) as info:
            checkpointed_map(square, items_of(1), ledger_path=ledger)
        message = str(info.value)
        assert f"pid {os.getpid()}" in message and "in use by a live campaign driver" in message
        return {"ok": True}

    assert checkpointed_map(nested, [{"task_id": "a"}], ledger_path=ledger).complete


def test_a_second_driver_in_another_process_is_refused(ledger, tmp_path):
    script = tmp_path / "slow.py"
    script.write_text(textwrap.dedent(f"""
        import time, sys
        from campaign import checkpointed_map
        def fn(item):
            print("started", flush=True)
            while True:  # until the test kills this driver
                time.sleep(3600)
        checkpointed_map(fn, [{{"task_id": "a"}}], ledger_path={str(ledger)!r})
    """))
    proc = subprocess.Popen([PYTHON, str(script)], env=child_env(), stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "started"
        with pytest.raises(DriverBusyError, match=f"pid {proc.pid}"):
            checkpointed_map(square, items_of(1), ledger_path=ledger)
        wait_until(lambda: read_ledger(ledger)["tasks"]["a"]["status"] == "running",
                   "the running task to reach the ledger (group commit)")
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    # the dead driver's leftovers are taken over: its running task is now interrupted and reruns
    camp = checkpointed_map(lambda it: {"ok": 1}, [{"task_id": "a"}], ledger_path=ledger)
    rec = camp.records["a"]
    assert camp.complete and rec["attempts"] == 2 and rec["history"][0]["status"] == "interrupted"
    assert read_ledger(ledger)["runs"][0]["status"] == "crashed"


def test_keyboard_interrupt_records_the_running_task_and_reraises(ledger):
    def fn(item):
        if item["x"] == 2:
            raise KeyboardInterrupt
        return square(item)

    with pytest.raises(KeyboardInterrupt):
        checkpointed_map(fn, items_of(4), ledger_path=ledger)
    doc = read_ledger(ledger)
    statuses = [r["status"] for r in doc["tasks"].values()]
    assert statuses == ["accepted", "accepted", "interrupted", "pending"]
    assert doc["tasks"]["t2"]["interruptions"] == 1 and doc["runs"][-1]["status"] == "interrupted"
    camp = checkpointed_map(square, items_of(4), ledger_path=ledger)
    assert camp.complete and camp.records["t2"]["attempts"] == 2


def test_sigterm_records_the_running_task_and_raises_interrupted(ledger):
    def fn(item):
        if item["x"] == 1:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises before this ends
        return square(item)

    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as info:
        checkpointed_map(fn, items_of(3), ledger_path=ledger)
    assert info.value.signum == signal.SIGTERM and isinstance(info.value, KeyboardInterrupt)
    assert signal.getsignal(signal.SIGTERM) is previous
    statuses = [r["status"] for r in read_ledger(ledger)["tasks"].values()]
    assert statuses == ["accepted", "interrupted", "pending"]


def test_exceptions_in_fn_do_not_escape_and_base_exceptions_do(ledger):
    def fn(item):
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        checkpointed_map(fn, items_of(1), ledger_path=ledger)
    assert read_ledger(ledger)["tasks"]["t0"]["status"] == "interrupted"
    assert read_ledger(ledger)["runs"][-1]["status"] == "crashed"


class Abort(BaseException):
    """Not an Exception, and neither KeyboardInterrupt nor SystemExit."""


def test_other_base_exceptions_in_fn_are_the_tasks_failure_with_their_type(ledger):
    def fn(item):
        if item["x"] == 1:
            raise Abort("gave up")
        return square(item)

    camp = checkpointed_map(fn, items_of(3), ledger_path=ledger)
    (failure,) = camp.failures
    assert (failure.task_id, failure.error_type, failure.message) == ("t1", "Abort", "gave up")
    assert "in fn" in failure.traceback
    assert camp.counts["accepted"] == 2 and read_ledger(ledger)["runs"][-1]["status"] == "finished"


def test_ledger_in_a_new_folder_and_progress(tmp_path):
    seen = []
    path = tmp_path / "deep" / "er" / "run.json"
    camp = checkpointed_map(square, items_of(3), ledger_path=path, progress=seen.append)
    assert camp.complete and path.exists()
    last = seen[-1]
    assert (last.total, last.accepted, last.remaining, last.running) == (3, 3, 0, 0)
    assert [p.running for p in seen] == [1, 0, 1, 0, 1, 0]


def test_history_is_bounded(ledger):
    for _ in range(8):
        checkpointed_map(lambda it: 1 / 0, items_of(1), ledger_path=ledger)
    rec = read_ledger(ledger)["tasks"]["t0"]
    assert rec["attempts"] == 8 and len(rec["history"]) == 5
    assert [h["attempt"] for h in rec["history"]] == [3, 4, 5, 6, 7]


class LearningScheduler(Scheduler):
    """Runs tasks one by one in a thread; takes more tasks at once after its first outcome
    (as the dask scheduler does once it has measured how long tasks take).

    Before each task it waits until the engine has filled its slots again (as many tasks as
    slots, or every task left): ``starved`` counts the times the engine did not, within a
    patience that only a hung engine exhausts.
    """

    name = "learning"
    total = 60

    def __init__(self):
        self.waiting: deque = deque()
        self.lock = threading.Condition()
        self.finished = 0
        self.starved = 0

    @property
    def slots(self) -> int:
        return 1 if self.finished == 0 else 8

    def start(self, fn, report):
        super().start(fn, report)
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def submit(self, task):
        with self.lock:
            self.waiting.append(task)
            self.lock.notify()

    def _filled(self) -> bool:
        return self.stopping or len(self.waiting) >= min(self.slots, self.total - self.finished)

    def _run(self):
        while True:
            with self.lock:
                if self.finished == self.total:
                    self.lock.wait_for(lambda: self.stopping)
                    return
                if not self.lock.wait_for(self._filled, timeout=0 if self.starved else PATIENCE):
                    self.starved += 1
                    self.lock.wait_for(lambda: self.stopping or self.waiting)
                if self.stopping:
                    return
                task = self.waiting.popleft()
            now = time.time()
            self.report(Started(task.task_id, task.attempt, Placement.here(), now))
            outcome = Outcome(task.task_id, task.attempt, OutcomeKind.RESULT, Placement.here(),
                              now, time.time(), result=self.fn(task.item))
            with self.lock:
                self.finished += 1  # the slots grow before the engine hears of the outcome
            self.report(outcome)

    def stop(self):
        with self.lock:
            self.stopping = True
            self.lock.notify()
        self.thread.join()


def test_the_engine_follows_a_scheduler_whose_slots_grow(ledger):
    """Submitting again once in-flight tasks fall under the slots of now, not of the start."""
    scheduler = LearningScheduler()
    camp = checkpointed_map(square, items_of(LearningScheduler.total), ledger_path=ledger,
                            execution=scheduler)
    assert camp.complete
    assert scheduler.starved == 0  # refilled as tasks finish, not once all 8 are done


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")
def test_the_ledger_writer_thread_leaves_ctrl_c_to_the_main_thread(tmp_path):
    """The driver's own threads block SIGINT, SIGTERM and SIGUSR1, so the kernel delivers them to
    the main thread, where they interrupt whatever fn waits in."""
    def blocked_in_writer(item):
        writer = next(t for t in threading.enumerate() if t.name == "ledger-writer")
        status = Path(f"/proc/self/task/{writer.native_id}/status").read_text()
        mask = int(next(line for line in status.splitlines()
                        if line.startswith("SigBlk:")).split()[1], 16)
        return {s.name: bool(mask >> (s - 1) & 1)
                for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGCHLD)}

    camp = checkpointed_map(blocked_in_writer, [{"task_id": "t"}], ledger_path=tmp_path / "l.json")
    assert camp.complete, camp.records["t"]["error"]
    assert camp.results[0] == {"SIGINT": True, "SIGTERM": True, "SIGUSR1": True,
                               "SIGCHLD": False}
