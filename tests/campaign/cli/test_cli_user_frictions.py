"""More of what a new user of the `campaign` command stumbled on: the streams each command
writes, the group's ``-v``, files given in the wrong place, hints for mistyped names, and
what a traceback, a count or a stopped run shows. Each is driven through the real command."""

from __future__ import annotations

import csv
import io
import json
import signal
from pathlib import Path

import pytest
from cli_data.cli_helpers import (
    campaign,
    end,
    start,
    statuses,
    wait_for,
    write_json_items,
    write_model,
)


def items_csv(tmp_path: Path, fail: bool = True) -> Path:
    path = tmp_path / "items.csv"
    path.write_text("task_id,x,fail\na,1,\nb,2,1\nc,3,\n" if fail else "task_id,x\na,1\nc,3\n")
    return path


def finished(tmp_path: Path) -> Path:
    """a and c accepted, b failed."""
    write_model(tmp_path)
    items_csv(tmp_path)
    proc = campaign("run", "model.py:fit", "--items", "items.csv", "--ledger", "runs.json",
                    "--progress", "off", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    return tmp_path / "runs.json"


# ---------------------------------------------------------------------------- streams
def test_every_command_writes_data_on_stdout_and_messages_on_stderr(tmp_path):
    write_model(tmp_path)
    items_csv(tmp_path)
    run = ("run", "model.py:fit", "--items", "items.csv", "--ledger", "runs.json",
           "--progress", "off")

    proc = campaign(*run, cwd=tmp_path)  # the summary is a message
    assert proc.returncode == 1 and proc.stdout == ""
    assert "2/3 accepted, 1 failed" in proc.stderr

    proc = campaign(*run, "--json", cwd=tmp_path)
    assert proc.returncode == 1
    summary = json.loads(proc.stdout)
    assert summary["ledger"] == "runs.json"
    assert (summary["total"], summary["accepted"], summary["failed"], summary["refused"],
            summary["kept"], summary["ran"]) == (3, 2, 1, 0, 2, 1)
    assert summary["complete"] is False
    assert "accepted" not in proc.stderr  # the summary is not also a message

    proc = campaign("status", "runs.json", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("ledger ") and proc.stderr == ""
    proc = campaign("status", "runs.json", "--json", cwd=tmp_path)
    assert json.loads(proc.stdout)["counts"]["failed"] == 1 and proc.stderr == ""
    proc = campaign("status", "runs.json", "--tasks", cwd=tmp_path)
    assert proc.stdout.splitlines() == ["a\taccepted", "c\taccepted", "b\tfailed"]

    proc = campaign("results", "runs.json", cwd=tmp_path)
    assert [r["task_id"] for r in csv.DictReader(io.StringIO(proc.stdout))] == ["a", "c"]
    assert "note" in proc.stderr
    proc = campaign("results", "runs.json", "-o", "out.json", cwd=tmp_path)
    assert proc.stdout == "" and "wrote 2 results to out.json" in proc.stderr
    assert len(json.loads((tmp_path / "out.json").read_text())) == 2

    proc = campaign("failures", "runs.json", cwd=tmp_path)
    assert proc.returncode == 1 and "task b" in proc.stdout and proc.stderr == ""
    proc = campaign("failures", "runs.json", "--json", cwd=tmp_path)
    assert [f["task_id"] for f in json.loads(proc.stdout)] == ["b"]

    proc = campaign("report", "runs.json", "-o", "page.html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and "wrote page.html" in proc.stderr

    proc = campaign("forget", "runs.json", "--status", "interrupted", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "" and "nothing to forget" in proc.stderr
    proc = campaign("forget", "runs.json", "b", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "" and "forgot 1 task" in proc.stderr

    (tmp_path / "items.csv").write_text("task_id,x,fail\na,1,\nb,2,\nc,3,\n")  # b forgotten
    proc = campaign(*run, "--json", cwd=tmp_path)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["complete"] is True


def test_run_json_after_nothing_to_run(tmp_path):
    write_model(tmp_path)
    items_csv(tmp_path, fail=False)
    run = ("run", "model.py:fit", "--items", "items.csv", "--ledger", "r.json", "--progress",
           "off", "--json")
    assert campaign(*run, cwd=tmp_path).returncode == 0
    proc = campaign(*run, cwd=tmp_path)
    assert proc.returncode == 0
    summary = json.loads(proc.stdout)
    assert (summary["kept"], summary["ran"], summary["accepted"]) == (2, 0, 2)


def test_run_json_of_a_stopped_run_names_the_signal_and_its_lines_have_no_eta(tmp_path):
    write_model(tmp_path)
    write_json_items(tmp_path / "items.json", 3, hold_from=1)  # t1 waits for the file "hold"
    proc = start("run", "model.py:fit", "--items", "items.json", "--ledger", "l.json",
                 "--progress", "lines", "--json", cwd=tmp_path)
    try:
        wait_for(lambda: statuses(tmp_path / "l.json")["t1"] == "running", what="t1 to run")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        end(proc)
    assert proc.returncode == 130, err
    summary = json.loads(out)
    assert summary["stopped_by"] == "Ctrl-C" and summary["complete"] is False
    assert summary["ledger"] == "l.json" and summary["total"] == 3
    stopped = [line for line in err.splitlines() if line.startswith("[campaign] stopped: ")]
    assert len(stopped) == 1 and "ETA" not in stopped[0], err


# ---------------------------------------------------------------------------- -v
@pytest.mark.parametrize("where", ["group", "command"])
def test_verbose_works_before_and_after_the_command(tmp_path, where):
    write_model(tmp_path)
    items_csv(tmp_path, fail=False)
    run = ["run", "model.py:fit", "--items", "items.csv", "--ledger", "r.json",
           "--progress", "off"]
    args = ["-v", *run] if where == "group" else [*run, "-v"]
    proc = campaign(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "INFO: running model.py:fit over 2 items" in proc.stderr
    for command in (["status", "r.json"], ["results", "r.json"], ["failures", "r.json"]):
        args = ["-v", *command] if where == "group" else [*command, "-v"]
        proc = campaign(*args, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr


# ---------------------------------------------------------------------------- wrong files
def test_status_of_a_csv_items_file_says_it_is_not_a_ledger(tmp_path):
    items_csv(tmp_path)
    proc = campaign("status", "items.csv", cwd=tmp_path)
    assert proc.returncode == 2
    err = proc.stderr
    assert "items.csv is not a campaign ledger" in err and "CSV" in err
    assert "corrupt" not in err and "backup" not in err
    assert "campaign run TARGET --items items.csv --ledger" in err


@pytest.mark.parametrize("command", ["status", "results", "failures"])
def test_an_items_list_given_as_the_ledger_gets_the_right_hint(tmp_path, command):
    (tmp_path / "items.json").write_text('[{"task_id": "a", "x": 1}]')
    proc = campaign(command, "items.json", cwd=tmp_path)
    assert proc.returncode == 2
    err = proc.stderr
    assert "items.json is not a campaign ledger" in err and "items file" in err
    assert "--ledger, or" not in err  # an option of `campaign run`, not of this command
    assert f"campaign {command} LEDGER" in err


def test_an_items_file_given_as_the_ledger_of_run_is_named_so(tmp_path):
    write_model(tmp_path)
    items_csv(tmp_path, fail=False)
    (tmp_path / "other.json").write_text('[{"task_id": "a", "x": 1}]')
    proc = campaign("run", "model.py:fit", "--items", "items.csv", "--ledger", "other.json",
                    cwd=tmp_path)
    assert proc.returncode == 2
    assert "other.json is not a campaign ledger: it looks like an items file" in proc.stderr
    assert "--items other.json --ledger runs.json" in proc.stderr
    assert (tmp_path / "other.json").read_text() == '[{"task_id": "a", "x": 1}]'


def test_status_tasks_before_the_ledger_says_to_put_the_ledger_first(tmp_path):
    finished(tmp_path)
    proc = campaign("status", "--tasks", "runs.json", cwd=tmp_path)
    assert proc.returncode == 2
    assert "campaign status runs.json --tasks" in proc.stderr
    assert "all" in campaign("status", "--help", cwd=tmp_path).stdout.split("--tasks", 1)[1]


# ---------------------------------------------------------------------------- hints
def test_a_mistyped_id_field_lists_the_fields_and_a_close_match(tmp_path):
    write_model(tmp_path)
    (tmp_path / "items.csv").write_text("sample,x\ns1,1\ns2,2\n")
    proc = campaign("run", "model.py:fit", "--items", "items.csv", "--ledger", "r.json",
                    "--id-field", "sampel", cwd=tmp_path)
    assert proc.returncode == 2
    assert "'sample', 'x'" in proc.stderr and "did you mean 'sample'" in proc.stderr


def test_a_target_without_a_function_suggests_the_module_functions(tmp_path):
    (tmp_path / "fit.py").write_text("def helper(item):\n    return {}\n\n"
                                     "def fit(item):\n    return {}\n\nlimit = 3\n")
    items_csv(tmp_path, fail=False)
    proc = campaign("run", "fit.py", "--items", "items.csv", "--ledger", "r.json",
                    cwd=tmp_path)
    assert proc.returncode == 2
    assert "fit.py:fit" in proc.stderr
    err = proc.stderr
    assert err.index("fit.py:fit") < err.index("fit.py:helper")
    assert "fit.py:limit" not in err


# ---------------------------------------------------------------------------- what is shown
CARET_MODEL = '''
def fit(item):
    table = {"a": {"b": 1}}
    return {"y": table["a"][item["key"]]}

def wrong(item):
    return 3
'''


def test_failures_lines_counts_lines_that_say_something(tmp_path):
    (tmp_path / "m.py").write_text(CARET_MODEL)
    (tmp_path / "items.json").write_text('[{"task_id": "a", "key": "zz"}]')
    assert campaign("run", "m.py:fit", "--items", "items.json", "--ledger", "r.json",
                    "--progress", "off", cwd=tmp_path).returncode == 1
    proc = campaign("failures", "r.json", "--lines", "1", cwd=tmp_path)
    shown = [line for line in proc.stdout.splitlines() if line.startswith("  | ")]
    assert len(shown) == 1 and 'table["a"][item["key"]]' in shown[0], proc.stdout


def test_an_error_type_of_a_builtin_has_no_module(tmp_path):
    (tmp_path / "m.py").write_text(CARET_MODEL)
    (tmp_path / "items.json").write_text('[{"task_id": "a", "key": "b"}]')
    proc = campaign("run", "m.py:wrong", "--items", "items.json", "--ledger", "r.json",
                    "--progress", "off", cwd=tmp_path)
    assert proc.returncode == 1
    out = campaign("failures", "r.json", cwd=tmp_path).stdout
    assert "returned an int;" in out and "builtins" not in out


def test_forget_counts_in_the_singular_and_plural(tmp_path):
    finished(tmp_path)
    proc = campaign("forget", "runs.json", "b", cwd=tmp_path)
    assert "forgot 1 task in runs.json" in proc.stderr
    assert "it runs again" in proc.stderr and "they run" not in proc.stderr
    proc = campaign("forget", "runs.json", "a", "c", cwd=tmp_path)
    assert "forgot 2 tasks" in proc.stderr and "they run again" in proc.stderr


def test_top_level_help_names_no_repository_path(tmp_path):
    out = " ".join(campaign("--help", cwd=tmp_path).stdout.split())
    assert "docs/cli.md" not in out
    assert "campaign COMMAND --help" in out


def test_no_resume_says_where_the_old_ledger_went(tmp_path):
    write_model(tmp_path)
    items_csv(tmp_path, fail=False)
    run = ("run", "model.py:fit", "--items", "items.csv", "--ledger", "r.json", "--progress",
           "off")
    assert campaign(*run, cwd=tmp_path).returncode == 0
    proc = campaign(*run, "--no-resume", cwd=tmp_path)
    assert proc.returncode == 0
    saved = list(tmp_path.glob("r.replaced-*.json"))
    assert len(saved) == 1
    assert f"the old ledger was kept as {saved[0].name}" in proc.stderr


# ---------------------------------------------------------------------------- Python API
def test_checkpointed_map_refuses_a_progress_that_is_not_callable(tmp_path):
    from campaign import checkpointed_map

    with pytest.raises(TypeError, match=r"progress must be .*None.*got False"):
        checkpointed_map(lambda item: {}, [{"task_id": "a"}], ledger_path=tmp_path / "l.json",
                         progress=False)
    assert not (tmp_path / "l.json").exists()


# ---------------------------------------------------------------------------- progress ends
def progress(accepted: int, running: int) -> object:
    from campaign._campaign import Progress

    return Progress(total=4, accepted=accepted, failed=0, refused=0, running=running,
                    remaining=4 - accepted - running, done_this_run=accepted, elapsed=2.0)


def test_the_last_progress_line_of_a_stopped_run_has_no_eta():
    from campaign._cli._progress import LineProgress

    out = io.StringIO()
    display = LineProgress(stream=out, interval=60)
    display(progress(1, 1))
    display.close(note="stopped: ")
    first, last = out.getvalue().splitlines()
    assert "ETA" in first
    assert last == "[campaign] stopped: 1/4 accepted, 0 failed, 1 running, 2 remaining, " \
                   "30.0 tasks/min"


def test_the_bar_leaves_the_final_counts_when_it_closes():
    from campaign._cli._progress import BarProgress

    out = io.StringIO()
    display = BarProgress(stream=out)
    display(progress(1, 1))
    display(progress(2, 0))
    display.close(note="stopped: ")
    last = out.getvalue().rstrip("\n").splitlines()[-1]
    assert last == "[campaign] stopped: 2/4 accepted, 0 failed, 0 running, 2 remaining, " \
                   "1.0 tasks/s"
