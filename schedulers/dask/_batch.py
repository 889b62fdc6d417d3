"""A batch of tasks on dask: what runs on a worker (each outcome kept apart, starts reported)
and what the driver learns from what the batch says (`Batch`).

Importable on every worker (the workers need the same environment as the driver; see
docs/cluster.md). Imports nothing heavy; distributed only inside a worker.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._events import ErrorInfo, Placement, Task
from .._host import HOST
from .._usage import Meter

logger = logging.getLogger(__name__)

#: A batch tells the driver that it starts before its first task, and waits until the dask
#: scheduler has that message (so a batch the driver heard nothing of had not started, and one
#: that ran before it in the same worker thread had ended), then, without waiting, before the
#: first task that begins at least this many seconds after its last message. A task that has
#: run this long is reported running by a thread beside it, and the start of the next task then
#: waits until the dask scheduler has its message: a task reported running is the one that runs
#: until the next message.
PROGRESS_INTERVAL = 0.02

#: Loaded functions kept per worker process (by digest of their pickle).
_LOADED: dict[str, Callable[[Any], Any]] = {}
_LOADED_MAX = 4


@dataclass(frozen=True)
class BatchFn:
    """``fn`` as every batch carries it, and where the batch reports the start of its tasks.

    ``payload`` is ``fn`` pickled once by the driver (cloudpickle: a function of ``__main__``
    by value, a module's function by reference); a worker process unpickles it once. Sent with
    each batch rather than scattered to the workers once, so that it survives the loss of
    every worker. ``topic`` is the dask event topic the driver listens on.
    """

    payload: bytes
    digest: str
    topic: str

    @classmethod
    def wrap(cls, fn: Callable[[Any], Any], topic: str) -> BatchFn:
        import cloudpickle

        payload = cloudpickle.dumps(fn)
        return cls(payload, hashlib.sha256(payload).hexdigest(), topic)

    def load(self) -> Callable[[Any], Any]:
        fn = _LOADED.get(self.digest)
        if fn is None:
            fn = pickle.loads(self.payload)
            while len(_LOADED) >= _LOADED_MAX:
                _LOADED.pop(next(iter(_LOADED)))
            _LOADED[self.digest] = fn
        return fn

    def __call__(self, item: Any) -> Any:
        return self.load()(item)


@dataclass
class Batch:
    """A batch in flight, as the driver knows it from `_Announcer`'s messages: its tasks, where
    it started (once it said so), how far it got."""

    tasks: list[Task]
    key: str = ""
    where: Placement | None = None
    slot: tuple | None = None  # the worker thread that last said it runs it: (host, pid, thread)
    reached: int = -1  # the index of the last task known to have started
    at: float = 0.0  # when that task started
    running: bool = False  # that task was said to run: it runs until the batch says more

    @staticmethod
    def slot_of(message: dict[str, Any]) -> tuple:
        """The worker thread a message comes from: ``(host, pid, thread)``."""
        host, pid = message["where"][:2]
        return host, pid, message.get("thread")

    def heard(self, message: dict[str, Any]) -> list[Task]:
        """Take in a message of the batch; return the tasks it newly says started."""
        index, running = int(message["index"]), bool(message.get("running"))
        if self.where is None:
            host, pid, worker, group = message["where"]
            self.where = Placement(host, pid, worker, None if group is None else tuple(group))
        self.slot = self.slot_of(message)  # the latest (dask may run a batch again elsewhere)
        if index < self.reached or (index == self.reached and not running):
            return []
        news = self.tasks[self.reached + 1:index + 1]
        if index > self.reached:
            self.reached, self.at = index, message["time"]
        self.running = running
        return news

    def lost(self) -> tuple[Task | None, list[Task], list[Task]]:
        """After its worker died: the task that was running then (None: not known), the tasks
        to run again as usual (they had not started, or had finished and their results were
        lost with the batch), and those to run again one per batch (any of them may have been
        the one running: so a task that kills its worker is found alone)."""
        tasks, reached = self.tasks, self.reached
        if self.where is None:  # a batch says so before its first task starts
            return None, tasks, []
        if len(tasks) == 1 or self.running:
            return tasks[reached], tasks[:reached] + tasks[reached + 1:], []
        # Those before the last task known started had finished; from it on, any may have
        # been running (the messages after it may have been lost with the worker).
        return None, tasks[:reached], tasks[reached:]


class _Announcer:
    """Sends ``{"key", "index", "time", "where", "running", "thread", "order"}`` on the batch's
    topic: task ``index`` starts (``running`` false) or has been running since ``time`` (true),
    in worker thread ``thread``; ``order`` (the worker's monotonic clock when it was sent) orders
    the messages of one worker process."""

    def __init__(self, topic: str | None, where: tuple):
        self.topic, self.where = topic or "", list(where)
        self.active = topic is not None  # on a dask worker, with a driver listening
        self.worker: Any = None
        self.key: str | None = None
        self.last = 0.0
        self._lock = threading.Lock()
        self._current = -1  # the task that runs now (-1: none)
        self._since = self._begun = 0.0  # since when (monotonic clock; wall clock)
        self._told = -1  # the last task reported running
        self._done = threading.Event()
        self._thread = threading.get_ident()  # the worker thread that runs the batch
        if topic is None:
            return
        try:
            from distributed import get_worker

            self.worker = get_worker()
            self.key = self.worker.get_current_task()
        except (ImportError, ValueError):  # not on a dask worker: nobody to tell
            self.active = False

    def _message(self, index: int, at: float, running: bool = False) -> dict[str, Any]:
        return {"key": self.key, "index": index, "time": at, "where": self.where,
                "running": running, "thread": self._thread, "order": time.monotonic()}

    def _send(self, message: dict[str, Any], wait: bool) -> None:
        """With ``wait``, returns once the dask scheduler has the message, so that the driver
        hears of it before it can hear of this worker's death. Without, the message may be lost
        with the worker."""
        self.last = time.monotonic()
        if wait:
            try:
                from distributed import get_client

                get_client().log_event(self.topic, message)
                return
            except Exception as exc:  # noqa: BLE001 -- whatever failed, the message goes as below
                logger.warning("could not report the start of batch %s synchronously (%s: "
                               "%s); reporting it without waiting", self.key,
                               type(exc).__name__, exc)
        self.worker.log_event(self.topic, message)

    def starts(self, index: int, size: int) -> None:
        """Before task ``index`` of ``size``: tell the driver when it must know."""
        if not self.active:
            return
        with self._lock:
            wait = index == 0 or self._told == index - 1  # the first, or after one told running
            self._current = -1
        if wait or time.monotonic() - self.last >= PROGRESS_INTERVAL:
            self._send(self._message(index, time.time()), wait)
        if index == 0 and size > 1:
            threading.Thread(target=self._watch, name="campaign-batch-progress",
                             daemon=True).start()
        with self._lock:
            self._current, self._since, self._begun = index, time.monotonic(), time.time()

    def _watch(self) -> None:
        """Report the task that has run `PROGRESS_INTERVAL` seconds or more as running."""
        while not self._done.wait(PROGRESS_INTERVAL / 2):
            with self._lock:
                index = self._current
                if (index >= 0 and index != self._told
                        and time.monotonic() - self._since >= PROGRESS_INTERVAL):
                    self._told = index
                    try:
                        self._send(self._message(index, self._begun, running=True), wait=False)
                    except Exception as exc:  # noqa: BLE001 -- a closing worker: stop telling
                        logger.debug("batch %s: stopped reporting progress: %s", self.key, exc)
                        return

    def end(self) -> None:
        self._done.set()


def _placement() -> tuple[str, int, str | None, tuple[int, ...] | None]:
    try:
        from distributed import get_worker

        worker = get_worker().name
    except (ImportError, ValueError):
        worker = None
    devices = os.environ.get("CUDA_VISIBLE_DEVICES")
    group = tuple(int(d) for d in devices.split(",") if d.strip().isdigit()) if devices else None
    return HOST, os.getpid(), None if worker is None else str(worker), group


def run_batch(fn: Callable[[Any], Any], tasks: list[tuple[str, int, Any]]) -> tuple[Any, list]:
    """Run ``fn`` on each ``(task_id, attempt, item)``; return where, and one outcome per task:
    ``(task_id, attempt, "result" | "error", value, started, ended, usage)``.

    An exception in ``fn`` (any `BaseException`, ``SystemExit`` included) is that task's
    outcome, not the batch's: the batch itself fails only when its worker is lost. With a
    `BatchFn`, the driver hears which task starts, and which one runs (`_Announcer`).
    """
    where = _placement()
    announce = _Announcer(fn.topic if isinstance(fn, BatchFn) else None, where)
    skip = 2 if isinstance(fn, BatchFn) else 1  # the frames before fn's: run_batch's, BatchFn's
    outcomes = []
    meter = Meter()
    try:
        for index, (task_id, attempt, item) in enumerate(tasks):
            announce.starts(index, len(tasks))
            begun = time.time()
            try:
                with meter:
                    value = fn(item)
                pickle.dumps(value)
            except BaseException as exc:  # noqa: BLE001 -- whatever fn raised is its outcome
                outcomes.append((task_id, attempt, "error", ErrorInfo.capture(exc, skip=skip),
                                 begun, time.time(), meter.usage))
            else:
                outcomes.append((task_id, attempt, "result", value, begun, time.time(),
                                 meter.usage))
    finally:
        announce.end()
    return where, outcomes
