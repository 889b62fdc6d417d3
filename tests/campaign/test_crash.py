"""SIGKILL a running campaign at random moments, hundreds of times; nothing accepted is lost.

Kills land during fn, during whole-file ledger writes (a temporary file is left behind), while
outcomes wait in the journal (`<ledger>.journal`, appended between whole-file writes), during a
compaction (a temporary file beside a journal) and between writes, under each execution:
``serial`` (fn in the driver), ``processes`` (the driver's workers die with it) and ``dask``
(an embedded cluster). Under ``dask`` a kill's victim is the driver or, more often, one of its
dask workers (the cluster's nanny starts a new one; the driver runs on), at a random instant
while tasks run. After every kill of a driver the ledger parses, the file alone is standard
JSON, every task ever seen accepted (the file and its journal read by `read_ledger`) is still
accepted with the same result and is never run again, no task is recorded failed (fn never
fails) and no task has more interruptions than kills could have caused; resuming finishes every
task, leaving no journal.

The three executions' loops run at the same time, each in a thread of its own (`loops`), and
after the rest of the suite (marked ``both_cores``): together they keep both cores busy.
``DIFFSOUP_CRASH_KILLS`` sets the number of kills for every execution (default: `KILLS`).
"""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from crash_child import expected
from testkit import PATIENCE, PYTHON, child_env

from campaign import read_ledger

CHILD = Path(__file__).with_name("crash_child.py")
#: Kills per execution, and when each lands: so many seconds after the driver said it is ready
#: ("ready": kills during start-up too) or after this run's first call of fn ("call"; the next
#: kill of the same driver, after one of its workers was killed, up to so long after that one).
KILLS = {"serial": 200, "processes": 200, "dask": 200}
WINDOW = {"serial": ("ready", 0.25), "processes": ("ready", 0.9), "dask": ("call", 0.5)}
#: The chance that a kill's victim is the driver; otherwise it is one of the driver's live dask
#: workers. A dask driver needs seconds to start its cluster, a worker is replaced meanwhile.
DRIVER_SHARE = {"serial": 1.0, "processes": 1.0, "dask": 0.25}
#: Tasks per campaign: under dask, enough for a driver to run on through several worker kills.
TASKS = {"serial": 120, "processes": 120, "dask": 400}


@dataclass
class Tally:
    """One campaign's kills, and the interruptions they can have caused."""

    worker_kills: int = 0
    #: records found ``running`` after each driver kill: each becomes interrupted (DriverLost)
    #: when the next driver takes over (counted again if that one is killed first)
    left_running: int = 0


def check(ledger: Path, log: Path, accepted: dict[str, dict], child_pid: int,
          accepted_before: set[str], tally: Tally) -> None:
    """The invariants after one driver ended; updates ``accepted`` with what is accepted now."""
    if not ledger.exists():
        assert not accepted
        return
    orjson.loads(ledger.read_bytes())  # the file alone is never half written
    tasks = read_ledger(ledger)["tasks"]  # the file and its journal: parses, or raises
    for tid, result in accepted.items():
        rec = tasks[tid]
        assert rec["status"] == "accepted", (tid, rec["status"])
        assert rec["result"] == result, tid
    for tid, rec in tasks.items():
        # fn never fails, and a lost worker is no failure
        assert rec["status"] != "failed", (tid, rec["error"])
        assert all(h["status"] != "failed" for h in rec["history"]), (tid, rec["history"])
        if rec["status"] == "accepted":
            i = int(tid[1:])
            want = expected(i)
            if i % 5 == 0:
                want["inf"] = {"$float": "inf"}
            assert rec["result"] == want, tid
            accepted.setdefault(tid, rec["result"])
    # each worker kill interrupts at most the one task its worker ran, each driver kill those
    # it left running: never a task that no kill stopped
    interruptions = sum(rec["interruptions"] for rec in tasks.values())
    assert interruptions <= tally.worker_kills + tally.left_running, (interruptions, tally)
    for tid, driver, _ in calls(log):
        if driver == child_pid:
            assert tid not in accepted_before, f"{tid} ran again after it was accepted"


def calls(log: Path) -> list[tuple[str, int, int]]:
    """(task id, driver pid, pid of the process that ran it) of every call of fn so far."""
    if not log.exists():
        return []
    return [(tid, int(driver), int(pid))
            for tid, driver, pid in (line.split() for line in log.read_text().splitlines())]


def parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[1])


def live_workers(log: Path, driver: int) -> list[int]:
    """The driver's worker processes that ran a task and still run (children of the driver):
    both of them, or none. A kill while the other worker is being replaced can leave the
    embedded cluster without any worker for good (distributed 2026.8: the survivor closes
    itself and its nanny does not replace it), and the driver waiting forever."""
    workers = sorted({pid for _, d, pid in calls(log) if d == driver != pid
                      and parent(pid) == driver})
    return workers if len(workers) >= 2 else []


