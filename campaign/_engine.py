"""`checkpointed_map`: run fn over items, record each task as it finishes, resume where stopped."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from schedulers import (
    ErrorInfo,
    Event,
    Outcome,
    OutcomeKind,
    Placement,
    Scheduler,
    Started,
    TakenBack,
    Task,
    make_scheduler,
)

from ._campaign import Campaign, Progress
from ._items import PreparedItems, prepare_items
from ._ledger import _records
from ._ledger._driver import Ledger
from ._ledger._status import ACCEPTED, RUNNING, RunStatus
from ._plan import nothing_to_run, plan
from ._policy import MAX_INTERRUPTIONS, RETRIES, Limits, settle, stopped
from ._signals import sigint_ignored, signals_raise
from ._taskqueue import Entry, TaskQueue

logger = logging.getLogger(__name__)

#: How often (seconds) the dispatcher looks, while tasks run, whether the ledger is still
#: writable: once a write failed, the tasks handed to the scheduler that have not started are
#: taken back (`Scheduler.take_back`) and none starts until a write succeeds again.
WRITABLE_CHECK = 0.02


def checkpointed_map(
    fn: Callable[[Mapping[str, Any]], Mapping[str, Any]],
    items: Iterable[Mapping[str, Any]],
    *,
    ledger_path: str | Path,
    resume: bool = True,
    execution: str | Scheduler = "serial",
    device_groups: Any = None,
    retries: int = RETRIES,
    max_interruptions: int = MAX_INTERRUPTIONS,
    timeout: float | None = None,
    progress: Callable[[Progress], None] | None = None,
    commit_interval: float = 0.1,
    ignore_fields: Iterable[str] = (),
    **scheduler_options: Any,
) -> Campaign:
    """Run ``fn(item)`` for every item, recording each task in the ledger as it finishes.

    Args:
        fn: a function of one item returning a flat dict of str -> number/str/bool/None
            (numpy and JAX scalars are converted).
        items: dicts of plain JSON, each with a ``task_id`` string that stays the same across
            restarts.
        ledger_path: the JSON file that records the campaign (created if missing).
        resume: keep the accepted tasks of an existing ledger and run the others (the default);
            False starts over, keeping the old file beside as ``<stem>.replaced-<time><suffix>``.
        execution: where tasks run: ``"serial"`` (this process, one after another),
            ``"processes"`` (one worker process per device group), or a `schedulers.Scheduler`.
        device_groups: for ``"processes"``: a list of tuples of device ids, one worker each
            (``solvers.mesh_groups(mesh, (1,) * n)`` for one GPU per task). Default: one group
            per visible GPU, else one CPU worker per core. A group given as one tuple per
            process, ``[((0,), (1,)), ((2,), (3,))]`` (``solvers.mesh_groups(mesh, (2,),
            per_process=1)``), runs each task on all its processes at once; ``fn`` calls
            ``solvers.distributed.initialize()`` and the result is process 0's.
        retries: how many more times a task that raised is run again within this run.
        max_interruptions: how many times a task whose worker was lost is run again in this
            run before it is recorded failed. Losses in earlier runs, a new driver taking over
            the tasks of a dead one, and Ctrl-C or SIGTERM are not counted (docs/ledger.md).
        timeout: for ``"processes"``: seconds a task may run before its worker is killed and
            the task fails with ``TaskTimeout``.
        progress: called with a `Progress` after every start and outcome (once for those a
            worker reported together); None (the default) for no progress. Anything else
            that is not callable is refused with ``TypeError``.
        commit_interval: the shortest time in seconds between two ledger writes (group commit);
            raise it on slow shared file systems. Outcomes arriving in between are written
            together; checkpointed_map returns only once all are durable.
        ignore_fields: top-level item fields that may be added, removed or changed without
            the task's item counting as changed (metadata columns such as ``notes``): an item
            that differs from its record in these fields only keeps its result (its record,
            with the item it ran with, stays). They are recorded in the run's entry
            (docs/ledger.md, "What the fingerprint covers").
        scheduler_options: further options of the chosen scheduler (e.g. ``workers=`` for
            ``"processes"``).

    Returns:
        a `Campaign`; on return every outcome is durable on disk. A resume that finds every
        item accepted (nothing to run) starts no scheduler and writes nothing.

    Raises:
        ItemError: bad items (before anything runs or is written).
        LedgerError: the ledger is corrupt, foreign or newer (it is not overwritten).
        DriverBusyError: another live driver runs a campaign on this ledger.
        KeyboardInterrupt, Interrupted: on Ctrl-C or SIGTERM, after the running task was
            recorded interrupted and the ledger written. Under ``"serial"``, a
            ``KeyboardInterrupt`` or ``SystemExit`` raised by ``fn`` propagates the same way
            (the task is recorded interrupted, with that type); any other exception raised by
            ``fn``, a `BaseException` included, is the task's failure, recorded with its type.
    """
    limits = _checked(fn, retries, max_interruptions, execution, device_groups, timeout)
    _check_run_options(progress, commit_interval)
    prepared = prepare_items(items, ignore_fields)
    scheduler = make_scheduler(execution, device_groups=device_groups, timeout=timeout,
                               **scheduler_options)
    if resume:
        done = nothing_to_run(ledger_path, prepared)
        if done is not None:
            return done
    ledger = Ledger(ledger_path, min_interval=commit_interval)
    run = _Run(fn, prepared, ledger, scheduler, limits, progress)
    return run.go(resume)


def _checked(fn: Any, retries: int, max_interruptions: int, execution: str | Scheduler,
             device_groups: Any, timeout: float | None) -> Limits:
    """The run's retry bounds, once ``fn`` and the options that go together were checked."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {fn!r}")
    limits = Limits(retries, max_interruptions)
    if execution == "serial" and (device_groups is not None or timeout is not None):
        raise ValueError(
            "device_groups and timeout need worker processes, which execution='serial' does not "
            "use; drop them or pass execution='processes'"
        )
    return limits


