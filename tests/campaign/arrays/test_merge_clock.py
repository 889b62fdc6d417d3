"""When array elements merge between tasks (campaign/_array/_merging.py, `MergeClock`).

Each merge rewrites the whole ledger, so all elements together merge about once per
``merge_every``, never sooner than ``SPACING`` times the last merge's duration after it. Checked
with real ``merged.json`` files and a clock the test moves (the merge itself counted, with the
duration the test gives it): merges do not grow with the elements, a slow merge spaces out the
next, and a stamp another element wrote counts as a merge just now.
"""

from __future__ import annotations

import pytest

from campaign._array import _merging
from campaign._array._merging import SPACING, MergeClock
from campaign._ledger._paths import LedgerPaths


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def merges(tmp_path, monkeypatch):
    """(ledger, the merges made, the duration each merge reports: set by the test)."""
    ledger = tmp_path / "ledger.json"
    LedgerPaths.of(ledger).work.mkdir()
    made: list[float] = []
    took = [0.1]

    def merge(path, *, wait=True):
        assert path == ledger and wait is False
        made.append(took[0])
        return took[0]

    monkeypatch.setattr(_merging, "merge", merge)
    return ledger, made, took


@pytest.mark.parametrize("elements", [1, 8, 128])
def test_elements_together_merge_about_once_per_interval(merges, elements):
    ledger, made, _ = merges
    clock = Clock()
    clocks = [MergeClock(ledger, 5.0, now=clock) for _ in range(elements)]
    for _ in range(1000):  # 100 s: every element ticks after each of its tasks, every 0.1 s
        clock.t += 0.1
        for each in clocks:
            each.tick()
    assert 100 / (2 * 5.0) <= len(made) <= 100 / 5.0 + 1, len(made)


def test_a_slow_merge_spaces_out_the_next(merges):
    ledger, made, took = merges
    clock = Clock()
    first, second = MergeClock(ledger, 1.0, now=clock), MergeClock(ledger, 1.0, now=clock)
    took[0] = 2.0
    clock.t = 1.0
    first.tick()
    assert len(made) == 1
    clock.t = 1.5
    second.tick()  # sees first's stamp: a merge just now, by its own clock
    due = 1.0 + SPACING * 2.0
    for t in (3.0, 10.0, due - 0.1):
        clock.t = t
        first.tick()
        second.tick()
        assert len(made) == 1, t
    clock.t = due
    first.tick()
    assert len(made) == 2
    clock.t = due + 1.0  # second sees the new stamp: it waits again
    second.tick()
    assert len(made) == 2


def test_a_damaged_stamp_is_a_merge_of_no_duration(merges):
    ledger, made, _ = merges
    clock = Clock()
    element = MergeClock(ledger, 1.0, now=clock)
    (LedgerPaths.of(ledger).work / "merged.json").write_bytes(b"{not json")
    clock.t = 1.0
    element.tick()  # changed since it looked: someone merged
    assert made == []
    clock.t = 2.0
    element.tick()
    assert len(made) == 1