def wait_for_workers(log: Path, proc: subprocess.Popen) -> list[int]:
    """`live_workers` once there are (one may be being replaced); [] if the driver ended."""
    deadline = time.monotonic() + PATIENCE
    while not (workers := live_workers(log, proc.pid)) and proc.poll() is None:
        assert time.monotonic() < deadline, "the driver has had no live worker for minutes"
        time.sleep(0.01)
    return workers


def writing(folder: Path) -> bool:
    """A whole-file write is under way (its temporary file exists)."""
    return any(folder.glob(".ledger.json.tmp-*"))


def journal(folder: Path) -> bool:
    return (folder / "ledger.json.journal").exists()


#: What a kill aimed at a moment waits for: a whole-file write, outcomes in the journal, a
#: compaction (a whole-file write while a journal exists).
MOMENTS = {"write": writing, "journal": journal,
           "compaction": lambda folder: writing(folder) and journal(folder)}


def wait_to_kill(proc: subprocess.Popen, log: Path, execution: str, rng: random.Random,
                 aim: str | None) -> bool:
    """Wait for the moment to kill ``proc`` or one of its workers; False if it finished first.
    With ``aim`` (a key of `MOMENTS`): the first moment that is seen."""
    if aim is not None:
        while not MOMENTS[aim](log.parent):
            if proc.poll() is not None:
                return False
        return True
    after, window = WINDOW[execution]
    if after == "call":  # a dask driver spends seconds starting its cluster: kill during tasks
        deadline = time.monotonic() + PATIENCE
        while not any(driver == proc.pid for _, driver, _ in calls(log)):
            if proc.poll() is not None:
                return False
            assert time.monotonic() < deadline, "the driver called fn for no task"
            time.sleep(0.01)
    try:
        proc.wait(timeout=rng.uniform(0.0, window))
    except subprocess.TimeoutExpired:
        return True
    return False


class Stopped(Exception):
    """The module's tests ended while a loop still ran (one failed or timed out)."""


