"""What an array worker knows of the records it runs: its share's, or the whole ledger's.

A submission writes each share's records once (`campaign._array._shares.write_shares`), so an
element reads only the shares it claims, one small file each, never the ledger: what it reads
and holds does not grow with the submission. What other workers did since is in
``<ledger>.work/`` (``latest/``, ``accepted/``, ``done/``), read task by task.

A ``campaign forget`` may remove a task after the submission wrote its records. The submission
noted ``forgets.json`` before it read the ledger; once that file differs (`View.stale`), or said
a forget was under way, the worker reads the ledger itself (its fragments applied) under the
ledger's lock, which every forget holds from its first change to its last, and runs from it
from then on. A submission written before share records existed is run from the ledger too.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from .._ledger import _document
from .._ledger._status import ACCEPTED
from ._shares import Shares, items_path, share_meta
from ._workdir import busy_state, forget_state, overlay

logger = logging.getLogger(__name__)


class View:
    """The records of one submission's tasks as this worker read them, and the state of
    ``forgets.json`` noted before they were read (see the module's text)."""

    def __init__(self, shares: Shares):
        self.shares = shares
        self.work = work = shares.work
        self.ledger = work.ledger
        self.whole: dict[str, Any] | None = None  # the ledger's records, once read
        meta = share_meta(work)
        if meta.get("items") is True:
            forgets = meta.get("forgets")
            self.state = forgets.encode() if isinstance(forgets, str) else None
            if busy_state(self.state):
                self.load(locked=True)
        else:
            self.state = None
            self.load(locked=False)

    def records(self, n: int) -> dict[str, Any]:
        """Task id -> record for the tasks of share ``n`` (the whole ledger's, once read)."""
        if self.whole is not None:
            return self.whole
        records = self.shares.records(n)
        if records is None:
            logger.warning("share records %s are missing or not whole: reading ledger %s "
                           "instead", items_path(self.work.root, n), self.ledger)
            return self.load(locked=False)
        self.work.expect(records)
        return records

    def load(self, *, locked: bool) -> dict[str, Any]:
        """Read the ledger's records (its fragments applied), under its lock if ``locked``."""
        if locked:
            with _document.file_lock(self.ledger):
                self._read()
            logger.info("a forget changed ledger %s since its records were read: read it "
                        "again", self.ledger)
        else:
            self._read()
            if busy_state(self.state):
                return self.load(locked=True)
        assert self.whole is not None
        self.work.expect(self.whole)
        return self.whole

    def _read(self) -> None:
        self.state = forget_state(self.ledger)  # before the records: see the module's text
        self.whole = overlay(_document.read(self.ledger), self.ledger)["tasks"]

    def stale(self) -> bool:
        return forget_state(self.ledger) != self.state

    def still_to_run(self, tid: str) -> bool:
        """Whether ``tid``, just claimed, is still to run: if a forget ran since the records
        were read (`stale`), the ledger is read again under its lock first."""
        if not self.stale():
            return True
        tasks: Mapping[str, Any] = self.load(locked=True)
        return tid in tasks and tasks[tid]["status"] != ACCEPTED and not self.work.is_done(tid)
