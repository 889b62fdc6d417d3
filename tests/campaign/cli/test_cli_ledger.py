"""`campaign status`, `results`, `failures` and `forget` on real ledgers written by real runs."""

from __future__ import annotations

import csv
import io
import json

import pytest
from cli_data.cli_helpers import campaign, read_doc, statuses, write_model


@pytest.fixture
def finished(tmp_path):
    """A finished campaign: a, c, d accepted (a's z is NaN), b failed; exit 1."""
    write_model(tmp_path)
    (tmp_path / "items.csv").write_text("task_id,x,fail,label\na,1,,foo\nb,2,1,bar\nc,3,,\n"
                                        "d,4,,\"q, r\"\n")
    proc = campaign("run", "model.py:fit", "--items", "items.csv", "--ledger", "runs.json",
                    cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    return tmp_path


def test_status_text_and_json(finished):
    proc = campaign("status", "runs.json", cwd=finished)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "tasks     4: 3 accepted, 1 failed" in text
    assert "ValueError: 1 (e.g. task 'b': task b diverged)" in text
    assert "last run  finished: serial on " in text and "(1 run recorded)" in text
    assert "1 task left for the next run" in text
    facts = json.loads(campaign("status", "runs.json", "--json", cwd=finished).stdout)
    assert facts["counts"] == {"pending": 0, "running": 0, "accepted": 3, "failed": 1,
                               "interrupted": 0}
    assert facts["failures_by_type"] == [{"type": "ValueError", "count": 1, "example_task": "b",
                                          "example_message": "task b diverged"}]
    assert facts["attempts"]["total"] == 4 and not facts["active"] and facts["eta_s"] is None
    assert facts["last_run"]["ended_tasks"] == 4 and facts["remaining"] == 1


def test_status_of_a_ledger_copied_from_another_machine_mid_run(finished, tmp_path_factory):
    doc = read_doc(finished / "runs.json")
    run = doc["runs"][-1]
    run.update(status="running", ended=None, host="node042", pid=999999)
    rec = doc["tasks"]["c"]
    rec.update(status="running", host="node042", pid=999999, worker="w3", started=rec["ended"])
    elsewhere = tmp_path_factory.mktemp("laptop") / "copy.json"
    elsewhere.write_text(json.dumps(doc))
    facts = json.loads(campaign("status", str(elsewhere), "--json", cwd=finished).stdout)
    assert facts["active"] and facts["last_run"]["driver_alive"] is None  # not checkable
    assert facts["running"][0]["task_id"] == "c" and facts["running"][0]["worker"] == "w3"
    assert facts["eta_s"] is not None and facts["remaining"] == 1
    text = campaign("status", str(elsewhere), cwd=finished).stdout
    assert "running (driver on host node042, not checked from here)" in text
    assert "c  host node042  pid 999999  worker w3  age" in text


def test_results_in_all_three_formats(finished):
    proc = campaign("results", "runs.json", cwd=finished)
    assert proc.returncode == 0
    rows = list(csv.reader(io.StringIO(proc.stdout)))
    assert rows == [["task_id", "y", "z", "ok"], ["a", "2", "nan", "true"],
                    ["c", "6", "1.5", "true"], ["d", "8", "2.0", "true"]]
    with_items = campaign("results", "runs.json", "--with-items", cwd=finished).stdout
    named = list(csv.DictReader(io.StringIO(with_items)))
    assert list(named[0]) == ["task_id", "y", "z", "ok", "item.x", "item.fail", "item.label"]
    assert named[2]["item.label"] == "q, r" and named[1]["item.label"] == ""
    as_json = json.loads(campaign("results", "runs.json", "--format", "json", cwd=finished).stdout)
    assert as_json[0] == {"task_id": "a", "y": 2, "z": {"$float": "nan"}, "ok": True}
    assert [r["task_id"] for r in as_json] == ["a", "c", "d"]
    lines = campaign("results", "runs.json", "--format", "jsonl", "--with-items",
                     cwd=finished).stdout.splitlines()
    assert [json.loads(line) for line in lines][1] == {
        "task_id": "c", "y": 6, "z": 1.5, "ok": True, "item.x": 3, "item.fail": None,
        "item.label": None}


def test_results_to_a_file_takes_the_format_from_its_suffix(finished):
    proc = campaign("results", "runs.json", "--output", "out.jsonl", cwd=finished)
    assert proc.returncode == 0 and proc.stdout == ""
    assert "wrote 3 results to out.jsonl (jsonl)" in proc.stderr
    assert len((finished / "out.jsonl").read_text().splitlines()) == 3


def test_failures_lists_errors_and_refused_tasks(finished):
    proc = campaign("failures", "runs.json", cwd=finished)
    assert proc.returncode == 1
    assert "task b (failed, 1 attempt)\n  ValueError: task b diverged\n" in proc.stdout
    assert 'raise ValueError(f"task {item' in proc.stdout  # the end of the traceback
    # change c's item: refused in the next run, listed with its changed field and the fix
    (finished / "items.csv").write_text("task_id,x,fail,label\na,1,,foo\nb,2,1,bar\nc,30,,\n"
                                        "d,4,,\"q, r\"\n")
    assert campaign("run", "model.py:fit", "--items", "items.csv", "--ledger", "runs.json",
                    cwd=finished).returncode == 1
    out = campaign("failures", "runs.json", cwd=finished).stdout
    assert "1 task refused in the last run" in out
    assert "  c: x: 3 -> 30" in out
    assert "campaign forget runs.json c" in out


def test_failures_exit_0_when_there_are_none(tmp_path):
    write_model(tmp_path)
    (tmp_path / "items.json").write_text('[{"task_id": "a", "x": 2}]')
    campaign("run", "model.py:fit", "--items", "items.json", "--ledger", "l.json", cwd=tmp_path)
    proc = campaign("failures", "l.json", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "no failed or refused tasks"


def test_forget_by_id_and_by_status_keeps_a_backup(finished):
    ledger = finished / "runs.json"
    original = ledger.read_bytes()
    proc = campaign("forget", "runs.json", "a", cwd=finished)
    assert proc.returncode == 0, proc.stderr
    assert "forgot 1 task in runs.json" in proc.stderr
    backups = list(finished.glob("runs.before-forget-*.json"))
    assert len(backups) == 1 and backups[0].read_bytes() == original
    assert str(backups[0].name) in proc.stderr
    assert statuses(ledger) == {"b": "failed", "c": "accepted", "d": "accepted"}
    proc = campaign("forget", "runs.json", "--status", "failed", cwd=finished)
    assert proc.returncode == 0 and statuses(ledger) == {"c": "accepted", "d": "accepted"}
    nothing = campaign("forget", "runs.json", "--status", "interrupted", cwd=finished)
    assert nothing.returncode == 0 and "nothing to forget" in nothing.stderr
    assert len(list(finished.glob("runs.before-forget-*.json"))) == 2  # none for nothing
    rerun = campaign("run", "model.py:fit", "--items", "items.csv", "--ledger", "runs.json",
                     cwd=finished)
    assert rerun.returncode == 1  # b still fails; a ran again
    assert read_doc(ledger)["tasks"]["a"]["attempts"] == 1
    assert list(read_doc(ledger)["tasks"]) == ["a", "b", "c", "d"]  # item order again


def test_forget_of_an_unknown_id_changes_nothing(finished):
    ledger = finished / "runs.json"
    before = ledger.read_bytes()
    proc = campaign("forget", "runs.json", "a", "zz", "yy", cwd=finished)
    assert proc.returncode == 2
    assert "2 task ids not in ledger runs.json: 'zz', 'yy'; nothing was changed" in proc.stderr
    assert ledger.read_bytes() == before
    assert not list(finished.glob("runs.before-forget-*"))
    usage = campaign("forget", "runs.json", cwd=finished)
    assert usage.returncode == 2 and "name the TASK_IDs" in usage.stderr
    bad_status = campaign("forget", "runs.json", "--status", "accepted", cwd=finished)
    assert bad_status.returncode == 2

