"""The processes scheduler: long-lived worker processes, one per device group (or K per group).

Each worker is a fresh interpreter (spawned, never forked; `_child`) started with
``CUDA_VISIBLE_DEVICES`` set to its group before it imports anything, so tasks never share a GPU
and the driver never touches one. A worker that dies (SIGKILL, segfault, ``os._exit``, out of
memory) is replaced and its task reported lost; a task that runs past ``timeout`` has its worker
killed and replaced and is reported failed.

A group given per process, ``((0,), (1,))``, runs each task on all its processes at once
(`_group`): one that dies takes the whole group down, which is started again on a
new coordinator port, and a process that raises makes the task fail, named in the message.

This module holds the scheduler and its monitor thread, the selector loop that reads the
workers' messages (`_messages`) and notices their exits and deadlines. Which worker
gets which task, and how many a busy worker holds ahead, is `_dispatch`; what a
worker's death or a timeout does is `_failures`; the monitor runs under
``SCHED_BATCH`` (`_thread_policy`).

Workers die with the driver (`_worker`), and each takes its task's subprocesses with
it (its process group). Before its first worker starts, a scheduler kills any worker of this
user on this host whose driver is gone and waits until it is (`_child.end_orphans`),
so a resumed campaign never runs a task beside an old copy of it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from multiprocessing import Pipe
from typing import Any

from .._base import Scheduler
from .._devices import Group, normalize_groups, visible_gpus
from .._events import (
    ErrorInfo,
    Event,
    Outcome,
    OutcomeKind,
    Placement,
    Report,
    Started,
    TakenBack,
    Task,
)
from .._host import HOST
from .._mean import RunningMean
from . import _dispatch, _failures
from . import _messages as msg
from ._child import ChildProcess, Spawner, end_orphans
from ._group import WorkerGroup
from ._selector import Members, WorkerSelector
from ._thread_policy import no_wakeup_preemption

logger = logging.getLogger(__name__)

class ProcessesScheduler(Scheduler):
    """Run tasks in worker processes, one per device group (K for a group of K processes).

    Args:
        device_groups: a list of tuples of device ids (or `solvers.mesh_groups(...)`), one
            worker each; a group given as per-process tuples, ``((0,), (1,))``, runs each task
            on that many processes at once (``solvers.mesh_groups(mesh, shape, per_process=1)``).
            Default: one group per visible GPU, else ``workers`` CPU workers.
        timeout: seconds a task may run; past it its worker (every process of its group) is
            killed and replaced and the task fails with ``TaskTimeout``.
        workers: number of CPU workers when there are no device groups (default: CPU count).
    """

    name = "processes"

    def __init__(self, device_groups: Any = None, *, timeout: float | None = None,
                 workers: int | None = None):
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.groups = _groups(device_groups, workers)
        self.timeout = timeout
        self._lock = threading.Lock()
        self._pending: deque[Task] = deque()
        self._workers: list[WorkerGroup] = []
        self._stopping = False
        self._fatal: ErrorInfo | None = None
        self._mean = RunningMean(_dispatch.MEAN_WINDOW)  # of task durations (seconds)
        self._queued = _dispatch.queued(self.groups)
        self._slots = _dispatch.slots(self.groups)
        self._generation = 0  # changes whenever self._workers does
        self._events: list[Event] = []  # reported together at the end of each locked step

    @property
    def slots(self) -> int:
        return self._slots

    @property
    def refill(self) -> int:
        return max(1, self._queued // 2)

    # ------------------------------------------------------------------ life cycle
    def start(self, fn: Callable[[Any], Any], report: Report) -> None:
        import cloudpickle

        super().start(fn, report)
        self._fn_bytes = cloudpickle.dumps(fn)
        end_orphans()
        self._spawner = Spawner()
        self._wake_r, self._wake_w = Pipe(duplex=False)
        for i, group in enumerate(self.groups):
            self._workers.append(self._spawn(i, group))
        logger.info("started worker processes for %d device groups: %s", len(self._workers),
                    ", ".join(str(g) for g in self.groups))
        self._monitor = threading.Thread(target=self._watch, name="processes-monitor",
                                         daemon=True)
        self._monitor.start()

    def _spawn(self, index: int, group: Group | None, failures: int = 0) -> WorkerGroup:
        ports = [w.port for w in self._workers if w.port is not None]  # a restart: a new one
        return WorkerGroup.spawn(index, group, self._fn_bytes, failures, ports,
                                 start=self._start_child)

    def _start_child(self, name: str, env: dict[str, str]) -> ChildProcess:
        """A worker process, started by the spawner thread: it lives as long as the workers
        (Linux kills a worker when the thread that started it ends), and under the policy the
        driver started with, not the monitor's ``SCHED_BATCH``."""
        return self._spawner.run(ChildProcess, name, env)

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            workers = list(self._workers)
        self._wake()
        if hasattr(self, "_monitor"):
            self._monitor.join(timeout=5.0)
        with self._lock:  # what the workers said before the end: tasks begun, results
            for w in workers:
                self._drain(w)
            self._report_events()
        for w in workers:
            for member in w.members:
                try:
                    member.conn.send_bytes(msg.STOP)
                except OSError:
                    pass
        deadline = time.monotonic() + 5.0
        for w in workers:
            for member in w.members:
                member.join(max(0.0, deadline - time.monotonic()) if w.task is None else 0.0)
            w.kill()
        if hasattr(self, "_spawner"):
            self._spawner.close()
        if hasattr(self, "_monitor"):
            self._wake_r.close()
            self._wake_w.close()

    # ------------------------------------------------------------------ dispatch
    def submit(self, task: Task) -> None:
        with self._lock:
            if self._fatal is not None:
                self._fail_locked(task, self._fatal)
            else:
                self._pending.append(task)
                self._assign_locked()  # sent from here: the monitor needs no wake-up for it
            self._report_events()

    def take_back(self) -> None:
        """Give back the queued tasks now, and ask every worker for those it holds (it answers
        before it would start the next one); tasks running go on."""
        with self._lock:
            while self._pending:
                task = self._pending.popleft()
                self._emit(TakenBack(task.task_id, task.attempt))
            for w in self._workers:
                w.ask_back()
            self._report_events()

    def _emit(self, event: Event) -> None:
        """Report ``event`` with the others of this step (`_report_events`), in order."""
        self._events.append(event)

    def _report_events(self) -> None:
        """Report what this step emitted: one call for a task's end and the next's start."""
        if self._events:
            events, self._events = self._events, []
            self.report(events if len(events) > 1 else events[0])

    def _wake(self) -> None:
        try:
            self._wake_w.send_bytes(b"!")
        except (OSError, AttributeError):
            pass

    def _assign_locked(self) -> None:
        if self._pending:
            _dispatch.assign(self._pending, self._workers, _dispatch.hold_depth(self._mean),
                             self._send)

    def _send(self, w: WorkerGroup) -> None:
        task = self._pending.popleft()
        try:
            w.send(task)
        except Exception as exc:  # noqa: BLE001 -- e.g. an item that cannot be pickled: any
            self._fail_locked(task, ErrorInfo.from_exception(exc))  # error is the task's

    def _requeue(self, w: WorkerGroup) -> None:
        """Tasks held by a worker that is gone go back to the front of the queue, unmarked, or
        to the engine if it had asked for them (`take_back`)."""
        held, recalled = w.release()
        if recalled:
            for task in held:
                self._emit(TakenBack(task.task_id, task.attempt))
        else:
            self._pending.extendleft(reversed(held))

    def _fail_locked(self, task: Task, error: ErrorInfo) -> None:
        now = time.time()
        self._emit(Outcome(task.task_id, task.attempt, OutcomeKind.ERROR, Placement.here(),
                           now, now, error=error))

    # ------------------------------------------------------------------ the selector loop
    def _watch(self) -> None:
        no_wakeup_preemption()
        selector = WorkerSelector(self._wake_r)
        try:
            while True:
                with self._lock:
                    if self._stopping:
                        return
                    selector.follow(self._workers, self._generation)
                    nearest = min((w.deadline for w in self._workers), default=float("inf"))
                timeout = (None if nearest == float("inf")
                           else max(0.0, nearest - time.monotonic()))
                ready = selector.select(timeout)
                self._handle_ready(ready, selector.by_conn, selector.by_sentinel, nearest)
        finally:
            selector.close()

    def _handle_ready(self, ready: list[Any], by_conn: Members, by_sentinel: Members,
                      nearest: float) -> None:
        """One wake-up of the monitor: messages, exits, deadlines (the earliest: ``nearest``)."""
        with self._lock:
            if self._stopping:
                return
            dead: dict[WorkerGroup, int] = {}  # a worker group -> its first dead process
            for thing in ready:  # exits first, so that the first process to die is named
                if thing in by_sentinel:
                    dead.setdefault(*by_sentinel[thing])
                elif thing is self._wake_r:
                    while self._wake_r.poll():
                        self._wake_r.recv_bytes()
            for thing in ready:
                member = by_conn.get(thing)
                if member is not None and not self._receive(*member):  # its socket closed
                    dead.setdefault(*member)
            for w, j in dead.items():
                if w not in self._workers:  # already replaced (its fn could not load)
                    continue
                self._drain(w)  # what they sent before it died comes first
                self._replace(w, _failures.death_cause(w, j))
            if nearest <= time.monotonic():
                now = time.monotonic()
                for w in list(self._workers):
                    if w.task is not None and w.deadline <= now:
                        self._expire(w)
            self._assign_locked()
            self._report_events()

    def _drain(self, w: WorkerGroup) -> None:
        """Receive every message the processes of ``w`` sent and the monitor did not read."""
        for j, member in enumerate(w.members):
            while not member.conn.closed and member.conn.poll():
                if not self._receive(w, j):
                    break

    def _receive(self, w: WorkerGroup, j: int) -> bool:
        try:
            message = w.members[j].conn.recv()
        except (EOFError, OSError):
            return False
        for one in msg.read(message):
            self._handle(w, j, one)
        return True

    def _handle(self, w: WorkerGroup, j: int, m: msg.FromWorker) -> None:
        if type(m) is msg.Done:
            if w.finished(j, m, _failures.ERROR_GRACE):
                self._mean.add(m.ended - w.begun)
                self._emit(w.outcome(HOST))
        elif type(m) is msg.Begin:
            if w.begin(m.task_id, m.time, self.timeout) is not None:
                self._emit(Started(m.task_id, m.attempt, w.placement(HOST), m.time))
        elif type(m) is msg.Returned:
            for task in w.given_back(m.task_ids):
                self._emit(TakenBack(task.task_id, task.attempt))
        elif type(m) is msg.Ready:
            w.joined(j, m.pid)
        elif type(m) is msg.Fatal:
            self._give_up(m.error)

    # ------------------------------------------------------------------ failures
    def _restart(self, w: WorkerGroup, failures: int = 0) -> None:
        """End every process of ``w`` and start the group again in its place."""
        self._requeue(w)
        w.kill()
        self._workers[self._workers.index(w)] = self._spawn(w.index, w.group, failures)
        self._generation += 1

    def _remove(self, w: WorkerGroup) -> None:
        self._requeue(w)
        w.kill()
        self._workers.remove(w)
        self._generation += 1

    def _replace(self, w: WorkerGroup, cause: str) -> None:
        """A worker died: report its task lost and start another in its place (for a group of
        several, the others are killed and the group starts again, `_failures`)."""
        whole = " (the other processes of the group were killed)" if w.several else ""
        task = w.drop_task() if w.task is not None else None
        if task is not None:
            logger.warning("%s while running task %r; replacing it%s", cause, task.task_id,
                           whole)
            self._emit(_failures.lost(w, task, cause, HOST))
        else:
            logger.warning("%s; replacing it%s", cause, whole)
        failures = _failures.start_failures(w)
        if self._fatal is not None:
            self._remove(w)
            while self._pending:
                self._fail_locked(self._pending.popleft(), self._fatal)
        elif failures >= _failures.MAX_START_FAILURES:
            self._requeue(w)
            self._give_up(_failures.cannot_start(cause, failures))
            self._remove(w)
        else:
            self._restart(w, failures)

    def _expire(self, w: WorkerGroup) -> None:
        """A task's deadline passed: its timeout, or the grace after one of its processes raised."""
        if w.errors():
            self._emit(w.outcome(HOST, _failures.late_note(w)))
        else:
            task = w.drop_task()
            assert task is not None
            self._emit(_failures.timed_out(w, task, self.timeout, HOST))
        self._restart(w)

    def _give_up(self, error: ErrorInfo) -> None:
        """Workers cannot start (fn cannot be loaded): fail every task with the reason."""
        logger.error("worker processes cannot start: %s: %s", error.type, error.message)
        self._fatal = error
        for other in self._workers:
            task = other.drop_task()
            if task is not None:
                self._fail_locked(task, error)
            self._requeue(other)
        while self._pending:
            self._fail_locked(self._pending.popleft(), error)


def _groups(device_groups: Any, workers: int | None) -> list[Group | None]:
    """The device groups, one worker each: those given, else one per visible GPU, else
    ``workers`` CPU workers (default: the CPU count)."""
    groups = normalize_groups(device_groups, several_processes=True)
    if groups is not None:
        return list(groups)
    gpus = visible_gpus()
    if gpus:
        return [(g,) for g in gpus]
    count = workers or os.cpu_count() or 1
    if count < 1:
        raise ValueError(f"workers must be >= 1, got {workers!r}")
    return [None] * count
