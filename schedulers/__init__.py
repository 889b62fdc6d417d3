"""Where tasks run: in this process, in worker processes per device group, on dask, on Slurm.

Importing this package does not import JAX.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError as _NotInstalled
from importlib.metadata import version as _version

try:
    __version__ = _version("diffsoup-campaign")
except _NotInstalled:  # run from a source tree that was never installed
    __version__ = "0+unknown"

import importlib
from typing import TYPE_CHECKING, Any

from ._base import Scheduler as Scheduler
from ._devices import normalize_groups as normalize_groups
from ._devices import visible_gpus as visible_gpus
from ._events import ErrorInfo as ErrorInfo
from ._events import Event as Event
from ._events import Outcome as Outcome
from ._events import OutcomeKind as OutcomeKind
from ._events import Placement as Placement
from ._events import Report as Report
from ._events import Started as Started
from ._events import TakenBack as TakenBack
from ._events import Task as Task
from ._registry import make_scheduler as make_scheduler
from ._serial import SerialScheduler as SerialScheduler
from ._usage import Meter as Meter

# Imported on first use (PEP 562): a worker process imports this package for its loop alone, and
# its start-up is on the critical path of every campaign on processes.
_LAZY = {
    "DaskScheduler": ".dask",
    "ProcessesScheduler": ".processes._scheduler",
    **dict.fromkeys(["ACTIVE_STATES", "ENDED_STATES", "Backoff", "JobWatcher",
                     "SlurmCommandError", "SlurmScheduler", "job_states", "poll_until",
                     "render_array_script", "sbatch", "scancel", "slurm_available"], ".slurm"),
}

if TYPE_CHECKING:
    from .dask import DaskScheduler as DaskScheduler
    from .processes._scheduler import ProcessesScheduler as ProcessesScheduler
    from .slurm import ACTIVE_STATES as ACTIVE_STATES
    from .slurm import ENDED_STATES as ENDED_STATES
    from .slurm import Backoff as Backoff
    from .slurm import JobWatcher as JobWatcher
    from .slurm import SlurmCommandError as SlurmCommandError
    from .slurm import SlurmScheduler as SlurmScheduler
    from .slurm import job_states as job_states
    from .slurm import poll_until as poll_until
    from .slurm import render_array_script as render_array_script
    from .slurm import sbatch as sbatch
    from .slurm import scancel as scancel
    from .slurm import slurm_available as slurm_available


def __getattr__(name: str) -> Any:
    if name == "SCHEDULERS":
        #: Execution names and the schedulers they select (schedulers/_registry.py).
        from ._registry import registry

        value: Any = registry()
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "SCHEDULERS"})
