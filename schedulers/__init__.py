"""Where tasks run: serial now; device-group processes, dask and Slurm build on the same interface.

Importing this package does not import JAX.
"""

from __future__ import annotations

from typing import Any

from ._base import Scheduler as Scheduler
from ._events import ErrorInfo as ErrorInfo
from ._events import Event as Event
from ._events import Outcome as Outcome
from ._events import OutcomeKind as OutcomeKind
from ._events import Placement as Placement
from ._events import Report as Report
from ._events import Started as Started
from ._events import Task as Task
from ._serial import SerialScheduler as SerialScheduler

#: Execution names and the schedulers they select.
SCHEDULERS: dict[str, type[Scheduler]] = {"serial": SerialScheduler}
#: Names that are part of the design but not available in this version.
PLANNED = ("processes", "dask", "slurm")


def make_scheduler(execution: str | Scheduler, **options: Any) -> Scheduler:
    """The scheduler named by ``execution`` (or ``execution`` itself if it is one).

    Raises `ValueError` for unknown names and for planned ones not built yet.
    """
    if isinstance(execution, Scheduler):
        return execution
    cls = SCHEDULERS.get(execution)
    if cls is None:
        known = ", ".join(repr(n) for n in SCHEDULERS)
        if execution in PLANNED:
            raise ValueError(
                f"execution={execution!r} is not available in this version of diffsoup-campaign "
                f"(available: {known}); run with execution='serial'"
            )
        raise ValueError(f"unknown execution {execution!r}; choose one of {known}")
    return cls(**options)
