"""Shares of a submission: runs of consecutive tasks that an array element claims as one.

The submission cuts its task list into shares of ``size`` tasks, written once beside it
(``<submission>/shares.json``; `share_size`: about eight shares per element). An element claims
a whole share by the exclusive create of the share's lease, ``<submission>/shares/s<n>.json``
(the leases of campaign/_array/_leases.py: renewed by a heartbeat, taken over by their next
generation once expired), runs its tasks, each still claimed by its own task lease, and marks the
share ended (``s<n>.done``) once every task of it has ended. It then claims the share after it;
where that one is taken or ended, it lists ``shares/`` once and goes to the middle of the
longest run of shares that nobody holds or ended (`Picker`). An element so looks only at the
tasks of the shares it holds, never at those another element runs or ended: what claiming costs
per task does not grow with the elements.

A share whose tasks are held by workers of another submission (or by a worker past its share's
lease) is released unended and looked at again a little later; once every share is ended or held,
an element waits on those held, and takes over any whose holder stopped renewing its lease (it
was killed, or its node lost): its tasks' leases expire too and are taken over, as today.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import re
import time
from pathlib import Path
from typing import Any

import orjson

from .._errors import LedgerError
from .._ledger import _ownership
from .._ledger._atomic import atomic_write
from .._ledger._paths import LedgerPaths
from .._ledger._store import RecordStore
from ._leases import Leases
from ._workdir import WorkDir, task_list_path

logger = logging.getLogger(__name__)

#: Shares per element the submission aims at: enough that elements ending their own take
#: others' untouched ones, while a share stays long enough to pay for its claim.
PER_ELEMENT = 8
#: The elements assumed where a submission does not say (`run_worker` called by hand).
ELEMENTS = 64
#: The longest share: a dead element's share waits a lease for the next element to take it.
MOST = 256

_NAME = re.compile(r"s(\d+)(?:\.\d+)?\.(json|done)")


def share_size(tasks: int, elements: int | None = None) -> int:
    """The tasks per share for a submission of ``tasks`` tasks and ``elements`` elements."""
    per = tasks // (PER_ELEMENT * max(1, elements or ELEMENTS))
    return max(1, min(MOST, per))


def share_name(n: int) -> str:
    return f"s{n:07d}"


def items_path(work_root: Path, n: int) -> Path:
    """``<submission>/items/s<n>.json``: the records of share ``n``'s tasks at submission."""
    return work_root / "items" / f"{share_name(n)}.json"


