"""The serial scheduler: each task runs in this process, one after another."""

from __future__ import annotations

import time

from ._base import Scheduler
from ._events import ErrorInfo, Outcome, OutcomeKind, Placement, Started, Task
from ._usage import Meter


class SerialScheduler(Scheduler):
    """Runs tasks in the calling process. `submit` returns after the task has finished.

    ``KeyboardInterrupt`` and ``SystemExit`` raised by ``fn`` propagate to the caller (the
    engine records the task interrupted, with that type, and stops); any other exception,
    a ``BaseException`` included, is the task's failure, reported with its type.
    """

    name = "serial"

    def __init__(self) -> None:
        self._placement = Placement.here()
        self._meter = Meter()

    @property
    def slots(self) -> int:
        return 1

    def submit(self, task: Task) -> None:
        where = self._placement
        begun = time.time()
        self.report(Started(task.task_id, task.attempt, where, begun))
        meter = self._meter
        try:
            with meter:
                value = self.fn(task.item)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # noqa: BLE001 -- any other is the task's failure
            self.report(Outcome(task.task_id, task.attempt, OutcomeKind.ERROR, where, begun,
                                time.time(), error=ErrorInfo.capture(exc), usage=meter.usage))
        else:
            self.report(Outcome(task.task_id, task.attempt, OutcomeKind.RESULT, where, begun,
                                time.time(), result=value, usage=meter.usage))
