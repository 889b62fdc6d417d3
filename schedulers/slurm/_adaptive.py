"""Adaptive scaling that also replaces worker jobs that end or begin to leave on their own.

dask's `Adaptive` only starts jobs when its target grows: a worker job that ends by itself
(its workers retired before walltime, ``scancel``, a node failure) keeps its place in the
cluster's plan and is never replaced. This one takes such a job out of the plan, so that the
next adaptive step starts a new job in its place:

- as soon as all its workers are retiring (draining before their lifetime), so that the new job
  starts while the old one finishes its tasks; the old job is left to end by itself;
- or a few seconds after its last worker disconnected without retiring (a nanny restarting a
  crashed worker takes a moment).

Imports distributed: import it only where a cluster is made.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from distributed.core import Status
from distributed.deploy.adaptive import Adaptive
from distributed.deploy.spec import SpecCluster

logger = logging.getLogger(__name__)

_LEAVING = {"closing_gracefully", "closing", "closed"}


class ReplacingAdaptive(Adaptive):
    """`distributed.Adaptive` that replaces worker jobs that end or leave.

    Args:
        replace_after: seconds a job whose workers were connected may have none connected
            before it counts as ended.
        leave_after: seconds a retiring job may run on after its last worker left before it
            is cancelled (its nanny and Python take a few seconds to exit by themselves).
        other arguments: those of `distributed.Adaptive`.
    """

    cluster: SpecCluster  # dask-jobqueue's clusters are SpecClusters: jobs in worker_spec

    def __init__(self, *args: Any, replace_after: float = 3.0, leave_after: float = 20.0,
                 **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.replace_after = replace_after
        self.leave_after = leave_after
        self.replaced = 0
        #: Jobs taken out of the plan while their workers finish: name -> (job, worker names).
        self.leaving: dict[str, tuple[Any, set[str]]] = {}
        self._seen: set[str] = set()
        self._gone_since: dict[str, float] = {}

    def _worker_names(self, job: str) -> set[str]:
        spec = self.cluster.worker_spec.get(job, {})
        if "group" in spec:
            return {str(job) + suffix for suffix in spec["group"]}
        return {job}

    def _statuses(self) -> dict[str, str]:
        """Worker name -> status, straight from the scheduler in this process if it is here."""
        workers = getattr(self.cluster.scheduler, "workers", None)
        if isinstance(workers, dict):
            return {str(ws.name): ws.status.name for ws in workers.values()}
        return {str(name): "running" for name in self.cluster.observed}

    async def recommendations(self, target: int) -> dict:
        statuses = self._statuses()
        now = time.monotonic()
        for name in list(self.cluster.worker_spec):
            names = self._worker_names(name)
            present = [statuses[n] for n in names if n in statuses]
            if present:
                self._seen.add(name)
                self._gone_since.pop(name, None)
                if all(s in _LEAVING for s in present):
                    self._take_out(name, names, "its workers are retiring")
            elif name in self._seen:
                since = self._gone_since.setdefault(name, now)
                if now - since >= self.replace_after:
                    self._take_out(name, names, "it has no worker left")
        for name, (job, names) in list(self.leaving.items()):
            if names & statuses.keys():
                self._gone_since.pop(name, None)
                continue
            since = self._gone_since.setdefault(name, now)
            if now - since >= self.leave_after:  # ended by now: scancel in case it did not
                del self.leaving[name]
                self._gone_since.pop(name, None)
                if job is not None:
                    await job.close()
                    job.status = Status.closed  # dask-jobqueue's close() leaves it running
        return await super().recommendations(target)

    def _take_out(self, name: str, names: set[str], why: str) -> None:
        self.cluster.worker_spec.pop(name, None)
        job = self.cluster.workers.pop(name, None)
        self._seen.discard(name)
        self.leaving[name] = (job, names)
        self.replaced += 1
        logger.info("worker job %s (%s): %s; starting another in its place", name,
                    getattr(job, "job_id", "?"), why)

    def forget_leaving(self) -> list[str]:
        """Forget the jobs taken out of the plan that may still run; return their Slurm ids.

        Call it before closing the cluster (which asserts that every job it made is closed),
        then cancel them.
        """
        ids = []
        for job, _ in self.leaving.values():
            if job is not None:
                if getattr(job, "job_id", None):
                    ids.append(job.job_id)
                job.status = Status.closed
        self.leaving.clear()
        return ids
