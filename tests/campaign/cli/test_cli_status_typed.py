"""`campaign status` reads a ledger with the typed parse (`campaign._ledger._typed`,
`Scan.typed_blocks`): the same chunks, columns and facts as the plain scan (`Scan.blocks`), and
every ledger the plain scan refuses is refused with the same `LedgerError`, naming the task and
the field."""

from __future__ import annotations

import json
import subprocess
import time

import orjson
import pytest
from cli_data.cli_helpers import campaign
from test_cli_status_large import load_benchmark
from testkit import PATIENCE, PYTHON, child_env

from campaign import read_ledger
from campaign._ledger import _document, _journal, _records
from campaign._errors import LedgerError
from campaign._ledger._overlay import scan_columns
from campaign._ledger._paths import LedgerPaths
from campaign._ledger._schema import COLUMNS, RECORD_FIELDS, record_problem
from campaign._ledger._status import Status
from campaign._ledger._typed import Invalid, Record, StatusName, decode
from schedulers._usage import FIELDS as RESOURCE_FIELDS


def _ledger(tmp_path, n=3000, name="typed.json"):
    ledger = tmp_path / name
    load_benchmark().generate(ledger, n, now=time.time())
    return ledger


def _both(ledger, block=8 << 10):
    """The chunks of the plain and of the typed scan, and how many typed chunks had
    `Record`s (not dicts)."""
    _, plain, _ = scan_columns(ledger, block=block)
    _, typed, _ = scan_columns(ledger, block=block, typed=True)
    plain, typed = list(plain), list(typed)
    records = sum(1 for tasks, _ in typed if tasks and type(next(iter(tasks.values()))) is Record)
    return plain, typed, records


def _assert_same(plain, typed):
    assert len(plain) == len(typed) > 1
    for (p_tasks, p_cols), (t_tasks, t_cols) in zip(plain, typed):
        assert list(p_tasks) == list(t_tasks)
        assert t_cols.counts == p_cols.counts and len(t_cols) == len(p_cols)
        for key in COLUMNS:
            got, want = t_cols.fields[key], p_cols.fields[key]
            assert got == want and list(map(type, got)) == list(map(type, want)), key


def test_the_typed_parse_knows_every_status():
    assert set(StatusName.__args__) == {s.value for s in Status}


def test_the_typed_record_declares_the_schemas_fields_and_where_null_is_allowed():
    """`Record` declares the fields of the schema (`RECORD_FIELDS`), in its order, each one
    required, then the resource fields (`schedulers._usage.FIELDS`), which may be absent; a
    null in a field is parsed exactly where the schema allows one, and refused elsewhere."""
    assert Record.__struct_fields__ == COLUMNS + RESOURCE_FIELDS
    assert len(Record.__struct_defaults__) == len(RESOURCE_FIELDS)
    base = {"status": "pending", "attempts": 0, "interruptions": 0, "item": {"task_id": "t"},
            "fingerprint": "sha256:" + "0" * 64, "result": None, "error": None, "host": None,
            "pid": None, "worker": None, "device_group": None, "started": None, "ended": None,
            "duration": None, "history": []}
    assert set(base) == set(COLUMNS) and record_problem(base) is None
    assert decode(orjson.dumps({"t": base}))["t"].status == "pending"
    for key, (kinds, _) in RECORD_FIELDS.items():
        data = orjson.dumps({"t": dict(base, **{key: None})})
        if type(None) in kinds:
            assert getattr(decode(data)["t"], key) is None, key
        else:
            with pytest.raises(Invalid):
                decode(data)


_NEW_FIELD = r"""
import sys
from campaign._ledger import _schema
_schema.RECORD_FIELDS["{key}"] = ({kinds}, "new")
from campaign._ledger import _typed
print(_typed.Record.__struct_fields__)
print(_typed.decode(sys.stdin.buffer.read()))
"""


