"""Two writers of one ledger on a shared file system whose caches may be stale: a driver that
commits (journal appends and compactions) and another process's read-merge-writes (what
``campaign forget``, ``campaign submit`` and the array workers' merges do) whose read is older than
the driver's commits in between: its lock (``<ledger>.lock``, exclusive through its ``O_EXCL``
owner file where ``flock`` is not) is held, but the file it reads is what a stale attribute cache
served before the driver's last commits. Whatever the interleaving, nothing either made durable is
lost: after every commit of the driver, and after it closes, the ledger holds every record either
wrote last, and a record the other removed stays removed (docs/ledger.md, "Never lost between
processes")."""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
import time
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from campaign import Ledger, read_ledger
from campaign._ledger import _commit, _document
from campaign._ledger._atomic import atomic_write
from campaign._ledger._update import update
from campaign._ledger._jsonvalue import fingerprint
from campaign._ledger._records import finished, new_record, started

DRIVER_TASKS = ("a1", "a2", "a3")
OTHER_TASKS = ("b1", "b2")
STATUSES = ("accepted", "failed", "interrupted")
driver_steps = st.lists(st.tuples(st.sampled_from(DRIVER_TASKS), st.sampled_from(STATUSES)),
                        max_size=3)


def attempt(rec: dict, status: str, who: str) -> dict:
    """A new attempt of ``rec``, ended with ``status``."""
    now = time.time()
    begun = started(rec, host=who, pid=os.getpid(), worker=who, device_group=None, at=now)
    return finished(begun, status, at=now,
                    result={"by": who} if status == "accepted" else None,
                    error=None if status == "accepted" else {"type": "E", "message": status})


class TwoWriters(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.folder = Path(tempfile.mkdtemp())
        self.path = self.folder / "ledger.json"
        self.saved = _document.load, _commit.IDLE_CHECK
        _commit.IDLE_CHECK = 0.01
        doc = _document.new_document()
        for tid in DRIVER_TASKS + OTHER_TASKS:
            item = {"task_id": tid}
            doc["tasks"][tid] = new_record(item, fingerprint(item))
        atomic_write(self.path, _document.dumps(doc))
        self.durable: dict[str, dict] = {}  # task id -> the record written last, durably
        self.removed: set[str] = set()
        self.driver: Ledger | None = None

    def teardown(self):
        try:
            if self.driver is not None:
                self.driver.close("finished")
                self.driver = None
                self.check()
        finally:
            _document.load, _commit.IDLE_CHECK = self.saved
            shutil.rmtree(self.folder, ignore_errors=True)

    @initialize(fraction=st.sampled_from([0.02, 0.5, 1e9]))
    def open_driver(self, fraction):
        self.fraction = fraction  # 0.02: it compacts at almost every commit; 1e9: never
        self.driver = Ledger(self.path, min_interval=0.0, compact_fraction=fraction)
        self.driver.open()

    def check(self):
        tasks = read_ledger(self.path)["tasks"]
        for tid, rec in self.durable.items():
            assert tasks.get(tid) == rec, f"{tid}: the durable record {rec} was lost"
        for tid in self.removed:
            assert tid not in tasks, f"{tid} was removed by the other writer and came back"

    def check_soon(self):
        """`check`, once the idle driver has had time to notice the file replaced (it looks
        every `campaign._ledger._commit.IDLE_CHECK` seconds; 0.01 s here)."""
        deadline = time.monotonic() + 10.0
        while True:
            try:
                return self.check()
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.02)

    def driver_commits(self, steps):
        for tid, status in steps:
            rec = self.driver.tasks[tid]
            if rec["status"] == "accepted":
                continue  # final
            new = attempt(rec, status, "driver")
            self.driver.put(tid, new)
            self.driver.flush()  # on return, durable
            self.durable[tid] = new

    @rule(tid=st.sampled_from(DRIVER_TASKS), status=st.sampled_from(STATUSES))
    def driver_commit(self, tid, status):
        self.driver_commits([(tid, status)])
        self.check_soon()  # at once where it wrote, and at its next look where it had no change

    def from_a_stale_read(self, inner, mutate):
        """The other writer reads, the driver commits ``inner`` meanwhile, and the other, holding
        the lock, writes what it had read with ``mutate``'s change (and removes the journal):
        its read-merge-write read what a stale cache still served. Returns `update`'s answer."""
        stale = _document.load(self.path)
        self.driver_commits(inner)
        load = self.saved[0]
        _document.load = lambda path: (copy.deepcopy(stale[0]), stale[1])
        try:
            return update(self.path, mutate)[0]
        finally:
            _document.load = load

    @rule(tid=st.sampled_from(OTHER_TASKS), status=st.sampled_from(STATUSES), inner=driver_steps)
    def other_writes_from_a_stale_read(self, tid, status, inner):
        def mutate(doc):
            rec = doc["tasks"].get(tid)
            if rec is None:
                rec = new_record({"task_id": tid}, fingerprint({"task_id": tid}))
            if rec["status"] == "accepted":
                return False
            doc["tasks"][tid] = attempt(rec, status, "other")
            return True

        if self.from_a_stale_read(inner, mutate):
            self.durable[tid] = read_ledger(self.path)["tasks"][tid]
            self.removed.discard(tid)

    @rule(tid=st.sampled_from(OTHER_TASKS), inner=driver_steps)
    def other_forgets_from_a_stale_read(self, tid, inner):
        self.from_a_stale_read(inner, lambda doc: doc["tasks"].pop(tid, None))
        self.durable.pop(tid, None)
        self.removed.add(tid)

    @rule()
    def driver_closes_and_another_opens(self):
        self.driver.close("finished")
        self.check()
        self.driver = Ledger(self.path, min_interval=0.0, compact_fraction=self.fraction)
        self.driver.open()


EXAMPLES = int(os.environ.get("DIFFSOUP_HYPOTHESIS_EXAMPLES", "60"))
TwoWriters.TestCase.settings = settings(max_examples=EXAMPLES, stateful_step_count=15,
                                        deadline=None)
test_no_durable_record_is_lost_between_two_writers = TwoWriters.TestCase
