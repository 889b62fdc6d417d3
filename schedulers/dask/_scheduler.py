"""The dask scheduler: an existing dask cluster, or a private embedded `LocalCluster`.

The embedded cluster listens on 127.0.0.1 and speaks TLS with a certificate made for the run:
no other process can connect to it. A cluster of the user's own keeps its own security.
Small tasks go in batches of about ``batch_seconds``, which keeps dask's per-task overhead below
raw ``client.map``; ``fn`` travels with every batch, so it survives the loss of every worker.
A task is reported started once its batch says so (`schedulers.dask._batch`). When a batch's
worker dies, the task the batch said runs (alone in its batch, or reported running) is reported
lost (the engine records it interrupted; only it spends ``max_interruptions``) and the others go
back to the queue without an interruption (all of them, when the batch's worker thread had since
started another batch: it had ended); where the batch could not say which task ran, those
that may have been running run again one per batch, so that a task that kills its worker is
found alone.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from .._base import Scheduler
from .._devices import normalize_groups
from .._events import ErrorInfo, Event, Outcome, OutcomeKind, Placement, Report, Started, Task
from .._host import HOST
from .._mean import RunningMean
from ._batch import PROGRESS_INTERVAL, Batch, BatchFn, run_batch
from ._cluster import NO_HTTP_CONFIG, OWN_CLUSTER_CONFIG, embedded_cluster, keep_workers

logger = logging.getLogger(__name__)

_DRIVER = Placement(HOST, 0, "dask", None)


class DaskScheduler(Scheduler):
    """Run tasks on a dask cluster.

    Args:
        device_groups: one embedded worker per group, started with ``CUDA_VISIBLE_DEVICES`` set
            to it and the resource ``GPU=1``; tasks then need ``GPU=1``, so a GPU task waits for a
            GPU worker. With an existing cluster, start its GPU workers with
            ``--resources GPU=1``.
        client: a `distributed.Client` to use (not closed at the end); it keeps its security.
        scheduler_address: the address of a running dask scheduler (``tls://host:8786``).
        security: a `distributed.security.Security` for ``scheduler_address`` (None: dask's
            configuration, ``distributed.comm.tls``), or for the embedded cluster (None or
            True: a temporary certificate made for the run).
        workers: number of embedded worker processes (default: CPU count), 1 thread each.
        batch_seconds: the run time aimed at for one batch of small tasks.
        max_batch: the largest batch.
        dashboard: serve dask's dashboard of the embedded cluster on 127.0.0.1 (its address is
            printed). Off by default: it is plain HTTP without authentication, so every user
            of the machine could read it, the call stacks of running tasks (``fn``'s frames
            and their values) and the workers' logs among it (docs/cluster.md, "Who can
            connect").
    """

    name = "dask"
    #: What runs a batch on a worker; a subclass may add to where the tasks ran.
    run_batch = staticmethod(run_batch)

    def __init__(self, device_groups: Any = None, *, client: Any = None,
                 scheduler_address: str | None = None, security: Any = None,
                 workers: int | None = None, batch_seconds: float = 0.3, max_batch: int = 1000,
                 dashboard: bool = False):
        if client is not None and scheduler_address is not None:
            raise ValueError("give client= or scheduler_address=, not both")
        if workers is not None and (client is not None or scheduler_address is not None):
            raise ValueError("workers= sizes the embedded cluster; an existing cluster has its own")
        if client is not None and security is not None:
            raise ValueError("a Client keeps the security it was made with; drop security= or "
                             "pass scheduler_address= with it instead of client=")
        if dashboard and (client is not None or scheduler_address is not None):
            raise ValueError("dashboard= is for the embedded cluster; an existing cluster serves "
                             "its own (`dask scheduler --dashboard-address`)")
        self.dashboard = bool(dashboard)
        self.groups = normalize_groups(device_groups)
        self.client = client
        self.scheduler_address = scheduler_address
        self.security = security
        self.workers = workers or os.cpu_count() or 1
        self.batch_seconds = batch_seconds
        self.max_batch = max_batch
        self._batch_size = 1
        self._threads = 1
        self._buffer: list[Task] = []
        self._batches: dict[str, Batch] = {}
        self._started: set[str] = set()  # tasks whose Started was reported, no outcome yet
        self._alone: set[str] = set()  # tasks that run one per batch
        #: per worker thread, (order, key) of the batch it last said it runs
        self._latest: dict[tuple, tuple[float, str]] = {}
        self._lock = threading.Lock()
        self._owned: list[Any] = []
        self._mean = RunningMean(1000)
        self._stopped = threading.Event()  # set by stop()
        self._stopping = False  # set by stop(), before the cluster closes

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
                self.client = Client(self.scheduler_address, security=self.security)
            else:
                config = OWN_CLUSTER_CONFIG if self.dashboard else {**OWN_CLUSTER_CONFIG,
                                                                     **NO_HTTP_CONFIG}
                with dask.config.set(config):
                    cluster = self._embedded_cluster()
                    self._owned.append(cluster)
                    self.client = Client(cluster, security=cluster.security)
                threading.Thread(target=keep_workers,
                                 args=(cluster, lambda: self._stopping, self._stopped),
                                 daemon=True, name="dask-keeper").start()
                if self.dashboard:
                    print(f"dask dashboard: {self.client.dashboard_link} (plain HTTP: every "
                          "user of this machine can read it)", file=sys.stderr)
            self._owned.insert(0, self.client)
        self._threads = max(1, sum(self.client.nthreads().values()))
        self._resources = {"GPU": 1} if self.groups is not None else None
        self._topic = f"campaign-starts-{uuid.uuid4().hex}"
        self._fn = BatchFn.wrap(fn, self._topic)
        self._completed = as_completed(loop=self.client.loop)  # the loop of our futures
        self._have_work = threading.Event()
        self._stopping = False
        self.client.subscribe_topic(self._topic, self._on_start)
        self._monitor = threading.Thread(target=self._watch, name="dask-monitor", daemon=True)
        self._monitor.start()

    def _embedded_cluster(self) -> Any:
        """The cluster this scheduler starts and owns when given neither a client nor an
        address: local worker processes here (`_cluster.embedded_cluster`); the Slurm backend
        starts worker jobs instead (`schedulers.slurm.SlurmScheduler`)."""
        return embedded_cluster(self.workers, self.groups, self.security, self.dashboard)

    def stop(self) -> None:
        self._stopping = True
        self._stopped.set()
        if hasattr(self, "_have_work"):
            self._have_work.set()
        with self._lock:
            futures = [f for f in self._completed.futures] if hasattr(self, "_completed") else []
        for fut in futures:
            fut.cancel()
        if hasattr(self, "_monitor"):
            self._monitor.join(timeout=10)
        if hasattr(self, "_topic"):
            try:
                self.client.unsubscribe_topic(self._topic)
            except Exception as exc:  # noqa: BLE001 -- a closed client: nothing left to hear
                logger.debug("unsubscribing %s: %s", self._topic, exc)
        for thing in self._owned:
            try:
                thing.close()
            except Exception as exc:  # noqa: BLE001 -- must not hide the run's own outcome
                logger.warning("closing %r failed: %s", thing, exc)

    # ------------------------------------------------------------------ dispatch
    def submit(self, task: Task) -> None:
        self._buffer.append(task)
        if len(self._buffer) >= self._batch_size:
            self.flush()

    def flush(self) -> None:
        tasks, self._buffer = self._buffer, []
        self._send(tasks)

    def _send(self, tasks: list[Task], alone: bool = False) -> None:
        """Submit ``tasks`` in batches (one per batch: those that run alone, or all of them)."""
        with self._lock:
            single = [t for t in tasks if alone or t.task_id in self._alone]
            rest = [t for t in tasks if not (alone or t.task_id in self._alone)]
        size = self._batch_size
        batches = [rest[i:i + size] for i in range(0, len(rest), size)] + [[t] for t in single]
        for batch in batches:
            key = f"campaign-batch-{uuid.uuid4().hex}"
            with self._lock:  # known before its worker can tell of its start
                self._batches[key] = Batch(batch, key)
            future = self.client.submit(self.run_batch, self._fn,
                                        [(t.task_id, t.attempt, t.item) for t in batch],
                                        key=key, pure=False, resources=self._resources)
            with self._lock:
                self._completed.add(future)
                self._have_work.set()

    # ------------------------------------------------------------------ starts
    def _on_start(self, event: tuple[float, dict[str, Any]]) -> None:
        """A batch says which task it starts, or runs (on the client's event loop, in order
        with the batch's outcome): report it and those before it in the batch as started."""
        message = event[1]
        with self._lock:
            batch = self._batches.get(str(message.get("key")))
            if batch is None or self._stopping:  # collected already, or not ours to report
                return
            news = batch.heard(message)
            # the batch that runs in this message's worker thread, as far as heard (a batch may
            # run again elsewhere: dask recomputes one whose result was lost with its worker)
            slot, order = Batch.slot_of(message), float(message.get("order", 0.0))
            if order >= self._latest.get(slot, (order,))[0]:
                self._latest[slot] = (order, batch.key)
            if batch.where is not None and (batch.running or len(batch.tasks) == 1):
                logger.debug("task %r runs (%s) on dask worker %s (pid %s on %s)",
                             batch.tasks[batch.reached].task_id,
                             f"for {PROGRESS_INTERVAL:g} s or more" if batch.running
                             else "alone in its batch", batch.where.worker, batch.where.pid,
                             batch.where.host)
            if news and batch.where is not None:
                started = self._started_events(news, batch.where, message["time"])
                if started:
                    self.report(started)

    def _started_events(self, tasks: list[Task], where: Placement, at: float) -> list[Event]:
        """`Started` for those of ``tasks`` not reported started yet (call with the lock)."""
        events: list[Event] = []
        for task in tasks:
            if task.task_id not in self._started:
                self._started.add(task.task_id)
                events.append(Started(task.task_id, task.attempt, where, at))
        return events

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
        result = exc = None
        status = future.status
        if status == "finished":
            try:
                result = future.result()
            except Exception as error:  # noqa: BLE001 -- lost while fetched, or will not unpickle
                status, exc = "error", error
        elif status == "error":
            exc = future.exception()
        # Release before reporting: a worker lost after this point must not make dask run
        # a batch again whose outcomes are already being recorded.
        future.release()
        again: list[tuple[list[Task], bool]] = []
        with self._lock:
            batch = self._batches.pop(future.key, None)
            if batch is None or self._stopping:
                return
            if result is not None:
                events = self._outcomes(batch, *result)
            else:
                events = self._lost(batch, status, exc, again)
            if events:
                self.report(events)
        for tasks, alone in again:
            if not self._stopping:
                self._send(tasks, alone)

    def _outcomes(self, batch: Batch, where: tuple, outcomes: list) -> list[Event]:
        host, pid, worker, group = where
        placement = Placement(host, pid, worker, group)
        events: list[Event] = []
        by_id = {t.task_id: t for t in batch.tasks}
        for task_id, attempt, how, value, begun, ended, usage in outcomes:
            events += self._started_events([by_id[task_id]], placement, begun)
            kind = OutcomeKind.RESULT if how == "result" else OutcomeKind.ERROR
            events.append(Outcome(task_id, attempt, kind, placement, begun, ended,
                                  result=value if how == "result" else None,
                                  error=value if how == "error" else None, usage=usage))
            self._started.discard(task_id)
            self._alone.discard(task_id)
        self._learn(outcomes)
        return events

    def _lost(self, batch: Batch, status: str, exc: BaseException | None,
              again: list[tuple[list[Task], bool]]) -> list[Event]:
        """The outcome of a batch that returned nothing (call with the lock): the events to
        report now; what to send again goes to ``again``."""
        from concurrent.futures import CancelledError

        from distributed import KilledWorker

        tasks, where = batch.tasks, batch.where
        cause = f"{type(exc).__name__}: {exc}" if exc is not None else f"the batch was {status}"
        if exc is not None and not isinstance(exc, (CancelledError, KilledWorker, OSError,
                                                    TimeoutError)):
            # Not a lost worker: the batch itself could not run (e.g. the workers lack a
            # package) or its result does not unpickle here. Each task's error, not a loss.
            error = ErrorInfo.from_exception(exc)
            where = where or _DRIVER
            now = time.time()
            events = self._started_events(tasks, where, batch.at or now)
            for task in tasks:
                events.append(Outcome(task.task_id, task.attempt, OutcomeKind.ERROR, where,
                                      batch.at or now, now, error=error))
                self._started.discard(task.task_id)
            return events
        if exc is None or isinstance(exc, CancelledError):
            logger.info("a dask batch of %d task(s) was cancelled; sending it again", len(tasks))
            again.append((tasks, False))
            return []
        if batch.slot is not None and self._latest.get(batch.slot, (0, batch.key))[1] != batch.key:
            # Its worker thread had started another batch since: this one had ended, and its
            # outcomes were lost with the worker before dask heard of them.
            logger.info("a dask batch of %d task(s) had ended before its worker was lost; its "
                        "outcomes were lost with it: sending it again", len(tasks))
            again.append((tasks, False))
            return []
        lost, rest, alone = batch.lost()
        events = []
        if lost is not None and where is not None:
            logger.warning("task %r was lost with dask worker %s (pid %s on %s): %s%s",
                           lost.task_id, where.worker, where.pid, where.host, cause,
                           f"; its {len(rest)} batch-mate(s) run again" if rest else "")
            events = self._started_events([lost], where, batch.at)
            events.append(Outcome(lost.task_id, lost.attempt, OutcomeKind.LOST, where,
                                  batch.at, time.time(), error=ErrorInfo(
                                      "WorkerLost", f"dask worker {where.worker} (pid "
                                      f"{where.pid} on {where.host}) died while the task "
                                      f"ran: {cause}")))
            self._started.discard(lost.task_id)
            self._alone.add(lost.task_id)
        elif alone:
            logger.warning("a dask batch of %d task(s) was lost (%s); %d of them run again one "
                           "per batch", len(tasks), cause, len(alone))
        else:
            logger.info("a dask batch of %d task(s) did not start (%s); sending it again",
                        len(tasks), cause)
        self._alone.update(t.task_id for t in alone)
        again.append((rest, False))
        again.append((alone, True))
        return events

    def _learn(self, outcomes: list) -> None:
        """Size the next batches from the measured task durations."""
        for _, _, _, _, begun, ended, _ in outcomes:
            self._mean.add(ended - begun)
        size = int(self.batch_seconds / max(self._mean.value, 1e-6))
        self._batch_size = max(1, min(self.max_batch, size))
