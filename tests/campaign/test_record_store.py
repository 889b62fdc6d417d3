"""Records held as bytes (campaign/_ledger/_store.py): what a user reads back is what was stored."""

from __future__ import annotations

import orjson

from campaign import checkpointed_map, read_ledger
from campaign._ledger._document import dumps, new_document
from campaign._ledger._records import new_record
from campaign._ledger._store import CHUNK, RecordStore


def _record(i: int, status: str = "pending") -> dict:
    return dict(new_record({"task_id": f"t{i}", "i": i}, "sha256:" + "0" * 64), status=status)


def test_a_file_of_several_chunks_is_the_bytes_of_the_plain_document():
    doc = new_document(now=1.0)
    doc["tasks"] = {f"t{i}": _record(i) for i in range(2 * CHUNK + 5)}
    held = dict(doc, tasks=RecordStore(doc["tasks"]))
    held["tasks"].parts(["t3", "t4"])  # some records held as bytes, the others as dicts
    assert dumps(held) == orjson.dumps(doc, option=orjson.OPT_APPEND_NEWLINE)
    assert orjson.loads(dumps(held)) == doc


def test_status_is_read_whatever_the_order_of_a_record_keys():
    first = _record(1, "accepted")
    last = {k: v for k, v in first.items() if k != "status"} | {"status": "failed"}
    store = RecordStore({"a": first, "b": last})
    store.parts(["a", "b"])
    assert store.status("a") == "accepted" and store.status("b") == "failed"
    assert store.status("missing") is None
    assert store["b"] == last and store.get("missing") is None


def test_a_record_that_cannot_be_written_fails_its_task_and_the_others_are_written():
    lost = dict(_record(3), host="caf\udce9")  # not even its failed record can be written
    store = RecordStore({"good": _record(1), "bad": dict(_record(2), result={"s": "caf\udce9"}),
                         "lost": lost})
    parts = store.parts(["good", "bad", "lost"])
    written = orjson.loads(b"{" + b",".join(parts) + b"}")
    assert written["good"] == _record(1) and "lost" not in written
    assert written["bad"]["status"] == "failed" and written["bad"]["result"] is None
    assert written["bad"]["error"]["type"] == "ResultError"
    assert store.status("bad") == "failed"
    assert store["lost"] is lost  # kept as it was: the task runs again on resume


def test_campaign_results_are_a_sequence_equal_to_the_list_of_results(tmp_path):
    items = [{"task_id": f"t{i}", "x": i} for i in range(7)]
    camp = checkpointed_map(lambda it: {"y": it["x"] * 2}, items, ledger_path=tmp_path / "l.json")
    expected = [{"y": 2 * i} for i in range(7)]
    assert camp.results == expected and list(camp.results) == expected
    assert camp.results[2] == {"y": 4} and camp.results[-1] == {"y": 12}
    assert camp.results[1:3] == [{"y": 2}, {"y": 4}] and len(camp.results) == 7
    assert repr(camp.results) == repr(expected)
    assert camp.records["t3"]["item"] == items[3] and "t9" not in camp.records
    assert list(camp.records) == [it["task_id"] for it in items]
    assert camp.result("t5") == {"y": 10} and camp.result("t9") is None
    assert camp.counts["accepted"] == 7
    on_disk = read_ledger(tmp_path / "l.json")["tasks"]
    assert {tid: camp.records[tid]["result"] for tid in camp.records} == {
        tid: rec["result"] for tid, rec in on_disk.items()}


def test_the_journal_parts_size_is_their_length_before_they_are_built():
    store = RecordStore({f"t{i}": _record(i) for i in range(50)})
    ids = [f"t{i}" for i in range(0, 50, 3)]
    size = store.parts_size(ids)  # encodes the records it sizes (kept as bytes), builds no part
    assert size == sum(map(len, store.parts(ids))) > 0
