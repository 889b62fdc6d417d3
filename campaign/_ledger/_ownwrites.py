"""What a ledger's writer remembers of its own writes, for the merge with a file that a process
its lock did not exclude put in place meanwhile (a shared file system without coherent locks).

Each whole-file write begins an *epoch*; each record written since is remembered with the
epoch and the journal's size after the append that carried it (size 0: the file itself). A
file written by another process names what it was made from as its ``base`` (the generation it
read and how much of that file's journal, `campaign._ledger._update.made_from`): what this writer
wrote after that, the other process did not read, and the merge keeps it (`unread`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: How many of its last whole-file writes a writer remembers the records of; a file whose base
#: is older keeps all the writer remembers.
EPOCHS = 8


class OwnWrites:
    """The records one writer wrote in its last `EPOCHS` whole-file writes and the appends after
    them, by task id; and which generations were its own files (True) or files of another
    process it merged (False), with their epochs."""

    __slots__ = ("epoch", "generations", "records")

    def __init__(self) -> None:
        self.records: dict[str, tuple[int, int]] = {}
        self.generations: dict[str, tuple[int, bool]] = {}
        self.epoch = 0

    def __bool__(self) -> bool:
        return bool(self.records)

    def appended(self, task_ids: Iterable[str], journal_size: int) -> None:
        """These records went to the journal; it is ``journal_size`` bytes long after them."""
        for tid in task_ids:
            self.records[tid] = (self.epoch, journal_size)

    def wrote_file(self, generation: str, task_ids: Iterable[str]) -> None:
        """A whole file of this generation was written, carrying these changed records."""
        self.epoch += 1
        epoch = self.epoch
        self.generations[generation] = (epoch, True)
        for tid in task_ids:
            self.records[tid] = (epoch, 0)
        if len(self.generations) > 2 * EPOCHS:  # forget the oldest epochs
            self.generations = {g: e for g, e in self.generations.items()
                                if e[0] > epoch - EPOCHS}
            self.records = {t: m for t, m in self.records.items() if m[0] > epoch - EPOCHS}

    def merged(self, generation: str) -> None:
        """The file of another process, of this generation, was merged and adopted."""
        self.generations[generation] = (self.epoch, False)

    def unread(self, base: Any, current: str | None) -> list[str]:
        """The records this writer wrote that a file made from ``base`` (its ``base`` field)
        did not hold; ``current`` is the generation this writer last read or wrote."""
        base = base if isinstance(base, dict) else {}
        read, made_from = base.get("journal"), base.get("generation")
        known = self.generations.get(made_from) if isinstance(made_from, str) else None
        epoch: int | None = None
        own = True
        if known is not None:
            epoch, own = known
        elif made_from == current:
            epoch = self.epoch
        if not own:  # a file merged before: it held all of that epoch we had written
            read = float("inf")
        if epoch is None or not isinstance(read, (int, float)):
            return list(self.records)
        return [tid for tid, (e, size) in self.records.items()
                if e > epoch or (e == epoch and size > read)]
