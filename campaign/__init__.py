"""Run one function over many items; record every finished task; resume exactly where stopped.

`checkpointed_map` drives a campaign from this process; `submit_array` hands one to a Slurm job
array whose elements each run `run_worker`. Importing this package does not import JAX.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError as _NotInstalled
from importlib.metadata import version as _version

try:
    __version__ = _version("diffsoup-campaign")
except _NotInstalled:  # run from a source tree that was never installed
    __version__ = "0+unknown"

from ._array._submit import ArraySubmission as ArraySubmission
from ._array._submit import SubmitError as SubmitError
from ._array._submit import submit_array as submit_array
from ._array._worker import WorkerSummary as WorkerSummary
from ._array._worker import run_worker as run_worker
from ._campaign import Campaign as Campaign
from ._campaign import Failure as Failure
from ._campaign import Progress as Progress
from ._engine import checkpointed_map as checkpointed_map
from ._errors import CampaignError as CampaignError
from ._errors import DriverBusyError as DriverBusyError
from ._errors import Interrupted as Interrupted
from ._errors import ItemError as ItemError
from ._errors import LeaseLostError as LeaseLostError
from ._errors import LedgerError as LedgerError
from ._errors import LedgerWriteError as LedgerWriteError
from ._errors import ResultError as ResultError
from ._ledger._document import read as read_ledger
from ._ledger._driver import Ledger as Ledger
from ._ledger._iter import LedgerRecords as LedgerRecords
from ._ledger._iter import iter_ledger as iter_ledger
from ._ledger._status import FORMAT_NAME as FORMAT_NAME
from ._ledger._status import FORMAT_VERSION as FORMAT_VERSION
from ._ledger._status import RunStatus as RunStatus
from ._ledger._status import Status as Status
from ._report import Report as Report
from ._report import write_report as write_report

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "ArraySubmission",
    "Campaign",
    "CampaignError",
    "DriverBusyError",
    "Failure",
    "Interrupted",
    "ItemError",
    "LeaseLostError",
    "Ledger",
    "LedgerError",
    "LedgerRecords",
    "LedgerWriteError",
    "Progress",
    "Report",
    "ResultError",
    "RunStatus",
    "Status",
    "SubmitError",
    "WorkerSummary",
    "__version__",
    "checkpointed_map",
    "iter_ledger",
    "read_ledger",
    "run_worker",
    "submit_array",
    "write_report",
]