@pytest.mark.parametrize("kinds, value, parsed", [
    ("frozenset({str, type(None)})", "x", "'x'"),
    ("frozenset({int})", 3, "3"),
])
def test_a_field_added_to_the_schema_is_a_field_of_the_typed_record(kinds, value, parsed):
    """`Record` is made from `RECORD_FIELDS`: a field the schema gains is parsed by its types,
    with no second list to edit; JSON types it has no parse for stop the import naming them."""
    base = {"status": "pending", "attempts": 0, "interruptions": 0, "item": {"task_id": "t"},
            "fingerprint": "sha256:" + "0" * 64, "result": None, "error": None, "host": None,
            "pid": None, "worker": None, "device_group": None, "started": None, "ended": None,
            "duration": None, "history": [], "extra": value}
    code = _NEW_FIELD.format(key="extra", kinds=kinds)
    out = subprocess.run([PYTHON, "-c", code], input=orjson.dumps({"t": base}),
                         capture_output=True, env=child_env(), timeout=PATIENCE, check=True)
    fields, record = out.stdout.decode().splitlines()
    assert fields == repr(COLUMNS + ("extra",) + RESOURCE_FIELDS)
    assert f"extra={parsed}" in record
    base["extra"] = [value]  # a list where the schema allows none: refused, the plain way
    run = subprocess.run([PYTHON, "-c", code], input=orjson.dumps({"t": base}),
                         capture_output=True, env=child_env(), timeout=PATIENCE)
    assert run.returncode != 0 and b"Invalid" in run.stderr
    odd = subprocess.run([PYTHON, "-c", _NEW_FIELD.format(key="odd", kinds="frozenset({bool})")],
                         input=b"{}", capture_output=True, env=child_env(), timeout=PATIENCE)
    assert odd.returncode != 0
    assert b"record field 'odd': no typed parse for the JSON types ['bool']" in odd.stderr


def test_typed_chunks_and_columns_equal_the_plain_scan(tmp_path):
    ledger = _ledger(tmp_path)
    plain, typed, records = _both(ledger)
    _assert_same(plain, typed)
    assert records == len(typed)  # every chunk of a writer's ledger took the typed parse


def test_odd_but_valid_records_give_the_plain_scan_columns(tmp_path):
    """Records the typed parse sends the plain way (an int beyond int64, a key the tables do
    not list) and ones it takes (integer times, usage fields, non-ASCII strings, tags of
    non-finite floats, a string that looks like a record boundary), mixed in one ledger."""
    ledger = _ledger(tmp_path, 2000)
    doc = read_ledger(ledger)
    for i, (tid, rec) in enumerate(doc["tasks"].items()):
        if i % 97 == 0:
            rec["pid"] = (1 << 63) + i  # an int for orjson, beyond the typed parse's int64
        elif i % 89 == 0:
            rec["note"] = {"by": "hand"}
        elif i % 7 == 0:
            rec.update(started=int(rec["started"] or 0), cpu_s=0.5, peak_rss_bytes=1 << 20)
        elif i % 11 == 0:
            rec["item"] = dict(rec["item"], label="Zürich ☃", trap='},"x":{"status":"')
        elif i % 13 == 0 and rec["status"] == "accepted":
            rec["result"] = dict(rec["result"], big=(1 << 64) - 1, inf={"$float": "-inf"})
    ledger.write_bytes(_document.dumps(doc))
    plain, typed, records = _both(ledger, block=4 << 10)
    _assert_same(plain, typed)
    assert 0 < records < len(typed)
    facts = json.loads(campaign("status", ledger.name, "--json", cwd=tmp_path).stdout)
    assert facts["total"] == 2000


def test_journal_and_fragments_give_the_plain_scan_columns(tmp_path):
    """Chunks the journal or an array worker's fragment changes come as the plain scan
    gives them; the others are typed."""
    from campaign._array._workdir import WorkDir

    ledger = _ledger(tmp_path, 2000)
    doc = read_ledger(ledger)
    ids = list(doc["tasks"])
    changed = dict(doc["tasks"][ids[700]], status="pending", attempts=0)
    line = _journal.encode(doc["generation"], time.time(),
                           [json.dumps({ids[700]: changed})[1:-1].encode()])
    LedgerPaths.of(ledger).journal.write_bytes(line)
    pending = next(t for t in ids[1000:] if doc["tasks"][t]["status"] == "pending")
    rec = _records.started(doc["tasks"][pending], host="n1", pid=1, worker="9_1",
                           device_group=None, at=time.time())
    rec = _records.finished(rec, "accepted", at=time.time(), result={"energy": 1.0})
    WorkDir(ledger, "sub1").write_fragment({pending: rec}, {"worker": "9_1", "host": "n1",
                                                            "pid": 1})
    plain, typed, records = _both(ledger)
    _assert_same(plain, typed)
    assert 0 < records <= len(typed) - 2
    seen = {tid: tasks[tid] for tasks, _ in typed for tid in tasks if tid in (ids[700], pending)}
    assert seen[ids[700]]["status"] == "pending" and seen[pending]["status"] == "accepted"


