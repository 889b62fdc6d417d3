"""What an element reads: its shares' records, written once by the submission, never the ledger
(campaign/_array/_view.py, `campaign._array._shares.write_shares`).

Checked with real submissions and workers: each share's file holds the records the ledger holds
for that share's tasks, in the task list's order; a worker runs a submission to its end without
reading the ledger or the task list (their readers made to fail); a submission made before
share records existed, or one with a share file missing, is run from the ledger. A forget
between the submission and its workers is in tests/faults/test_forget_arrays.py.
"""

from __future__ import annotations

import orjson
import pytest

from campaign import read_ledger, run_worker
from campaign._array import _shares, _view
from campaign._array._plan import plan_submission
from campaign._array._shares import items_path, share_meta
from campaign._array._workdir import WorkDir, task_list_path

OWNER = {"worker": "w", "job": None, "array_task": None, "host": "here", "pid": 1}


def submit(tmp_path, tasks: int, elements: int) -> tuple[WorkDir, list[str]]:
    ledger = tmp_path / "ledger.json"
    items = [{"task_id": f"t{i:04d}", "x": i, "note": "é" * (i % 3)} for i in range(tasks)]
    sub = plan_submission(items, ledger_path=ledger).record(elements=elements)
    ids = orjson.loads(task_list_path(ledger, sub.id).read_bytes())
    return WorkDir(ledger, sub.id), ids


@pytest.mark.parametrize(("tasks", "elements"), [(1, 1), (100, 4), (3000, 2)])
def test_each_share_file_holds_the_ledgers_records_of_its_tasks_in_order(tmp_path, tasks,
                                                                         elements):
    work, ids = submit(tmp_path, tasks, elements)
    meta = share_meta(work)
    assert meta["items"] is True and meta["forgets"] is None  # no forget ever ran
    size = meta["size"]
    held = read_ledger(work.ledger)["tasks"]
    count = -(-tasks // size)
    for n in range(count):
        records = orjson.loads(items_path(work.root, n).read_bytes())
        assert list(records) == ids[n * size:(n + 1) * size]
        assert records == {tid: held[tid] for tid in records}
    assert not items_path(work.root, count).exists()
    assert len(list((work.root / "items").iterdir())) == count


def test_a_worker_runs_its_submission_without_reading_the_ledger_or_the_task_list(
        tmp_path, monkeypatch):
    work, ids = submit(tmp_path, 300, 2)

    def no_ledger(*args, **kwargs):
        raise AssertionError("an element read the whole ledger or the whole task list")

    monkeypatch.setattr(_view, "overlay", no_ledger)
    monkeypatch.setattr(_shares, "read_task_list", no_ledger)
    ran: list[str] = []
    summary = run_worker(lambda item: ran.append(item["task_id"]) or {"x": item["x"]},
                         work.ledger, work.submission, owner=OWNER, merge_every=3600.0)
    assert summary.accepted == 300 and sorted(ran) == ids
    tasks = read_ledger(work.ledger)["tasks"]
    assert all(tasks[tid]["status"] == "accepted" and tasks[tid]["result"] == {"x": int(tid[1:])}
               for tid in ids)


@pytest.mark.parametrize("damage", ["no shares.json", "a share file missing"])
def test_without_share_records_a_worker_reads_the_ledger(tmp_path, damage):
    work, ids = submit(tmp_path, 200, 2)
    if damage == "no shares.json":  # as a submission made before shares
        (work.root / "shares.json").unlink()
    else:
        items_path(work.root, 1).unlink()
    ran: list[str] = []
    run_worker(lambda item: ran.append(item["task_id"]) or {}, work.ledger, work.submission,
               owner=OWNER, merge_every=3600.0)
    assert sorted(ran) == ids
    assert {r["status"] for r in read_ledger(work.ledger)["tasks"].values()} == {"accepted"}


def test_a_task_whose_worker_died_after_its_fragment_is_not_run_again(tmp_path, monkeypatch):
    """The first worker dies between a task's fragment and its done marks (the ledger does not
    have the record yet, its share's file says pending): the next worker takes the task's
    lease over once expired, finds the accepted record in ``latest/`` and does not run it."""
    work, ids = submit(tmp_path, 20, 1)

    class Killed(BaseException):
        pass

    def die(self, task_id, *, accepted):
        raise Killed

    monkeypatch.setattr(WorkDir, "mark_done", die)
    first: list[str] = []
    with pytest.raises(Killed):
        run_worker(lambda item: first.append(item["task_id"]) or {}, work.ledger,
                   work.submission, owner=OWNER, lease_seconds=0.5, merge_every=3600.0)
    monkeypatch.undo()
    (died_in,) = first
    then: list[str] = []
    run_worker(lambda item: then.append(item["task_id"]) or {}, work.ledger, work.submission,
               owner=dict(OWNER, worker="w2"), lease_seconds=0.5, merge_every=3600.0)
    assert sorted(then) == sorted(set(ids) - {died_in})
    rec = read_ledger(work.ledger)["tasks"][died_in]
    assert rec["status"] == "accepted" and rec["attempts"] == 1 and not rec["interruptions"]
