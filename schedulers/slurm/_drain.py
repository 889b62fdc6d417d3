"""A worker plugin that drains a dask worker before its ``--lifetime`` ends it.

dask's ``--lifetime`` retires a worker at once: the task it is running is abandoned and runs
again elsewhere. This plugin begins ``window`` seconds earlier: it asks the scheduler to retire
the worker without closing it (no new task comes to it), hands the tasks queued on it back to
the scheduler, waits for the tasks it runs to finish, copies its results to other workers and
closes it, nanny and Slurm job included. A task still
running when the lifetime comes is abandoned then, and dask runs it again elsewhere.
Imports distributed and psutil: import it only where a cluster is made.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import psutil
from distributed.diagnostics.plugin import WorkerPlugin

# Under "distributed" so that it shows in the worker logs with dask's own lines.
logger = logging.getLogger("distributed.campaign.drain")


class DrainBeforeLifetime(WorkerPlugin):
    """Stop giving a worker tasks ``window`` seconds before its lifetime; close it once idle.

    Args:
        window: seconds before the worker's (staggered) lifetime at which draining begins;
            at the lifetime it is closed whatever it runs.
    """

    name = "campaign-drain-before-lifetime"
    idempotent = True

    def __init__(self, window: float):
        self.window = window
        self._task: asyncio.Future | None = None
        self._draining = False

    async def setup(self, worker: Any) -> None:
        lifetime = getattr(worker, "lifetime", None)
        if not lifetime:
            return
        started = psutil.Process().create_time()  # about when the lifetime's clock began
        delay = max(0.0, started + lifetime - self.window - time.time())
        self._task = asyncio.ensure_future(self._drain_later(worker, delay))

    async def teardown(self, worker: Any) -> None:
        if self._task is not None and not self._draining:
            self._task.cancel()  # closed before draining began; while draining, let it end

    async def _drain_later(self, worker: Any, delay: float) -> None:
        await asyncio.sleep(delay)
        if worker.status.name != "running":
            return
        self._draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.window
        logger.info("draining before the lifetime ends in %.0f s: no new task", self.window)
        address = worker.address
        try:
            answer = await asyncio.wait_for(worker.scheduler.retire_workers(
                workers=[address], close_workers=False, remove=False,
                stimulus_id=f"campaign-drain-{time.time()}"), self.window)
        except TimeoutError:
            answer = {address: "timed out"}
        if address not in answer:  # its data could go nowhere: dask's lifetime will decide
            logger.info("could not drain (no other worker to take its results)")
            self._draining = False
            return
        # The scheduler tells the worker it is retiring through another channel than its
        # answer: wait for that, else the worker would start the next queued task.
        while worker.status.name == "running" and loop.time() < deadline:
            await asyncio.sleep(0.05)
        _hand_back_queued_tasks(worker)
        while (worker.state.all_running_tasks and worker.status.name == "closing_gracefully"
               and loop.time() < deadline):
            await asyncio.sleep(0.2)
        if worker.status.name not in ("running", "closing_gracefully"):
            return  # being closed already (scancel, the scheduler)
        if worker.state.all_running_tasks:
            logger.info("lifetime reached with tasks still running: they will run elsewhere")
        # What Worker.close_gracefully does (it would only wait here, the worker being
        # already closing gracefully): move the results it holds elsewhere, then close.
        try:
            await asyncio.wait_for(worker.scheduler.retire_workers(
                workers=[address], close_workers=False, remove=True,
                stimulus_id=f"campaign-drained-{time.time()}"),
                max(5.0, deadline - loop.time()))
        except (TimeoutError, OSError) as exc:
            logger.info("could not hand over its results (%s); closing anyway", exc)
        await worker.close(nanny=True, reason="campaign-drained-before-lifetime")


def _hand_back_queued_tasks(worker: Any) -> None:
    """Give the tasks queued on a draining worker back to the scheduler, which places them on
    running workers (they would otherwise wait until this one leaves)."""
    stimulus_id = f"campaign-drain-handback-{time.time()}"
    for ts in [*worker.state.ready, *worker.state.constrained]:
        worker.batched_stream.send({"op": "reschedule", "key": ts.key,
                                    "stimulus_id": stimulus_id})
