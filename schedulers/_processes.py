"""The processes scheduler: one long-lived worker process per device group.

Each worker is a fresh interpreter (spawned, never forked; `schedulers._child`) started with
``CUDA_VISIBLE_DEVICES`` set to its group before it imports anything, so tasks never share a GPU
and the driver never touches one. A worker that dies (SIGKILL, segfault, ``os._exit``, out of
memory) is replaced and its task reported lost; a task that runs past ``timeout`` has its worker
killed and replaced and is reported failed.

When tasks are short (under `LOOKAHEAD_BELOW` seconds on average) each busy worker also holds
the next task, so it starts it without waiting for a round trip to the driver. A held task has
not started: if its worker dies it goes back to the queue unmarked.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing import Pipe
from multiprocessing.connection import wait
from typing import Any, Callable

from ._base import Scheduler
from ._child import ChildProcess
from ._devices import normalize_groups, visible_gpus
from ._events import ErrorInfo, Outcome, OutcomeKind, Placement, Report, Started, Task
from ._host import HOST

logger = logging.getLogger(__name__)

#: A slot whose worker dies this many times in a row before it is ready is given up.
MAX_START_FAILURES = 3
#: Busy workers hold their next task while the mean task takes less than this (seconds).
LOOKAHEAD_BELOW = 1.0


@dataclass(eq=False)
class _Worker:
    index: int
    group: tuple[int, ...] | None
    process: ChildProcess
    pid: int = 0
    ready: bool = False
    task: Task | None = None  # running (its "begin" arrived)
    held: deque[Task] = field(default_factory=deque)  # sent, not begun yet
    begun: float = 0.0
    deadline: float = float("inf")
    start_failures: int = 0
    name: str = field(default="")

    @property
    def conn(self) -> Any:
        return self.process.conn

    @property
    def idle(self) -> bool:
        return self.ready and self.task is None and not self.held


class ProcessesScheduler(Scheduler):
    """Run tasks in worker processes, one per device group.

    Args:
        device_groups: a list of tuples of device ids (or `solvers.mesh_groups(...)`), one
            worker each. Default: one group per visible GPU, else ``workers`` CPU workers.
        timeout: seconds a task may run; past it its worker is killed and replaced and the task
            fails with ``TaskTimeout``.
        workers: number of CPU workers when there are no device groups (default: CPU count).
    """

    name = "processes"

    def __init__(self, device_groups: Any = None, *, timeout: float | None = None,
                 workers: int | None = None):
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        groups = normalize_groups(device_groups)
        if groups is None:
            gpus = visible_gpus()
            if gpus:
                groups = [(g,) for g in gpus]
            else:
                count = workers or os.cpu_count() or 1
                if count < 1:
                    raise ValueError(f"workers must be >= 1, got {workers!r}")
                groups = [None] * count
        self.groups: list[tuple[int, ...] | None] = groups
        self.timeout = timeout
        self._lock = threading.Lock()
        self._pending: deque[Task] = deque()
        self._workers: list[_Worker] = []
        self._stopping = False
        self._fatal: ErrorInfo | None = None

        self._mean = 0.0  # mean task duration (seconds), once one finished
        self._seen = 0

    @property
    def slots(self) -> int:
        return 2 * len(self.groups)  # one running and one held per worker

    # ------------------------------------------------------------------ life cycle
    def start(self, fn: Callable[[Any], Any], report: Report) -> None:
        import cloudpickle

        super().start(fn, report)
        self._fn_bytes = cloudpickle.dumps(fn)
        self._wake_r, self._wake_w = Pipe(duplex=False)
        self._workers = [self._spawn(i, group) for i, group in enumerate(self.groups)]
        logger.info("started %d worker processes (device groups: %s)", len(self._workers),
                    ", ".join(str(g) for g in self.groups))
        self._monitor = threading.Thread(target=self._watch, name="processes-monitor",
                                         daemon=True)
        self._monitor.start()

    def _spawn(self, index: int, group: tuple[int, ...] | None, failures: int = 0) -> _Worker:
        env = {}
        if group is not None:
            env["CUDA_VISIBLE_DEVICES"] = env["DIFFSOUP_DEVICE_GROUP"] = ",".join(map(str, group))
        process = ChildProcess(f"campaign-worker-{index}", env)
        try:
            process.conn.send_bytes(self._fn_bytes)
        except OSError:  # it died at once; the monitor sees its sentinel and replaces it
            pass
        return _Worker(index, group, process, start_failures=failures, name=f"proc-{index}")

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            workers = list(self._workers)
        self._wake()
        for w in workers:
            try:
                w.conn.send(None)
            except OSError:
                pass
        deadline = time.monotonic() + 5.0
        for w in workers:
            w.process.join(max(0.0, deadline - time.monotonic()) if w.task is None else 0.0)
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
            w.process.close()
        if hasattr(self, "_monitor"):
            self._monitor.join(timeout=5.0)
            self._wake_r.close()
            self._wake_w.close()

    # ------------------------------------------------------------------ dispatch
    def submit(self, task: Task) -> None:
        with self._lock:
            if self._fatal is not None:
                self._fail_locked(task, self._fatal)
                return
            self._pending.append(task)
            self._assign_locked()
        self._wake()

    def _wake(self) -> None:
        try:
            self._wake_w.send_bytes(b"!")
        except (OSError, AttributeError):
            pass

    def _assign_locked(self) -> None:
        for w in self._workers:  # first every idle worker gets a task
            if self._pending and w.idle:
                self._send(w)
        if self._seen and self._mean < LOOKAHEAD_BELOW:  # then busy ones hold the next one
            for w in self._workers:
                if self._pending and w.ready and w.task is not None and not w.held:
                    self._send(w)

    def _send(self, w: _Worker) -> None:
        task = self._pending.popleft()
        try:
            w.conn.send(("task", task.task_id, task.attempt, task.item))
        except Exception as exc:  # e.g. an item that cannot be pickled
            self._fail_locked(task, ErrorInfo.from_exception(exc))
        else:
            w.held.append(task)

    def _requeue(self, w: _Worker) -> None:
        """Tasks held by a worker that is gone go back to the front of the queue, unmarked."""
        self._pending.extendleft(reversed(w.held))
        w.held.clear()

    def _placement(self, w: _Worker) -> Placement:
        return Placement(HOST, w.pid, w.name, w.group)

    def _fail_locked(self, task: Task, error: ErrorInfo) -> None:
        now = time.time()
        self.report(Outcome(task.task_id, task.attempt, OutcomeKind.ERROR, Placement.here(),
                            now, now, error=error))

    # ------------------------------------------------------------------ monitoring
    def _watch(self) -> None:
        while True:
            with self._lock:
                if self._stopping:
                    return
                by_conn = {w.conn: w for w in self._workers}
                by_sentinel = {w.process.sentinel: w for w in self._workers
                               if w.process.sentinel is not None}
                nearest = min((w.deadline for w in self._workers), default=float("inf"))
            timeout = None if nearest == float("inf") else max(0.0, nearest - time.monotonic())
            ready = wait([self._wake_r, *by_conn, *by_sentinel], timeout)
            with self._lock:
                if self._stopping:
                    return
                if self._wake_r in ready:
                    while self._wake_r.poll():
                        self._wake_r.recv_bytes()
                dead = [by_sentinel[s] for s in ready if s in by_sentinel]
                for conn in (c for c in ready if c in by_conn):
                    w = by_conn[conn]
                    if not self._receive(w) and w not in dead:  # its socket closed
                        dead.append(w)
                for w in dead:
                    while w.conn.poll():  # what it sent before it died comes first
                        if not self._receive(w):
                            break
                    self._replace(w, self._death_cause(w))
                now = time.monotonic()
                for w in list(self._workers):
                    if w.task is not None and w.deadline <= now:
                        self._timeout(w)
                self._assign_locked()

    def _receive(self, w: _Worker) -> bool:
        try:
            message = w.conn.recv()
        except (EOFError, OSError):
            return False
        kind = message[0]
        if kind == "ready":
            w.pid, w.ready, w.start_failures = message[1], True, 0
        elif kind == "fatal":
            self._give_up(w, message[1])
        elif kind == "begin":
            _, task_id, attempt, begun = message
            if w.held and w.held[0].task_id == task_id:
                w.task, w.begun = w.held.popleft(), begun
                w.deadline = time.monotonic() + self.timeout if self.timeout else float("inf")
                self.report(Started(task_id, attempt, self._placement(w), begun))
        elif kind == "done":
            _, task_id, attempt, how, value, begun, ended = message
            task, w.task, w.deadline = w.task, None, float("inf")
            if task is None or task.task_id != task_id:
                return True
            self._seen += 1
            self._mean += ((ended - begun) - self._mean) / min(self._seen, 100)
            where = self._placement(w)
            if how == "result":
                out = Outcome(task_id, attempt, OutcomeKind.RESULT, where, begun, ended,
                              result=value)
            else:
                out = Outcome(task_id, attempt, OutcomeKind.ERROR, where, begun, ended,
                              error=value)
            self.report(out)
        return True

    def _death_cause(self, w: _Worker) -> str:
        where = f"worker {w.name} (pid {w.pid or w.process.pid}, device group {w.group})"
        w.process.join(2.0)  # its socket closes a moment before it exits
        if w.process.is_alive():  # it closed its end of the socket: of no use any more
            w.process.kill()
            w.process.join()
            return f"{where} closed its connection to the driver and was killed"
        code = w.process.exitcode
        how = f"exit code {code}"
        if code is not None and code < 0:
            try:
                how = f"signal {signal.Signals(-code).name}"
            except ValueError:
                how = f"signal {-code}"
        return f"{where} died with {how}"

    def _replace(self, w: _Worker, cause: str) -> None:
        """A worker died: report its task lost and start another in its place."""
        task = w.task
        w.task = None
        if task is not None:
            logger.warning("%s while running task %r; replacing it", cause, task.task_id)
            self.report(Outcome(task.task_id, task.attempt, OutcomeKind.LOST,
                                self._placement(w), w.begun, time.time(),
                                error=ErrorInfo("WorkerLost", f"{cause} while running the task")))
        else:
            logger.warning("%s; replacing it", cause)
        self._requeue(w)
        w.process.close()
        failures = 0 if w.ready else w.start_failures + 1
        if self._fatal is not None:
            self._workers.remove(w)
            while self._pending:
                self._fail_locked(self._pending.popleft(), self._fatal)
            return
        if failures >= MAX_START_FAILURES:
            self._give_up(w, ErrorInfo("WorkerStartError",
                                       f"{cause} before it was ready, {failures} times in a row"))
            return
        self._workers[self._workers.index(w)] = self._spawn(w.index, w.group, failures)

    def _timeout(self, w: _Worker) -> None:
        task = w.task
        w.task = None
        w.process.kill()
        w.process.join()
        self.report(Outcome(task.task_id, task.attempt, OutcomeKind.ERROR, self._placement(w),
                            w.begun, time.time(), error=ErrorInfo(
                                "TaskTimeout",
                                f"the task ran longer than timeout={self.timeout} s; its worker "
                                f"{w.name} (pid {w.pid}) was killed and replaced")))
        self._requeue(w)
        w.process.close()
        self._workers[self._workers.index(w)] = self._spawn(w.index, w.group)

    def _give_up(self, w: _Worker, error: ErrorInfo) -> None:
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
