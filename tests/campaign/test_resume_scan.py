"""A driver's resume reads its ledger a block at a time (`campaign._ledger._storeload`): the records
it holds, the runs, the take-over of a dead driver's leftovers and the errors are those of the
whole-document load (`campaign._ledger._document.load`), whatever the file, its journal and the
array fragments beside it hold, and wherever the blocks are cut."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from campaign import Ledger, checkpointed_map
from campaign._ledger import _document, _journal, _runs, _storeload
from campaign._array._workdir import absorb_fragments
from campaign._errors import LedgerError
from campaign._ledger._jsonvalue import fingerprint
from campaign._ledger._paths import LedgerPaths
from campaign._ledger._records import finished, new_record, started
from campaign._ledger._store import RecordStore

STATUSES = ("pending", "running", "accepted", "failed", "interrupted")


def record(tid: str, status: str, n: int, attempts: int = 1) -> dict:
    item = {"task_id": tid, "n": n}
    rec = new_record(item, fingerprint(item))
    if status == "pending":
        return rec
    for _ in range(attempts):
        rec = started(rec, host="elsewhere", pid=1, worker=None, device_group=None, at=1.0)
    if status == "running":
        return rec
    ok = status == "accepted"
    return finished(rec, status, at=2.0, result={"n": n} if ok else None,
                    error=None if ok else {"type": "E", "message": f"no {n}"})


def run_entry(rid: str, status: str) -> dict:
    return dict(_runs.new_run(rid, "serial", now=1.0), status=status)


def part(tid: str, rec: dict) -> bytes:
    return orjson.dumps({tid: rec})[1:-1]


@st.composite
def ledgers(draw):
    """(file records, journal lines, fragments, the journal's tail, a version-1 file)."""
    ids = [f"t{i}" for i in range(draw(st.integers(0, 40)))]
    file_recs = {t: (draw(st.sampled_from(STATUSES)), i) for i, t in enumerate(ids)}
    pool = ids + [f"new{i}" for i in range(6)]
    lines = draw(st.lists(st.tuples(
        st.lists(st.tuples(st.sampled_from(pool), st.sampled_from(STATUSES)), max_size=8),
        st.booleans(),  # with a runs list
        st.booleans()),  # of another generation
        max_size=5)) if pool else []
    fragments = draw(st.lists(st.lists(st.tuples(
        st.sampled_from(pool), st.sampled_from(STATUSES), st.integers(1, 3)), max_size=4),
        max_size=3)) if pool else []
    tail = draw(st.sampled_from(["", "torn", "corrupt"]))
    return file_recs, lines, fragments, tail, draw(st.booleans())


def write_ledger(path: Path, spec) -> None:
    file_recs, lines, fragments, tail, version1 = spec
    doc = _document.new_document(now=1.0)
    doc["runs"] = [run_entry("old", "finished"), run_entry("dead", "running")]
    doc["tasks"] = {t: record(t, s, n) for t, (s, n) in file_recs.items()}
    if version1:
        doc["version"] = 1
        del doc["generation"]
    path.write_bytes(_document.dumps(doc))
    generation = doc.get("generation", "0" * 16)
    journal = b""
    for k, (changes, with_runs, other) in enumerate(lines):
        runs = [run_entry(f"j{k}", "running")] if with_runs else None
        parts = [part(t, record(t, s, 100 + k)) for t, s in changes]
        journal += _journal.encode("f" * 16 if other else generation, 3.0 + k, parts, runs)
    if tail == "torn":
        journal += _journal.encode(generation, 9.0, [part("t0", record("t0", "failed", 9))])[:-5]
    elif tail == "corrupt":
        journal += b"00000000 {}\n"
    if journal:
        LedgerPaths.of(path).journal.write_bytes(journal)
    for k, recs in enumerate(fragments):
        folder = LedgerPaths.of(path).work / "sub" / "fragments"
        folder.mkdir(parents=True, exist_ok=True)
        body = {t: record(t, s, 200 + k, attempts=a) for t, s, a in recs}
        (folder / f"{k:04d}-w.json").write_bytes(orjson.dumps({"owner": {}, "records": body}))


def decoded(tasks) -> list:
    store = RecordStore.of(tasks)
    return [(tid, store[tid]) for tid in store]


@pytest.fixture
def folder():
    path = Path(tempfile.mkdtemp())
    yield path
    shutil.rmtree(path, ignore_errors=True)


@settings(max_examples=120, deadline=None)
@given(ledgers(), st.sampled_from([64, 300, 1 << 16]))
def test_the_block_load_gives_the_whole_load(spec, block):
    folder = Path(tempfile.mkdtemp())
    try:
        path = folder / "ledger.json"
        write_ledger(path, spec)
        whole, whole_state = _document.load(path)
        doc, state = _storeload.load(path, block=block)
        assert isinstance(doc["tasks"], RecordStore)
        assert state == whole_state
        assert {k: v for k, v in doc.items() if k != "tasks"} == \
            {k: v for k, v in whole.items() if k != "tasks"}
        assert decoded(doc["tasks"]) == decoded(whole["tasks"])
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@settings(max_examples=80, deadline=None)
@given(ledgers(), st.booleans())
def test_a_driver_holds_what_the_whole_load_gave_it(spec, resume):
    folder = Path(tempfile.mkdtemp())
    try:
        path = folder / "ledger.json"
        write_ledger(path, spec)
        original = path.read_bytes()
        whole, state = _document.load(path)
        clean = not state[3] and "generation" in whole and not spec[2]
        absorb_fragments(whole, path)
        absorbed = decoded(whole["tasks"])
        stale = _runs.take_over(whole, path)
        ledger = Ledger(path)
        _storeload.BLOCK, block = 100, _storeload.BLOCK
        try:
            with ledger._commit.file_lock:
                ledger._load_as_driver(resume)
        finally:
            _storeload.BLOCK = block
        if not resume:
            assert len(ledger.tasks) == 0
            saved, = folder.glob("ledger.replaced-*.json")
            if state[3]:  # with its journal: written whole, the fragments merged
                assert decoded(_document.read(saved)["tasks"]) == absorbed
            else:
                assert saved.read_bytes() == original
            return
        assert decoded(ledger.tasks) == decoded(whole["tasks"])
        assert ledger.doc["runs"] == whole["runs"]
        assert [r["status"] for r in ledger.doc["runs"]].count("running") == 0
        assert ledger._commit._dirty == set(stale)
        assert ledger._commit._disk_state == state
        assert ledger._commit._generation == whole.get("generation")
        assert ledger._commit._need_whole is not clean
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_resume_after_a_kill_runs_exactly_the_tasks_not_accepted(folder, monkeypatch):
    monkeypatch.setattr(_storeload, "BLOCK", 200)
    path = folder / "ledger.json"
    statuses = {f"t{i}": STATUSES[i % 5] for i in range(30)}
    journal = [([(f"t{i}", "accepted") for i in range(0, 30, 7)], True, False),
               ([("t3", "running"), ("t4", "accepted")], False, False)]
    write_ledger(path, ({t: (s, i) for i, (t, s) in enumerate(statuses.items())}, journal, [],
                        "torn", False))
    before = _document.read(path)["tasks"]
    todo = [t for t, rec in before.items() if rec["status"] != "accepted"]
    items = [rec["item"] for rec in before.values()]
    ran = []

    def fn(item):
        ran.append(item["task_id"])
        return {"n": item["n"]}

    camp = checkpointed_map(fn, items, ledger_path=path)
    assert ran == todo
    after = _document.read(path)["tasks"]
    assert all(rec["status"] == "accepted" for rec in after.values())
    assert {t: after[t] for t in before if t not in todo} == \
        {t: rec for t, rec in before.items() if t not in todo}
    assert after["t3"]["interruptions"] == before["t3"]["interruptions"] + 1  # taken over
    assert not LedgerPaths.of(path).journal.exists()
    assert camp.complete


def _listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()
            if p.is_file() and not p.name.endswith((".lock", ".driver"))}


