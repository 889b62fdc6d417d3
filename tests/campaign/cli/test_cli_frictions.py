"""What a new user of the `campaign` command stumbled on, each driven through the real command
(job arrays: tests/campaign/cli/test_cli_array_frictions.py).

The progress displays are read live from a running `campaign run`, while a task waits for a
file, so what they show never depends on how fast the machine is.
"""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

import pytest
from cli_data.cli_helpers import (
    campaign,
    end,
    read_doc,
    spec_file,
    start,
    statuses,
    wait_for,
    write_json_items,
    write_model,
)
from testkit import PATIENCE, wait_until


# ---------------------------------------------------------------------------- helpers
def finished_ledger(tmp_path: Path) -> Path:
    """a and c accepted, b failed (exit 1)."""
    write_model(tmp_path)
    (tmp_path / "items.csv").write_text("task_id,x,fail\na,1,\nb,2,1\nc,3,\n")
    proc = campaign("run", "model.py:fit", "--items", "items.csv", "--ledger", "runs.json",
                    cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    return tmp_path / "runs.json"


class Reader:
    """Collects what a child process writes on stderr, as it writes it (a thread)."""

    def __init__(self, proc):
        self.text = ""
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(proc.stderr,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        while True:
            chunk = stream.read(1)
            if not chunk:
                return
            with self._lock:
                self.text += chunk

    def shows(self, needle: str) -> bool:
        with self._lock:
            return needle in self.text

    def close(self, proc) -> None:
        """Kill the process if it still runs, read to the end, close its pipes."""
        proc.kill()
        proc.wait(timeout=PATIENCE)
        self._thread.join(timeout=PATIENCE)
        proc.stdout.close()
        proc.stderr.close()


# ---------------------------------------------------------------------------- progress
@pytest.mark.parametrize("mode, shown", [
    ("lines", "[campaign] 1/2 accepted, 0 failed, 1 running, 0 remaining"),
    ("bar", "1 ok, 0 failed, 1 running, 0 remaining"),
])
def test_progress_counts_the_task_running_in_a_serial_run(tmp_path, mode, shown):
    write_model(tmp_path)
    write_json_items(tmp_path / "items.json", 2, hold_from=1)  # t1 waits for the file "hold"
    proc = start("run", "model.py:fit", "--items", "items.json", "--ledger", "l.json",
                 "--progress", mode, "--progress-interval", "0.2", cwd=tmp_path)
    err = Reader(proc)
    try:
        wait_for(lambda: statuses(tmp_path / "l.json")["t1"] == "running", what="t1 to run")
        wait_until(lambda: err.shows(shown), f"the display to show {shown!r} while t1 runs")
        (tmp_path / "hold").touch()
        assert proc.wait(timeout=PATIENCE) == 0
    finally:
        err.close(proc)


@pytest.mark.slow
@pytest.mark.parametrize("mode, shown", [
    ("lines", "[campaign] 0/2 accepted, 0 failed, 2 running, 0 remaining"),
    ("bar", "0 ok, 0 failed, 2 running, 0 remaining"),
])
def test_progress_counts_both_tasks_of_two_process_workers(tmp_path, mode, shown):
    write_model(tmp_path)
    write_json_items(tmp_path / "items.json", 2, hold_from=0)  # both wait for "hold"
    spec = spec_file(tmp_path, 'execution = "processes"\n[options]\nworkers = 2\n',
                     ledger="l.json")
    proc = start("run", spec.name, "--progress", mode, "--progress-interval", "0.2",
                 cwd=tmp_path)
    err = Reader(proc)
    try:
        wait_for(lambda: set(statuses(tmp_path / "l.json").values()) == {"running"},
                 what="both tasks to run")
        wait_until(lambda: err.shows(shown), f"the display to show {shown!r}")
        (tmp_path / "hold").touch()
        assert proc.wait(timeout=PATIENCE) == 0
    finally:
        err.close(proc)


# ---------------------------------------------------------------------------- items
def test_a_never_started_task_takes_its_edited_item(tmp_path):
    write_model(tmp_path)
    items = tmp_path / "items.json"
    write_json_items(items, 4, hold_from=1)  # t1 waits for "hold"; t2, t3 never start
    args = ("run", "model.py:fit", "--items", "items.json", "--ledger", "l.json")
    proc = start(*args, cwd=tmp_path)
    try:
        wait_for(lambda: statuses(tmp_path / "l.json")["t1"] == "running", what="t1 to run")
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=PATIENCE)
    finally:
        end(proc)
    before = read_doc(tmp_path / "l.json")["tasks"]
    assert [r["status"] for r in before.values()] == ["accepted", "interrupted", "pending",
                                                      "pending"]
    edited = json.loads(items.read_text())
    for item in edited:
        item.pop("hold", None)
        if item["task_id"] in ("t1", "t2"):
            item["x"] = 100
    items.write_text(json.dumps(edited))
    again = campaign(*args, cwd=tmp_path)
    assert again.returncode == 1, again.stderr  # t1 ran once: its item is refused
    after = read_doc(tmp_path / "l.json")["tasks"]
    assert after["t1"] == before["t1"]
    assert after["t2"]["status"] == "accepted" and after["t2"]["result"]["y"] == 200
    assert after["t2"]["item"]["x"] == 100 and after["t2"]["attempts"] == 1
    assert after["t2"]["fingerprint"] != before["t2"]["fingerprint"]
    assert after["t3"]["status"] == "accepted"
    refused = read_doc(tmp_path / "l.json")["runs"][-1]["refused"]
    assert [r["task_id"] for r in refused] == ["t1"]


@pytest.mark.parametrize("name, text, lines", [
    ("dup.jsonl", '{"task_id": "a", "x": 1}\n{"task_id": "b", "x": 1}\n'
                  '{"task_id": "a", "x": 2}\n', (1, 3)),
    ("dup.csv", "task_id,x\na,1\nb,2\n\nb,3\n", (3, 5)),
    ("dup.json", '[\n  {"task_id": "a", "x": 1},\n  {"task_id": "b",\n   "x": 2},\n'
                 '  {"task_id": "b", "x": 3}\n]\n', (3, 5)),
])
def test_a_duplicate_task_id_names_the_file_and_both_lines(tmp_path, name, text, lines):
    write_model(tmp_path)
    (tmp_path / name).write_text(text)
    proc = campaign("run", "model.py:fit", "--items", name, "--ledger", "l.json", cwd=tmp_path)
    assert proc.returncode == 2
    first, second = lines
    assert f"items file {name} line {second}: " in proc.stderr, proc.stderr
    assert f"also the task_id of line {first}" in proc.stderr, proc.stderr
    assert not (tmp_path / "l.json").exists()


@pytest.mark.parametrize("body, hint", [
    ("workers = 2\n", "did you mean [options] workers = 2?"),
    ('time = "1:00:00"\n', "did you mean [array] time = '1:00:00'?"),
])
def test_a_scheduler_option_at_the_top_of_a_spec_gets_a_hint(tmp_path, body, hint):
    write_model(tmp_path)
    write_json_items(tmp_path / "items.json", 2)
    spec = spec_file(tmp_path, body)
    proc = campaign("run", spec.name, cwd=tmp_path)
    assert proc.returncode == 2 and hint in proc.stderr, proc.stderr


# ---------------------------------------------------------------------------- CLI words
def test_messages_name_the_ledger_option_not_the_python_argument(tmp_path):
    write_model(tmp_path)
    write_json_items(tmp_path / "items.json", 2, hold_from=0)
    args = ("run", "model.py:fit", "--items", "items.json", "--ledger", "l.json")
    proc = start(*args, cwd=tmp_path)
    try:
        wait_for(lambda: statuses(tmp_path / "l.json")["t0"] == "running", what="t0 to run")
        busy = campaign(*args, cwd=tmp_path)
    finally:
        proc.kill()
        proc.communicate(timeout=PATIENCE)
    assert busy.returncode == 2 and "live campaign driver" in busy.stderr
    assert "ledger_path" not in busy.stderr and "--ledger" in busy.stderr, busy.stderr
    (tmp_path / "foreign.json").write_text('{"name": "something else"}')
    foreign = campaign("run", "model.py:fit", "--items", "items.json", "--ledger",
                       "foreign.json", cwd=tmp_path)
    assert foreign.returncode == 2 and "--ledger" in foreign.stderr, foreign.stderr
    assert "ledger_path" not in foreign.stderr


def test_status_tasks_lists_the_ids_that_forget_asks_for(tmp_path):
    ledger = finished_ledger(tmp_path)
    failed = campaign("status", "runs.json", "--tasks", "failed", cwd=tmp_path)
    assert failed.returncode == 0 and failed.stdout == "b\n", failed.stdout
    every = campaign("status", "runs.json", "--tasks", cwd=tmp_path)
    assert every.returncode == 0
    assert every.stdout.splitlines() == ["a\taccepted", "c\taccepted", "b\tfailed"]
    none = campaign("status", "runs.json", "--tasks", "pending", cwd=tmp_path)
    assert none.returncode == 0 and none.stdout == ""
    as_json = campaign("status", "runs.json", "--tasks", "--json", cwd=tmp_path)
    assert json.loads(as_json.stdout) == {"accepted": ["a", "c"], "failed": ["b"]}
    unknown = campaign("forget", "runs.json", "zz", cwd=tmp_path)
    assert unknown.returncode == 2
    assert f"campaign status {ledger.name} --tasks" in unknown.stderr, unknown.stderr


# ---------------------------------------------------------------------------- outputs
def test_failures_json(tmp_path):
    finished_ledger(tmp_path)
    proc = campaign("failures", "runs.json", "--json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    (entry,) = json.loads(proc.stdout)
    assert {k: entry[k] for k in ("task_id", "status", "attempts", "error_type", "message")} \
        == {"task_id": "b", "status": "failed", "attempts": 1, "error_type": "ValueError",
            "message": "task b diverged"}
    assert "raise ValueError" in entry["traceback"]


def test_failures_json_lists_refused_tasks_and_nothing_when_all_is_well(tmp_path):
    write_model(tmp_path)
    write_json_items(tmp_path / "items.json", 2)
    assert campaign("run", "model.py:fit", "--items", "items.json", "--ledger", "l.json",
                    cwd=tmp_path).returncode == 0
    clean = campaign("failures", "l.json", "--json", cwd=tmp_path)
    assert clean.returncode == 0 and json.loads(clean.stdout) == []
    write_json_items(tmp_path / "items.json", 2, extra=1)  # every item changed
    assert campaign("run", "model.py:fit", "--items", "items.json", "--ledger", "l.json",
                    cwd=tmp_path).returncode == 1
    refused = json.loads(campaign("failures", "l.json", "--json", cwd=tmp_path).stdout)
    assert [(r["task_id"], r["status"]) for r in refused] == [("t0", "refused"),
                                                                ("t1", "refused")]
    assert [c["field"] for c in refused[0]["changed"]] == ["extra"]


def test_results_of_a_partial_campaign_note_the_missing_tasks(tmp_path):
    finished_ledger(tmp_path)
    proc = campaign("results", "runs.json", cwd=tmp_path)
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[0].startswith("task_id,")
    assert len(proc.stdout.splitlines()) == 3  # the header, a and c
    assert "1 of 3 tasks has no accepted result (1 failed)" in proc.stderr, proc.stderr


def test_grammar_of_one(tmp_path):
    write_model(tmp_path)
    write_json_items(tmp_path / "items.json", 1)
    assert campaign("run", "model.py:fit", "--items", "items.json", "--ledger", "l.json",
                    cwd=tmp_path).returncode == 0
    text = campaign("status", "l.json", cwd=tmp_path).stdout
    assert "(1 task ended in" in text and "(1 run recorded)" in text, text
    assert "0 interruptions" in text and "0 tasks left for the next run" in text, text
    write_json_items(tmp_path / "items.json", 1, extra=1)  # refused: its item changed
    campaign("run", "model.py:fit", "--items", "items.json", "--ledger", "l.json", cwd=tmp_path)
    note = campaign("results", "l.json", cwd=tmp_path).stderr
    assert "1 result belongs to a task refused" in note, note
    assert "(s)" not in text + note


def test_worker_help_says_seconds(tmp_path):
    proc = campaign("worker", "--help", cwd=tmp_path)
    assert proc.returncode == 0
    assert "RANGE" not in proc.stdout and "--lease-seconds SECONDS" in proc.stdout, proc.stdout


def test_submit_with_nothing_to_run_says_so_on_stdout(tmp_path):
    write_model(tmp_path)
    write_json_items(tmp_path / "items.json", 2)
    spec = spec_file(tmp_path)
    assert campaign("run", spec.name, cwd=tmp_path).returncode == 0
    proc = campaign("submit", spec.name, "--array", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("nothing to run") and proc.stdout.count("\n") == 1, proc.stdout
    assert not (tmp_path / "slurm-logs").exists()
