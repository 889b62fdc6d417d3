"""Property tests of the ledger's state machine (hypothesis).

Any sequence of runs (with tasks that succeed, raise or are interrupted), changed items, forgets,
writes by another process and fresh starts keeps the invariants: the ledger parses; a task once
accepted keeps its result and is never run again (until forgotten); a changed item of a task
that ever started is refused and its record left untouched; no task is left `running`; every
fingerprint matches its item.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from campaign import Ledger, checkpointed_map, read_ledger
from campaign._document import Serializer, dumps, new_document, update
from campaign._jsonvalue import fingerprint
from campaign._records import finished, new_record, started

TASKS = ("a", "b", "c", "d")
outcomes = st.fixed_dictionaries({t: st.sampled_from(["ok", "ok", "fail", "interrupt"])
                                  for t in TASKS})


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.folder = Path(tempfile.mkdtemp())
        self.path = self.folder / "ledger.json"
        self.x = {t: 0 for t in TASKS}
        self.accepted: dict[str, dict] = {}  # task id -> its accepted record, as first seen
        self.runs = 0

    def teardown(self):
        shutil.rmtree(self.folder, ignore_errors=True)

    def items(self, subset):
        return [{"task_id": t, "x": self.x[t]} for t in TASKS if t in subset]

    def tasks(self):
        return read_ledger(self.path)["tasks"] if self.path.exists() else {}

    def learn(self):
        for tid, rec in self.tasks().items():
            if rec["status"] == "accepted":
                self.accepted.setdefault(tid, rec)

    @rule(plan=outcomes, retries=st.integers(0, 1),
          subset=st.sets(st.sampled_from(TASKS), min_size=1))
    def run(self, plan, retries, subset):
        self.runs += 1
        before = self.tasks()
        calls = []

        def fn(item):
            calls.append(item["task_id"])
            what = plan[item["task_id"]]
            if what == "fail":
                raise ValueError("planned failure")
            if what == "interrupt":
                raise KeyboardInterrupt
            return {"x": item["x"], "run": self.runs}

        try:
            camp = checkpointed_map(fn, self.items(subset), ledger_path=self.path,
                                    retries=retries, commit_interval=0.0)
        except KeyboardInterrupt:
            camp = None
        after = self.tasks()
        for tid in calls:
            assert tid not in self.accepted, f"{tid} ran again after it was accepted"
        for tid in subset:
            old = before.get(tid)
            if old is not None and old["item"]["x"] != self.x[tid]:
                if old["status"] == "pending" and not old["attempts"]:
                    continue  # never started: nothing to protect, it takes the edited item
                assert tid not in calls and after[tid] == old, "a changed item was not refused"
                if camp is not None:
                    assert tid in camp.refused and camp.result(tid) is None
        if camp is not None:
            assert [r["x"] for r in camp.results] == [
                self.x[t] for t in TASKS if t in subset and after[t]["status"] == "accepted"
                and t not in camp.refused]
        self.learn()

    @rule(tid=st.sampled_from(TASKS))
    def change_item(self, tid):
        self.x[tid] += 1

    @rule(tid=st.sampled_from(TASKS))
    def forget(self, tid):
        if self.path.exists():
            update(self.path, lambda doc: doc["tasks"].pop(tid, None))  # forget
            self.accepted.pop(tid, None)

    @rule(tid=st.sampled_from(TASKS),
          status=st.sampled_from(["accepted", "failed", "interrupted"]))
    def another_process_writes(self, tid, status):
        other = Ledger(self.path, min_interval=0.0)
        other.open(driver=False)
        rec = other.tasks.get(tid)
        if rec is None:
            item = {"task_id": tid, "x": self.x[tid]}
            rec = new_record(item, fingerprint(item))
        rec = started(rec, host="elsewhere", pid=1, worker="w", device_group=None, at=time.time())
        other.put(tid, finished(rec, status, at=time.time(),
                                result={"x": rec["item"]["x"], "run": -1}
                                if status == "accepted" else None))
        other.close("finished")
        self.learn()

    @rule()
    def start_over(self):
        items = self.items(TASKS)
        camp = checkpointed_map(lambda it: {"x": it["x"], "run": 0}, items,
                                ledger_path=self.path, resume=False)
        assert camp.complete
        self.accepted = {}
        self.learn()

    @invariant()
    def accepted_tasks_keep_their_result(self):
        tasks = self.tasks()
        for tid, rec in self.accepted.items():
            assert tasks[tid] == rec
        for tid, rec in tasks.items():
            assert rec["status"] != "running"
            assert rec["fingerprint"] == fingerprint(rec["item"])


LedgerMachine.TestCase.settings = settings(max_examples=int(os.environ.get("DIFFSOUP_HYPOTHESIS_EXAMPLES", "80")),
                                           stateful_step_count=12,
                                           deadline=None)
test_ledger_state_machine = pytest.mark.slow(LedgerMachine.TestCase)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["put", "replace", "remove", "run"]),
                          st.sampled_from(["a", "b", 'c"é', "d/\\"])), max_size=30))
def test_commits_serialize_as_the_whole_document_does(steps):
    """The serializer that reuses unchanged records' JSON writes exactly `dumps`' bytes."""
    doc = new_document(now=1.0)
    serializer = Serializer()
    for op, tid in steps:
        if op == "put" and tid not in doc["tasks"]:
            doc["tasks"][tid] = new_record({"task_id": tid, "x": len(tid)}, "f" * 8)
        elif op == "replace" and tid in doc["tasks"]:
            doc["tasks"][tid] = started(doc["tasks"][tid], host="h", pid=1, worker=None,
                                        device_group=[0, 1], at=2.5)
        elif op == "remove":
            doc["tasks"].pop(tid, None)
        elif op == "run":
            doc["runs"].append({"id": tid, "status": "running"})
        assert serializer.dumps(doc) == dumps(doc)