def test_a_pretty_printed_ledger_is_read_whole_by_the_typed_scan(tmp_path):
    ledger = _ledger(tmp_path, 300)
    ledger.write_text(json.dumps(read_ledger(ledger), indent=2))
    _, typed, _ = scan_columns(ledger, typed=True)
    (tasks, cols), = list(typed)
    assert tasks == read_ledger(ledger)["tasks"] and len(cols) == 300


#: (field, value) put into one record: each makes it invalid for `record_problem` but the
#: last ones (valid, some sent the plain way by the typed parse).
_BAD = [
    ("status", "Accepted"), ("status", 1), ("status", None), ("attempts", -1),
    ("attempts", True), ("attempts", 1.0), ("attempts", 1 << 64), ("interruptions", -2),
    ("item", []), ("item", None), ("item", "x"), ("fingerprint", "sha256:" + "A" * 64),
    ("fingerprint", "sha256:" + "0" * 63), ("fingerprint", 5),
    ("fingerprint", "sha256:" + "0" * 63 + "\u00e9"), ("result", []), ("result", {"x": [1]}),
    ("result", {"x": {"$float": "no"}}), ("result", {"x": {}}), ("result", {"x": {"a": 1}}),
    ("result", {"x": {"$float": "nan", "y": 1}}), ("error", {}),
    ("error", {"type": 1, "message": "m"}), ("error", {"type": "T"}), ("error", "x"),
    ("host", 1), ("pid", "1"), ("pid", True), ("pid", 1.5), ("pid", 1 << 64), ("worker", 0),
    ("device_group", [True]), ("device_group", [1 << 64]), ("device_group", {}),
    ("started", "x"), ("ended", True), ("duration", []), ("history", [1]), ("history", {}),
    ("history", [[]]), ("result", None), ("interruptions", 1 << 63),
    # valid:
    ("result", {"x": {"$float": "nan"}}), ("device_group", [1, 2]), ("history", [{}]),
    ("pid", (1 << 64) - 1), ("cpu_s", "anything"), ("extra", [1, {}]),
]


def test_a_bad_field_is_refused_as_the_reader_refuses_it(tmp_path):
    """Whatever field of a record in the middle of the file is wrong, the typed scan raises
    the `LedgerError` the reader raises (naming the task and the field); a valid odd record
    gives the plain scan's chunks."""
    ledger = _ledger(tmp_path, 2000)
    doc = read_ledger(ledger)
    ids = list(doc["tasks"])
    for k, (field, value) in enumerate(_BAD):
        tid = ids[900 + k * 7]
        bad = dict(doc["tasks"][tid], **{field: value})
        if field == "result" and value is None:
            bad["status"] = "accepted"
        text = json.dumps(dict(doc, tasks=dict(doc["tasks"], **{tid: bad})),
                          separators=(",", ":"), ensure_ascii=False)  # ints beyond uint64 too
        ledger.write_text(text)
        if record_problem(orjson.loads(json.dumps(bad))) is None:
            plain, typed, _ = _both(ledger)
            _assert_same(plain, typed)
            continue
        with pytest.raises(LedgerError) as expected:
            read_ledger(ledger)
        assert repr(tid) in str(expected.value), (field, value)
        with pytest.raises(LedgerError) as got:
            list(scan_columns(ledger, block=8 << 10, typed=True)[1])
        assert str(got.value) == str(expected.value), (field, value)


def test_status_refuses_a_bad_field_in_a_large_ledger_naming_task_and_field(tmp_path):
    ledger = _ledger(tmp_path, 30_000)
    doc = read_ledger(ledger)
    tid = list(doc["tasks"])[17_345]
    doc["tasks"][tid] = dict(doc["tasks"][tid], interruptions="two")
    ledger.write_bytes(_document.dumps(doc))
    with pytest.raises(LedgerError) as expected:
        read_ledger(ledger)
    proc = campaign("status", ledger.name, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    said = str(expected.value).replace(str(ledger), ledger.name)
    assert said in proc.stderr and repr(tid) in said and "'interruptions'" in said
