"""The ledger's journal (docs/ledger.md, "The journal and compaction"): outcomes appended between
whole-file writes, merged by every reader, compacted away at the end of a run.

The states a killed driver leaves are made with a real driver `Ledger`: its file and journal
are copied after its commits, it is closed (it compacts), and the copies are put back, as if
it had been killed before closing.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
from testkit import PATIENCE, PYTHON, child_env

from campaign import Ledger, checkpointed_map, read_ledger
from campaign._ledger._document import dumps, new_document
from campaign._ledger._jsonvalue import fingerprint
from campaign._ledger._paths import LedgerPaths
from campaign._ledger._records import finished, new_record, started
from campaign._ledger._update import update

DATA = Path(__file__).with_name("ledger_data")


def item(tid: str, x: int = 0) -> dict:
    return {"task_id": tid, "x": x}


def recorded(calls: list[str], it: Mapping[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """``result``, once ``it``'s task id is appended to ``calls``."""
    calls.append(it["task_id"])
    return result


def every_100th_fails(it: Mapping[str, Any]) -> dict[str, Any]:
    if it["x"] % 100 == 0:
        raise ZeroDivisionError("every 100th item fails")
    return {"x": it["x"]}


def outcome(rec: dict, status: str = "accepted") -> dict:
    rec = started(rec, host="h", pid=1, worker=None, device_group=None, at=time.time())
    return finished(rec, status, at=time.time(),
                    result={"x": rec["item"]["x"]} if status == "accepted" else None,
                    error=None if status == "accepted" else {"type": "E", "message": "m"})


def killed_driver(path: Path, lines: list[list[str]]) -> tuple[bytes, bytes, bytes]:
    """A driver commits one journal line per list of task ids (each task accepted), and would
    be killed then: returns the file and the journal at that moment, and the file its close
    compacted. The compacted file is left in place."""
    led = Ledger(path, min_interval=0.0, compact_fraction=1e9)
    led.open()
    for tids in lines:
        for tid in tids:
            rec = led.tasks.get(tid) or new_record(item(tid), fingerprint(item(tid)))
            led.put(tid, outcome(rec))
        led.flush()
    state = path.read_bytes(), LedgerPaths.of(path).journal.read_bytes()
    led.close("finished")
    assert not LedgerPaths.of(path).journal.exists()
    return state[0], state[1], path.read_bytes()


def restore(path: Path, file: bytes, journal: bytes) -> None:
    path.write_bytes(file)
    LedgerPaths.of(path).journal.write_bytes(journal)


def test_each_commit_is_a_journal_line_merged_by_readers(ledger):
    file, journal, compacted = killed_driver(ledger, [["a"], ["b", "c"], ["d"]])
    assert set(orjson.loads(file)["tasks"]) == set()  # the file alone: none of the outcomes
    assert journal.count(b"\n") == 3  # one line per commit (the new file holds the run)
    restore(ledger, file, journal)
    doc = read_ledger(ledger)
    assert {t: r["status"] for t, r in doc["tasks"].items()} == dict.fromkeys("abcd", "accepted")
    assert doc["tasks"] == orjson.loads(compacted)["tasks"]
    assert [r["status"] for r in doc["runs"]] == ["running"]  # as a killed driver left it


@pytest.mark.parametrize("reader", ["read_ledger", "scan", "scan as bytes"])
def test_a_file_compacted_while_its_journal_is_read_is_read_again(ledger, monkeypatch, reader):
    """A compaction between a reader's read of the file and of its journal (a new file, the
    journal gone): the reader reads the new file again, so no outcome of the old journal is
    lost. Every reader of the ledger reads through `campaign._ledger._document.with_journal`."""
    from campaign._ledger import _journal
    from campaign._ledger._scan import Scan

    file, journal, compacted = killed_driver(ledger, [["a"], ["b", "c"]])
    restore(ledger, file, journal)
    real, calls = _journal.read, []

    def compacting_read(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 1:  # the file was read: it is compacted now
            new = ledger.with_name("compacted.tmp")
            new.write_bytes(compacted)
            new.replace(ledger)
            LedgerPaths.of(ledger).journal.unlink()
        return real(*args, **kwargs)

    monkeypatch.setattr(_journal, "read", compacting_read)
    if reader == "read_ledger":
        tasks = read_ledger(ledger)["tasks"]
    else:
        scan = Scan(ledger, as_bytes=reader == "scan as bytes")
        tasks = {tid: rec for chunk in scan.chunks() for tid, rec in chunk.items()}
        scan.close()
    assert len(calls) == 2 and calls[0] != calls[1]  # the second read: the new generation
    assert {t: r["status"] for t, r in tasks.items()} == dict.fromkeys("abc", "accepted")


def test_a_torn_last_line_is_ignored_with_a_warning_and_the_lines_before_kept(ledger, caplog):
    file, journal, _ = killed_driver(ledger, [["a"], ["b"], ["c"]])
    last = journal.rstrip(b"\n").rfind(b"\n") + 1
    for cut in (last + 1, last + 9, len(journal) - 1):  # a crash during the last append
        restore(ledger, file, journal[:cut])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="campaign._ledger._journal"):
            tasks = read_ledger(ledger)["tasks"]
        assert {t: r["status"] for t, r in tasks.items()} == {"a": "accepted", "b": "accepted"}
        assert any("line 3 is not whole" in r.getMessage() and r.levelno == logging.WARNING
                   for r in caplog.records), caplog.text


