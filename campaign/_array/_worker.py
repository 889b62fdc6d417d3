"""An array worker (`campaign worker`, `run_worker`): claim tasks by lease, run them, record
fragments.

Each element of a Slurm job array runs one worker. Workers share nothing but the ledger's folder:
a worker claims a share of the submission's tasks (campaign/_array/_shares.py), and in it each
task by creating its lease file (campaign/_array/_leases.py); a task is run, recorded in a
fragment file (campaign/_array/_workdir.py), marked done and released; fragments are merged into
the ledger every few seconds by one worker at a time, spaced by the merges' own duration, and at
the end (unless another worker's merge has already applied them; campaign/_array/_merging.py).
A worker reads the records of the shares it claims, never the whole ledger
(campaign/_array/_view.py). SIGUSR1 (sent by Slurm ``--signal`` before the time
limit) and SIGTERM (the limit itself, ``scancel``) stop the worker after recording its running
task as interrupted and releasing it.

A worker runs the item the ledger holds: it continues a ``latest/`` record, or counts an
accepted mark, only for the same fingerprint, and when a ``campaign forget`` ran since it read
the ledger (``forgets.json`` changed) it reads the ledger again under its lock before it runs
the task it claimed (`campaign._array._view.View`).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schedulers import ErrorInfo, OutcomeKind
from schedulers._usage import Meter

from .._errors import Interrupted
from .._ledger import _records
from .._ledger._atomic import HOST
from .._ledger._jsonvalue import decode
from .._ledger._status import ACCEPTED
from .._policy import MAX_INTERRUPTIONS, RETRIES, Limits, settle, stopped
from .._signals import Stop, signals_raise
from ._leases import Heartbeat, Leases
from ._merging import MergeClock, last_merge
from ._shares import Picker, Shares, read_task_list
from ._view import View
from ._workdir import WorkDir, check_submission_id, task_list_path

logger = logging.getLogger(__name__)


def slurm_owner() -> dict[str, Any]:
    """Who this worker is: the Slurm array element (or job) if any, host and pid."""
    job = os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID")
    index = os.environ.get("SLURM_ARRAY_TASK_ID")
    worker = f"{job}_{index}" if job and index else (job or f"{HOST}-{os.getpid()}")
    return {"worker": worker, "job": job, "array_task": index, "host": HOST, "pid": os.getpid()}


def array_share() -> tuple[int, int] | None:
    """(this element's position, the array's element count) from Slurm's environment, or None
    outside a job array (or when Slurm does not say)."""
    try:
        index = int(os.environ["SLURM_ARRAY_TASK_ID"])
        count = int(os.environ["SLURM_ARRAY_TASK_COUNT"])
        first = int(os.environ.get("SLURM_ARRAY_TASK_MIN", "0"))
        step = int(os.environ.get("SLURM_ARRAY_TASK_STEP", "1")) or 1
    except (KeyError, ValueError):
        return None
    position = (index - first) // step
    return (position, count) if 0 <= position < count else None


@dataclass
class WorkerSummary:
    """What one `run_worker` did: attempts run, tasks accepted, failed and interrupted, and the
    signal that stopped it (None: it ran out of tasks)."""

    ran: int = 0
    accepted: int = 0
    failed: int = 0
    interrupted: int = 0
    stopped_by: int | None = None


def run_worker(fn: Callable[[Any], Any], ledger: str | os.PathLike[str], submission: str, *,
               owner: dict[str, Any] | None = None, lease_seconds: float = 60.0,
               merge_every: float = 5.0, retries: int = RETRIES,
               max_interruptions: int = MAX_INTERRUPTIONS,
               max_tasks: int | None = None) -> WorkerSummary:
    """Claim and run the tasks of a submission (`submit_array`, `campaign submit`) until none
    is left, or SIGUSR1/SIGTERM stops us; what one element of a job array runs.

    Outcomes are recorded by the same policy as `checkpointed_map`'s (campaign/_policy.py); a
    run is the submission: a task whose lease expired (its worker died) more than
    ``max_interruptions`` times in this submission is recorded failed.

    Args:
        fn: the task function, called with each claimed task's item.
        ledger: the ledger the submission was planned in.
        submission: the submission's id (`ArraySubmission.submission`).
        owner: who this worker is in leases and records (default: the Slurm array element,
            host and pid).
        lease_seconds: a task whose worker stops renewing its lease this long is claimed again.
        merge_every: the fewest seconds between this worker's merges of fragments into the
            ledger (more after slow merges: `campaign._array._merging.MergeClock`).
        retries: runs again at once, up to this many times, a task whose ``fn`` raised.
        max_interruptions: how often a task may be lost before it is recorded failed.
        max_tasks: stop after this many attempts (None: no limit).

    Returns:
        a `WorkerSummary`.

    Raises:
        LedgerError: the ledger has no such submission.
    """
    ledger = Path(ledger)
    check_submission_id(submission)
    owner = owner or slurm_owner()
    work = WorkDir(ledger, submission)
    if not task_list_path(ledger, submission).exists():
        read_task_list(work)  # raises: no such submission
    shares = Shares(work, None, lease_seconds=lease_seconds)
    view = View(shares)
    claims = _Claims(fn, Leases(work, lease_seconds=lease_seconds), owner,
                     Limits(retries, max_interruptions), WorkerSummary())
    poll = min(lease_seconds / 4, 2.0)
    picker = Picker(shares, owner, array_share(), poll)
    logger.info("worker %s: %d shares of submission %s", owner["worker"], shares.count,
                submission)
    beat, share_beat = (Heartbeat(claims.leases, lease_seconds / 4),
                        Heartbeat(shares.leases, lease_seconds / 4))
    clock = MergeClock(ledger, merge_every)

    with beat, share_beat, signals_raise(signal.SIGUSR1, signal.SIGTERM, swallow=True) as stop:
        def halted() -> bool:
            return stop.signum is not None or (max_tasks is not None
                                               and claims.summary.ran >= max_tasks)

        while (got := picker.claim(halted)) is not None:
            n, share = got
            share_beat.lease = share
            ended = False  # an Interrupted out of a task releases the share unended
            try:
                ended = _run_share(shares.ids(n), view.records(n), claims, view, beat, halted,
                                   clock.tick)
            finally:
                share_beat.lease = None
                shares.leases.release(share, done=ended)
            if not ended and not halted():
                picker.defer(n)
    return _finish(claims, stop, ledger)


def _run_share(ids: list[str], tasks: dict[str, Any], claims: _Claims, view: View,
               beat: Heartbeat, halted: Callable[[], bool],
               between_tasks: Callable[[], None]) -> bool:
    """Run the tasks of a claimed share (``tasks``: their records, `View.records`); True once
    each has ended (accepted or failed, in this submission), False when the worker stops or
    another worker holds some of them."""
    work, owner = claims.leases.work, claims.owner
    left = [tid for tid in ids if tid in tasks and tasks[tid]["status"] != ACCEPTED]
    waiting = False
    for tid in left:
        if halted():
            return False
        lease = claims.leases.claim(tid, owner)
        if lease is None:  # another worker holds it (if it dies, reclaimed later) or ended it
            waiting = waiting or not work.is_done(tid)
            continue
        if not view.still_to_run(tid):
            claims.leases.release(lease, done=False)  # forgotten, or ended
            continue
        tasks = view.whole if view.whole is not None else tasks
        rec = work.newest(tid, tasks[tid])
        if rec["status"] == ACCEPTED:  # its worker died after its fragment, before its marks
            claims.leases.release(lease, done=True, accepted=True)
            continue
        if "stolen_from" in lease:
            again = claims.lost(tid, rec, lease)
            if again is None:
                continue
            rec = again
        beat.lease = lease
        tasks[tid] = claims.run(rec, tid, lease)
        beat.lease = None
        between_tasks()
    return not waiting and not halted()


def _finish(claims: _Claims, stop: Stop, ledger: Path) -> WorkerSummary:
    summary = claims.summary
    summary.stopped_by = stop.signum
    last_merge(ledger, claims.written, claims.owner, claims.leases.lease_seconds)
    logger.info("worker stops: ran %d (%d accepted, %d failed, %d interrupted)", summary.ran,
                summary.accepted, summary.failed, summary.interrupted)
    return summary


@dataclass
class _Claims:
    """What one worker runs with: the task function, its leases, who it is, its limits."""

    fn: Callable[[Any], Any]
    leases: Leases[WorkDir]
    owner: dict[str, Any]
    limits: Limits
    summary: WorkerSummary
    written: list[Path] = field(default_factory=list)  # our fragments

    def fragment(self, tid: str, rec: dict[str, Any]) -> None:
        self.written.append(self.leases.work.write_fragment({tid: rec}, self.owner))

    def lost(self, tid: str, rec: dict[str, Any], lease: dict[str, Any]) -> dict[str, Any] | None:
        """The task's previous holder died (its lease expired): record that attempt
        interrupted, or failed once the task was lost more than ``max_interruptions`` times in
        this submission (then the task is done and None is returned)."""
        work, previous, at = self.leases.work, lease["stolen_from"], time.time()
        begun = _records.started(rec, host=previous.get("host"), pid=previous.get("pid"),
                                 worker=previous.get("worker"), device_group=None, at=at)
        error = ErrorInfo("WorkerLost", f"array worker {previous.get('worker')} on "
                          f"{previous.get('host')} stopped renewing its lease (killed, cancelled "
                          "or its node was lost)")
        lost = work.lost(tid) + 1
        decision = settle(begun, OutcomeKind.LOST, limits=self.limits, tries=0, lost=lost, at=at,
                          error=error)
        self.fragment(tid, decision.record)
        work.set_lost(tid, lost)  # after the fragment: a crash in between never over-counts
        if decision.again:
            return decision.record
        self.leases.release(lease, done=True)
        self.summary.failed += 1
        return None

    def run(self, rec: dict[str, Any], tid: str, lease: dict[str, Any]) -> dict[str, Any]:
        """Run a claimed task (again at once while ``retries`` allow), record it, release it."""
        owner, summary = self.owner, self.summary
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
                    value = self.fn(item)
            except Interrupted as exc:
                new = stopped(begun, at=time.time(), error=ErrorInfo(
                    "Interrupted", f"{exc}; the task was released for another worker"))
                self.fragment(tid, new)
                self.leases.release(lease, done=False)
                summary.interrupted += 1
                raise
            except Exception as exc:  # noqa: BLE001 -- whatever fn raised is the task's outcome
                decision = settle(begun, OutcomeKind.ERROR, limits=self.limits, tries=tries,
                                  lost=0, at=time.time(), error=ErrorInfo.capture(exc),
                                  usage=meter.usage)
            else:
                decision = settle(begun, OutcomeKind.RESULT, limits=self.limits, tries=tries,
                                  lost=0, at=time.time(), result=value, usage=meter.usage)
            rec = decision.record
            taker = self.leases.taken_over(lease)
            if taker is not None:  # fenced: the lease's next generation runs the task
                logger.warning("task %r: the lease was taken over by %s while fn ran (this "
                               "worker stalled past it); recorded as a superseded attempt",
                               tid, taker.get("worker"))
                rec = _records.superseded(rec, taker, at=time.time())
                self.fragment(tid, rec)
                self.leases.release(lease, done=False)
                summary.interrupted += 1
                return rec
            if decision.again:
                continue
            self.fragment(tid, rec)
            accepted = decision.status == ACCEPTED
            self.leases.release(lease, done=True, accepted=accepted)
            if accepted:
                summary.accepted += 1
            else:
                summary.failed += 1
            return rec
