"""The one exception of `solvers.lsq`: a row block that is missing, damaged or inconsistent."""

from __future__ import annotations

import shlex


class BlockError(ValueError):
    """A stored row block cannot be used: its file is missing, its bytes no longer match the
    checksum recorded when it was written, or its shape disagrees with the other blocks.

    ``task_id`` names the block's task (None when unknown). Picklable, so it crosses from a dask
    worker to the driver intact.
    """

    def __init__(self, message: str, task_id: str | None = None):
        super().__init__(message)
        self.task_id = task_id

    def __reduce__(self):
        return (type(self), (self.args[0], self.task_id))


def recompute_hint(task_id: str | None, ledger: str | None) -> str:
    """The way out of a damaged block: forget its task, run the assembly again."""
    where = shlex.quote(ledger) if ledger else "LEDGER"
    who = shlex.quote(task_id) if task_id is not None else "TASK_ID"
    return (f"run `campaign forget {where} {who}` and run the assembly again: only this block "
            "is computed again (`BlockStore.verify` lists every damaged block at once)")
