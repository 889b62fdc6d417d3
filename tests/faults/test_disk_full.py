"""A full disk stops the run cleanly (issue 16, point 7), on a real 64 KiB tmpfs.

Mounting needs root: as another user these tests skip with the reason (and fail in CI, which
runs as root). Each test unmounts its tmpfs in a ``finally``.

- The first failed ledger write stops dispatching, and the tasks queued or held ahead by
  workers are taken back: no task starts after it that was not already running.
- Writes are retried; a disk that gets room again lets the run go on with nothing lost.
- Writes that keep failing end in `LedgerWriteError` naming the path, the errno and the fix;
  the file on disk parses and every task it says accepted is; a resume on a disk with room
  again runs only the others.
- ``campaign run`` prints one paragraph and exits 3.
- A read-only file system is refused before anything runs, naming ``EROFS``; exit 3.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from cli_data.cli_helpers import campaign
from testkit import PYTHON, child_env, require

from campaign import LedgerWriteError, checkpointed_map, read_ledger

HERE = Path(__file__).resolve().parent
N = 60  # the ledger of 60 pending tasks fits in 64 KiB, that of 60 finished ones does not
PAD = "p" * 300  # each result makes its record grow by this much


@pytest.fixture
def tiny_disk(tmp_path):
    """A real tmpfs of 64 KiB at ``tmp_path/disk``; `remount` changes it."""
    require(os.geteuid() == 0 and shutil.which("mount") is not None,
            "mounting a tmpfs needs root and mount(8)")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=False)
        if os.path.ismount(disk):
            subprocess.run(["umount", "-l", str(disk)], check=False)


def remount(disk: Path, option: str) -> None:
    """``mount -o remount,OPTION``: ``size=16m`` gives room, ``ro`` makes it read-only."""
    subprocess.run(["mount", "-o", f"remount,{option}", str(disk)], check=True)


def counted(item):
    """Leaves a mark (on the ordinary disk) for every call, named with the time it began, takes
    a moment like real work, and notes when it ended in the mark."""
    mark = Path(item["marks"], f"{item['task_id']}_{time.time():.6f}_{uuid.uuid4().hex}")
    mark.touch()
    time.sleep(item["sleep"])
    mark.write_text(f"{time.time():.6f}")
    return {"x": item["x"], "pad": PAD}


def calls_of(marks: Path) -> list[str]:
    return [p.name.split("_")[0] for p in marks.iterdir()]


def begun_after(marks: Path, moment: float) -> list[str]:
    return [p.name.split("_")[0] for p in marks.iterdir() if float(p.name.split("_")[1]) > moment]


def running_at(marks: Path, moment: float) -> list[str]:
    """The tasks that had begun before ``moment`` and had not ended by then."""
    return [p.name.split("_")[0] for p in marks.iterdir()
            if float(p.name.split("_")[1]) <= moment
            and (not p.read_text() or float(p.read_text()) > moment)]


def ended_before(marks: Path, moment: float) -> list[str]:
    return [p.name.split("_")[0] for p in marks.iterdir()
            if p.read_text() and float(p.read_text()) <= moment]


def items(marks: Path, sleep: float) -> list[dict]:
    return [{"task_id": f"t{i:03d}", "x": i, "marks": str(marks), "sleep": sleep}
            for i in range(N)]


@pytest.mark.parametrize("execution", ["serial", "processes"])
def test_a_full_disk_stops_the_run_and_keeps_what_was_recorded(tiny_disk, tmp_path, caplog,
                                                               monkeypatch, execution):
    monkeypatch.setenv("DIFFSOUP_LEDGER_WRITE_RETRY", "2")
    marks = tmp_path / "marks"
    marks.mkdir()
    ledger = tiny_disk / "runs.json"
    workers = 2 if execution == "processes" else 1
    options = {"workers": workers} if execution == "processes" else {}
    with pytest.raises(LedgerWriteError) as info:
        checkpointed_map(counted, items(marks, 0.1), ledger_path=ledger, execution=execution,
                         commit_interval=0.0, **options)
    error = info.value
    assert error.errno == errno.ENOSPC and error.path == str(ledger)
    message = str(error)
    assert f"writing ledger {ledger} failed" in message and "ENOSPC (errno 28)" in message
    assert "free space on the file system" in message and "run again" in message
    doc = read_ledger(ledger)  # whole and valid
    accepted = {t for t, r in doc["tasks"].items() if r["status"] == "accepted"}
    assert all(doc["tasks"][t]["result"] == {"x": int(t[1:]), "pad": PAD} for t in accepted)
    called = calls_of(marks)
    assert accepted <= set(called)
    assert 0 < len(accepted) < N
    failed_at = min(r.created for r in caplog.records if "no new task starts" in r.getMessage())
    running, late = running_at(marks, failed_at), begun_after(marks, failed_at)
    unwritten = set(ended_before(marks, failed_at)) - accepted  # carried by the failed write
    print(f"{execution}: {len(called)} called, {len(accepted)} recorded; at the failure "
          f"{len(running)} running, {len(unwritten)} in the failed write; {len(late)} began later")
    # after the first failed write no task starts that was not running already: the tasks
    # queued or held ahead are taken back; a worker may only have begun one before the
    # take-back reached it (serial: the one whose start raced with the failure)
    assert len(late) <= workers, late
    # so fn ran unrecorded only for those few, the tasks running at that moment, and those
    # whose outcome the failed write carried: at most one per worker each (commit_interval=0:
    # each outcome is written before that worker's next one)
    assert len(running) <= workers and len(unwritten) <= workers
    assert len(called) <= len(accepted) + 3 * workers, (
        f"{len(called)} called, {len(accepted)} recorded")

    remount(tiny_disk, "size=16m")  # room again: a resume runs only the others
    for mark in marks.iterdir():
        mark.unlink()
    camp = checkpointed_map(counted, items(marks, 0.1), ledger_path=ledger)
    assert camp.complete and camp.kept == len(accepted)
    assert sorted(calls_of(marks)) == sorted(set(f"t{i:03d}" for i in range(N)) - accepted)
    first = read_ledger(ledger)["runs"][0]
    assert first["status"] == "crashed"


def test_a_disk_that_gets_room_again_loses_nothing(tiny_disk):
    """A passing error (here: the disk is full until it is given room) does not end the run."""
    ledger = tiny_disk / "runs.json"
    env = dict(child_env(), DIFFSOUP_LEDGER_WRITE_RETRY="600")
    child = subprocess.Popen([PYTHON, str(HERE / "ledger_child.py"), "slow", str(ledger), "150",
                              "0.01"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        seen = []
        for line in child.stderr:  # the library's warning, through logging's last resort
            seen.append(line)
            if "failed (ENOSPC" in line:
                break
        assert "no new task starts until a write succeeds" in "".join(seen), "".join(seen)
        remount(tiny_disk, "size=16m")
        out, err = child.communicate(timeout=300)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    assert "written again after" in err
    report = json.loads(out)
    assert report["counts"]["accepted"] == 150
    assert sorted(report["calls"]) == [f"t{i:03d}" for i in range(150)]  # each exactly once
    doc = read_ledger(ledger)
    assert len(doc["tasks"]) == 150
    assert all(r["status"] == "accepted" for r in doc["tasks"].values())
    assert doc["runs"][-1]["status"] == "finished"


def test_campaign_run_on_a_full_disk_prints_one_paragraph_and_exits_3(tiny_disk, tmp_path):
    (tmp_path / "model.py").write_text(
        "import time\n\ndef fit(item):\n    time.sleep(0.01)\n"
        f"    return {{'y': 2 * item['x'], 'pad': {PAD!r}}}\n")
    rows = [{"task_id": f"t{i:03d}", "x": i} for i in range(N)]
    (tmp_path / "items.json").write_text(json.dumps(rows))
    env_before = os.environ.get("DIFFSOUP_LEDGER_WRITE_RETRY")
    os.environ["DIFFSOUP_LEDGER_WRITE_RETRY"] = "1"  # read by the command's environment
    try:
        proc = campaign("run", "model.py:fit", "--items", "items.json", "--ledger",
                        str(tiny_disk / "runs.json"), cwd=tmp_path, timeout=120)
    finally:
        if env_before is None:
            del os.environ["DIFFSOUP_LEDGER_WRITE_RETRY"]
        else:
            os.environ["DIFFSOUP_LEDGER_WRITE_RETRY"] = env_before
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("campaign: error:")]
    assert len(errors) == 1
    assert f"writing ledger {tiny_disk / 'runs.json'} failed" in errors[0]
    assert "ENOSPC (errno 28)" in errors[0] and "Fix: free space" in errors[0]
    accepted = [r for r in read_ledger(tiny_disk / "runs.json")["tasks"].values()
                if r["status"] == "accepted"]
    assert accepted and all(r["result"]["y"] == 2 * r["item"]["x"] for r in accepted)


def test_a_read_only_file_system_is_refused_in_one_paragraph(tiny_disk, tmp_path):
    """Remounting read-only under a live run is refused (EBUSY: the driver holds its lock
    files open for writing), so EROFS meets a run when it starts: nothing runs, exit 3."""
    remount(tiny_disk, "ro")
    (tmp_path / "model.py").write_text("def fit(item):\n    raise AssertionError('ran')\n")
    (tmp_path / "items.json").write_text(json.dumps([{"task_id": "a", "x": 1}]))
    proc = campaign("run", "model.py:fit", "--items", "items.json", "--ledger",
                    str(tiny_disk / "runs.json"), cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"campaign: error: cannot write ledger {tiny_disk / 'runs.json'}")
    assert "EROFS (errno 30)" in proc.stderr and "nothing was run" in proc.stderr
    assert "remount it read-write" in proc.stderr
    assert not list(tiny_disk.iterdir())


def test_campaign_forget_on_a_full_disk_changes_nothing_and_exits_3(tiny_disk, tmp_path):
    remount(tiny_disk, "size=1m")
    ledger = tiny_disk / "runs.json"
    checkpointed_map(lambda it: {"x": it["x"]}, [{"task_id": f"t{i}", "x": i} for i in range(5)],
                     ledger_path=ledger)
    before = ledger.read_bytes()
    with open(tiny_disk / "filler", "wb", buffering=0) as filler:  # take every block left
        try:
            while True:
                filler.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    proc = campaign("forget", str(ledger), "t1", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith(f"campaign: error: cannot write ledger {ledger} (ENOSPC")
    assert "left as it was" in proc.stderr and "Traceback" not in proc.stderr
    assert ledger.read_bytes() == before
    assert sorted(p.name for p in tiny_disk.iterdir()) == [
        "filler", "runs.json", "runs.json.driver", "runs.json.driver.1",  # the run's lease
        "runs.json.lock"]  # no backup, no temporary
