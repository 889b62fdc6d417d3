"""`campaign.iter_ledger`: the records `read_ledger` gives, in its order, streamed in bounded
memory; the journal of a killed driver merged; a bad record refused as `read_ledger` refuses it."""

from __future__ import annotations

import math
import tracemalloc

import orjson
import pytest
from test_journal import killed_driver, restore

from campaign import LedgerError, LedgerRecords, checkpointed_map, iter_ledger, read_ledger


def fit(item):
    if item["x"] % 97 == 3:
        raise ValueError(f"x = {item['x']} is out of range")
    return {"y": item["x"] * 0.5, "r": math.nan if item["x"] % 50 == 7 else 1.0,
            "tags": ["a", {"k": item["x"]}]}


def items(n: int) -> list[dict]:
    return [{"task_id": f"t{i:05d}", "x": i, "note": "é" * (i % 5)} for i in range(n)]


def test_the_records_and_the_head_are_read_ledgers(ledger):
    checkpointed_map(fit, items(3000), ledger_path=ledger)
    checkpointed_map(fit, items(3200), ledger_path=ledger)  # a second run, 200 more tasks
    whole = read_ledger(ledger)
    with iter_ledger(ledger) as stream:
        assert isinstance(stream, LedgerRecords)
        head = stream.head
        records = list(stream)
    assert records == list(whole["tasks"].items())  # the same records, in the same order
    assert head == {k: v for k, v in whole.items() if k != "tasks"}
    assert len(head["runs"]) == 2
    assert ledger.stat().st_size > 1 << 20  # many blocks, not one


def test_a_killed_drivers_journal_is_merged(ledger):
    file, journal, compacted = killed_driver(ledger, [["a"], ["b", "c"], ["a", "d"]])
    restore(ledger, file, journal)
    stream = iter_ledger(ledger)
    records = dict(stream)
    assert records == read_ledger(ledger)["tasks"] == orjson.loads(compacted)["tasks"]
    assert set(records) == set("abcd") and stream.head["runs"][-1]["status"] == "running"


def test_it_holds_one_block_not_the_whole_ledger(ledger):
    checkpointed_map(fit, items(20000), ledger_path=ledger)
    tracemalloc.start()
    try:
        read_ledger(ledger)
        whole = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        count = 0
        for _, record in iter_ledger(ledger):
            count += record["status"] in ("accepted", "failed")
        streamed = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == 20000
    # read_ledger holds every record (tens of MB); the stream a block's records at a time
    assert streamed < whole / 10, (streamed, whole)


def test_a_bad_record_is_refused_naming_the_task(ledger):
    checkpointed_map(fit, items(2000), ledger_path=ledger)
    doc = orjson.loads(ledger.read_bytes())
    doc["tasks"]["t01500"]["attempts"] = "three"
    ledger.write_bytes(orjson.dumps(doc))
    with pytest.raises(LedgerError) as whole:
        read_ledger(ledger)
    seen = []
    with pytest.raises(LedgerError) as streamed:
        for task_id, _ in iter_ledger(ledger):
            seen.append(task_id)
    assert "t01500" in str(streamed.value) and "attempts" in str(streamed.value)
    assert str(streamed.value) == str(whole.value)
    assert "t01500" not in seen


def test_a_stream_is_read_once_and_a_missing_ledger_is_refused(ledger, tmp_path):
    checkpointed_map(fit, items(3), ledger_path=ledger)
    stream = iter_ledger(ledger)
    assert len(list(stream)) == 3
    with pytest.raises(RuntimeError, match="call campaign.iter_ledger again"):
        iter(stream)
    with pytest.raises(LedgerError, match="no ledger at"):
        iter_ledger(tmp_path / "nope.json")