@pytest.mark.parametrize("where", ["file", "journal"])
def test_an_invalid_record_in_a_late_block_is_refused_as_the_whole_load_refuses_it(
        folder, monkeypatch, where):
    monkeypatch.setattr(_storeload, "BLOCK", 128)
    path = folder / "ledger.json"
    write_ledger(path, ({f"t{i}": ("accepted", i) for i in range(20)}, [], [], "", False))
    bad = dict(record("t18", "failed", 18), attempts="three")
    if where == "file":
        doc = _document.read(path)
        doc["tasks"]["t18"] = bad
        path.write_bytes(orjson.dumps(doc))
    else:
        generation = _document.read(path)["generation"]
        LedgerPaths.of(path).journal.write_bytes(
            _journal.encode(generation, 3.0, [part("t2", record("t2", "running", 2)),
                                              part("t18", bad)]))
    with pytest.raises(LedgerError) as whole:
        _document.load(path)
    files = _listing(folder)
    with pytest.raises(LedgerError) as driver:
        Ledger(path).open()
    assert str(driver.value) == str(whole.value)
    assert "'t18'" in str(driver.value) and "'attempts'" in str(driver.value)
    assert _listing(folder) == files  # nothing written


def test_a_file_the_scan_cannot_split_is_read_whole_with_its_journal(folder):
    path = folder / "ledger.json"
    write_ledger(path, ({f"t{i}": ("running", i) for i in range(5)},
                        [([("t1", "accepted"), ("new0", "pending")], True, False)], [], "",
                        False))
    path.write_text(orjson.dumps(orjson.loads(path.read_bytes()),
                                 option=orjson.OPT_INDENT_2).decode())
    whole, state = _document.load(path)
    doc, got = _storeload.load(path, block=64)
    assert got == state
    assert decoded(doc["tasks"]) == decoded(whole["tasks"])
    assert doc["runs"] == whole["runs"]


def test_nothing_to_run_compacts_a_journal_read_a_block_at_a_time(folder, monkeypatch):
    from campaign._items import prepare_items
    from campaign._plan import nothing_to_run

    monkeypatch.setattr(_storeload, "BLOCK", 100)
    path = folder / "ledger.json"
    file_recs = {f"t{i}": ("accepted" if i % 3 else "failed", i) for i in range(12)}
    file_recs["other"] = ("failed", 99)  # a task of the ledger that is not among the items
    fixes = [(f"t{i}", "accepted") for i in range(0, 12, 3)]
    write_ledger(path, (file_recs, [(fixes, True, False)], [], "", False))
    whole = _document.read(path)
    items = [whole["tasks"][f"t{i}"]["item"] for i in range(12)]
    camp = nothing_to_run(path, prepare_items(items))
    assert camp is not None and camp.kept == 12
    assert not LedgerPaths.of(path).journal.exists()
    after = orjson.loads(path.read_bytes())  # the file alone holds everything
    assert decoded(after["tasks"]) == decoded(whole["tasks"])
    assert after["runs"] == whole["runs"]
    write_ledger(path, (file_recs, [(fixes[1:], True, False)], [], "", False))
    assert nothing_to_run(path, prepare_items(items)) is None
    assert LedgerPaths.of(path).journal.exists()  # nothing written
