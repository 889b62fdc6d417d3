"""What runs on a dask worker: a batch of tasks, each outcome kept apart, each start reported.

Importable on every worker (the workers need the same environment as the driver; see
docs/cluster.md). Imports nothing heavy; distributed only inside a worker.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._events import ErrorInfo
from ._host import HOST
from ._usage import Meter

logger = logging.getLogger(__name__)

#: A batch tells the driver which task it starts before its first task (a batch of one task
#: waits until the dask scheduler has that message), then, without waiting, before the first
#: task that begins at least this many seconds after its last message.
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


class _Announcer:
    """Sends ``{"key", "index", "time", "where"}`` on the batch's topic: task ``index`` starts."""

    def __init__(self, topic: str | None, where: tuple):
        self.topic, self.where = topic, list(where)
        self.worker = self.key = None
        self.last = 0.0
        if topic is None:
            return
        try:
            from distributed import get_worker

            self.worker = get_worker()
            self.key = self.worker.get_current_task()
        except (ImportError, ValueError):  # not on a dask worker: nobody to tell
            self.topic = None

    def _message(self, index: int) -> dict[str, Any]:
        return {"key": self.key, "index": index, "time": time.time(), "where": self.where}

    def begin(self, wait: bool) -> None:
        """Before the first task. With ``wait``, returns once the dask scheduler has the
        message, so that the driver hears of the start before it can hear of this worker's
        death (a batch of one task: the driver then knows whether that task ran when its
        worker died). Without, the message may be lost with the worker."""
        if self.topic is None:
            return
        message = self._message(0)
        self.last = time.monotonic()
        if wait:
            try:
                from distributed import get_client

                get_client().log_event(self.topic, message)
                return
            except Exception as exc:  # no client here: the message may be lost with us
                logger.warning("could not report the start of batch %s synchronously (%s: "
                               "%s); reporting it without waiting", self.key,
                               type(exc).__name__, exc)
        self.worker.log_event(self.topic, message)

    def progress(self, index: int) -> None:
        if self.topic is None or time.monotonic() - self.last < PROGRESS_INTERVAL:
            return
        self.last = time.monotonic()
        self.worker.log_event(self.topic, self._message(index))


def _placement() -> tuple[str, int, str | None, tuple[int, ...] | None]:
    try:
        from distributed import get_worker

        worker = get_worker().name
    except (ImportError, ValueError):
        worker = None
    devices = os.environ.get("CUDA_VISIBLE_DEVICES")
    group = tuple(int(d) for d in devices.split(",") if d.strip().isdigit()) if devices else None
    return HOST, os.getpid(), None if worker is None else str(worker), group


def _trimmed(exc: BaseException) -> BaseException:
    """``exc`` without the frames of this module (the traceback starts in ``fn``)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return exc.with_traceback(tb)


def run_batch(fn: Callable[[Any], Any], tasks: list[tuple[str, int, Any]]) -> tuple[Any, list]:
    """Run ``fn`` on each ``(task_id, attempt, item)``; return where, and one outcome per task:
    ``(task_id, attempt, "result" | "error", value, started, ended, usage)``.

    An exception in ``fn`` (any `BaseException`, ``SystemExit`` included) is that task's
    outcome, not the batch's: the batch itself fails only when its worker is lost. With a
    `BatchFn`, the driver hears which task starts (`_Announcer`) before it runs.
    """
    where = _placement()
    announce = _Announcer(fn.topic if isinstance(fn, BatchFn) else None, where)
    announce.begin(wait=len(tasks) == 1)
    outcomes = []
    meter = Meter()
    for index, (task_id, attempt, item) in enumerate(tasks):
        if index:
            announce.progress(index)
        begun = time.time()
        try:
            with meter:
                value = fn(item)
            pickle.dumps(value)
        except BaseException as exc:
            outcomes.append((task_id, attempt, "error", ErrorInfo.from_exception(_trimmed(exc)),
                             begun, time.time(), meter.usage))
        else:
            outcomes.append((task_id, attempt, "result", value, begun, time.time(), meter.usage))
    return where, outcomes