def _check_run_options(progress: Any, commit_interval: Any) -> None:
    """``progress`` is None (no progress) or a callable taking a `Progress`; the group commit's
    interval is a number of seconds >= 0."""
    if progress is not None and not callable(progress):
        raise TypeError(
            "progress must be a callable taking a campaign.Progress (called after every start "
            f"and outcome), or None for no progress; got {progress!r}"
        )
    if not commit_interval >= 0:
        raise ValueError(f"commit_interval must be >= 0 seconds, got {commit_interval!r}")


class _Run:
    """One call of `checkpointed_map`: plans the tasks, dispatches them, records outcomes."""

    def __init__(self, fn: Callable[[Any], Any], items: PreparedItems, ledger: Ledger,
                 scheduler: Scheduler, limits: Limits,
                 progress: Callable[[Progress], None] | None):
        self.fn = fn
        self.items = items  # an item's entry is released once its task needs it no more
        self.ledger = ledger
        self.scheduler = scheduler
        self.limits = limits
        self.progress = progress
        self.cond = threading.Condition()
        self.queue = TaskQueue(items, ())
        self.inflight: dict[str, Entry] = {}  # submitted to the scheduler, no outcome yet
        self.running: set[str] = set()  # of those, the ones that started
        self.tries: dict[str, int] = {}  # this run's attempts that ended in a result or error
        self.lost: dict[str, int] = {}  # this run's attempts lost by the infrastructure
        self.kept = 0
        self.refused: dict[str, list[dict[str, Any]]] = {}
        self.counts = {"accepted": 0, "failed": 0, "done": 0}
        self.begun = time.monotonic()
        self.taken_back = False  # since the ledger stopped being writable

    # ------------------------------------------------------------------ the run
    def go(self, resume: bool) -> Campaign:
        ledger = self.ledger
        ledger.open(resume=resume, execution=self.scheduler.name)
        try:
            with signals_raise(signal.SIGTERM):
                self._plan()
                self._dispatch()
        except BaseException as exc:
            self._abandon(exc)
            raise
        ledger.close(RunStatus.FINISHED)
        return Campaign.from_records(ledger.path, self.items.task_ids, ledger.tasks, self.refused,
                                     ledger_writes=ledger.commits,
                                     ledger_bytes_written=ledger.bytes_written,
                                     kept=self.kept, ran=len(self.tries.keys() | self.lost.keys()),
                                     elapsed=time.monotonic() - self.begun)

    def _plan(self) -> None:
        requested = self.scheduler.requested()
        if requested:  # before the plan's flush: durable with the run's other fields
            self.ledger.set_run(requested=requested)
        planned = plan(self.ledger, self.items)
        to_run = planned.to_run.indices
        self.items.keep_only(to_run)  # the kept and refused items are not needed again
        self.queue = TaskQueue(self.items, to_run)
        self.refused = planned.refused
        self.counts["accepted"] = self.kept = planned.kept

    def _dispatch(self) -> None:
        scheduler, cond, queue, inflight = self.scheduler, self.cond, self.queue, self.inflight
        if not queue:
            return  # nothing to run: no scheduler (no workers, no cluster) is started
        scheduler.start(self.fn, self._report)
        try:
            while True:
                with cond:
                    while inflight and not (queue and len(inflight) <= self._low_water()) and (
                            self.taken_back or self.ledger.writable()):
                        cond.wait(WRITABLE_CHECK)
                    if not queue and not inflight:
                        break
                    writable = self.ledger.writable()  # raises once the ledger gave up
                    if not writable and self.taken_back:  # a write failed: start no new task
                        cond.wait(0.5)  # until a retry succeeds (or writable() raises)
                        continue
                    self.taken_back = not writable
                    batch = []
                    while writable and queue and len(inflight) < scheduler.slots:
                        entry = queue.popleft()
                        inflight[entry[1].task_id] = entry
                        batch.append(entry[1])
                if not writable:  # the tasks handed out but not started come back (TakenBack)
                    scheduler.take_back()
                    continue
                for task in batch:
                    scheduler.submit(task)
                scheduler.flush()
        finally:
            scheduler.stop()

    def _low_water(self) -> int:
        """Submit more once at most this many tasks are in flight (the scheduler's slots and
        refill may change as it learns how long tasks take)."""
        return max(0, self.scheduler.slots - max(1, self.scheduler.refill))

    def _abandon(self, exc: BaseException) -> None:
        """Record the tasks in flight as interrupted, write, and close the run."""
        why = ErrorInfo(type(exc).__qualname__, str(exc) or "the run was interrupted")
        with self.cond:
            for tid in list(self.inflight):
                rec = self.ledger.tasks.get(tid)
                if rec is not None and rec["status"] == RUNNING:
                    self.ledger.put(tid, stopped(rec, at=time.time(), error=why))
            self.inflight.clear()
            self.running.clear()
        try:
            with sigint_ignored():  # a second Ctrl-C must not cut this last write short
                self.ledger.close(RunStatus.INTERRUPTED if isinstance(exc, KeyboardInterrupt)
                                  else RunStatus.CRASHED)
        except Exception as close_error:  # noqa: BLE001 -- any: keep the original exception
            if close_error is not exc:  # (a LedgerWriteError is raised again by close)
                logger.error("could not record the interruption in %s: %s", self.ledger.path,
                             close_error)

    # ------------------------------------------------------------------ events
    def _record(self, tid: str, index: int) -> dict[str, Any]:
        rec = self.ledger.tasks.get(tid)
        if rec is None:  # removed by another process (campaign forget) while we ran
            items = self.items
            rec = _records.new_record(items.stored(index), items.fingerprint(index))
        return rec

    def _report(self, events: Event | list[Event]) -> None:
        finished = False
        with self.cond:
            for event in events if type(events) is list else (events,):
                if type(event) is Started:
                    self._started(event)
                elif type(event) is Outcome:
                    self._finish(event)
                    finished = True
                elif type(event) is TakenBack:
                    self._taken_back(event)
                    finished = True
            if finished and (not self.inflight
                             or (self.queue and len(self.inflight) <= self._low_water())):
                self.cond.notify()  # only when the dispatcher has something to do
        if self.progress is not None:
            self.progress(self._progress())

    def _started(self, event: Started) -> None:
        tid = event.task_id
        entry = self.inflight.get(tid)
        if entry is None:
            logger.warning("ignoring the start of a task that was not handed out: %r", tid)
            return
        self.running.add(tid)
        self.ledger.put(tid, _records.started(self._record(tid, entry[0]), at=event.time,
                                              **_where(event.placement)))

    def _taken_back(self, event: TakenBack) -> None:
        """The scheduler gave back a task that never started: not an attempt; it goes back to
        the front of the queue, its record as it was."""
        entry = self.inflight.pop(event.task_id, None)
        if entry is None:
            logger.warning("ignoring a task given back that was not handed out: %r",
                           event.task_id)
            return
        self.queue.appendleft(entry)

    def _finish(self, out: Outcome) -> None:
        tid = out.task_id
        self.running.discard(tid)
        entry = self.inflight.pop(tid, None)
        if entry is None:
            logger.warning("ignoring a second outcome for task %r", tid)
            return
        index, task = entry
        rec = self._record(tid, index)
        if rec["status"] == ACCEPTED:  # another process accepted it meanwhile: that result stays
            self.counts["done"] += 1
            self.counts["accepted"] += 1
            self.items.release(index)
            return
        tries, lost = self.tries.get(tid, 0), self.lost.get(tid, 0)
        if out.kind is OutcomeKind.LOST:
            lost = self.lost[tid] = lost + 1
        else:
            tries = self.tries[tid] = tries + 1
        decision = settle(rec, out.kind, limits=self.limits, tries=tries, lost=lost,
                          at=out.ended, began=out.started, where=_where(out.placement),
                          result=out.result, error=out.error, usage=out.usage)
        new, again = decision.record, decision.again
        self.ledger.put(tid, new)
        if again:
            self.queue.append((index, Task(tid, task.item, task.attempt + 1)))
        else:
            self.items.release(index)
            self.counts["done"] += 1
            self.counts["accepted" if new["status"] == ACCEPTED else "failed"] += 1

    def _progress(self) -> Progress:
        with self.cond:
            accepted, failed = self.counts["accepted"], self.counts["failed"]
            total = len(self.items)
            refused = len(self.refused)
            return Progress(total, accepted, failed, refused, len(self.running),
                            total - accepted - failed - refused - len(self.running),
                            self.counts["done"], time.monotonic() - self.begun)


def _where(placement: Placement) -> dict[str, Any]:
    group = placement.device_group
    return {"host": placement.host, "pid": placement.pid, "worker": placement.worker,
            "device_group": None if group is None else list(group)}
