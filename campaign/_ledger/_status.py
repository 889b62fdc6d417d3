"""Names used in the ledger, written once: task statuses, run statuses and the ledger's format."""

from __future__ import annotations

import enum

FORMAT_NAME = "diffsoup-campaign-ledger"
FORMAT_VERSION = 2


class Status(str, enum.Enum):
    """Status of one task in the ledger.

    ``pending``: known to the campaign, not started yet. ``running``: started, no outcome yet.
    ``accepted``: finished with a valid result; never run again. ``failed``: ``fn`` raised or
    returned an invalid result. ``interrupted``: stopped by the infrastructure (Ctrl-C, SIGTERM,
    a lost worker, a killed driver); does not count against the failure budget.
    """

    PENDING = "pending"
    RUNNING = "running"
    ACCEPTED = "accepted"
    FAILED = "failed"
    INTERRUPTED = "interrupted"

    def __str__(self) -> str:
        return self.value


#: The statuses as plain strings, for the hot paths and for comparing with loaded records.
PENDING, RUNNING, ACCEPTED, FAILED, INTERRUPTED = (s.value for s in Status)


class RunStatus(str, enum.Enum):
    """Status of one entry of the ledger's ``runs`` list (docs/ledger.md, "Runs").

    ``running``: a driver is working (or died without a trace). ``finished``: it returned.
    ``interrupted``: Ctrl-C or SIGTERM stopped it. ``crashed``: an error in the driver, a ledger
    that could not be written, or found ``running`` by the next driver. ``submitted``: a
    ``campaign submit`` recorded its tasks for array workers, which record tasks, never the run.
    """

    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"
    CRASHED = "crashed"
    SUBMITTED = "submitted"

    def __str__(self) -> str:
        return self.value
#: How many earlier attempts a record keeps in its ``history``.
HISTORY_LIMIT = 5
#: How many runs the ledger keeps in its ``runs`` list.
RUNS_LIMIT = 20