class Drivers:
    """The drivers one loop started: `start` refuses to start one once `stop` was called, and
    `stop` kills every one still running (each with its process group)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: list[subprocess.Popen] = []
        self._stopped = False

    def start(self, ledger: Path, log: Path, execution: str) -> subprocess.Popen:
        with self._lock:
            if self._stopped:
                raise Stopped
            # its own process group: whatever it leaves behind is killed with it (a worker of
            # ``processes`` leads a group of its own and must die by itself)
            with open(ledger.with_name("drivers.err"), "ab") as err:  # what each driver said
                proc = subprocess.Popen([PYTHON, str(CHILD), str(ledger), str(log),
                                         str(TASKS[execution]), execution], env=child_env(),
                                        stdout=subprocess.PIPE, stderr=err, text=True,
                                        start_new_session=True)
            self._started.append(proc)
        return proc

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            started, self._started = self._started, []
        for proc in started:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def said(ledger: Path) -> str:
    """The end of what the drivers of ``ledger`` wrote to stderr."""
    return ledger.with_name("drivers.err").read_text(errors="replace")[-3000:]


def ready(proc: subprocess.Popen) -> subprocess.Popen:
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def check_finished(folder: Path, ledger: Path, log: Path, accepted: dict[str, dict],
                   killed: set[int], execution: str) -> int:
    """The invariants once a campaign finished; returns how many calls of fn ran again."""
    assert not journal(folder), "a finished run left its journal"
    tasks = read_ledger(ledger)["tasks"]
    assert len(tasks) == TASKS[execution]
    assert all(r["status"] == "accepted" for r in tasks.values())
    assert len(accepted) == TASKS[execution]
    ran = [tid for tid, _, _ in calls(log)]
    assert set(ran) == set(tasks)
    # a killed driver's temporary file is removed by the next driver that writes (a resume
    # with nothing to run writes nothing); one that finished leaves none
    left = {int(tmp.name.split("-")[-2]) for tmp in folder.glob(".ledger.json.tmp-*")}
    assert left <= killed, f"drivers {sorted(left - killed)} left a temporary file"
    return len(ran) - len(tasks)


class Loop:
    """One execution's kills, campaign after campaign, until it has its `KILLS` and a driver
    kill at each of the `MOMENTS` (aimed at a moment that no random kill hit)."""

    def __init__(self, execution: str, tmp: Path, drivers: Drivers):
        self.execution, self.tmp, self.drivers = execution, tmp, drivers
        self.wanted = int(os.environ.get("DIFFSOUP_CRASH_KILLS", KILLS[execution]))
        self.rng = random.Random(20261130)
        self.kills = self.worker_kills = self.campaigns = self.reruns = self.aimed = 0
        self.landed = dict.fromkeys(MOMENTS, 0)  # driver kills that landed at each moment
        self.deadline = math.inf  # for kills aimed at a moment, if it comes to that

    def more(self) -> bool:
        return self.kills < self.wanted or not all(self.landed.values())

    def run(self) -> str:
        """Every campaign, checked after each of its drivers and once finished; the summary."""
        began = time.monotonic()
        while self.more():
            self.campaign()
        landed = self.landed
        return (f"{self.execution}: {self.kills} SIGKILLs ({self.kills - self.worker_kills} of "
                f"the driver, {self.aimed} of them aimed; {self.worker_kills} of a dask worker) "
                f"over {self.campaigns} campaigns in {time.monotonic() - began:.0f} s, "
                f"{landed['write']} during a whole-file write, {landed['journal']} with outcomes "
                f"in the journal, {landed['compaction']} during a compaction; "
                f"{self.campaigns * TASKS[self.execution]} tasks accepted, none lost, none "
                f"failed; {self.reruns} calls of fn again for tasks killed before they were "
                "recorded")

    def campaign(self) -> None:
        self.campaigns += 1
        folder = self.tmp / f"c{self.campaigns}"
        folder.mkdir()
        ledger, log = folder / "ledger.json", folder / "calls.log"
        accepted: dict[str, dict] = {}
        killed: set[int] = set()
        tally = Tally()
        finished = False
        while not finished:
            before = set(accepted)
            proc = ready(self.drivers.start(ledger, log, self.execution))
            finished = self.until_killed(proc, folder, killed, tally)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            assert proc.stdout is not None
            proc.stdout.close()
            if not finished and ledger.exists():
                tally.left_running += sum(rec["status"] == "running"
                                          for rec in read_ledger(ledger)["tasks"].values())
            check(ledger, log, accepted, proc.pid, before, tally)
            if not finished and not self.more():  # the last kill: one more driver, unharmed
                before = set(accepted)
                proc = ready(self.drivers.start(ledger, log, self.execution))
                assert proc.wait(timeout=PATIENCE) == 0, (proc.returncode, said(ledger))
                assert proc.stdout is not None
                proc.stdout.close()
                check(ledger, log, accepted, proc.pid, before, tally)
                finished = True
        self.reruns += check_finished(folder, ledger, log, accepted, killed, self.execution)

    def until_killed(self, proc: subprocess.Popen, folder: Path, killed: set[int],
                     tally: Tally) -> bool:
        """Kill ``proc``'s workers (dask) and then ``proc``, at random moments or aimed at one;
        False once it was killed, True if it finished its campaign (it is left to finish once
        no more kills are wanted)."""
        log = folder / "calls.log"
        while self.more():
            # the first moment none of the random kills landed at
            aim = (None if self.kills < self.wanted
                   else next(m for m, n in self.landed.items() if not n))
            if aim:
                self.deadline = min(self.deadline, time.monotonic() + PATIENCE)
                assert time.monotonic() < self.deadline, \
                    f"{self.kills} kills, none at the moment {aim!r}, even aimed at it: " \
                    f"{self.landed}"
            if not wait_to_kill(proc, log, self.execution, self.rng, aim):
                proc.wait()
                assert proc.returncode == 0, (proc.returncode, said(folder / "ledger.json"))
                return True
            share = DRIVER_SHARE[self.execution]
            if aim is None and share < 1 and self.rng.random() >= share:
                workers = wait_for_workers(log, proc)
                try:
                    os.kill(self.rng.choice(workers), signal.SIGKILL)
                except (IndexError, ProcessLookupError):  # the driver or worker ended first
                    continue
                self.kills += 1
                self.worker_kills += 1
                tally.worker_kills += 1
                continue  # the driver runs on
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            self.kills += 1
            killed.add(proc.pid)
            self.aimed += aim is not None
            for moment, seen in MOMENTS.items():
                self.landed[moment] += seen(folder)
            return False
        assert proc.wait(timeout=PATIENCE) == 0, (proc.returncode, said(folder / "ledger.json"))
        return True


@pytest.fixture(scope="module")
def loops(request, tmp_path_factory) -> Iterator[dict[str, Future[str]]]:
    """The loop of every execution this session selected, all started at once, each in a
    thread of its own: their drivers and workers keep both cores busy together, where one
    loop alone leaves one core idle for much of its time. Each test waits for its own loop's
    summary (or failure). When the module's tests end, the drivers still running are killed."""
    selected = [item.callspec.params["execution"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")]
    drivers = {execution: Drivers() for execution in selected}
    pool = ThreadPoolExecutor(len(selected), thread_name_prefix="sigkill-loop")
    try:
        yield {execution: pool.submit(Loop(execution, tmp_path_factory.mktemp(execution),
                                           drivers[execution]).run)
               for execution in selected}
    finally:
        for d in drivers.values():
            d.stop()
        pool.shutdown(wait=True)


@pytest.mark.slow
@pytest.mark.both_cores
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("execution", list(KILLS))
def test_sigkill_at_random_moments_loses_nothing(execution, loops):
    print(f"\n{loops[execution].result()}")
