"""The interface every scheduler implements. Schedulers know nothing of ledgers."""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, ClassVar

from ._events import Report, Task


class Scheduler(abc.ABC):
    """Runs ``fn(item)`` somewhere and reports each task's start and outcome.

    The engine calls `start` once, then rounds of `submit` (at most `slots` tasks in flight,
    a round once `refill` slots are free) each followed by `flush`, then `stop`.
    `report` may be called from any thread, with one event or a list of them in order; it must
    be given a `Started` event before ``fn`` runs and exactly one `Outcome` per submitted task
    (unless `stop` comes first), or, for a task given back by `take_back`, one `TakenBack` and
    nothing else. Where ``fn`` ran to a return or an exception, the outcome's
    ``usage`` is what a `schedulers.Meter` measured around that call, in that process.
    """

    name: ClassVar[str]

    @property
    @abc.abstractmethod
    def slots(self) -> int:
        """How many tasks the engine may have submitted without their outcome yet."""

    @property
    def refill(self) -> int:
        """How many slots must be free before the engine submits more (1: after each outcome).

        A scheduler that queues tasks of its own asks for them in batches, sparing the driver
        a thread switch per task.
        """
        return 1

    def requested(self) -> dict[str, int] | None:
        """What each worker process was given by a resource manager: ``cpus`` and
        ``memory_bytes`` (either may be absent), recorded in the run's entry so that
        `campaign report` can set each attempt's CPU time and peak memory against it. None
        (the default) where nothing was requested: the workers share this machine."""
        return None

    def start(self, fn: Callable[[Any], Any], report: Report) -> None:
        self.fn = fn
        self.report = report

    @abc.abstractmethod
    def submit(self, task: Task) -> None:
        """Run ``task`` (or queue it); report its start and outcome through ``report``."""

    def flush(self) -> None:
        """Called after each round of `submit` calls: send what was buffered (batching)."""
        return None

    def take_back(self) -> None:
        """Give back every submitted task that has not started yet (queued here, or held ahead
        by a worker), reporting a `TakenBack` for each, now or once a worker confirmed it will
        not start it; tasks already running go on. The engine calls this when the ledger stops
        being writable. By default nothing is held: nothing to give back.
        """
        return None

    def stop(self) -> None:
        """Release workers. Tasks still running are abandoned; the engine records them."""
        return None
