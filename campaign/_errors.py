"""The few exception classes of `campaign`. All subclass built-ins and pickle cleanly."""

from __future__ import annotations


class CampaignError(Exception):
    """Base class of the errors raised by `campaign`."""

    def __reduce__(self):
        return (type(self), self.args)


class ItemError(CampaignError, ValueError):
    """The items given to `checkpointed_map` are not valid (raised before any task runs)."""


class LedgerError(CampaignError, ValueError):
    """A ledger file is corrupt, foreign, of a newer version, or cannot be written."""


class LedgerWriteError(LedgerError):
    """Writing the ledger failed and kept failing (disk full, read-only, I/O error).

    ``path`` is the file, ``errno`` the operating system's error number (None when the cause
    was not an `OSError`). What was recorded before the first failed write stays in the file.
    """

    def __init__(self, message: str, path: str | None = None, errno: int | None = None):
        super().__init__(message)
        self.path = path
        self.errno = errno

    def __reduce__(self):
        return (type(self), (str(self), self.path, self.errno))


class DriverBusyError(CampaignError, RuntimeError):
    """Another live driver already runs a campaign on this ledger."""


class LeaseLostError(DriverBusyError):
    """This process's lease (a driver's on its ledger) was taken over by another process: it
    was stopped or stalled for longer than the lease, so it writes no more outcomes as
    current."""


class ResultError(CampaignError, TypeError):
    """``fn`` returned something that is not a flat dict of str -> number/str/bool/None."""


class Interrupted(KeyboardInterrupt):
    """The campaign was stopped by a signal (SIGINT or SIGTERM) after recording its state.

    ``signum`` is the signal's number. Subclasses `KeyboardInterrupt` so that code which already
    handles Ctrl-C handles SIGTERM the same way.
    """

    def __init__(self, signum: int, message: str = ""):
        super().__init__(signum, message)
        self.signum = signum
        self.message = message

    def __str__(self) -> str:
        return self.message or f"interrupted by signal {self.signum}"
