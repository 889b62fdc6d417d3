"""`campaign status` on a generated 100,000-task ledger answers, with the right counts.

The timing itself is measured by benchmarks/cli_status.py (no timed assertion here).
"""

from __future__ import annotations

import importlib.util
import json
import time

import pytest
from cli_data.cli_helpers import ROOT, campaign


def load_benchmark():
    spec = importlib.util.spec_from_file_location("cli_status_bench",
                                                  ROOT / "benchmarks" / "cli_status.py")
    assert spec is not None and spec.loader is not None, "benchmarks/cli_status.py is missing"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_status_of_100k_tasks(tmp_path):
    ledger = tmp_path / "big.json"
    counts = load_benchmark().generate(ledger, 100_000, now=time.time())
    proc = campaign("status", ledger.name, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    assert facts["total"] == 100_000 and facts["counts"] == counts
    assert facts["active"] and len(facts["running"]) == counts["running"] == 8
    assert {e["type"] for e in facts["failures_by_type"]} == {"ConvergenceError", "ValueError"}
    assert facts["throughput_per_s"] > 0 and facts["eta_s"] > 0
    text = campaign("status", ledger.name, cwd=tmp_path).stdout
    assert "tasks     100000:" in text and "ETA" in text


# ------------------------------------------------------------------ the streaming scan
def _small_ledger(tmp_path, n=3000):
    ledger = tmp_path / "small.json"
    load_benchmark().generate(ledger, n, now=time.time())
    return ledger


def _scanned(path, block):
    from campaign._ledger._scan import Scan

    out, chunks = {}, 0
    scan = Scan(path, block=block)
    for chunk in scan.chunks():
        chunks += 1
        out.update(chunk)
    return scan.head, out, chunks


def test_scan_in_small_blocks_gives_what_read_ledger_gives(tmp_path):
    from campaign import read_ledger

    ledger = _small_ledger(tmp_path)
    doc = read_ledger(ledger)
    head, tasks, chunks = _scanned(ledger, block=16 << 10)
    assert chunks > 20  # it did stream
    assert list(tasks.items()) == list(doc["tasks"].items())
    assert head == {k: v for k, v in doc.items() if k != "tasks"}


def test_scan_of_records_whose_strings_look_like_a_record_boundary(tmp_path):
    """A cut between two records is found by a pattern; one inside a string must not fool it."""
    from campaign import read_ledger
    from campaign._ledger import _document

    ledger = _small_ledger(tmp_path, 400)
    doc = read_ledger(ledger)
    trap = '},"sample-000009":{"status":"accepted"'
    for i, (tid, rec) in enumerate(list(doc["tasks"].items())):
        if i % 3 == 0:
            doc["tasks"][tid] = dict(rec, item=dict(rec["item"], note=trap * (1 + i % 5)))
    ledger.write_bytes(_document.dumps(doc))
    _, tasks, chunks = _scanned(ledger, block=4 << 10)
    assert chunks > 5 and tasks == read_ledger(ledger)["tasks"]


def test_scan_of_a_pretty_printed_ledger_reads_it_whole(tmp_path):
    from campaign import read_ledger

    ledger = _small_ledger(tmp_path, 200)
    doc = read_ledger(ledger)
    ledger.write_text(json.dumps(doc, indent=2))
    _, tasks, _ = _scanned(ledger, block=4 << 10)
    assert tasks == doc["tasks"]


def test_scan_merges_the_journal(tmp_path):
    """Lines of the file's generation replace records and add new ones (after the others);
    a line of another generation is skipped, as `campaign.read_ledger` does."""
    from campaign import read_ledger
    from campaign._ledger import _journal
    from campaign._ledger._paths import LedgerPaths

    ledger = _small_ledger(tmp_path, 500)
    doc = read_ledger(ledger)
    gen = doc["generation"]
    ids = list(doc["tasks"])
    changed = dict(doc["tasks"][ids[7]], status="pending", attempts=0)
    new = dict(doc["tasks"][ids[0]], item={"task_id": "extra"})
    lines = [_journal.encode(gen, time.time(), [json.dumps({ids[7]: changed})[1:-1].encode()]),
             _journal.encode("0" * 16, time.time(), [json.dumps({ids[8]: changed})[1:-1].encode()]),
             _journal.encode(gen, time.time() + 1, [json.dumps({"extra": new})[1:-1].encode()])]
    LedgerPaths.of(ledger).journal.write_bytes(b"".join(lines))
    merged = read_ledger(ledger)
    assert merged["tasks"][ids[7]]["status"] == "pending" and "extra" in merged["tasks"]
    head, tasks, _ = _scanned(ledger, block=8 << 10)
    assert list(tasks.items()) == list(merged["tasks"].items())
    assert head["updated"] == merged["updated"]
    proc = campaign("status", ledger.name, "--json", cwd=tmp_path)
    assert json.loads(proc.stdout)["total"] == 501


def test_status_refuses_a_bad_field_in_the_last_chunk_naming_task_and_field(tmp_path):
    from campaign import read_ledger
    from campaign._ledger import _document
    from campaign._errors import LedgerError

    ledger = _small_ledger(tmp_path, 3000)
    doc = read_ledger(ledger)
    last = list(doc["tasks"])[-1]
    doc["tasks"][last] = dict(doc["tasks"][last], pid="node17")
    ledger.write_bytes(_document.dumps(doc))
    with pytest.raises(LedgerError) as expected:
        read_ledger(ledger)
    for args in (("status",), ("status", "--tasks=all"), ("results",), ("failures",)):
        proc = campaign(*args, ledger.name, cwd=tmp_path)
        assert proc.returncode == 2, (args, proc.stdout[-300:])
        assert proc.stdout == ""  # nothing printed from the chunks before the bad one
        said = str(expected.value).replace(str(ledger), ledger.name)
        assert said in proc.stderr and repr(last) in said and "'pid'" in said


@pytest.mark.parametrize("fmt", ["csv", "json", "jsonl"])
def test_results_written_as_they_stream_match_the_whole_ledger(tmp_path, fmt):
    """Rows from many chunks (a ledger larger than a block): the same rows, in item order,
    as built from the whole document."""
    import csv
    import io

    from campaign import read_ledger
    from campaign._ledger import _document
    from campaign._cli._results import result_rows

    ledger = tmp_path / "big.json"
    load_benchmark().generate(ledger, 30_000, now=time.time())
    doc = read_ledger(ledger)
    assert ledger.stat().st_size > 2 * 8 << 20  # more than two blocks of the scan
    want = list(result_rows(doc["tasks"], True))
    proc = campaign("results", ledger.name, "--with-items", "--format", fmt, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    if fmt == "json":
        got = json.loads(proc.stdout)
    elif fmt == "jsonl":
        got = [json.loads(line) for line in proc.stdout.splitlines()]
    else:
        table = list(csv.DictReader(io.StringIO(proc.stdout)))
        got = [row["task_id"] for row in table]
        want = [row["task_id"] for row in want]
        assert set(table[0]) >= {"energy", "chi2", "item.material"}
    assert got == want and len(want) == doc_accepted(doc)
    # a bad record in the last chunk: --output is not written
    last = list(doc["tasks"])[-1]
    doc["tasks"][last] = dict(doc["tasks"][last], attempts=-1)
    ledger.write_bytes(_document.dumps(doc))
    proc = campaign("results", ledger.name, "--format", fmt, "-o", "out." + fmt, cwd=tmp_path)
    assert proc.returncode == 2 and "'attempts'" in proc.stderr
    assert not (tmp_path / f"out.{fmt}").exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def doc_accepted(doc):
    return sum(1 for rec in doc["tasks"].values() if rec["status"] == "accepted")


def test_scan_applies_unmerged_fragments_as_overlay_does(tmp_path):
    """Records of array workers' fragments not merged yet (one replacing a record, one for a
    task only a fragment knows, and superseded attempts: one the ledger's accepted record keeps
    in its history, one nothing newer replaced) stream by as `campaign._array._workdir.overlay`
    gives them."""
    from campaign import read_ledger
    from campaign._ledger import _document, _records
    from campaign._array._workdir import WorkDir, overlay
    from campaign._ledger._overlay import scan_records

    ledger = _small_ledger(tmp_path, 2000)
    doc = read_ledger(ledger)
    ids = list(doc["tasks"])
    pending = next(t for t in ids if doc["tasks"][t]["status"] == "pending")
    owner = {"worker": "9_1", "host": "n1", "pid": 1}
    rec = _records.started(doc["tasks"][pending], host="n1", pid=1, worker="9_1",
                           device_group=None, at=time.time())
    rec = _records.finished(rec, "accepted", at=time.time(), result={"energy": 1.0})
    work = WorkDir(ledger, "sub1")
    work.write_fragment({pending: rec}, owner)
    work.write_fragment({"only-here": dict(rec, item={"task_id": "only-here"})}, owner)
    # a worker whose lease was taken over: the taker's accepted record is merged, the stale
    # worker's attempt is not; and a superseded attempt nothing newer replaced
    taker = {"worker": "9_2", "host": "n2", "pid": 2}
    again, lone = [t for t in ids if doc["tasks"][t]["status"] == "pending"][1:3]
    stale = _records.started(doc["tasks"][again], device_group=None, at=time.time(), **owner)
    lost = _records.superseded(_records.finished(stale, "accepted", at=time.time(),
                                                 result={"energy": 2.0}), taker, at=time.time())
    doc["tasks"][again] = _records.finished(
        _records.started(stale, device_group=None, at=time.time(), **taker),
        "accepted", at=time.time(), result={"energy": 3.0})
    ledger.write_bytes(_document.dumps(doc))
    work.write_fragment({again: lost}, owner)
    alone = _records.started(doc["tasks"][lone], device_group=None, at=time.time(), **owner)
    work.write_fragment({lone: _records.superseded(_records.finished(
        alone, "accepted", at=time.time(), result={"energy": 4.0}), taker, at=time.time())},
        owner)
    want = overlay(read_ledger(ledger), ledger)["tasks"]
    _, chunks, _ = scan_records(ledger, block=16 << 10)
    got = {}
    for chunk in chunks:
        got.update(chunk)
    assert got == want and got[pending]["status"] == "accepted" and "only-here" in got
    assert [e["attempt"] for e in got[again]["history"] if e["error"]] == [1]
    assert got[lone]["status"] == "interrupted" and "superseded" not in got[lone]
    facts = json.loads(campaign("status", ledger.name, "--json", cwd=tmp_path).stdout)
    assert facts["total"] == 2001


# ------------------------------------------------------------------ the chunk check and tally
#: (field, value) put into one record: each makes it invalid for `record_problem`, or, for the
#: last ones, stays valid (a non-finite float's tag, an empty error-free record's fields).
_BAD_VALUES = [
    ("status", "bogus"), ("status", 1), ("status", None), ("status", []), ("attempts", -1),
    ("attempts", True), ("attempts", 1.0), ("interruptions", -2), ("item", []), ("item", None),
    ("fingerprint", "sha256:" + "A" * 64), ("fingerprint", "sha256:" + "0" * 63),
    ("fingerprint", 5), ("fingerprint", "sha257:" + "0" * 64),
    ("fingerprint", "sha256:" + "0" * 63 + "\u00e9"), ("result", []), ("result", {"x": [1]}),
    ("result", {"x": {"$float": "no"}}), ("error", {}), ("error", {"type": 1, "message": "m"}),
    ("error", "x"), ("host", 1), ("pid", "1"), ("pid", True), ("worker", 0),
    ("device_group", [True]), ("device_group", {}), ("started", "x"), ("ended", True),
    ("duration", []), ("history", [1]), ("history", {}), ("result", None),
    ("result", {"x": {"$float": "nan"}}), ("device_group", [1, 2]), ("history", [{}]),
]


def test_the_chunk_check_accepts_only_what_the_record_check_accepts(tmp_path):
    """`valid_columns` (a whole chunk at once) never passes a chunk with a record that
    `record_problem` refuses, whatever field is wrong and wherever the record is."""
    import random

    from campaign import read_ledger
    from campaign._ledger._schema import record_problem, valid_columns

    recs = list(read_ledger(_small_ledger(tmp_path, 1000))["tasks"].values())
    assert valid_columns(recs) is not None
    rng = random.Random(0)
    for field, value in _BAD_VALUES:
        for _ in range(4):
            changed = list(recs)
            i = rng.randrange(len(changed))
            changed[i] = dict(changed[i], **{field: value})
            if record_problem(changed[i]) is not None:
                assert valid_columns(changed) is None, (field, value, changed[i]["status"])
    for i, bad in ((3, [1]), (4, "status"), (5, {k: v for k, v in recs[5].items()
                                               if k != "history"})):
        assert valid_columns(recs[:i] + [bad] + recs[i + 1:]) is None


def test_the_tally_of_columns_counts_as_record_by_record(tmp_path):
    """`Tally` counts a chunk over its columns; the same facts come out of counting every
    record alone (one-record chunks), whatever the chunk size."""
    from campaign import read_ledger
    from campaign._tally import Tally

    doc = read_ledger(_small_ledger(tmp_path, 2000))
    now = doc["updated"] + 10.0
    tasks = list(doc["tasks"].items())
    facts = []
    for size in (1, 7, 500, len(tasks)):
        tally = Tally(doc["runs"], now)
        for begin in range(0, len(tasks), size):
            tally.add(dict(tasks[begin:begin + size]))
        facts.append(tally.facts(doc, "x"))
    assert all(f == facts[0] for f in facts[1:])
    counts = {s: sum(r["status"] == s for _, r in tasks) for s in facts[0]["counts"]}
    assert facts[0]["counts"] == counts and facts[0]["total"] == len(tasks)
    assert facts[0]["attempts"]["total"] == sum(r["attempts"] for _, r in tasks)
    assert len(facts[0]["running"]) == counts["running"]


def _odd_submitted_ledger(tmp_path):
    """A submitted run's ledger with every status, failures and odd-but-valid records (no end
    recorded, integer times, workers of another job or none, keys the tables do not list), and
    the task list of the submission (every task but the first ten)."""
    from campaign._ledger import _document
    from campaign._array._workdir import write_task_list

    ledger = _small_ledger(tmp_path, 2500)
    doc = json.loads(ledger.read_bytes())
    ids = list(doc["tasks"])
    started = doc["runs"][-1]["started"]
    doc["runs"][-1].update(status="submitted", submission="sub1", job="77", to_run=len(ids) - 10)
    for i, tid in enumerate(ids):
        rec = doc["tasks"][tid]
        if rec["status"] in ("accepted", "failed"):
            rec["worker"] = (f"77_{i % 5}", f"78_{i % 3}", None, "")[i % 4]
        if i % 50 == 0 and rec["status"] == "accepted":
            rec["ended"] = None  # a file made by hand: no end recorded
        elif i % 50 == 1 and rec["status"] in ("accepted", "failed"):
            rec["ended"] = int(started) + (1 if i % 100 == 1 else -1)
        if i % 70 == 2:
            rec["note"] = {"by": "hand"}
    ledger.write_bytes(_document.dumps(doc))
    write_task_list(ledger, "sub1", ids[10:])
    return ledger


def test_streamed_submission_facts_match_a_plain_count_of_json_load(tmp_path):
    """What `campaign status` counts as the ledger streams by in small chunks (the tally over
    columns, the submission's tasks by array element) equals a plain count over `json.load`'s
    records, one record at a time."""
    from campaign._cli._status import summarize
    from campaign._ledger._overlay import scan_columns
    from campaign._tally import SubmissionTally, Tally

    ledger = _odd_submitted_ledger(tmp_path)
    with open(ledger) as fh:
        doc = json.load(fh)
    now = doc["updated"] + 5.0
    head, blocks, _ = scan_columns(ledger, block=8 << 10)
    tally, sub = Tally(head["runs"], now), SubmissionTally(ledger, head["runs"][-1])
    chunks = 0
    for chunk, cols in blocks:
        tally.add(chunk, cols)
        sub.add(chunk, cols)
        chunks += 1
    assert chunks > 20  # it did stream
    assert tally.facts(head, "x") == summarize(doc, "x", now)
    since, wanted = doc["runs"][-1]["started"], set(list(doc["tasks"])[10:])
    done, by = 0, {}
    for tid, rec in doc["tasks"].items():
        if tid in wanted and rec["status"] in ("accepted", "failed") \
                and (rec["ended"] or 0.0) >= since:
            done += 1
            if rec["worker"] and rec["worker"].startswith("77_"):
                by[rec["worker"]] = by.get(rec["worker"], 0) + 1
    got = sub.facts([], None)
    assert got["done"] == done > 0 and got["to_run"] == len(wanted)
    assert {k: e["ended_tasks"] for k, e in got["elements"].items()} == by and len(by) == 5
