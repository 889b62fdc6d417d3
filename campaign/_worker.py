"""An array worker (`campaign worker`): claim tasks by lease, run them, record fragments.

Each element of a Slurm job array runs one worker. Workers share nothing but the ledger's folder:
a task is claimed by creating its lease file, run, recorded in a fragment file, marked done and
released; fragments are merged into the ledger every few seconds and at the end. SIGUSR1 (sent
by Slurm ``--signal`` before the time limit) and SIGTERM (the limit itself, ``scancel``) stop
the worker after recording its running task as interrupted and releasing it.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from schedulers import ErrorInfo, OutcomeKind
from schedulers._usage import Meter

from . import _document, _records
from ._array import WorkDir, merge_fragments, overlay, task_key, work_root
from ._atomic import HOST, atomic_write
from ._errors import Interrupted, LedgerError
from ._jsonvalue import decode
from ._policy import Limits, settle, stopped
from ._signals import Stop, signals_raise
from ._status import ACCEPTED

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
    """Claim and run the submission's tasks until none is left (or a signal stops us).

    Outcomes are recorded by the same policy as `checkpointed_map`'s (campaign/_policy.py); a
    run is the submission: a task whose lease expired (its worker died) more than
    ``max_interruptions`` times in this submission is recorded failed.
    """
    ledger = Path(ledger)
    limits = Limits(retries, max_interruptions)
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
    with beat, signals_raise(signal.SIGUSR1, signal.SIGTERM, swallow=True) as stop:
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
                    rec = _lost(tid, rec, lease, work, owner, limits, summary)
                    if rec is None:
                        continue
                beat.lease = lease
                tasks[tid] = _run_one(fn, rec, tid, work, owner, lease, summary, limits)
                beat.lease = None
                if time.monotonic() - last_merge > merge_every:
                    _merge(ledger)
                    last_merge = time.monotonic()
            if waiting and len(waiting) == len(left):  # nothing claimable now: wait a little
                time.sleep(min(lease_seconds / 4, 2.0))
            left = waiting
    return _finish(summary, stop, ledger)


def _finish(summary: WorkerSummary, stop: Stop, ledger: Path) -> WorkerSummary:
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


def _lost(tid: str, rec: dict[str, Any], lease: dict[str, Any], work: WorkDir,
          owner: dict[str, Any], limits: Limits, summary: WorkerSummary) -> dict[str, Any] | None:
    """The task's previous holder died (its lease expired): record that attempt interrupted,
    or failed once the task was lost more than ``max_interruptions`` times in this submission
    (then the task is done and None is returned)."""
    previous = lease["stolen_from"]
    at = time.time()
    begun = _records.started(rec, host=previous.get("host"), pid=previous.get("pid"),
                             worker=previous.get("worker"), device_group=None, at=at)
    error = ErrorInfo("WorkerLost", f"array worker {previous.get('worker')} on "
                      f"{previous.get('host')} stopped renewing its lease (killed, cancelled or "
                      "its node was lost)")
    lost = lost_in_submission(work, tid) + 1
    decision = settle(begun, OutcomeKind.LOST, limits=limits, tries=0, lost=lost, at=at,
                      error=error)
    work.write_fragment({tid: decision.record}, owner)
    _count_lost(work, tid, lost)  # after the fragment: a crash in between never over-counts
    if decision.again:
        return decision.record
    work.release(lease, done=True)
    summary.failed += 1
    return None


def lost_in_submission(work: WorkDir, task_id: str) -> int:
    """How many times this submission lost the task (its array worker died holding it)."""
    try:
        return int(orjson.loads((work.root / "lost" / task_key(task_id)).read_bytes()))
    except (FileNotFoundError, orjson.JSONDecodeError, TypeError, ValueError):
        return 0


def _count_lost(work: WorkDir, task_id: str, lost: int) -> None:
    folder = work.root / "lost"
    folder.mkdir(exist_ok=True)
    atomic_write(folder / task_key(task_id), orjson.dumps(lost))


def _run_one(fn, rec, tid, work, owner, lease, summary, limits: Limits):
    where = {"host": owner["host"], "pid": owner["pid"], "worker": owner["worker"],
             "device_group": None}
    tries = 0
    while True:
        begun = _records.started(rec, at=time.time(), **where)
        summary.ran += 1
        tries += 1
        meter = Meter()  # empty until fn ran: an item that does not decode measured nothing
        try:
            item = decode(begun["item"])
            with meter:
                value = fn(item)
        except Interrupted as exc:
            new = stopped(begun, at=time.time(), error=ErrorInfo(
                "Interrupted", f"{exc}; the task was released for another worker"))
            work.write_fragment({tid: new}, owner)
            work.release(lease, done=False)
            summary.interrupted += 1
            raise
        except Exception as exc:  # noqa: BLE001 -- whatever fn raised is the task's outcome
            info = ErrorInfo.capture(exc)
            decision = settle(begun, OutcomeKind.ERROR, limits=limits, tries=tries, lost=0,
                              at=time.time(), error=info, usage=meter.usage)
        else:
            decision = settle(begun, OutcomeKind.RESULT, limits=limits, tries=tries, lost=0,
                              at=time.time(), result=value, usage=meter.usage)
        rec = decision.record
        if decision.again:
            continue
        work.write_fragment({tid: rec}, owner)
        accepted = decision.status == ACCEPTED
        work.release(lease, done=True, accepted=accepted)
        if accepted:
            summary.accepted += 1
        else:
            summary.failed += 1
        return rec


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
