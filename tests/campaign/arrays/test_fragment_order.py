"""Fragments are applied to the ledger in one order whatever the clocks that named them: a
superseded attempt (a run past a lease another worker took over) is folded into the task's
newest record after every other fragment, so one merge records both runs. The fragments'
names sort by their writers' clocks; a taker whose clock runs ahead names its records after
the superseded run's, though it wrote them first (tests/sharedfs/test_clock_skew.py runs the
whole case with libfaketime)."""

from __future__ import annotations

import time

from campaign import read_ledger
from campaign._array._plan import plan_submission
from campaign._array._workdir import WorkDir, fragment_files, merge_fragments, overlay
from campaign._ledger import _records
from campaign._ledger._overlay import scan_records

STALLED = {"worker": "4000_0", "host": "n1", "pid": 11}
TAKER = {"worker": "4001_0", "host": "n2", "pid": 22}


def runs(rec):
    """(worker, status, error type) of the record's attempts, oldest first."""
    return [(e["worker"], e["status"], (e["error"] or {}).get("type"))
            for e in rec["history"]] + [(rec["worker"], rec["status"], None)]


def test_a_superseded_attempt_named_before_the_takers_records_is_kept(tmp_path):
    ledger = tmp_path / "ledger.json"
    sub = plan_submission([{"task_id": "t0", "x": 0}], ledger_path=ledger).record().id
    pending = read_ledger(ledger)["tasks"]["t0"]
    work = WorkDir(ledger, sub)
    begun = time.time()
    stalled = _records.started(pending, device_group=None, at=begun, **STALLED)
    # the taker's clock is ahead: its records, written first, are named after this one
    ran = _records.finished(stalled, "accepted", at=begun + 3, result={"y": 1})
    work.write_fragment({"t0": _records.superseded(ran, TAKER, at=begun + 3)}, STALLED)
    lost = _records.finished(
        _records.started(pending, device_group=None, at=begun + 1, **STALLED), "interrupted",
        at=begun + 1, error={"type": "WorkerLost", "message": "stopped renewing its lease",
                             "traceback": ""})
    work.write_fragment({"t0": lost}, TAKER)
    again = _records.started(lost, device_group=None, at=begun + 1, **TAKER)
    work.write_fragment({"t0": _records.finished(again, "accepted", at=begun + 4, result={"y": 2})},
                        TAKER)
    shown = overlay(read_ledger(ledger), ledger)["tasks"]["t0"]
    _, chunks, _ = scan_records(ledger)
    scanned = {tid: rec for chunk in chunks for tid, rec in chunk.items()}["t0"]

    merge_fragments(ledger)  # once: both runs are in the record
    rec = read_ledger(ledger)["tasks"]["t0"]
    assert runs(rec) == [("4000_0", "interrupted", "WorkerLost"), ("4001_0", "accepted", None)]
    assert "so it ran twice" in rec["history"][0]["error"]["message"], rec["history"]
    assert rec["result"] == {"y": 2}
    assert shown == scanned == rec  # what status and the workers show before the merge
    merge_fragments(ledger)  # the next merge finds every fragment in the ledger: all go
    assert read_ledger(ledger)["tasks"]["t0"] == rec
    assert fragment_files(ledger) == []
