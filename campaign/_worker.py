"""An array worker (`campaign worker`): claim tasks by lease, run them, record fragments.

Each element of a Slurm job array runs one worker. Workers share nothing but the ledger's folder:
a task is claimed by creating its lease file, run, recorded in a fragment file, marked done and
released; fragments are merged into the ledger every few seconds and at the end. SIGUSR1 (sent
by Slurm ``--signal`` before the time limit) and SIGTERM (the limit itself, ``scancel``) stop
the worker after recording its running task as interrupted and releasing it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import orjson

from schedulers import ErrorInfo

from . import _document, _records
from ._array import WorkDir, merge_fragments, overlay, work_root
from ._atomic import HOST
from ._errors import Interrupted, LedgerError
from ._jsonvalue import decode, encode_result
from ._status import ACCEPTED, FAILED, INTERRUPTED

logger = logging.getLogger(__name__)


def slurm_owner() -> dict[str, Any]:
    """Who this worker is: the Slurm array element (or job) if any, host and pid."""
    job = os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID")
    index = os.environ.get("SLURM_ARRAY_TASK_ID")
    worker = f"{job}_{index}" if job and index else (job or f"{HOST}-{os.getpid()}")
    return {"worker": worker, "job": job, "array_task": index, "host": HOST, "pid": os.getpid()}


@dataclass
class WorkerSummary:
    ran: int = 0
    accepted: int = 0
    failed: int = 0
    interrupted: int = 0
    stopped_by: int | None = None


def task_list_path(ledger: Path, submission: str) -> Path:
    return work_root(ledger) / submission / "tasks.json"


def write_task_list(ledger: Path, submission: str, task_ids: list[str]) -> None:
    from ._atomic import atomic_write

    path = task_list_path(ledger, submission)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, orjson.dumps(task_ids))


def run_worker(fn: Callable[[Any], Any], ledger: Path, submission: str, *,
               owner: dict[str, Any] | None = None, lease_seconds: float = 60.0,
               merge_every: float = 5.0, retries: int = 0, max_interruptions: int = 3,
               max_tasks: int | None = None) -> WorkerSummary:
    """Claim and run the submission's tasks until none is left (or a signal stops us)."""
    ledger = Path(ledger)
    owner = owner or slurm_owner()
    try:
        task_ids = orjson.loads(task_list_path(ledger, submission).read_bytes())
    except FileNotFoundError:
        raise LedgerError(f"ledger {ledger} has no submission {submission!r} (no "
                          f"{task_list_path(ledger, submission)}); submit it with "
                          "`campaign submit`") from None
    tasks = overlay(_document.read(ledger), ledger)["tasks"]
    work = WorkDir(ledger, submission, lease_seconds=lease_seconds)
    summary = WorkerSummary()
    beat = _Heartbeat(work, lease_seconds / 4)
    last_merge = time.monotonic()
    logger.info("worker %s: %d tasks in submission %s", owner["worker"], len(task_ids), submission)
    with beat, _signals_raise() as stop:
        left = [tid for tid in task_ids if tid in tasks and tasks[tid]["status"] != ACCEPTED]
        while left and stop.signum is None:
            waiting = []
            for tid in left:
                if stop.signum is not None or (max_tasks is not None and summary.ran >= max_tasks):
                    return _finish(summary, stop, ledger)
                lease = work.claim(tid, owner)
                if lease is None:
                    if not work.is_done(tid):
                        waiting.append(tid)  # another worker holds it: if it dies, reclaim
                    continue
                rec = work.newest(tid, tasks[tid])
                if "stolen_from" in lease:
                    rec = _lost(tid, rec, lease["stolen_from"], work, owner)
                beat.lease = lease
                tasks[tid] = _run_one(fn, rec, tid, work, owner, lease, summary, retries,
                                      max_interruptions)
                beat.lease = None
                if time.monotonic() - last_merge > merge_every:
                    _merge(ledger)
                    last_merge = time.monotonic()
            if waiting and len(waiting) == len(left):  # nothing claimable now: wait a little
                time.sleep(min(lease_seconds / 4, 2.0))
            left = waiting
    return _finish(summary, stop, ledger)


