"""execution="processes" under faults, with the real things: SIGKILLs of the driver while its
workers run tasks that started subprocesses of their own, and a resume right after."""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from testkit import PATIENCE, PYTHON, child_env, wait_until

from campaign import checkpointed_map, read_ledger
from schedulers.processes._child import _ENTRY

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "processes_driver.py"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads processes from Linux's /proc")


# ---------------------------------------------------------------------- helpers
def running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat.rpartition(b")")[2].split()[0] not in (b"Z", b"X")


def in_sessions(sessions: set[int]) -> list[int]:
    """The running processes whose session is one of ``sessions`` (a worker leads its own)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_bytes().rpartition(b")")[2].split()
        except OSError:
            continue
        if int(fields[3]) in sessions and fields[0] not in (b"Z", b"X"):
            found.append(int(proc.name))
    return found


def start_driver(ledger: Path, folder: Path, tasks: int, seconds: float, log: Path,
                 *extra: str) -> subprocess.Popen:
    with log.open("a") as out:
        return subprocess.Popen([PYTHON, str(DRIVER), str(ledger), str(folder), str(tasks),
                                 str(seconds), *extra], env=child_env(), stdout=out, stderr=out)


def started(folder: Path, at_least: int, *, now: bool = False) -> dict[int, int] | None:
    """worker pid -> the pid of its task's subprocess, once ``at_least`` workers started a task
    (with ``now``: are running one and have written its first heartbeat, so that the attempt
    counts in ``attempts``)."""
    found = {}
    for mark in folder.glob("*.start"):
        text = mark.read_text()
        if not text:  # being written
            return None
        pid = int(mark.name.split(".")[1])
        beat = mark.with_suffix(".beat")
        if not now or (running(pid) and not mark.with_suffix(".end").exists()
                       and beat.exists() and beat.stat().st_size > 0):
            found[pid] = int(text)
    return found if len(found) >= at_least else None


def attempts(folder: Path) -> dict[str, list[tuple[int, int, int]]]:
    """task id -> (first heartbeat, last heartbeat, pid) of each of its runs, in order."""
    runs: dict[str, list[tuple[int, int, int]]] = {}
    for beat in folder.glob("*.beat"):
        task, pid, _ = beat.name.split(".")
        beats = [int(line) for line in beat.read_text().split()]
        if not beats:  # killed before its first heartbeat: it did nothing
            continue
        runs.setdefault(task, []).append((min(beats), max(beats), int(pid)))
    return {task: sorted(spans) for task, spans in runs.items()}


def kill_while_running(tmp_path: Path, *extra: str
                       ) -> tuple[Path, Path, Path, dict[int, int], int]:
    """Start a driver, SIGKILL it once two workers run a task; also returns when it was dead
    (ns)."""
    ledger, folder, log = tmp_path / "ledger.json", tmp_path / "marks", tmp_path / "driver.log"
    folder.mkdir()
    driver = start_driver(ledger, folder, 8, 1.0, log, *extra)
    try:
        if extra:  # the first worker to run t0 died: wait for its replacement to run a task
            wait_until(lambda: (folder / "died").exists(), "a worker died")
        workers = wait_until(lambda: started(folder, 2, now=True), "both workers run a task")
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    return ledger, folder, log, workers, time.time_ns()


# ---------------------------------------------------------------------- tests
@pytest.mark.parametrize("extra", [(), ("die-first",)], ids=["first-workers", "a-replacement"])
def test_a_killed_drivers_workers_and_their_subprocesses_end_quietly(tmp_path, extra):
    ledger, folder, log, workers, dead = kill_while_running(tmp_path, *extra)
    ends = set(folder.glob("*.end"))
    everything = set(workers) | set(workers.values())
    wait_until(lambda: not any(map(running, everything)) and not in_sessions(set(workers)),
               "the dead driver's workers, their guardians and their tasks' subprocesses end")
    said = log.read_text()
    assert "Traceback" not in said and "BrokenPipeError" not in said, said
    assert set(folder.glob("*.end")) == ends, "a task finished after its driver died"
    for task, spans in attempts(folder).items():
        for _, last, pid in spans:
            assert pid not in workers or last < dead, f"task {task} went on after the driver died"
    assert "failed" not in {r["status"] for r in read_ledger(ledger)["tasks"].values()}


def test_a_resume_right_after_a_driver_kill_runs_no_task_twice_at_once(tmp_path):
    ledger, folder, log, workers, _ = kill_while_running(tmp_path)
    resumed = subprocess.run([PYTHON, str(DRIVER), str(ledger), str(folder), "8", "1.0"],
                             env=child_env(), capture_output=True, text=True, timeout=PATIENCE)
    assert resumed.returncode == 0, resumed.stderr
    tasks = read_ledger(ledger)["tasks"]
    assert len(tasks) == 8 and {r["status"] for r in tasks.values()} == {"accepted"}
    runs = attempts(folder)
    killed = {t for t, spans in runs.items() if any(pid in workers for *_, pid in spans)}
    assert len(killed) >= 2
    for task in killed:  # the interrupted attempt, then the one that finished
        assert len(runs[task]) >= 2, runs[task]
    for task, spans in runs.items():
        for (_, last, pid), (first, _, _) in itertools.pairwise(spans):
            assert last < first, f"task {task}: an attempt in pid {pid} still ran when the " \
                                 "next one began"
    assert "Traceback" not in log.read_text() + resumed.stderr
    assert not any(map(running, set(workers) | set(workers.values())))


def alive(item: dict) -> dict:
    return {"orphan_alive": running(item["orphan"]), "child_alive": running(item["child"])}


def test_a_new_driver_ends_an_orphaned_worker_before_any_task_starts(tmp_path, ledger):
    """A worker whose driver died but which still runs (its parent-death signal did not reach
    it) is killed with its subprocesses, and gone, before the first task starts."""
    fake = tmp_path / "fake" / "schedulers"  # runs under the worker's own command line
    (fake / "processes").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "processes" / "__init__.py").write_text("")
    (fake / "processes" / "_worker.py").write_text(textwrap.dedent(f"""
        import subprocess, time, pathlib
        def serve(fd, driver):
            child = subprocess.Popen(["sleep", "300"])
            pathlib.Path({str(tmp_path / "child")!r}).write_text(str(child.pid))
            time.sleep(300)
    """))
    gone_driver = subprocess.run([PYTHON, "-c", "import os; print(os.getpid())"],
                                 capture_output=True, text=True, check=True)
    orphan = subprocess.Popen([PYTHON, "-c", _ENTRY, "0", gone_driver.stdout.strip()],
                              env=dict(child_env(), PYTHONPATH=str(fake.parent)),
                              cwd=fake.parent, start_new_session=True)
    try:
        child = wait_until(lambda: orphan.poll() is not None or (
            (tmp_path / "child").exists() and (tmp_path / "child").read_text()),
            "the orphan's subprocess")
        assert running(orphan.pid) and running(int(child))
        items = [{"task_id": f"t{i}", "orphan": orphan.pid, "child": int(child)}
                 for i in range(4)]
        camp = checkpointed_map(alive, items, ledger_path=ledger, execution="processes",
                                workers=2)
        assert camp.complete
        assert [r["orphan_alive"] or r["child_alive"] for r in camp.results] == [False] * 4
    finally:
        orphan.kill()
        orphan.wait()


def test_a_second_driver_on_this_host_leaves_a_live_drivers_workers_alone(tmp_path):
    """The orphan sweep of a new driver kills only workers whose driver is gone: a campaign
    running beside it (another ledger, same user, same host) loses no worker and no attempt."""
    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        folder.mkdir()
        (folder / "marks").mkdir()
    log = tmp_path / "first.log"
    driver = start_driver(first / "ledger.json", first / "marks", 2, 3.0, log)
    try:
        workers = wait_until(lambda: started(first / "marks", 2, now=True),
                             "both workers of the first driver run a task")
        beside = subprocess.run([PYTHON, str(DRIVER), str(second / "ledger.json"),
                                 str(second / "marks"), "2", "0.1"], env=child_env(),
                                capture_output=True, text=True, timeout=PATIENCE)
        assert beside.returncode == 0, beside.stderr
        assert all(map(running, workers)), "the second driver killed the first one's workers"
        assert driver.wait(timeout=PATIENCE) == 0, log.read_text()
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    tasks = read_ledger(first / "ledger.json")["tasks"]
    assert {r["status"] for r in tasks.values()} == {"accepted"}
    assert all(r["attempts"] == 1 and r["interruptions"] == 0 for r in tasks.values()), tasks
    assert "killing it" not in beside.stderr, beside.stderr
