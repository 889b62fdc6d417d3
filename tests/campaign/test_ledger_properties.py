"""Property tests of the ledger's state machine (hypothesis).

Any sequence of runs (with tasks that succeed, raise or are interrupted), changed items, forgets,
writes by another process, fresh starts and drivers killed with outcomes in the journal (after
a commit, halfway through an append, during a compaction, after a compaction replaced the file
but before it removed the journal) keeps the invariants: the file alone parses and, read with
its journal, a task once accepted keeps its result and is never run again (until forgotten); a
changed item of a task that ever started is refused and its record left untouched; no task is
left `running`; every fingerprint matches its item; a run that ends leaves no journal.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from campaign import Ledger, checkpointed_map, read_ledger
from campaign._ledger._atomic import HOST
from campaign._ledger._document import dumps, new_document
from campaign._ledger._jsonvalue import fingerprint
from campaign._ledger._paths import LedgerPaths
from campaign._ledger._records import finished, new_record, started
from campaign._ledger._store import RecordStore
from campaign._ledger._update import update

TASKS = ("a", "b", "c", "d")
outcomes = st.fixed_dictionaries({t: st.sampled_from(["ok", "ok", "fail", "interrupt"])
                                  for t in TASKS})
STATUS = {"ok": "accepted", "fail": "failed", "interrupt": "interrupted"}
#: Where a killed driver stops: after a commit, during its last journal append, during a
#: compaction (its temporary file half written), after a compaction replaced the file but
#: before it removed the journal.
KILLED_AT = ("after_commit", "mid_append", "mid_compaction", "after_replace")
#: A pid above Linux's largest (2**22): a temporary file named for it is a dead writer's.
DEAD_PID = 2**22 + 1


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
        assert not LedgerPaths.of(self.path).journal.exists(), "a run that ended left its journal"
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

    @rule(plan=outcomes, subset=st.sets(st.sampled_from(TASKS), min_size=1),
          at=st.sampled_from(KILLED_AT), cut=st.integers(0, 10**6),
          fraction=st.sampled_from([0.05, 1e9]))
    def driver_killed(self, plan, subset, at, cut, fraction):
        """A driver commits one journal line per outcome and is killed: the file, journal and
        temporary file it leaves are those of a real driver `Ledger` at that moment."""
        driver = Ledger(self.path, min_interval=0.0, compact_fraction=fraction)
        driver.open()
        for tid in sorted(subset):
            item = {"task_id": tid, "x": self.x[tid]}
            rec = driver.tasks.get(tid) or new_record(item, fingerprint(item))
            if rec["status"] == "accepted" or rec["fingerprint"] != fingerprint(item):
                continue  # a driver keeps it, or refuses the changed item
            rec = started(rec, host="killed", pid=2, worker=None, device_group=None,
                          at=time.time())
            status = STATUS[plan[tid]]
            driver.put(tid, finished(rec, status, at=time.time(), result={
                "x": self.x[tid], "run": -2} if status == "accepted" else None, error=None
                if status == "accepted" else {"type": "E", "message": "planned"}))
            driver.flush()
        file = self.path.read_bytes()
        journal = LedgerPaths.of(self.path).journal
        lines = journal.read_bytes() if journal.exists() else b""
        driver.close("finished")  # what a compaction writes
        compacted = self.path.read_bytes()
        if at == "after_replace":
            journal.write_bytes(lines)  # stale: of the generation before the compaction
            return self.learn()
        self.path.write_bytes(file)
        if at == "mid_append" and lines:
            last = lines.rstrip(b"\n").rfind(b"\n") + 1
            lines = lines[:last + cut % (len(lines) - last)]
        journal.write_bytes(lines)
        if at == "mid_compaction":
            tmp = self.path.with_name(f".{self.path.name}.tmp-{HOST}-{DEAD_PID}-0badf00d")
            tmp.write_bytes(compacted[:cut % len(compacted)])
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
        if self.path.exists():
            orjson.loads(self.path.read_bytes())  # the file alone is never half written
        tasks = self.tasks()
        for tid, rec in self.accepted.items():
            assert tasks[tid] == rec
        for rec in tasks.values():
            assert rec["status"] != "running"
            assert rec["fingerprint"] == fingerprint(rec["item"])


EXAMPLES = int(os.environ.get("DIFFSOUP_HYPOTHESIS_EXAMPLES", "80"))
LedgerMachine.TestCase.settings = settings(max_examples=EXAMPLES, stateful_step_count=12,
                                           deadline=None)
test_ledger_state_machine = pytest.mark.slow(LedgerMachine.TestCase)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["put", "replace", "remove", "run", "commit"]),
                          st.sampled_from(["a", "b", 'c"é', "d/\\"])), max_size=30))
def test_the_record_store_writes_the_bytes_of_the_plain_document(steps):
    """Records held as bytes once committed (`RecordStore`) are written, in chunks, exactly as
    orjson writes the same document held as dicts, and read back as the same records."""
    doc = new_document(now=1.0)
    store = RecordStore()
    held = dict(doc, tasks=store)
    for op, tid in steps:
        tasks = doc["tasks"]
        if op == "put" and tid not in tasks:
            tasks[tid] = store[tid] = new_record({"task_id": tid, "x": len(tid)}, "f" * 8)
        elif op == "replace" and tid in tasks:
            tasks[tid] = store[tid] = started(store[tid], host="h", pid=1, worker=None,
                                              device_group=[0, 1], at=2.5)
        elif op == "remove":
            tasks.pop(tid, None)
            store.pop(tid, None)
        elif op == "run":
            doc["runs"].append({"id": tid, "status": "running"})
        elif op == "commit":
            store.parts([tid] if tid in store else [])
        assert dumps(held) == dumps(doc) == orjson.dumps(doc, option=orjson.OPT_APPEND_NEWLINE)
        assert dict(store) == tasks and list(store) == list(tasks)
        assert all(store.status(t) == rec["status"] for t, rec in tasks.items())
