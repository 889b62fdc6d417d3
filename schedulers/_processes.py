"""The processes scheduler: long-lived worker processes, one per device group (or K per group).

Each worker is a fresh interpreter (spawned, never forked; `schedulers._child`) started with
``CUDA_VISIBLE_DEVICES`` set to its group before it imports anything, so tasks never share a GPU
and the driver never touches one. A worker that dies (SIGKILL, segfault, ``os._exit``, out of
memory) is replaced and its task reported lost; a task that runs past ``timeout`` has its worker
killed and replaced and is reported failed.

A group given per process, ``((0,), (1,))``, runs each task on all its processes at once
(`schedulers._group`): one that dies takes the whole group down, which is started again on a
new coordinator port, and a process that raises makes the task fail, named in the message.

When tasks are short (under `LOOKAHEAD_BELOW` seconds on average) each busy one-process worker
also holds the next tasks, about `HOLD_AHEAD` seconds of them, so it starts each without waiting
for a round trip to the driver. A held task has not started: if its worker dies it goes back to
the queue unmarked.

The driver's monitor thread runs under Linux's ``SCHED_BATCH`` policy: with its usual share of
the CPU, but a worker's message does not make it preempt that worker on its core (a socket's
wake-up puts the reader on the writer's core), so a worker goes on with its next task while the
driver records the last one. With tasks of 10 ms and a worker on each of two cores, this and
holding more than one task were worth about one point of efficiency.

Workers die with the driver (`schedulers._worker`), and each takes its task's subprocesses with
it (its process group). Before its first worker starts, a scheduler kills any worker of this
user on this host whose driver is gone and waits until it is (`schedulers._child.end_orphans`),
so a resumed campaign never runs a task beside an old copy of it.
"""

from __future__ import annotations

import logging
import math
import os
import selectors
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from multiprocessing import Pipe
from typing import Any

