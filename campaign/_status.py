"""Names used in the ledger, written once: task statuses and the ledger's format."""

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
#: How many earlier attempts a record keeps in its ``history``.
HISTORY_LIMIT = 5
#: How many runs the ledger keeps in its ``runs`` list.
RUNS_LIMIT = 20