def write_shares(ledger: Path, submission: str, task_ids: list[str], size: int,
                 records: RecordStore, forgets: bytes | None) -> None:
    """What the elements of a submission read instead of the ledger, written once at
    submission, before its task list: each share's records (task id -> record, as the ledger
    holds them; ``items/s<n>.json``), then ``shares.json``: the share size, and ``forgets``,
    the state of ``forgets.json`` noted before the ledger was read (a forget since then makes
    an element read the ledger itself, campaign/_array/_view.py)."""
    root = LedgerPaths.of(ledger).work / submission
    _ownership.make_folder(root / "items", ledger)
    for n in range(-(-len(task_ids) // size)):
        parts = []
        for tid in task_ids[n * size:(n + 1) * size]:
            data = records.encoded(tid)  # None: unwritable, recorded failed (not to run)
            if data is not None:
                parts.append(orjson.dumps(tid) + b":" + data)
        atomic_write(items_path(root, n), b"{" + b",".join(parts) + b"}")
    meta = {"size": size, "count": -(-len(task_ids) // size), "items": True,
            "forgets": None if forgets is None else forgets.decode(errors="replace")}
    atomic_write(root / "shares.json", orjson.dumps(meta))


def share_meta(work: WorkDir) -> dict[str, Any]:
    """``<submission>/shares.json`` ({} where it is missing or not whole: a submission made
    before shares, or by hand)."""
    try:
        meta = _ownership.read_json(work.root / "shares.json", work.ledger)
    except (FileNotFoundError, orjson.JSONDecodeError):
        return {}
    return meta if isinstance(meta, dict) else {}


class ShareMarks:
    """The `Leases` marks of a submission's shares: ``shares/s<n>.json`` and ``s<n>.done``."""

    def __init__(self, work: WorkDir):
        self.leases = self.latest = work.root / "shares"
        _ownership.make_folder(self.leases, work.ledger)

    def is_done(self, task_id: str) -> bool:
        return os.path.exists(f"{self.leases}/{task_id}.done")

    def mark_done(self, task_id: str, *, accepted: bool) -> None:
        (self.leases / f"{task_id}.done").touch(mode=0o644)


class Shares:
    """The shares of one submission's task list, and their leases.

    ``task_ids`` None: the count comes from ``shares.json`` and each share's ids and records
    from its own file (`records`), so that an element never reads the whole task list; the
    list is read only where those files are missing (a submission made before them)."""

    def __init__(self, work: WorkDir, task_ids: list[str] | None, *, lease_seconds: float):
        self.work = work
        count = share_meta(work).get("count") if task_ids is None else None
        self.task_ids: list[str] | None
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
            self.task_ids, self.size, self.count = None, _size(work, 0), count
        else:
            ids = read_task_list(work) if task_ids is None else task_ids
            self.task_ids, self.size = ids, _size(work, len(ids))
            self.count = -(-len(ids) // self.size)
        self.marks = ShareMarks(work)
        self.leases = Leases(self.marks, lease_seconds=lease_seconds, key=str)
        self._records: tuple[int, dict[str, Any] | None] | None = None

    def ids(self, n: int) -> list[str]:
        if self.task_ids is None:
            records = self.records(n)
            if records is not None:
                return list(records)
            self.task_ids = read_task_list(self.work)
        return self.task_ids[n * self.size:(n + 1) * self.size]

    def records(self, n: int) -> dict[str, Any] | None:
        """Task id -> record of share ``n``'s tasks as the submission wrote them
        (`write_shares`), or None where its file is missing or not whole."""
        if self._records is None or self._records[0] != n:
            path = items_path(self.work.root, n)
            try:
                records = _ownership.read_json(path, self.work.ledger)
            except (FileNotFoundError, orjson.JSONDecodeError):
                records = None
            self._records = (n, records if isinstance(records, dict) else None)
        return self._records[1]

    def listing(self) -> tuple[set[int], set[int]]:
        """(the shares ended, the shares whose lease file exists), from one listing."""
        ended: set[int] = set()
        held: set[int] = set()
        for name in os.listdir(self.marks.leases):
            match = _NAME.fullmatch(name)
            if match is not None:
                (ended if match[2] == "done" else held).add(int(match[1]))
        return ended, held - ended


def read_task_list(work: WorkDir) -> list[str]:
    """The submission's task ids, in the order `submit_array` wrote them."""
    path = task_list_path(work.ledger, work.submission)
    try:
        return _ownership.read_json(path, work.ledger)
    except FileNotFoundError:
        raise LedgerError(f"ledger {work.ledger} has no submission {work.submission!r} (no "
                          f"{path}); submit it with `campaign submit`") from None


def _size(work: WorkDir, tasks: int) -> int:
    size = share_meta(work).get("size")
    if type(size) is not int or size < 1:
        return share_size(tasks)  # a submission written before shares: every worker agrees
    return size


class Picker:
    """Which share an element claims next (see the module's text)."""

    def __init__(self, shares: Shares, owner: dict[str, Any],
                 position: tuple[int, int] | None, poll: float):
        self.shares, self.owner, self.poll = shares, owner, poll
        count = shares.count
        self.next: int | None = (random.randrange(count) if position is None
                                 else position[0] * count // position[1]) if count else None
        self.later: dict[int, float] = {}  # shares released with tasks held elsewhere: when

    def defer(self, n: int) -> None:
        """Share ``n`` was released unended (another worker holds some of its tasks)."""
        self.later[n] = time.monotonic() + self.poll

    def claim(self, stopped: Any) -> tuple[int, dict[str, Any]] | None:
        """Claim a share: (its number, its lease), or None once every share has ended (or
        ``stopped()`` says the worker stops)."""
        leases = self.shares.leases
        while not stopped():
            if self.next is not None and self.next < self.shares.count \
                    and self.next not in self.later:
                n, self.next = self.next, None
                lease = leases.claim(share_name(n), self.owner)
                if lease is not None:
                    self.next = n + 1
                    return n, lease
            ended, held = self.shares.listing()
            if len(ended) >= self.shares.count:
                return None
            now = time.monotonic()
            self.later = {n: at for n, at in self.later.items() if at > now and n not in ended}
            free = [n for n in range(self.shares.count)
                    if n not in ended and n not in held and n not in self.later]
            if free:
                self.next = _middle_of_longest_run(free)
                continue
            for n in sorted(held):  # all held: take over any whose holder died
                lease = leases.claim(share_name(n), self.owner)
                if lease is not None:
                    self.next = n + 1
                    return n, lease
            time.sleep(self.poll)
        return None


def _middle_of_longest_run(free: list[int]) -> int:
    """The middle of the longest run of consecutive numbers in ``free`` (sorted, not empty):
    elements that list at once mostly pick different shares, far from their holders."""
    best_start, best_len, start = free[0], 1, free[0]
    for prev, n in itertools.pairwise(free):
        if n != prev + 1:
            start = n
        if n - start + 1 > best_len:
            best_start, best_len = start, n - start + 1
    return best_start + best_len // 2
