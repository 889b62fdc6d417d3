"""The streaming scan with what array workers have not merged yet applied: their fragments'
records and the leases held now (`campaign status`, `campaign report`, `campaign results`).

`Overlay` applies them record by record to the chunks a `campaign._ledger._scan.Scan` yields, as
`campaign._array._workdir.overlay` applies them to a whole document.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ._records import from_fragment
from ._scan import BLOCK, Scan, columns_checked
from ._schema import Columns


class Overlay:
    """Array workers' fragments not merged yet, applied record by record: the records a scan
    yields become those `campaign._array._workdir.overlay` gives the whole document; leases held now
    show their task running (as `campaign status` shows them)."""

    def __init__(self, ledger: Path, *, with_leases: bool = True):
        from .._array._leases import live_leases
        from .._array._workdir import fragment_files, load_fragment, superseding

        self.pending: dict[str, list[dict[str, Any]]] = {}
        loaded = [records for records in map(load_fragment, fragment_files(ledger)) if records]
        for records in sorted(loaded, key=superseding):  # in `absorb_fragments`'s order
            for tid, rec in records.items():
                self.pending.setdefault(tid, []).append(rec)
        self.leases = live_leases(ledger) if with_leases else []
        self.held = {lease["task_id"]: lease for lease in self.leases}
        self._seen: set[str] = set()

    def __bool__(self) -> bool:
        return bool(self.pending or self.held)

    def touches(self, tasks: dict[str, Any]) -> bool:
        """Whether `apply` changes a record of ``tasks``."""
        return bool(self) and not (self.pending.keys().isdisjoint(tasks)
                                   and self.held.keys().isdisjoint(tasks))

    def apply(self, tasks: dict[str, Any]) -> dict[str, Any]:
        """``tasks`` (one chunk) with the fragments' records and the leases applied."""
        if not self:
            return tasks
        for tid in self.pending.keys() & tasks.keys() | self.held.keys() & tasks.keys():
            self._seen.add(tid)
            tasks[tid] = self._one(tid, tasks[tid])
        return tasks

    def unseen(self) -> dict[str, Any]:
        """The tasks only fragments hold (none of the chunks had them), at the end of a scan."""
        out = {}
        for tid in self.pending.keys() - self._seen:
            rec = self._one(tid, None)
            if rec is not None:
                out[tid] = rec
        return out

    def _one(self, tid: str, have: dict[str, Any] | None) -> dict[str, Any] | None:
        for rec in self.pending.get(tid, ()):  # as `merge_fragments` will apply them
            have = from_fragment(have, rec)
        lease = self.held.get(tid)
        if lease is not None and have is not None and have["status"] != "accepted":
            owner = lease["owner"]
            have = dict(have, status="running", host=owner.get("host"), pid=owner.get("pid"),
                        worker=owner.get("worker"), started=lease["claimed"])
        return have


def scan_columns(path: Path, *, with_leases: bool = True, block: int = BLOCK,
                 typed: bool = False) -> tuple[
        dict[str, Any], Iterator[tuple[dict[str, Any], Columns]], Overlay]:
    """The head, the checked chunks and their `Columns` with the array overlay applied (the
    tasks only fragments hold come last), and the overlay (for its leases). ``typed``: the
    chunks of `Scan.typed_blocks` (records not dicts where no fragment or lease touches them),
    for a reader of the columns and task ids only."""
    scan = Scan(path, block=block)
    over = Overlay(path, with_leases=with_leases)

    def blocks() -> Iterator[tuple[dict[str, Any], Columns]]:
        chunks = scan.typed_blocks(over.touches) if typed else scan.blocks()
        for tasks, cols in chunks:
            if over.touches(tasks):
                tasks = over.apply(tasks)
                cols = columns_checked(tasks, scan.path)
            yield tasks, cols
        extra = over.unseen()
        if extra:
            yield extra, columns_checked(extra, scan.path)

    return scan.head, blocks(), over


def scan_records(path: Path, *, with_leases: bool = True,
                 block: int = BLOCK) -> tuple[dict[str, Any], Iterator[dict[str, Any]], Overlay]:
    """`scan_columns` without the columns: the head, the checked chunks with the array overlay
    applied (the tasks only fragments hold come last), and the overlay (for its leases)."""
    head, blocks, over = scan_columns(path, with_leases=with_leases, block=block)
    return head, (tasks for tasks, _ in blocks), over