def _finish(summary: WorkerSummary, stop: _Stop, ledger: Path) -> WorkerSummary:
    summary.stopped_by = stop.signum
    _merge(ledger)
    logger.info("worker stops: ran %d (%d accepted, %d failed, %d interrupted)", summary.ran,
                summary.accepted, summary.failed, summary.interrupted)
    return summary


def _merge(ledger: Path) -> None:
    try:
        merge_fragments(ledger)
    except Exception as exc:  # the fragments stay; a later merge applies them
        logger.warning("merging fragments into %s failed (%s); they stay for later", ledger, exc)


def _lost(tid: str, rec: dict[str, Any], previous: dict[str, Any], work: WorkDir,
          owner: dict[str, Any]) -> dict[str, Any]:
    """The task's previous holder died (its lease expired): record that attempt interrupted."""
    at = time.time()
    begun = _records.started(rec, host=previous.get("host"), pid=previous.get("pid"),
                             worker=previous.get("worker"), device_group=None, at=at)
    error = ErrorInfo("WorkerLost", f"array worker {previous.get('worker')} on "
                      f"{previous.get('host')} stopped renewing its lease (killed, cancelled or "
                      "its node was lost)")
    lost = _records.finished(begun, INTERRUPTED, at=at, error=error.as_dict())
    work.write_fragment({tid: lost}, owner)
    return lost


def _run_one(fn, rec, tid, work, owner, lease, summary, retries, max_interruptions):
    where = {"host": owner["host"], "pid": owner["pid"], "worker": owner["worker"],
             "device_group": None}
    if rec["interruptions"] > max_interruptions:
        new = dict(rec, status=FAILED, error=ErrorInfo(
            "WorkerLost", f"lost {rec['interruptions']} times (max_interruptions="
                          f"{max_interruptions})").as_dict())
        work.write_fragment({tid: new}, owner)
        work.release(lease, done=True)
        summary.failed += 1
        return new
    for attempt in range(retries + 1):
        begun = _records.started(rec, at=time.time(), **where)
        summary.ran += 1
        try:
            value = fn(decode(begun["item"]))
            stored = encode_result(value)
        except Interrupted as exc:
            new = _records.finished(begun, INTERRUPTED, at=time.time(), error=ErrorInfo(
                "Interrupted", f"{exc}; the task was released for another worker").as_dict())
            work.write_fragment({tid: new}, owner)
            work.release(lease, done=False)
            summary.interrupted += 1
            raise
        except Exception as exc:  # fn raised, or returned an invalid result
            info = ErrorInfo.from_exception(exc.with_traceback(
                exc.__traceback__.tb_next if exc.__traceback__ else None))
            rec = _records.finished(begun, FAILED, at=time.time(), error=info.as_dict())
            if attempt < retries:
                continue
            work.write_fragment({tid: rec}, owner)
            work.release(lease, done=True)
            summary.failed += 1
            return rec
        new = _records.finished(begun, ACCEPTED, at=time.time(), result=stored)
        work.write_fragment({tid: new}, owner)
        work.release(lease, done=True, accepted=True)
        summary.accepted += 1
        return new
    raise AssertionError("unreachable")


class _Heartbeat:
    """Renews the lease being run every ``interval`` seconds from a thread."""

    def __init__(self, work: WorkDir, interval: float):
        self.work, self.interval = work, interval
        self.lease: dict[str, Any] | None = None
        self._stop = threading.Event()

    def __enter__(self) -> _Heartbeat:
        self._thread = threading.Thread(target=self._loop, name="lease-heartbeat", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            lease = self.lease
            if lease is not None:
                try:
                    if not self.work.heartbeat(lease):
                        logger.error("lost the lease of task %r", lease["task_id"])
                except OSError as exc:
                    logger.warning("lease heartbeat failed: %s", exc)


class _Stop:
    signum: int | None = None


@contextlib.contextmanager
def _signals_raise() -> Iterator[_Stop]:
    """SIGUSR1 and SIGTERM raise `Interrupted` (main thread): the running task is recorded
    interrupted and released, and the worker stops claiming."""
    stop = _Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum, frame):
        stop.signum = signum
        raise Interrupted(signum, f"stopped by {signal.Signals(signum).name}")

    previous = {s: signal.signal(s, handler) for s in (signal.SIGUSR1, signal.SIGTERM)}
    try:
        yield stop
    except Interrupted:
        pass
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
