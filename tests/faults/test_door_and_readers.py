"""What a run refuses at the door and what every reader refuses in a file: a result integer no
JSON reader keeps exact (each way a task runs), a ledger nested deeper than any reader parses
(edited by hand), a submission id that is a path. Real runs and the real command line."""

from __future__ import annotations

import json
import subprocess

import pytest
from testkit import PYTHON, child_env

from campaign import LedgerError, checkpointed_map, read_ledger
from campaign._array._plan import plan_submission

BIG = 2**70 + 1


def big(item):
    return {"n": BIG + item["x"]}


@pytest.mark.parametrize("execution", ["serial", "processes"])
def test_a_result_integer_too_big_to_keep_exact_fails_its_task_by_name(tmp_path, execution):
    options = {"workers": 1} if execution == "processes" else {}
    camp = checkpointed_map(big, [{"task_id": "t", "x": 1}], ledger_path=tmp_path / "l.json",
                            execution=execution, **options)
    rec = read_ledger(tmp_path / "l.json")["tasks"]["t"]
    assert rec["status"] == "failed" and rec["result"] is None
    assert rec["error"]["type"] == "ResultError"
    assert "'n'" in rec["error"]["message"] and str(BIG + 1) in rec["error"]["message"]
    assert not camp.results


def test_an_array_worker_refuses_it_too(tmp_path):
    task = tmp_path / "bigtask.py"
    task.write_text(f"def run(item):\n    return {{'n': {BIG} + item['x']}}\n")
    (tmp_path / "spec.toml").write_text(f'target = "{task}:run"\nitems = "i.json"\n'
                                        'ledger = "l.json"\n')
    (tmp_path / "i.json").write_text("[]")
    sid = plan_submission([{"task_id": "t", "x": 1}], ledger_path=tmp_path / "l.json").record().id
    proc = subprocess.run([PYTHON, "-m", "campaign._cli", "worker", str(tmp_path / "spec.toml"),
                           "--submission", sid], env=child_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    subprocess.run([PYTHON, "-m", "campaign._cli", "status", str(tmp_path / "l.json")],
                   env=child_env(), capture_output=True, check=True, timeout=120)
    rec = read_ledger(tmp_path / "l.json")["tasks"]["t"]
    assert rec["status"] == "failed" and rec["error"]["type"] == "ResultError", rec


def test_a_ledger_nested_past_every_reader_names_the_task(tmp_path):
    ledger = tmp_path / "l.json"
    checkpointed_map(lambda item: {"y": 1}, [{"task_id": t, "x": 1} for t in ("a", "b c")],
                     ledger_path=ledger)
    doc = read_ledger(ledger)
    text = json.dumps(doc)  # edited by hand: one item nested 1,100 deep
    marker = '"item": {"task_id": "b c", "x": 1}'
    assert marker in text
    ledger.write_text(text.replace(marker, '"item": {"task_id": "b c", "x": '
                                   + "[" * 1100 + "1" + "]" * 1100 + "}"))
    before = ledger.read_bytes()
    with pytest.raises(LedgerError, match="the record of task 'b c' nests"):
        read_ledger(ledger)
    for command in (["status"], ["results"], ["failures"], ["report", "-o", "r.html"]):
        proc = subprocess.run([PYTHON, "-m", "campaign._cli", command[0], str(ledger),
                               *command[1:]], cwd=tmp_path, env=child_env(),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, (command, proc.stderr)
        assert "the record of task 'b c' nests" in proc.stderr, (command, proc.stderr)
        assert "Traceback" not in proc.stderr
    with pytest.raises(LedgerError, match="task 'b c'"):
        checkpointed_map(lambda item: {"y": 1}, [{"task_id": "a", "x": 1}], ledger_path=ledger)
    assert ledger.read_bytes() == before


@pytest.mark.parametrize("submission", ["../escape", "a/b", "", ".", "x" * 65, "id with space"])
def test_a_submission_id_that_is_not_one_is_refused(tmp_path, submission):
    (tmp_path / "m.py").write_text("def run(item):\n    return {'y': 1}\n")
    (tmp_path / "spec.toml").write_text('target = "m.py:run"\nitems = "i.json"\n'
                                        'ledger = "l.json"\n')
    (tmp_path / "i.json").write_text("[]")
    plan_submission([{"task_id": "t", "x": 1}], ledger_path=tmp_path / "l.json").record()
    proc = subprocess.run([PYTHON, "-m", "campaign._cli", "worker", "spec.toml", "--submission",
                           submission], cwd=tmp_path, env=child_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"submission id {submission!r} is not valid" in proc.stderr
    assert not (tmp_path / "escape").exists() and not (tmp_path / "l.json.work" / "a").exists()
