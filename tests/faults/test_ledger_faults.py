"""The ledger's integrity under bad values, hand-edited files and symlinks (issue 16, 3/8/9/10).

- A value the serializer would refuse (a string that is not valid UTF-8, a cycle, nesting too
  deep) fails only its own task, naming the task and the key; every other task is recorded.
- A record that still cannot be serialized never blocks the others.
- A hand-edited ledger with a wrong field is refused on load, naming file, task and field, and
  its bytes stay as they were.
- A symlinked ledger is locked and replaced at its target: a second driver reached through the
  link is refused, and the link stays a link.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cli_data.cli_helpers import campaign
from testkit import PYTHON, child_env, wait_until

from campaign import DriverBusyError, ItemError, Ledger, LedgerError, checkpointed_map, read_ledger
from campaign._ledger._jsonvalue import fingerprint
from campaign._ledger._records import new_record, started

HERE = Path(__file__).resolve().parent
NOT_UTF8 = os.fsdecode(b"caf\xe9")  # what a file name in Latin-1 becomes: 'caf\udce9'


def named_after_bad_bytes(item):
    """Task T7 returns a string that is not valid UTF-8 (in a value or, for K7, a key)."""
    if item["task_id"] == "T7":
        return {"name": NOT_UTF8, "x": item["x"]}
    if item["task_id"] == "K7":
        return {NOT_UTF8: 1}
    return {"name": "fine", "x": item["x"]}


# ------------------------------------------------------------ 3: one bad string, one failed task
@pytest.mark.parametrize("execution", ["serial", "processes"])
def test_a_result_that_is_not_valid_utf8_fails_only_its_task(ledger, execution):
    ids = [f"T{i}" for i in range(12)] + ["K7"]
    items = [{"task_id": t, "x": i} for i, t in enumerate(ids)]
    options: dict[str, Any] = {"workers": 2} if execution == "processes" else {}
    camp = checkpointed_map(named_after_bad_bytes, items, ledger_path=ledger,
                            execution=execution, **options)
    failed = {f.task_id: f for f in camp.failures}
    assert set(failed) == {"T7", "K7"}
    assert failed["T7"].error_type == "ResultError"
    assert failed["T7"].message.startswith(
        "task 'T7': result key 'name' holds a string that is not valid UTF-8 ('caf\\udce9')")
    assert "os.fsdecode" in failed["T7"].message  # says where such strings come from
    assert failed["K7"].message.startswith("task 'K7': fn returned a result key that is not "
                                           "valid UTF-8")
    doc = read_ledger(ledger)  # the file is whole, and holds every task
    assert {t: r["status"] for t, r in doc["tasks"].items()} == {
        t: "failed" if t in ("T7", "K7") else "accepted" for t in ids}
    assert all(doc["tasks"][t]["result"] == {"name": "fine", "x": i}
               for i, t in enumerate(ids) if t not in ("T7", "K7"))


def _noting(seen: list[Any], result: dict[str, Any]) -> Any:
    """A task function that notes each item it is called with and returns ``result``."""
    def fn(item: Any) -> dict[str, Any]:
        seen.append(item)
        return result
    return fn


def _cycle_list() -> list[Any]:
    a: list[Any] = [1]
    a.append(a)
    return a


def _cycle_dict() -> dict[str, Any]:
    d: dict[str, Any] = {"k": 1}
    d["self"] = d
    return d


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("value, words", [
    (NOT_UTF8, ["task 'T1'", "items[1]['v']", "not valid UTF-8", "'caf\\udce9'"]),
    ({NOT_UTF8: 1}, ["task 'T1'", "items[1]['v']", "has a key that is not valid UTF-8"]),
    ([0, {"deep": [NOT_UTF8]}], ["items[1]['v'][1]['deep'][0]", "not valid UTF-8"]),
    (_cycle_list(), ["task 'T1'", "items[1]['v'][1] is the same list as items[1]['v']",
                     "cycle"]),
    (_cycle_dict(), ["task 'T1'", "items[1]['v']['self'] is the same dict as items[1]['v']",
                     "cycle"]),
    (_nested(250), ["task 'T1'", "items[1]['v'][0]", "more than 200 levels"]),
    (2**64, ["task 'T1'", "items[1]['v']", "too large"]),
])
def test_an_item_the_ledger_could_not_write_is_refused_before_anything_runs(ledger, value,
                                                                             words):
    checkpointed_map(lambda it: {"ok": 1}, [{"task_id": "T0"}], ledger_path=ledger)
    before = ledger.read_bytes()
    called: list[Any] = []
    with pytest.raises(ItemError) as info:
        checkpointed_map(_noting(called, {"ok": 1}),
                         [{"task_id": "T0"}, {"task_id": "T1", "v": value}], ledger_path=ledger)
    for word in words:
        assert word in str(info.value)
    assert not called and ledger.read_bytes() == before


def test_the_deepest_item_allowed_is_written_and_read_back(ledger):
    item = {"task_id": "deep", "v": _nested(198) + [float("nan")]}  # 200 levels with the tag
    camp = checkpointed_map(lambda it: {"ok": 1}, [item], ledger_path=ledger)
    assert camp.complete and read_ledger(ledger)["tasks"]["deep"]["status"] == "accepted"


# --------------------------------------------- 3: defence in depth in the commit path
def test_a_record_that_cannot_be_serialized_never_blocks_the_others(ledger):
    """Records that got past validation (a scheduler of one's own, a future path) still do not
    stop the ledger: the others are written, and that task is recorded failed."""
    book = Ledger(ledger)
    book.open()
    records = {}
    for tid in ("a", "b", "c"):
        item = {"task_id": tid}
        rec = started(new_record(item, fingerprint(item)), host="h", pid=1, worker=None,
                      device_group=None, at=1.0)
        result = {"name": NOT_UTF8 if tid == "b" else tid}
        records[tid] = dict(rec, status="accepted", result=result)
    book.put_many(records)
    book.flush()
    book.put("d", new_record({"task_id": "d"}, fingerprint({"task_id": "d"})))
    book.close("finished")
    tasks = read_ledger(ledger)["tasks"]
    assert [tasks[t]["status"] for t in "abcd"] == ["accepted", "failed", "accepted", "pending"]
    assert tasks["a"]["result"] == {"name": "a"} and tasks["b"]["result"] is None
    assert tasks["b"]["error"]["type"] == "ResultError"
    assert "task 'b'" in tasks["b"]["error"]["message"]
    assert "['result']['name']" in tasks["b"]["error"]["message"]


# ------------------------------------------------------------ 9: schema check on load
def _finished(ledger):
    checkpointed_map(lambda it: {"y": it["x"]}, [{"task_id": t, "x": i} for i, t in
                                                 enumerate("abc")], ledger_path=ledger)
    return json.loads(ledger.read_text())


def _task(field, value):
    def mutate(doc):
        if value is KeyError:
            del doc["tasks"]["b"][field]
        else:
            doc["tasks"]["b"][field] = value
    return mutate


@pytest.mark.parametrize("mutate, words", [
    (_task("fingerprint", KeyError), ["task 'b'", "lacks the field 'fingerprint'"]),
    (_task("fingerprint", "sha256:xyz"), ["task 'b'", "'fingerprint'", "64 hex digits"]),
    (_task("result", None), ["task 'b'", "'result' = None", "the task is accepted"]),
    (_task("result", {"y": [1]}), ["task 'b'", "'result.y'", "number, string, bool or null"]),
    (_task("attempts", "three"), ["task 'b'", "'attempts' = 'three' (a string)",
                                  "integer >= 0"]),
    (_task("attempts", -1), ["task 'b'", "'attempts' = -1"]),
    (_task("interruptions", True), ["task 'b'", "'interruptions' = True (a bool)"]),
    (_task("status", "done"), ["task 'b'", "'status' = 'done'", "one of pending, running"]),
    (_task("error", {"type": "X"}), ["task 'b'", "'error'", "'message'"]),
    (_task("history", {}), ["task 'b'", "'history'", "a list"]),
    (_task("pid", "12"), ["task 'b'", "'pid' = '12'"]),
    (_task("device_group", [0, "1"]), ["task 'b'", "'device_group'"]),
    (lambda doc: doc.update(runs=[1]), ["runs[0] is 1, not an object"]),
    (lambda doc: doc["runs"][0].update(status="exploded"), ["runs[0]", "'status'"]),
    (lambda doc: doc["runs"][0].pop("pid"), ["runs[0] lacks the field 'pid'"]),
    (lambda doc: doc.update(version=True), ["invalid format version True"]),
    (lambda doc: doc["tasks"].update(b=[]), ["task 'b' is [], not an object"]),
])
def test_a_hand_edited_ledger_is_refused_before_anything_is_written(ledger, mutate, words):
    doc = _finished(ledger)
    mutate(doc)
    ledger.write_text(json.dumps(doc))
    before = ledger.read_bytes()
    called: list[Any] = []
    with pytest.raises(LedgerError) as info:
        checkpointed_map(_noting(called, {"y": 0}),
                         [{"task_id": t, "x": i} for i, t in enumerate("abcd")],
                         ledger_path=ledger)
    message = str(info.value)
    assert str(ledger) in message and "left untouched" in message
    for word in words:
        assert word in message
    assert not called and ledger.read_bytes() == before


def test_the_commands_refuse_a_hand_edited_ledger_in_one_paragraph(tmp_path):
    ledger = tmp_path / "runs.json"
    doc = _finished(ledger)
    doc["tasks"]["b"]["attempts"] = "three"
    ledger.write_text(json.dumps(doc))
    before = ledger.read_bytes()
    for args in (("status", "runs.json"), ("forget", "runs.json", "b")):
        proc = campaign(*args, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("campaign: error: ledger ")
        assert "task 'b' has the field 'attempts' = 'three'" in proc.stderr
        assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert ledger.read_bytes() == before


# ------------------------------------------------------------ str and os.PathLike
def test_read_ledger_takes_str_and_pathlike(ledger):
    _finished(ledger)

    class Where:
        def __fspath__(self):
            return str(ledger)

    for path in (str(ledger), ledger, Where()):
        assert set(read_ledger(path)["tasks"]) == {"a", "b", "c"}
    camp = checkpointed_map(lambda it: {"y": 0}, [{"task_id": "a", "x": 0}],
                            ledger_path=str(ledger))
    assert camp.complete and camp.kept == 1


# ------------------------------------------------------------ 8: symlinks
def _gated_driver(ledger: Path, gate: Path, n: int = 3) -> subprocess.Popen[str]:
    return subprocess.Popen([PYTHON, str(HERE / "ledger_child.py"), "gate", str(ledger), str(n),
                             str(gate)], env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_driver_through_a_symlink_is_refused_while_the_first_lives(tmp_path):
    real = tmp_path / "data" / "real.json"
    real.parent.mkdir()
    link = tmp_path / "link.json"
    link.symlink_to(os.path.relpath(real, tmp_path))
    gate = tmp_path / "gate"
    first = _gated_driver(real, gate)
    try:
        wait_until(lambda: gate.with_name("gate.started").exists()
                   and read_ledger(real)["tasks"]["t000"]["status"] == "running",
                   "the first driver's task, recorded running")
        before = real.read_bytes()  # the first driver writes nothing more while t000 waits
        called: list[Any] = []
        with pytest.raises(DriverBusyError) as info:
            checkpointed_map(_noting(called, {"x": 0}),
                             [{"task_id": "t000", "x": 0}], ledger_path=link)
        assert f"pid {first.pid}" in str(info.value) and not called
        assert real.read_bytes() == before and link.is_symlink()
    finally:
        gate.touch()
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert json.loads(out)["counts"]["accepted"] == 3
    statuses = {t: r["status"] for t, r in read_ledger(link)["tasks"].items()}
    assert statuses == {"t000": "accepted", "t001": "accepted", "t002": "accepted"}
    assert [r["status"] for r in read_ledger(real)["runs"]] == ["finished"]  # no take-over


def test_a_run_through_a_symlink_keeps_the_link_and_locks_the_target(tmp_path):
    real = tmp_path / "data" / "real.json"
    real.parent.mkdir()
    link = tmp_path / "link.json"
    link.symlink_to(real)
    items = [{"task_id": t, "x": i} for i, t in enumerate("abc")]
    camp = checkpointed_map(lambda it: {"y": it["x"]}, items[:2], ledger_path=link)
    assert camp.complete and camp.ledger_path == real
    camp = checkpointed_map(lambda it: {"y": it["x"]}, items, ledger_path=link)
    assert camp.complete and camp.kept == 2
    assert link.is_symlink() and link.resolve() == real and real.is_file()
    assert sorted(read_ledger(real)["tasks"]) == ["a", "b", "c"]
    assert (real.parent / "real.json.driver").exists() and (real.parent / "real.json.lock").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "link.json"]  # nothing beside
    proc = campaign("forget", "link.json", "a", cwd=tmp_path)  # a command through the link
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and sorted(read_ledger(real)["tasks"]) == ["b", "c"]
    assert list(real.parent.glob("real.before-forget-*.json"))
    camp = checkpointed_map(lambda it: {"y": it["x"]}, items, ledger_path=link, resume=False)
    assert camp.complete and link.is_symlink() and list(real.parent.glob("real.replaced-*.json"))