from ._base import Scheduler
from ._child import ChildProcess, Spawner, end_orphans
from ._devices import Group, group_processes, normalize_groups, visible_gpus
from ._events import (
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
from ._group import WorkerGroup
from ._host import HOST

logger = logging.getLogger(__name__)

#: A slot whose worker dies this many times in a row before it is ready is given up.
MAX_START_FAILURES = 3
#: Busy workers hold their next task while the mean task takes less than this (seconds).
LOOKAHEAD_BELOW = 1.0
#: Seconds of tasks a busy worker holds (at least one, at most `MAX_HELD`): enough that a driver
#: answering at the next scheduler tick leaves no gap.
HOLD_AHEAD = 0.01
MAX_HELD = 8
#: Tasks per worker the scheduler queues beyond those running and held; the engine tops the
#: queue up when half of it is gone, one thread switch of the driver per that many tasks.
QUEUED_PER_WORKER = 4
#: Seconds the other processes of a group get to finish a task after one of them raised,
#: before the group is restarted (they may wait in a collective for the one that raised).
ERROR_GRACE = 5.0


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
        groups: list[Group | None] | None = normalize_groups(device_groups,
                                                             several_processes=True)
        if groups is None:
            gpus = visible_gpus()
            if gpus:
                groups = [(g,) for g in gpus]
            else:
                count = workers or os.cpu_count() or 1
                if count < 1:
                    raise ValueError(f"workers must be >= 1, got {workers!r}")
                groups = [None] * count
        self.groups: list[Group | None] = groups
        self.timeout = timeout
        self._lock = threading.Lock()
        self._pending: deque[Task] = deque()
        self._workers: list[WorkerGroup] = []
        self._stopping = False
        self._fatal: ErrorInfo | None = None
        self._mean = 0.0  # mean task duration (seconds), once one finished
        self._seen = 0
        # a one-process worker runs one task and holds more; a group of several runs one
        self._queued = QUEUED_PER_WORKER * len(groups)
        self._slots = self._queued + sum(1 if g is not None and len(group_processes(g)) > 1
                                         else 1 + MAX_HELD for g in groups)
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
                for j, member in enumerate(w.members):
                    while not member.conn.closed and member.conn.poll():
                        if not self._receive(w, j):
                            break
            self._report_events()
        for w in workers:
            for member in w.members:
                try:
                    member.conn.send(None)
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
        if not self._pending:
            return
        for w in self._workers:  # first every idle worker gets a task
            if self._pending and w.idle:
                self._send(w)
        if self._seen and self._mean < LOOKAHEAD_BELOW:  # then busy ones hold the next ones
            depth = min(MAX_HELD, max(1, math.ceil(HOLD_AHEAD / max(self._mean, 1e-6))))
            for _ in range(depth):  # in rounds, so that every worker gets its share
                for w in self._workers:
                    if not self._pending:
                        return
                    if (w.ready and not w.several and w.task is not None
                            and len(w.held) < depth):
                        self._send(w)

    def _send(self, w: WorkerGroup) -> None:
        task = self._pending.popleft()
        try:
            w.send(task)
        except Exception as exc:  # e.g. an item that cannot be pickled
            self._fail_locked(task, ErrorInfo.from_exception(exc))

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

    # ------------------------------------------------------------------ monitoring
    def _watch(self) -> None:
        _no_wakeup_preemption()
        with selectors.DefaultSelector() as selector:
            watched: dict[Any, int] = {}  # what the selector watches -> its fd
            generation = -1
            by_conn: dict[Any, tuple[WorkerGroup, int]] = {}
            by_sentinel: dict[Any, tuple[WorkerGroup, int]] = {}
            while True:
                with self._lock:
                    if self._stopping:
                        return
                    changed = generation != self._generation
                    if changed:
                        generation = self._generation
                        by_conn = {m.conn: (w, j) for w in self._workers
                                   for j, m in enumerate(w.members)}
                        by_sentinel = {m.sentinel: (w, j) for w in self._workers
                                       for j, m in enumerate(w.members)
                                       if m.sentinel is not None}
                    nearest = min((w.deadline for w in self._workers), default=float("inf"))
                # One selector for the whole run, changed only when workers are replaced (a new
                # poll set per wake-up cost more than the tasks' own messages).
                if changed:
                    wanted = {self._wake_r, *by_conn, *by_sentinel}
                    for gone in set(watched) - wanted:  # by the fd it had: it may be closed now
                        selector.unregister(watched.pop(gone))
                    for new in wanted - set(watched):
                        watched[new] = _fd(new)
                        selector.register(watched[new], selectors.EVENT_READ, new)
                timeout = (None if nearest == float("inf")
                           else max(0.0, nearest - time.monotonic()))
                ready = [key.data for key, _ in selector.select(timeout)]
                self._handle_ready(ready, by_conn, by_sentinel, nearest)

    def _handle_ready(self, ready: list[Any], by_conn: dict[Any, tuple[WorkerGroup, int]],
                      by_sentinel: dict[Any, tuple[WorkerGroup, int]], nearest: float) -> None:
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
                for k, member in enumerate(w.members):
                    while member.conn.poll():  # what they sent before it died comes first
                        if not self._receive(w, k):
                            break
                self._replace(w, self._death_cause(w, j))
            if nearest <= time.monotonic():
                now = time.monotonic()
                for w in list(self._workers):
                    if w.task is not None and w.deadline <= now:
                        self._expire(w)
            self._assign_locked()
            self._report_events()

    def _receive(self, w: WorkerGroup, j: int) -> bool:
        try:
            message = w.members[j].conn.recv()
        except (EOFError, OSError):
            return False
        for one in message if isinstance(message, list) else (message,):
            self._handle(w, j, one)
        return True

    def _handle(self, w: WorkerGroup, j: int, message: tuple) -> None:
        kind = message[0]
        if kind == "ready":
            if w.joined(j, message[1]):
                w.start_failures = 0
        elif kind == "fatal":
            self._give_up(w, message[1])
        elif kind == "returned":
            for task in w.given_back(message[1]):
                self._emit(TakenBack(task.task_id, task.attempt))
        elif kind == "begin":
            _, task_id, attempt, begun = message
            if w.begin(task_id, begun, self.timeout) is not None:
                self._emit(Started(task_id, attempt, w.placement(HOST), begun))
        elif kind == "done":
            _, task_id, attempt, how, value, begun, ended, usage = message
            if w.task is None or w.task.task_id != task_id:
                return
            w.done[j] = (how, value, begun, ended, usage)
            if len(w.done) == len(w.members):
                self._seen += 1
                self._mean += ((ended - w.begun) - self._mean) / min(self._seen, 100)
                self._emit(w.outcome(HOST))
            elif how == "error":  # the others may wait for it in a collective: not for ever
                w.deadline = min(w.deadline, time.monotonic() + ERROR_GRACE)

    def _death_cause(self, w: WorkerGroup, j: int) -> str:
        where = w.describe(j)
        member = w.members[j]
        member.join(2.0)  # its socket closes a moment before it exits
        if member.is_alive():  # it closed its end of the socket: of no use any more
            member.kill()
            member.join()
            return f"{where} closed its connection to the driver and was killed"
        code = member.exitcode
        how = f"exit code {code}"
        if code is not None and code < 0:
            try:
                how = f"signal {signal.Signals(-code).name}"
            except ValueError:
                how = f"signal {-code}"
        return f"{where} died with {how}"

    def _restart(self, w: WorkerGroup, failures: int = 0) -> None:
        """End every process of ``w`` and start the group again in its place."""
        self._requeue(w)
        w.kill()
        self._workers[self._workers.index(w)] = self._spawn(w.index, w.group, failures)
        self._generation += 1

    def _replace(self, w: WorkerGroup, cause: str) -> None:
        """A worker died: report its task lost and start another in its place.

        For a group of several processes the others are killed too and the group starts again
        on a new coordinator port. The task is lost even when another process raised meanwhile:
        its collectives fail once a peer is gone (the error is quoted in the message).
        """
        whole = " (the other processes of the group were killed)" if w.several else ""
        if w.task is not None:
            logger.warning("%s while running task %r; replacing it%s", cause, w.task.task_id,
                           whole)
            task, w.task = w.task, None
            meanwhile = "".join(f"; process {j} raised meanwhile {w.done[j][1].type}: "
                                f"{w.done[j][1].message}" for j in w.errors())
            self._emit(Outcome(task.task_id, task.attempt, OutcomeKind.LOST,
                                w.placement(HOST), w.begun, time.time(),
                                error=ErrorInfo("WorkerLost", f"{cause} while running the "
                                                              f"task{whole}{meanwhile}")))
        else:
            logger.warning("%s; replacing it%s", cause, whole)
        failures = 0 if w.ready else w.start_failures + 1
        if self._fatal is not None:
            self._requeue(w)
            w.kill()
            self._workers.remove(w)
            self._generation += 1
            while self._pending:
                self._fail_locked(self._pending.popleft(), self._fatal)
            return
        if failures >= MAX_START_FAILURES:
            self._requeue(w)
            self._give_up(w, ErrorInfo("WorkerStartError",
                                       f"{cause} before it was ready, {failures} times in a row"))
            w.kill()
            self._workers.remove(w)
            self._generation += 1
            return
        self._restart(w, failures)

    def _expire(self, w: WorkerGroup) -> None:
        """A task's deadline passed: its timeout, or the grace after one of its processes raised."""
        if w.errors():
            late = sorted(set(range(len(w.members))) - set(w.done))
            who = f"process {late[0]}" if len(late) == 1 else f"processes {late}"
            self._emit(w.outcome(HOST, f"; {who} had not finished {ERROR_GRACE:g} s later and "
                                        "the group was restarted"))
        else:
            task, w.task = w.task, None
            assert task is not None
            pids = ", ".join(str(pid) for _, pid in sorted(w.pids.items()))
            self._emit(Outcome(task.task_id, task.attempt, OutcomeKind.ERROR,
                                w.placement(HOST), w.begun, time.time(), error=ErrorInfo(
                                    "TaskTimeout",
                                    f"the task ran longer than timeout={self.timeout} s; its "
                                    f"worker {w.name} (pid {pids}) was killed and replaced")))
        self._restart(w)

    def _give_up(self, w: WorkerGroup, error: ErrorInfo) -> None:
        """Workers cannot start (fn cannot be loaded): fail every task with the reason."""
        logger.error("worker processes cannot start: %s: %s", error.type, error.message)
        self._fatal = error
        for other in self._workers:
            if other.task is not None:
                self._fail_locked(other.task, error)
                other.task = None
            self._requeue(other)
        while self._pending:
            self._fail_locked(self._pending.popleft(), error)


def _set_policy(policy: int) -> bool:
    """Put the calling thread under a non-real-time scheduling ``policy`` (Linux only)."""
    try:
        os.sched_setscheduler(threading.get_native_id(), policy, os.sched_param(0))
    except OSError as exc:
        logger.debug("could not change the monitor thread's scheduling policy: %s", exc)
        return False
    return True


def _no_wakeup_preemption() -> bool:
    """Put the calling thread under ``SCHED_BATCH`` if it runs under the default policy (Linux);
    True if it did. Elsewhere, or if refused, nothing changes."""
    if not sys.platform.startswith("linux") or not hasattr(os, "SCHED_BATCH"):
        return False
    if os.sched_getscheduler(0) != os.SCHED_OTHER:  # the user chose a policy: keep it
        return False
    return _set_policy(os.SCHED_BATCH)


def _fd(thing: Any) -> int:
    return thing if isinstance(thing, int) else thing.fileno()
