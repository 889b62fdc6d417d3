"""The execution names (``"serial"``, ``"processes"``, ``"dask"``, ``"slurm"``), the schedulers
they select, and `make_scheduler`, which builds one from its name and options."""

from __future__ import annotations

import functools
import inspect
from typing import Any

from ._base import Scheduler


@functools.cache
def registry() -> dict[str, type[Scheduler]]:
    """Execution names and the schedulers they select (``schedulers.SCHEDULERS``). Built on
    first use: it imports the scheduler modules, each of which imports dask & co. only when
    started."""
    from ._serial import SerialScheduler
    from .dask import DaskScheduler
    from .processes._scheduler import ProcessesScheduler
    from .slurm import SlurmScheduler

    return {"serial": SerialScheduler, "processes": ProcessesScheduler, "dask": DaskScheduler,
            "slurm": SlurmScheduler}


def make_scheduler(execution: str | Scheduler, **options: Any) -> Scheduler:
    """The scheduler named by ``execution`` (or ``execution`` itself if it is one).

    ``options`` whose value is None are dropped; the rest go to the scheduler's constructor.
    Raises `ValueError` for unknown names and for options the chosen scheduler does not take.
    """
    options = {k: v for k, v in options.items() if v is not None}
    if isinstance(execution, Scheduler):
        if options:
            raise ValueError(f"options {sorted(options)} are given to the scheduler's "
                             "constructor; pass them there when you pass a Scheduler")
        return execution
    schedulers = registry()
    cls = schedulers.get(execution)
    if cls is None:
        known = ", ".join(repr(n) for n in schedulers)
        raise ValueError(f"unknown execution {execution!r}; choose one of {known}")
    accepted = [name for name, p in inspect.signature(cls).parameters.items()
                if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(
            f"execution={execution!r} does not take {', '.join(unknown)}; it takes "
            f"{', '.join(accepted) or 'no options'}"
        )
    return cls(**options)
