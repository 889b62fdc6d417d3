"""Items are held compactly (their stored JSON, not the objects), yet fn gets each item as given,
tasks run in item order, and a run hands each task out as it goes."""

from __future__ import annotations

import math
import tracemalloc
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np
import pytest

from campaign import checkpointed_map, read_ledger
from campaign._items import prepare_items
from campaign._ledger._jsonvalue import encode_item, fingerprint
from campaign._taskqueue import TaskQueue


def same(a: Any, b: Any) -> bool:
    """Equal, of the same types all the way down, dict keys in the same order (NaN == NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


PLAIN: list[dict[str, Any]] = [
    {"task_id": "flat", "i": 7, "x": -0.0, "big": 2**64 - 1, "neg": -(2**63), "s": "é☃𝄞",
     "t": True, "n": None, "f": 1e-310},
    {"z": 1, "task_id": "key order", "a": 2.5},
    {"task_id": "nested", "v": {"w": [1, [2.0, {"deep": None}], "x"]}, "e": {}, "l": []},
]
AS_GIVEN: list[Mapping[str, Any]] = [  # not their own stored form: fn gets these very objects
    {"task_id": "tuple", "v": (1, 2)},
    {"task_id": "nonfinite", "v": [math.inf, math.nan]},
    {"task_id": "numpy", "v": np.float32(1.5)},
    MappingProxyType({"task_id": "mapping", "v": 1}),
]


def test_fn_gets_every_item_as_given_in_item_order(ledger):
    items: list[Mapping[str, Any]] = [*PLAIN, *AS_GIVEN]
    seen: list[Any] = []

    def fn(item: Mapping[str, Any]) -> dict[str, Any]:
        seen.append(item)
        return {"ok": True}

    camp = checkpointed_map(fn, iter(items), ledger_path=ledger)
    assert camp.complete and [it["task_id"] for it in seen] == [it["task_id"] for it in items]
    for plain, got in zip(PLAIN, seen):
        assert same(plain, got), (plain, got)
    for given, got in zip(AS_GIVEN, seen[len(PLAIN):]):
        assert got is given
    tasks = read_ledger(ledger)["tasks"]
    for one in items:
        stored = encode_item(dict(one), "item")
        rec = tasks[one["task_id"]]
        assert rec["item"] == stored and rec["fingerprint"] == fingerprint(stored)


def test_items_streamed_from_an_iterator_are_held_as_bytes_not_objects():
    n = 20_000

    def items() -> Iterator[dict[str, Any]]:
        for i in range(n):
            yield {"task_id": f"t{i:07d}", "i": i, "x": i / 3, "tag": "sample"}

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        prepared = prepare_items(items())
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # per item: its task id (~60 bytes), digest and JSON (~110) and two list slots; as the
    # dict, a PreparedItem and a digest object it took over 400
    assert held / n < 300, f"{held / n:.0f} bytes per item"
    assert len(prepared) == n and prepared.task_ids[5] == "t0000005"
    assert same(prepared.item(5), {"task_id": "t0000005", "i": 5, "x": 5 / 3, "tag": "sample"})


def test_a_released_item_says_so_and_its_task_id_stays():
    prepared = prepare_items({"task_id": f"t{i}", "v": i} for i in range(4))
    prepared.keep_only([1, 3])
    assert prepared.item(1) == {"task_id": "t1", "v": 1} and prepared.item(3)["v"] == 3
    prepared.release(3)
    for index in (0, 2, 3):
        with pytest.raises(LookupError, match=f"task 't{index}'"):
            prepared.item(index)
    assert prepared.task_ids == ["t0", "t1", "t2", "t3"]
    assert [p.task_id for p in prepared] == prepared.task_ids


def test_the_queue_builds_tasks_when_taken_in_the_order_of_one_deque():
    prepared = prepare_items({"task_id": f"t{i}", "v": i} for i in range(5))
    queue = TaskQueue(prepared, [0, 2, 3])
    assert len(queue) == 3
    first = queue.popleft()
    assert first[0] == 0 and (first[1].task_id, first[1].item, first[1].attempt) == (
        "t0", {"task_id": "t0", "v": 0}, 0)
    queue.append((first[0], type(first[1])("t0", first[1].item, 1)))  # to run again: last
    second = queue.popleft()
    queue.appendleft(second)  # given back: first again
    order = []
    while queue:
        index, task = queue.popleft()
        order.append((index, task.task_id, task.attempt))
    assert order == [(2, "t2", 0), (3, "t3", 0), (0, "t0", 1)]
    with pytest.raises(IndexError):
        queue.popleft()


def test_a_retried_task_runs_again_after_the_others(ledger):
    calls: list[str] = []

    def fn(item: Mapping[str, Any]) -> dict[str, Any]:
        calls.append(item["task_id"])
        if item["task_id"] == "b" and calls.count("b") == 1:
            raise ValueError("first try")
        return {"v": item["v"]}

    camp = checkpointed_map(fn, ({"task_id": t, "v": i} for i, t in enumerate("abc")),
                            ledger_path=ledger, retries=1)
    assert camp.complete and calls == ["a", "b", "c", "b"]
    assert [r["v"] for r in camp.results] == [0, 1, 2]
    assert read_ledger(ledger)["tasks"]["b"]["attempts"] == 2


def test_a_finished_ledger_resumed_in_another_order_or_in_part_runs_nothing(ledger):
    items: list[dict[str, Any]] = [{"task_id": f"t{i}", "v": i} for i in range(50)]
    first = checkpointed_map(lambda it: {"w": it["v"] * 2}, items, ledger_path=ledger)
    written = ledger.read_bytes()

    def never(item: Mapping[str, Any]) -> dict[str, Any]:
        raise AssertionError("nothing is to run")

    for again in (items[::-1], items[10:20], items[:1]):
        camp = checkpointed_map(never, again, ledger_path=ledger)
        assert camp.task_ids == tuple(it["task_id"] for it in again)
        assert list(camp.results) == [{"w": it["v"] * 2} for it in again]
        assert (camp.kept, camp.ran) == (len(again), 0)
        assert all(camp.records[t] == first.records[t] for t in camp.task_ids)
        assert ledger.read_bytes() == written
    changed = [dict(items[0], v=-1), *items[1:]]
    camp = checkpointed_map(never, changed, ledger_path=ledger)
    assert camp.refused == ("t0",) and camp.kept == 49 and camp.ran == 0
