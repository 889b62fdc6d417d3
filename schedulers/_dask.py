"""The dask scheduler: an existing dask cluster, or an embedded `LocalCluster` on loopback.

Small tasks are sent in batches sized so that one batch runs for about ``batch_seconds``, which
keeps dask's per-task overhead below raw ``client.map``; outcomes stream back with
``as_completed``; a lost worker (``KilledWorker``, a closed connection) loses its batch's tasks,
which the engine records interrupted and runs again.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import uuid
from typing import Any, Callable

from ._base import Scheduler
from ._dask_batch import run_batch
from ._devices import normalize_groups
from ._events import ErrorInfo, Outcome, OutcomeKind, Placement, Report, Started, Task
from ._host import HOST

logger = logging.getLogger(__name__)

#: dask settings for many small tasks: measured 4x faster than the default worker-saturation.
FAST_CONFIG = {"distributed.scheduler.worker-saturation": float("inf")}


class DaskScheduler(Scheduler):
    """Run tasks on a dask cluster.

    Args:
        device_groups: one embedded worker per group, started with ``CUDA_VISIBLE_DEVICES`` set
            to it and the resource ``GPU=1``; tasks then need ``GPU=1``, so a GPU task waits for a
            GPU worker. With an existing cluster, start its GPU workers with
            ``--resources GPU=1``.
        client: a `distributed.Client` to use (not closed at the end).
        scheduler_address: the address of a running dask scheduler (``tcp://host:8786``).
        workers: number of embedded worker processes (default: CPU count), 1 thread each.
        batch_seconds: the run time aimed at for one batch of small tasks.
        max_batch: the largest batch.
    """

    name = "dask"
    #: What runs a batch on a worker; a subclass may add to where the tasks ran.
    run_batch = staticmethod(run_batch)

    def __init__(self, device_groups: Any = None, *, client: Any = None,
                 scheduler_address: str | None = None, workers: int | None = None,
                 batch_seconds: float = 0.3, max_batch: int = 1000):
        if client is not None and scheduler_address is not None:
            raise ValueError("give client= or scheduler_address=, not both")
        if workers is not None and (client is not None or scheduler_address is not None):
            raise ValueError("workers= sizes the embedded cluster; an existing cluster has its own")
        self.groups = normalize_groups(device_groups)
        self.client = client
        self.scheduler_address = scheduler_address
        self.workers = workers or os.cpu_count() or 1
        self.batch_seconds = batch_seconds
        self.max_batch = max_batch
        self._batch_size = 1
        self._threads = 1
        self._buffer: list[Task] = []
        self._batches: dict[str, list[Task]] = {}
        self._lock = threading.Lock()
        self._owned: list[Any] = []
        self._mean = 0.0
        self._seen = 0

    @property
    def slots(self) -> int:
        return max(2, 2 * self._threads * self._batch_size)

    # ------------------------------------------------------------------ life cycle
    def start(self, fn: Callable[[Any], Any], report: Report) -> None:
        import dask
        from distributed import Client, as_completed

        super().start(fn, report)
        if self.client is None:
            if self.scheduler_address is not None:
                self.client = Client(self.scheduler_address)
            else:
                with dask.config.set(FAST_CONFIG):
                    cluster = self._embedded_cluster()
                    self._owned.append(cluster)
                    self.client = Client(cluster)
                print(f"dask dashboard: {self.client.dashboard_link}", file=sys.stderr)
            self._owned.insert(0, self.client)
        self._threads = max(1, sum(self.client.nthreads().values()))
        self._resources = {"GPU": 1} if self.groups is not None else None
        self._fn = self._share(fn)
        self._completed = as_completed(loop=self.client.loop)  # the loop of our futures
        self._have_work = threading.Event()
        self._stopping = False
        self._monitor = threading.Thread(target=self._watch, name="dask-monitor", daemon=True)
        self._monitor.start()

    def _share(self, fn: Callable[[Any], Any]) -> Any:
        """``fn`` as each batch refers to it: sent once to every worker."""
        [future] = self.client.scatter([fn], broadcast=True, hash=False)
        return future

    def _embedded_cluster(self) -> Any:
        from distributed import LocalCluster, Nanny, Scheduler as DaskScheduler_, SpecCluster

        if self.groups is None:
            return LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                                host="127.0.0.1", dashboard_address="127.0.0.1:0")
        workers = {
            f"group-{i}": {"cls": Nanny, "options": {
                "nthreads": 1, "host": "127.0.0.1", "resources": {"GPU": 1},
                "env": {"CUDA_VISIBLE_DEVICES": ",".join(map(str, g)),
                        "DIFFSOUP_DEVICE_GROUP": ",".join(map(str, g))}}}
            for i, g in enumerate(self.groups)
        }
        scheduler = {"cls": DaskScheduler_,
                     "options": {"host": "127.0.0.1", "dashboard_address": "127.0.0.1:0"}}
        return SpecCluster(workers=workers, scheduler=scheduler)

    def stop(self) -> None:
        self._stopping = True
        if hasattr(self, "_have_work"):
            self._have_work.set()
        with self._lock:
            futures = [f for f in self._completed.futures] if hasattr(self, "_completed") else []
        for fut in futures:
            fut.cancel()
        if hasattr(self, "_monitor"):
            self._monitor.join(timeout=10)
        release = getattr(getattr(self, "_fn", None), "release", None)
        if release is not None:  # a scattered fn: released before its workers go away
            release()
        for thing in self._owned:
            try:
                thing.close()
            except Exception as exc:  # closing must not hide the run's own outcome
                logger.warning("closing %r failed: %s", thing, exc)

    # ------------------------------------------------------------------ dispatch
    def submit(self, task: Task) -> None:
        self._buffer.append(task)
        if len(self._buffer) >= self._batch_size:
            self.flush()

    def flush(self) -> None:
        while self._buffer:
            batch, self._buffer = (self._buffer[:self._batch_size],
                                   self._buffer[self._batch_size:])
            key = f"campaign-batch-{uuid.uuid4().hex}"
            future = self.client.submit(self.run_batch, self._fn,
                                        [(t.task_id, t.attempt, t.item) for t in batch],
                                        key=key, pure=False, resources=self._resources)
            now = time.time()
            where = Placement(HOST, 0, "dask", None)
            for task in batch:
                self.report(Started(task.task_id, task.attempt, where, now))
            with self._lock:
                self._batches[key] = batch
                self._completed.add(future)
                self._have_work.set()

    # ------------------------------------------------------------------ outcomes
    def _watch(self) -> None:
        while not self._stopping:
            self._have_work.wait()
            if self._stopping:
                return
            for future in self._completed:
                if self._stopping:
                    return
                self._collect(future)
            with self._lock:
                if self._completed.is_empty():
                    self._have_work.clear()

    def _collect(self, future: Any) -> None:
        with self._lock:
            batch = self._batches.pop(future.key)
        if future.status == "finished":
            (host, pid, worker, group), outcomes = future.result()
            # Release before reporting: a worker lost after this point must not make dask run
            # a batch again whose outcomes are already being recorded.
            future.release()
            where = Placement(host, pid, worker, group)
            for task_id, attempt, how, value, begun, ended in outcomes:
                kind = OutcomeKind.RESULT if how == "result" else OutcomeKind.ERROR
                self.report(Outcome(task_id, attempt, kind, where, begun, ended,
                                    result=value if how == "result" else None,
                                    error=value if how == "error" else None))
            self._learn(outcomes)
        else:
            exc = future.exception() if future.status == "error" else None
            cause = (f"{type(exc).__name__}: {exc}" if exc is not None
                     else f"the batch was {future.status}")
            logger.warning("a dask batch of %d task(s) was lost (%s)", len(batch), cause)
            now = time.time()
            for task in batch:
                self.report(Outcome(task.task_id, task.attempt, OutcomeKind.LOST,
                                    Placement(HOST, 0, "dask", None), now, now,
                                    error=ErrorInfo("WorkerLost", f"dask lost the task: {cause}")))
        future.release()

    def _learn(self, outcomes: list) -> None:
        """Size the next batches from the measured task durations."""
        for *_, begun, ended in outcomes:
            self._seen += 1
            self._mean += ((ended - begun) - self._mean) / min(self._seen, 1000)
        size = int(self.batch_seconds / max(self._mean, 1e-6))
        self._batch_size = max(1, min(self.max_batch, size))
