"""Shares: how array elements divide a submission's tasks (campaign/_array/_shares.py).

Each element claims whole shares of the task list by lease, its own first (from Slurm's
``SLURM_ARRAY_TASK_*`` variables, `array_share`), then the middle of the longest run of shares
nobody holds. Checked here, with real files and threads: every share is claimed by one element
at a time and ended once, an element stops once every share has ended, the claims and listings it
makes stay bounded by the shares (not elements x shares), a dead element's share is taken over
once its lease expires, and a share released with tasks held elsewhere is claimed again later.
benchmarks/array_scale.py measures elements x tasks over a FUSE view.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st
from testkit import in_threads

from campaign._array import _shares
from campaign._array._shares import Picker, Shares, share_name, share_size
from campaign._array._workdir import WorkDir, write_task_list
from campaign._array._worker import array_share

OWNER = {"worker": "w", "host": "here", "pid": 1}


@given(tasks=st.integers(0, 10**7), elements=st.one_of(st.none(), st.integers(1, 5000)))
def test_a_share_is_one_to_most_tasks_about_eight_per_element(tasks, elements):
    size = share_size(tasks, elements)
    assert 1 <= size <= _shares.MOST
    count = -(-tasks // size)
    if size < _shares.MOST:  # not capped: at least eight shares per element, or one per task
        assert count >= min(tasks, _shares.PER_ELEMENT * (elements or _shares.ELEMENTS))


@given(st.sets(st.integers(0, 200), min_size=1))
def test_the_next_share_is_in_the_middle_of_the_longest_free_run(free):
    ordered = sorted(free)
    runs, start = [], ordered[0]
    for prev, n in zip(ordered, [*ordered[1:], None]):
        if n != prev + 1:
            runs.append(range(start, prev + 1))
            start = n
    longest = max(len(r) for r in runs)
    got = _shares._middle_of_longest_run(ordered)
    run = next(r for r in runs if got in r)
    assert len(run) == longest and got == run[len(run) // 2]


def submission(tmp_path, tasks: int, size: int) -> tuple[WorkDir, list[str]]:
    ledger = tmp_path / "ledger.json"
    ids = [f"t{i:05d}" for i in range(tasks)]
    write_task_list(ledger, "sub", ids, size)
    return WorkDir(ledger, "sub"), ids


def counting(shares: Shares) -> Counter[str]:
    """Count the share claims and listings made through ``shares``."""
    counts: Counter[str] = Counter()
    claim, listing = shares.leases.claim, shares.listing

    def counted_claim(name, owner):
        counts["claims"] += 1
        return claim(name, owner)

    def counted_listing():
        counts["listings"] += 1
        return listing()

    shares.leases.claim, shares.listing = counted_claim, counted_listing
    return counts


@pytest.mark.parametrize(("elements", "tasks"), [(1, 50), (8, 2000), (32, 3000)])
def test_elements_claim_each_share_once_and_hold_it_alone(tmp_path, elements, tasks):
    work, ids = submission(tmp_path, tasks, share_size(tasks, elements))
    claimed: list[tuple[int, int]] = []
    holding: Counter[int] = Counter()
    mutex = threading.Lock()
    costs: list[Counter[str]] = []

    def element(i: int) -> None:
        shares = Shares(work, ids, lease_seconds=60.0)
        costs.append(counting(shares))
        picker = Picker(shares, dict(OWNER, worker=f"w{i}"), (i, elements), poll=0.05)
        while (got := picker.claim(lambda: False)) is not None:
            n, lease = got
            with mutex:
                holding[n] += 1
                assert holding[n] == 1, f"share {n} held twice at once"
                claimed.append((i, n))
            time.sleep(0.001)  # its tasks
            with mutex:
                holding[n] -= 1
            shares.leases.release(lease, done=True)

    errors = in_threads(element, elements)
    assert not errors, errors
    count = Shares(work, ids, lease_seconds=60.0).count
    assert sorted(n for _, n in claimed) == list(range(count))  # each share ended once


@pytest.mark.parametrize(("elements", "tasks"), [(8, 2000), (32, 3000), (128, 10000)])
def test_the_claims_and_listings_of_all_elements_grow_with_the_shares_only(tmp_path, elements,
                                                                           tasks):
    """Elements taking turns (one share each, round robin: the same every run): claims are
    each share once plus a few lost to a neighbour, listings a few per element, never one per
    share and element as when each walked the whole list."""
    work, ids = submission(tmp_path, tasks, share_size(tasks, elements))
    costs, pickers = [], []
    for i in range(elements):
        shares = Shares(work, ids, lease_seconds=60.0)
        costs.append(counting(shares))
        pickers.append((shares, Picker(shares, dict(OWNER, worker=f"w{i}"), (i, elements),
                                       poll=0.05)))
    ended: list[int] = []
    live = list(pickers)
    while live:
        for pair in list(live):
            shares, picker = pair
            got = picker.claim(lambda: False)
            if got is None:
                live.remove(pair)
                continue
            ended.append(got[0])
            shares.leases.release(got[1], done=True)
    count = pickers[0][0].count
    assert sorted(ended) == list(range(count))
    claims = sum(c["claims"] for c in costs)
    listings = sum(c["listings"] for c in costs)
    assert claims <= count + 4 * elements, (claims, count)
    assert listings <= 4 * elements, (listings, count)


def test_a_dead_elements_share_is_taken_over_once_its_lease_expires(tmp_path):
    work, ids = submission(tmp_path, 40, 10)
    dead = Shares(work, ids, lease_seconds=0.5)
    assert dead.leases.claim(share_name(1), dict(OWNER, worker="dead")) is not None  # never renewed
    shares = Shares(work, ids, lease_seconds=0.5)
    picker = Picker(shares, OWNER, (0, 1), poll=0.05)
    got = []
    while (claim := picker.claim(lambda: False)) is not None:
        got.append((claim[0], claim[1].get("stolen_from", {}).get("worker")))
        shares.leases.release(claim[1], done=True)
    assert sorted(got) == [(0, None), (1, "dead"), (2, None), (3, None)]
    assert got[-1] == (1, "dead")  # taken over last, once nothing else was left


def test_a_share_released_unended_is_claimed_again_later(tmp_path):
    work, ids = submission(tmp_path, 20, 10)
    shares = Shares(work, ids, lease_seconds=60.0)
    picker = Picker(shares, OWNER, (0, 1), poll=0.05)
    n, lease = picker.claim(lambda: False)
    shares.leases.release(lease, done=False)  # another worker held one of its tasks
    picker.defer(n)
    order = []
    while (claim := picker.claim(lambda: False)) is not None:
        order.append(claim[0])
        shares.leases.release(claim[1], done=True)
    assert order == [1 - n, n]


def test_a_stopped_element_claims_nothing(tmp_path):
    work, ids = submission(tmp_path, 20, 10)
    assert Picker(Shares(work, ids, lease_seconds=60.0), OWNER, None, 0.05).claim(
        lambda: True) is None


def test_a_submission_without_a_share_size_gets_the_same_one_in_every_worker(tmp_path):
    ledger = tmp_path / "ledger.json"
    ids = [f"t{i}" for i in range(5000)]
    write_task_list(ledger, "old", ids)  # as before shares: no shares.json
    work = WorkDir(ledger, "old")
    sizes = {Shares(work, ids, lease_seconds=60.0).size for _ in range(3)}
    assert sizes == {share_size(5000)}


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
