"""Bad input is a clear error raised before any task runs, and nothing is written."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from campaign import ItemError, checkpointed_map


def never(item):
    raise AssertionError("fn must not run on bad input")


@pytest.mark.parametrize(
    "items, words",
    [
        ([{"x": 1}], ["items[0]", "no 'task_id'", "'x'"]),
        ([{"task_id": 3}], ["items[0]", "task_id 3", "non-empty string"]),
        ([{"task_id": ""}], ["items[0]", "task_id ''"]),
        ([{"task_id": "a"}, "b"], ["items[1]", "str, not a dict"]),
        ([{"task_id": "a", "v": {1: 2}}], ["items[0]['v']", "key 1", "str(key)"]),
        ([{"task_id": "a", "v": [1, {2, 3}]}],
         ["items[0]['v'][1]", "is a set,", "not plain JSON"]),
        ([{"task_id": "a", "v": np.zeros(3)}],
         ["items[0]['v']", "numpy.ndarray", "(3,)", ".tolist()"]),
        ([{"task_id": "a", "v": 2**70}], ["items[0]['v']", "too large", "string"]),
        ([{"task_id": "a", "v": {"$float": "x"}}], ["reserves", "$float"]),
        ("abc", ["list of dicts"]),
    ],
)
def test_bad_items_are_refused_before_anything_runs(ledger, items, words):
    with pytest.raises(ItemError) as info:
        checkpointed_map(never, items, ledger_path=ledger)
    for word in words:
        assert word in str(info.value)
    assert not ledger.exists()


def test_duplicate_task_ids_are_all_listed(ledger):
    items = [{"task_id": t} for t in ["a", "b", "a", "c", "b", "a", "d"]]
    with pytest.raises(ItemError) as info:
        checkpointed_map(never, items, ledger_path=ledger)
    message = str(info.value)
    assert "2 task_id(s)" in message and "'a' (3x)" in message and "'b' (2x)" in message
    assert "'c'" not in message and not ledger.exists()


def test_numpy_scalars_and_nonfinite_floats_in_items_are_accepted(ledger):
    items = [{"task_id": "a", "t": np.float32(1.5), "n": np.int64(3), "bad": math.inf,
              "seq": (1, 2)}]
    seen: list[dict[str, Any]] = []

    def fn(it):
        seen.append(it)
        return {"ok": True}

    camp = checkpointed_map(fn, items, ledger_path=ledger)
    assert camp.complete and seen[0]["t"] == np.float32(1.5)
    item = camp.records["a"]["item"]
    assert item == {"task_id": "a", "t": 1.5, "n": 3, "bad": math.inf, "seq": [1, 2]}
    # the same item given again (tuple vs list, numpy vs float) is the same fingerprint
    again = checkpointed_map(never, [dict(items[0], seq=[1, 2], t=1.5)], ledger_path=ledger)
    assert again.complete and not again.failures


@pytest.mark.parametrize("bad", [{"retries": -1}, {"retries": 1.5}, {"max_interruptions": -2},
                                 {"commit_interval": -1.0}])
def test_bad_options(ledger, bad):
    with pytest.raises(ValueError):
        checkpointed_map(never, [{"task_id": "a"}], ledger_path=ledger, **bad)
    assert not ledger.exists()


def test_unknown_execution(ledger):
    with pytest.raises(ValueError, match="unknown execution 'gpu'"):
        checkpointed_map(never, [{"task_id": "a"}], ledger_path=ledger, execution="gpu")


def test_device_groups_need_processes(ledger):
    with pytest.raises(ValueError, match="execution='processes'"):
        checkpointed_map(never, [{"task_id": "a"}], ledger_path=ledger, device_groups=[(0,)])
