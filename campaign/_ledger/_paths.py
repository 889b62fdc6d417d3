"""The files of one ledger, named once (`LedgerPaths`): the ledger file, symlinks resolved, and
the files and folder beside it that every lock, write and reader acts on (docs/ledger.md).

- ``<ledger>.lock``: the lock of every read-merge-write (`campaign._ledger._ledger_lock`);
- ``<ledger>.journal``: the commits appended between whole-file writes
(`campaign._ledger._journal`);
- ``<ledger>.driver``: the ``flock`` a driver holds for its run, and ``<ledger>.driver.<n>``
  its lease (`campaign._ledger._owner_lease`);
- ``<ledger>.work/``: the job arrays' folder (`campaign._array._workdir`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

LOCK = ".lock"
JOURNAL = ".journal"
DRIVER = ".driver"
WORK = ".work"


@dataclass(frozen=True, slots=True)
class LedgerPaths:
    """The ledger's files, beside the file its path resolves to (a symlinked ledger's files
    are the target's, so two names of one ledger share one lock). Build it once with `of`
    and pass it on: `of` returns a `LedgerPaths` it is given as it is."""

    file: Path
    lock: Path
    journal: Path
    driver: Path
    work: Path

    @classmethod
    def of(cls, ledger: str | os.PathLike[str] | LedgerPaths) -> LedgerPaths:
        if isinstance(ledger, LedgerPaths):
            return ledger
        file = Path(os.path.realpath(ledger))
        name = file.name
        return cls(file, file.with_name(name + LOCK), file.with_name(name + JOURNAL),
                   file.with_name(name + DRIVER), file.with_name(name + WORK))
