"""`campaign forget` on a ledger that job-array workers ran (`campaign worker`, real processes):
the forgotten record does not come back from the workers' files, a resubmission runs the task
again, and a worker runs the fixed item, never the old one it had kept in ``latest/``.

Each test first runs a real array to its end, forgets through the real CLI, then plans and runs
again as a user would (`plan_submission(...).record()`, `campaign worker`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import orjson
import pytest
from testkit import PYTHON, ROOT, child_env, wait_until

from campaign import checkpointed_map, read_ledger
from campaign._array._plan import plan_submission
from campaign._array._workdir import WorkDir, task_key
from campaign._ledger._paths import LedgerPaths

TASK = ROOT / "tests" / "array_data" / "array_task.py"


def items_for(marks: Path, n: int, **changed: dict) -> list[dict]:
    items = [{"task_id": f"t{i:02d}", "x": i, "sleep": 0.0, "marks": str(marks)} for i in range(n)]
    for item in items:
        item.update(changed.get(item["task_id"], {}))
    return items


def run_array(tmp_path: Path, items: list[dict], elements: int = 2) -> list[str]:
    """Plan a submission of ``items`` and run it to its end with ``elements`` workers; returns
    the task ids it planned to run."""
    spec = tmp_path / "spec.toml"
    if not spec.exists():
        spec.write_text(f'target = "{TASK}:run"\nitems = "items.json"\nledger = "ledger.json"\n')
        (tmp_path / "items.json").write_text("[]")
    sub = plan_submission(items, ledger_path=tmp_path / "ledger.json").record()
    run_workers(tmp_path, sub.id, elements)
    return [p.task_id for p in sub.plan.to_run]


def run_workers(tmp_path: Path, sid: str, elements: int) -> None:
    """Run submission ``sid`` to its end with ``elements`` workers (`campaign worker`)."""
    spec = tmp_path / "spec.toml"
    procs = [subprocess.Popen(
        [PYTHON, "-m", "campaign._cli", "worker", str(spec), "--submission", sid,
         "--merge-every", "0.5"],
        env=dict(child_env(), SLURM_ARRAY_JOB_ID="900", SLURM_ARRAY_TASK_ID=str(i)),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(elements)]
    for proc in procs:
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err


def campaign(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "campaign._cli", *args], cwd=cwd, env=child_env(),
                          capture_output=True, text=True, timeout=120)


def calls(marks: Path, task_id: str) -> list[str]:
    """The ``x`` of each call of ``fn`` for the task, in order."""
    notes = sorted(marks.glob(f"{task_id}.*.start"), key=lambda p: int(p.name.split(".")[3]))
    return [note.read_text() for note in notes]


@pytest.fixture
def marks(tmp_path: Path) -> Path:
    folder = tmp_path / "marks"
    folder.mkdir()
    return folder


def test_a_forgotten_task_stays_forgotten_and_a_resubmission_runs_it(tmp_path, marks):
    ledger = tmp_path / "ledger.json"
    run_array(tmp_path, items_for(marks, 6))
    work = LedgerPaths.of(ledger).work
    key = task_key("t03")
    assert (work / "accepted" / key).exists()  # what a forget must clear

    proc = campaign("forget", "ledger.json", "t03", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "t03" not in read_ledger(ledger)["tasks"]
    results = campaign("results", "ledger.json", "--format", "jsonl", cwd=tmp_path)
    assert results.returncode == 0, results.stderr
    assert "t03" not in results.stdout  # the workers' fragments do not bring it back
    assert not (work / "accepted" / key).exists()
    assert not list(work.glob(f"*/done/{key}")) and not (work / "latest" / f"{key}.json").exists()
    for fragment in work.glob("*/fragments/*.json"):
        assert "t03" not in orjson.loads(fragment.read_bytes())["records"]

    changed = items_for(marks, 6, t03={"x": 30})  # a changed item: planned, never refused
    assert run_array(tmp_path, changed) == ["t03"]
    tasks = read_ledger(ledger)["tasks"]
    assert tasks["t03"]["status"] == "accepted" and tasks["t03"]["result"]["x2"] == 60
    assert calls(marks, "t03") == ["3", "30"]  # once with each item
    assert all(calls(marks, f"t{i:02d}") == [str(i)] for i in (0, 1, 2, 4, 5))


def test_the_worker_runs_the_fixed_item_after_a_forget(tmp_path, marks):
    ledger = tmp_path / "ledger.json"
    run_array(tmp_path, items_for(marks, 4, t02={"fail": True}))
    assert read_ledger(ledger)["tasks"]["t02"]["status"] == "failed"
    assert (LedgerPaths.of(ledger).work / "latest" / f"{task_key('t02')}.json").exists()

    proc = campaign("forget", "ledger.json", "--status", "failed", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "forgot 1 task" in proc.stderr

    assert run_array(tmp_path, items_for(marks, 4, t02={"x": 20})) == ["t02"]  # fixed
    rec = read_ledger(ledger)["tasks"]["t02"]
    assert rec["status"] == "accepted", rec
    assert rec["result"]["x2"] == 40
    assert calls(marks, "t02") == ["2", "20"]  # the old item once, the fixed one once


def test_a_task_forgotten_after_its_submission_is_never_run_by_its_workers(tmp_path, marks):
    """The submission wrote its records (each share's file) before the forget: its workers see
    that ``forgets.json`` changed since, and run from the ledger, which no longer has it."""
    ledger = tmp_path / "ledger.json"
    run_array(tmp_path, [])  # the spec, and an empty submission
    sid = plan_submission(items_for(marks, 4), ledger_path=ledger).record().id
    proc = campaign("forget", "ledger.json", "t01", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    run_workers(tmp_path, sid, 2)
    tasks = read_ledger(ledger)["tasks"]
    assert sorted(tasks) == ["t00", "t02", "t03"], tasks
    assert {r["status"] for r in tasks.values()} == {"accepted"}
    assert calls(marks, "t01") == []


def test_a_task_an_array_worker_runs_now_is_refused(tmp_path, marks):
    ledger = tmp_path / "ledger.json"
    spec = tmp_path / "spec.toml"
    spec.write_text(f'target = "{TASK}:run"\nitems = "items.json"\nledger = "ledger.json"\n')
    (tmp_path / "items.json").write_text("[]")
    items = [dict(item, hang_in="0") for item in items_for(marks, 3)]  # element 0 never ends
    sid = plan_submission(items, ledger_path=ledger).record().id
    proc = subprocess.Popen(
        [PYTHON, "-m", "campaign._cli", "worker", str(spec), "--submission", sid],
        env=dict(child_env(), SLURM_ARRAY_JOB_ID="901", SLURM_ARRAY_TASK_ID="0"),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        (note,) = wait_until(lambda: list(marks.glob("*.start")), "the worker to begin a task")
        held = note.name.split(".")[0]
        before = ledger.read_bytes()
        refused = campaign("forget", "ledger.json", held, cwd=tmp_path)
        assert refused.returncode == 2, refused
        assert f"task {held!r} is running now" in refused.stderr
        assert "901_0" in refused.stderr and "nothing was forgotten" in refused.stderr
        assert ledger.read_bytes() == before
        assert (LedgerPaths.of(ledger).work / "leases" / f"{task_key(held)}.json").exists()
        assert not list(tmp_path.glob("ledger.before-forget-*"))
    finally:
        proc.terminate()
        proc.communicate(timeout=120)
    assert read_ledger(ledger)["tasks"][held]["status"] == "interrupted"


def test_a_resume_with_nothing_to_run_writes_the_workers_records_into_the_file(tmp_path, marks):
    ledger = tmp_path / "ledger.json"
    items = items_for(marks, 5)
    sid = plan_submission(items, ledger_path=ledger).record().id
    planned = ledger.read_bytes()  # every task pending
    run_array(tmp_path, items)
    finished = read_ledger(ledger)["tasks"]
    # as if the workers' merges were lost (a broken lock): the file as planned, and their
    # records in a fragment, as a worker writes one
    ledger.write_bytes(planned)
    WorkDir(ledger, sid).write_fragment(finished, {"worker": "900_0"})
    assert {r["status"] for r in orjson.loads(ledger.read_bytes())["tasks"].values()} == {
        "pending"}

    camp = checkpointed_map(lambda item: 1 / 0, items, ledger_path=ledger)  # runs nothing
    assert camp.complete and [r["x2"] for r in camp.results] == [2 * i for i in range(5)]
    on_disk = orjson.loads(ledger.read_bytes())["tasks"]  # the file alone, no fragment read
    assert {r["status"] for r in on_disk.values()} == {"accepted"}, on_disk
    assert all(calls(marks, f"t{i:02d}") == [str(i)] for i in range(5))


def test_workers_under_a_group_umask_read_their_own_files(tmp_path, marks):
    """umask 002 (user private groups) must not make the workers' own files look foreign to
    a private (0600) ledger: what they write is never group-writable."""
    ledger = tmp_path / "ledger.json"
    items = items_for(marks, 6)
    plan_submission(items, ledger_path=ledger).record()
    ledger.chmod(0o600)
    old = os.umask(0o002)
    try:
        run_array(tmp_path, items)
    finally:
        os.umask(old)
    tasks = read_ledger(ledger)["tasks"]
    assert {r["status"] for r in tasks.values()} == {"accepted"}, tasks
    assert oct(ledger.stat().st_mode & 0o777) == oct(0o600)
