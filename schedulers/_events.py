"""What a scheduler reports to the engine: a task started, or its outcome. Named once here."""

from __future__ import annotations

import enum
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._host import HOST


@dataclass(frozen=True, slots=True)
class Task:
    """One run of ``fn(item)``: the task's id, its item (plain JSON) and the attempt number."""

    task_id: str
    item: Any
    attempt: int


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a task ran: host, process, the scheduler's worker/job id and the device group."""

    host: str = HOST
    pid: int = 0
    worker: str | None = None
    device_group: tuple[int, ...] | None = None

    @classmethod
    def here(cls, worker: str | None = None,
             device_group: tuple[int, ...] | None = None) -> Placement:
        return cls(HOST, os.getpid(), worker, device_group)


class OutcomeKind(str, enum.Enum):
    """``result``: fn returned. ``error``: fn raised. ``lost``: the infrastructure lost the task
    (worker died, job cancelled, walltime) -- not the task's fault."""

    RESULT = "result"
    ERROR = "error"
    LOST = "lost"


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """An error that crossed a process boundary as text: type name, message, traceback."""

    type: str
    message: str
    traceback: str = ""

    @classmethod
    def from_exception(cls, exc: BaseException) -> ErrorInfo:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(type(exc).__qualname__, str(exc), tb)

    @classmethod
    def capture(cls, exc: BaseException, *, skip: int = 1) -> ErrorInfo:
        """``exc``, raised by a task's ``fn``, without the first ``skip`` frames of its traceback:
        those of the runner that called ``fn`` (1: the frame that caught it), so that the
        recorded traceback starts in the task's own code."""
        tb = exc.__traceback__
        for _ in range(skip):
            if tb is None or tb.tb_next is None:
                break
            tb = tb.tb_next
        return cls.from_exception(exc.with_traceback(tb))

    def as_dict(self) -> dict[str, str]:
        return {"type": self.type, "message": self.message, "traceback": self.traceback}


@dataclass(frozen=True, slots=True)
class Started:
    task_id: str
    attempt: int
    placement: Placement
    time: float


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an attempt ended. ``result`` is set for RESULT, ``error`` for ERROR and LOST.

    ``usage``: what ``fn`` used, where it ran to its end (`schedulers._usage`: ``cpu_s``,
    ``peak_rss_bytes``, ``gpu_peak_bytes``, each only where measured); None where it did not
    (a lost task, a timeout).
    """

    task_id: str
    attempt: int
    kind: OutcomeKind
    placement: Placement
    started: float
    ended: float
    result: Any = None
    error: ErrorInfo | None = None
    usage: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class TakenBack:
    """A submitted task the scheduler gave back before it started (`Scheduler.take_back`): no
    attempt was made, and none of it is reported again; the engine runs it later."""

    task_id: str
    attempt: int


Event = Started | Outcome | TakenBack
#: Called with one event, or with a list of events that arrived together (in order).
Report = Callable[[Event | list[Event]], None]
