"""The order in which array workers try to claim tasks, and their walk past ended ones.

`claim_order` turns the task list to begin at each element's share (from Slurm's
``SLURM_ARRAY_TASK_*`` variables, `array_share`), so that elements that start together do not all
race for the first task; `WorkDir.not_done` yields the tasks that have not ended when reached,
listing ``done/`` instead of looking up each task once a worker has passed many ended ones. Both
are checked against what they must keep: every task is tried, none that ended is yielded, the
ones left are yielded in order. benchmarks/scale.py measures what they save at 200 claimers.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from campaign._array._workdir import WorkDir, task_key
from campaign._array._worker import array_share, claim_order

IDS = [f"t{i:03d}" for i in range(100)]


def test_each_element_starts_at_its_share_and_tries_every_task():
    starts = []
    for i in range(8):
        order = claim_order(IDS, (i, 8))
        assert sorted(order) == IDS  # every task, once
        start = IDS.index(order[0])
        assert order == IDS[start:] + IDS[:start]  # the list turned, not shuffled
        starts.append(start)
    assert starts == [i * 100 // 8 for i in range(8)]


def test_a_worker_without_a_share_starts_somewhere_and_tries_every_task():
    order = claim_order(IDS)
    assert sorted(order) == IDS
    start = IDS.index(order[0])
    assert order == IDS[start:] + IDS[:start]
    assert claim_order([]) == []


@pytest.mark.parametrize(("env", "share"), [
    ({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "10"}, (3, 10)),
    ({"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "1",
      "SLURM_ARRAY_TASK_STEP": "2"}, (3, 4)),  # --array=1-7:2 is 1, 3, 5, 7
    ({"SLURM_ARRAY_TASK_ID": "3"}, None),  # Slurm says no count: a random start
    ({"SLURM_ARRAY_TASK_ID": "x", "SLURM_ARRAY_TASK_COUNT": "10"}, None),
    ({"SLURM_ARRAY_TASK_ID": "12", "SLURM_ARRAY_TASK_COUNT": "10"}, None),  # not in the array
    ({}, None),
])
def test_the_share_comes_from_slurms_array_variables(monkeypatch, env, share):
    for name in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN",
                 "SLURM_ARRAY_TASK_STEP"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert array_share() == share


def end(work: WorkDir, task_id: str, *, accepted: bool = True) -> None:
    work.mark_done(task_id, accepted=accepted)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 400), data=st.data())
def test_not_done_yields_exactly_the_tasks_not_ended_when_reached(tmp_path_factory, n, data):
    """Tasks end before the walk and while it goes on (as other workers end them), in long runs
    and scattered, so that the walk lists ``done/`` and also looks up: what it yields is every
    task not ended when reached, in order, and never one that had ended."""
    folder = tmp_path_factory.mktemp("work")
    work = WorkDir(folder / "ledger.json", "sub")
    ids = [f"task {i}/x" for i in range(n)]  # any character: the files are named by key
    before = data.draw(st.sets(st.sampled_from(ids))) if ids else set()
    for tid in before:
        end(work, tid, accepted=data.draw(st.booleans()))
    # while the walk goes on: when the k-th task is yielded, these end (ahead of it or behind)
    during = data.draw(st.dictionaries(st.integers(0, n), st.sets(st.sampled_from(ids)),
                                       max_size=8)) if ids else {}
    ended = set(before)
    got: list[str] = []
    seen = [frozenset(ended)]  # what had ended while the walk looked for the next task
    for tid in work.not_done(ids):
        assert tid not in ended, f"{tid!r} had ended and was yielded"
        got.append(tid)
        for late in during.get(len(got), ()):
            end(work, late)
            ended.add(late)
        seen.append(frozenset(ended))
    # in order, each once; a task passed over had ended before the walk reached it
    at = [ids.index(tid) for tid in got]
    assert at == sorted(set(at))
    for k, (lo, hi) in enumerate(zip([-1, *at], [*at, len(ids)], strict=True)):
        for tid in ids[lo + 1:hi]:
            assert tid in seen[k], f"{tid!r} had not ended and was passed over"


def test_a_worker_past_long_runs_of_ended_tasks_lists_instead_of_looking_up(tmp_path,
                                                                          monkeypatch):
    work = WorkDir(tmp_path / "ledger.json", "sub")
    ids = [f"t{i:05d}" for i in range(3000)]
    for tid in ids:
        if tid != "t02999":
            end(work, tid)
    lookups = []
    real = os.path.exists

    def counted(path):
        lookups.append(path)
        return real(path)

    monkeypatch.setattr(os.path, "exists", counted)
    assert list(work.not_done(ids)) == ["t02999"]
    # a third of the list is looked up (1,000 lookups), then one listing skips the rest
    assert len(lookups) < 1100
    assert any(p.endswith(task_key("t02999")) for p in lookups)