def test_a_corrupt_line_ends_the_journal_with_a_warning(ledger, caplog):
    file, journal, _ = killed_driver(ledger, [["a"], ["b"], ["c"]])
    lines = journal.splitlines(keepends=True)
    bad = bytearray(lines[1])
    bad[len(bad) // 2] ^= 0x01  # one flipped bit: the checksum no longer matches
    restore(ledger, file, b"".join(lines[:1] + [bytes(bad)] + lines[2:]))
    with caplog.at_level(logging.WARNING, logger="campaign._ledger._journal"):
        tasks = read_ledger(ledger)["tasks"]
    assert {t: r["status"] for t, r in tasks.items()} == {"a": "accepted"}  # c comes after b's line
    assert "line 2 is corrupt" in caplog.text


def _applied_by_hand(file: bytes, lines: list[bytes]) -> dict[str, Any]:
    """The document the file and these whole journal lines make, each line applied in turn."""
    doc = orjson.loads(file)
    for line in lines:
        entry = orjson.loads(line[9:])
        assert entry["generation"] == doc["generation"]
        doc["tasks"].update(entry["tasks"])
        doc["runs"] = entry.get("runs", doc["runs"])
        doc["updated"] = entry["updated"]
    return doc


@pytest.mark.parametrize("keep", [3, 2])  # the whole journal; its last line torn
def test_the_journal_reader_gives_the_same_lines_as_dicts_and_as_bytes(ledger, caplog, keep):
    """`_journal.read` applies the lines in order (a task's newest record, new tasks in the
    order they first appear), as dicts or as bytes alike, and counts every byte it read."""
    from campaign._ledger import _journal
    from campaign._ledger._store import RecordStore

    file, journal, _ = killed_driver(ledger, [["b", "a"], ["c", "b"], ["a", "d"]])
    lines = journal.splitlines(keepends=True)
    data = b"".join(lines[:keep]) + (b"" if keep == 3 else lines[2][:-5])
    restore(ledger, file, data)
    want = _applied_by_hand(file, lines[:keep])
    generation = orjson.loads(file)["generation"]
    with caplog.at_level(logging.WARNING, logger="campaign._ledger._journal"):
        plain = _journal.read(ledger, generation)
        held = _journal.read(ledger, generation, as_bytes=True)
    assert isinstance(held.records, RecordStore) and type(plain.records) is dict
    assert all(type(v) is bytes for _, v in held.records.raw_items())
    entries = [orjson.loads(line[9:]) for line in lines[:keep]]
    expected_ids = list(dict.fromkeys(t for entry in entries for t in entry["tasks"]))
    runs = next((e["runs"] for e in reversed(entries) if "runs" in e), None)
    for found in (plain, held):
        assert list(found.records) == expected_ids
        assert dict(found.records) == {t: want["tasks"][t] for t in expected_ids}
        assert (found.runs, found.updated, found.lines) == (runs, want["updated"], keep)
        assert found.size == len(data) and found.present
    doc = orjson.loads(file)
    plain.apply(doc)
    assert doc == want == read_ledger(ledger)
    assert ("line 3 is not whole" in caplog.text) == (keep == 2)
    assert _journal.read(ledger, None).size == len(data)  # a version-1 file: no line applies
    assert not _journal.read(ledger, None).records


def test_lines_of_an_older_generation_are_skipped(ledger, caplog):
    """A compaction killed after it replaced the file, before it removed the journal."""
    _, journal, compacted = killed_driver(ledger, [["a"], ["b"]])
    restore(ledger, compacted, journal + journal)  # stale lines, even twice over
    with caplog.at_level(logging.WARNING):
        doc = read_ledger(ledger)
    assert doc == orjson.loads(compacted) and not caplog.records


def test_the_next_driver_compacts_a_killed_drivers_journal_and_keeps_its_outcomes(ledger):
    file, journal, _ = killed_driver(ledger, [["a"], ["b"]])
    restore(ledger, file, journal[:-3])  # b's line cut short: b was not recorded
    calls: list[str] = []
    camp = checkpointed_map(lambda it: recorded(calls, it, {"x": it["x"]}),
                            [item(t) for t in "abc"], ledger_path=ledger)
    assert camp.complete and calls == ["b", "c"]
    doc = orjson.loads(ledger.read_bytes())  # the file alone holds everything
    assert not LedgerPaths.of(ledger).journal.exists()
    assert [doc["tasks"][t]["status"] for t in "abc"] == ["accepted"] * 3
    assert [r["status"] for r in doc["runs"]] == ["crashed", "finished"]


def test_other_writers_compact_the_journal(ledger):
    file, journal, _ = killed_driver(ledger, [["a"], ["b"]])
    restore(ledger, file, journal)
    generation = orjson.loads(file)["generation"]
    update(ledger, lambda doc: doc["tasks"].pop("a"))  # as `campaign forget a` does
    assert not LedgerPaths.of(ledger).journal.exists()
    doc = orjson.loads(ledger.read_bytes())
    assert list(doc["tasks"]) == ["b"] and doc["tasks"]["b"]["status"] == "accepted"
    assert doc["generation"] != generation

    restore(ledger, file, journal)  # a writer that is not the driver (an array worker)
    other = Ledger(ledger, min_interval=0.0)
    other.open(driver=False)
    other.put("e", outcome(new_record(item("e"), fingerprint(item("e")))))
    other.close("finished")
    assert not LedgerPaths.of(ledger).journal.exists()
    assert set(orjson.loads(ledger.read_bytes())["tasks"]) == {"a", "b", "e"}


def test_a_version_1_file_still_loads_and_resumes(tmp_path, caplog):
    path = tmp_path / "old.json"
    shutil.copy(DATA / "ledger-v1.json", path)
    LedgerPaths.of(path).journal.write_bytes(b"00000000 {}\n")  # a version-1 file has no journal
    doc = read_ledger(path)
    assert doc["version"] == 2 and "generation" not in doc
    assert {t: r["status"] for t, r in doc["tasks"].items()} == {
        "v0": "accepted", "v1": "accepted", "v2": "failed"}
    assert doc["tasks"]["v1"]["result"] == {"y": 10, "inf": {"$float": "inf"}}
    calls: list[str] = []
    camp = checkpointed_map(lambda it: recorded(calls, it, {"y": it["x"] * 10}),
                            [item(f"v{i}", i) for i in range(3)], ledger_path=path)
    result = camp.result("v1")
    assert calls == ["v2"] and result is not None and result["inf"] == float("inf")
    written = orjson.loads(path.read_bytes())
    assert written["version"] == 2 and isinstance(written["generation"], str)
    assert [r["status"] for r in written["runs"]] == ["finished", "finished"]
    assert not LedgerPaths.of(path).journal.exists()


def test_a_resume_with_tasks_to_run_writes_the_file_once(ledger):
    items = [item(f"t{i:04d}", i) for i in range(2000)]
    checkpointed_map(every_100th_fails, items,
                     ledger_path=ledger)
    size = ledger.stat().st_size
    camp = checkpointed_map(lambda it: {"x": it["x"]}, items, ledger_path=ledger)
    assert camp.complete and camp.ran == 20
    # its run's entry and the 20 outcomes were appended, the whole file written at the end only
    assert ledger.stat().st_size <= camp.ledger_bytes_written < 1.5 * size


CHILD_READER = """
import os, sys, time
from campaign import read_ledger
path, tid, deadline = sys.argv[1], sys.argv[2], time.monotonic() + float(sys.argv[3])
while True:
    before = os.stat(path).st_ino
    doc = read_ledger(path)
    after = os.stat(path).st_ino
    if doc["tasks"].get(tid, {}).get("status") == "accepted" or time.monotonic() > deadline:
        break
    time.sleep(0.05)
print(before, after, doc["generation"], doc["tasks"].get(tid, {}).get("status"))
"""


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_outcome_is_on_disk_before_the_next_whole_file_write_of_a_large_ledger(ledger):
    """200,000 records: a second process reads each finished task through read_ledger while
    the file is still the one the run started with (no whole-file write in between)."""
    n = 200_000
    doc = new_document()
    template = outcome(new_record(item("x"), fingerprint(item("x"))))
    items = [item(f"t{i:06d}", i) for i in range(n)]
    for it in items:
        doc["tasks"][it["task_id"]] = dict(template, item=it, fingerprint=fingerprint(it),
                                           result={"x": it["x"]})
    ledger.write_bytes(dumps(doc))
    inode, generation = ledger.stat().st_ino, doc["generation"]
    seen = []

    def fn(it):
        if it["x"] > n:  # the task before this one finished: another process must see it
            out = subprocess.run([PYTHON, "-c", CHILD_READER, str(ledger), f"n{it['x'] - n - 1}",
                                  str(PATIENCE)], env=child_env(), capture_output=True,
                                 text=True, timeout=PATIENCE + 60, check=True)
            seen.append(out.stdout.split())
        return {"x": it["x"]}

    new = [item(f"n{k}", n + k) for k in range(3)]
    camp = checkpointed_map(fn, items + new, ledger_path=ledger)
    assert camp.complete and camp.kept == n and camp.ran == 3
    assert seen == [[str(inode), str(inode), generation, "accepted"]] * 2
    assert ledger.stat().st_ino != inode and not LedgerPaths.of(ledger).journal.exists()  # compacted
    assert read_ledger(ledger)["tasks"]["n2"]["status"] == "accepted"
