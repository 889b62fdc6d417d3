"""An array worker's merges of fragments into the ledger: when (`MergeClock`), and its last.

Each merge rewrites the whole ledger, so merges are spaced out across all elements: an element
merges between tasks at most every ``merge_every`` seconds, never while another merges (the
ledger's lock is held), and not until ``SPACING`` times the last merge's duration has passed
since it saw any element's last merge. Every merge between tasks notes how long it took in
``<ledger>.work/merged.json``; an element that finds the file changed since it last looked
knows another merged just now (by its own clock: node clocks may differ). A merge of a bigger
ledger takes longer and so waits longer: merges take at most about a tenth of the elapsed time,
as the driver's compactions do (docs/ledger.md). At its end each element waits until its own
fragments are merged, one ending element merging at a time (`last_merge`).
"""

from __future__ import annotations

import logging
import random
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import filelock
import orjson

from .._ledger import _document, _ownership
from .._ledger._atomic import atomic_write
from .._ledger._paths import LedgerPaths
from ._leases import FolderMarks, Leases, exists_fresh
from ._workdir import merge_fragments

logger = logging.getLogger(__name__)

#: After a merge that took t seconds, the next merge between tasks waits SPACING * t: merges
#: take at most about 1 / (1 + SPACING) of the elapsed time (the driver's compaction rule).
SPACING = 9.0


class MergeClock:
    """When this element merges between tasks (see the module's text)."""

    def __init__(self, ledger: Path, every: float, *,
                 now: Callable[[], float] = time.monotonic):
        self.ledger, self.every, self.now = ledger, every, now
        self.path = LedgerPaths.of(ledger).work / "merged.json"
        self.seen = self._read()
        self.since = now()  # when this element last saw a merge (or began)

    def tick(self) -> None:
        """Merge now if a merge is due (`due`), and note it for the other elements."""
        if not self.due():
            return
        took = merge(self.ledger, wait=False)
        self.since = self.now()
        if took is not None:
            stamp = orjson.dumps({"took": took, "token": secrets.token_hex(6)})
            try:
                atomic_write(self.path, stamp, durable=False)
            except OSError as exc:  # a hint: the others merge sooner, nothing is lost
                logger.warning("cannot note the merge in %s (%s)", self.path, exc)
            else:
                self.seen = stamp

    def due(self) -> bool:
        """Whether this element merges now: ``every`` seconds since it last merged or saw a
        merge, and SPACING times the last merge's duration."""
        now = self.now()
        if now - self.since < self.every:
            return False  # no look at the file: one read every ``every`` seconds at most
        stamp = self._read()
        if stamp != self.seen:  # another element merged since we last looked
            self.seen, self.since = stamp, now
            return False
        return now - self.since >= SPACING * _took(stamp)

    def _read(self) -> bytes | None:
        try:
            return _ownership.read_bytes(self.path, self.ledger)
        except FileNotFoundError:
            return None


def _took(stamp: bytes | None) -> float:
    try:
        took = orjson.loads(stamp or b"{}").get("took", 0.0)
    except (orjson.JSONDecodeError, AttributeError):
        return 0.0
    return float(took) if isinstance(took, (int, float)) and took > 0 else 0.0


def merge(ledger: Path, *, wait: bool = True) -> float | None:
    """Merge the fragments into the ledger. ``wait=False`` (the merges between tasks): not
    while another process holds the ledger's lock; it is merging, and that merge or a later one
    (at the latest this worker's last, which waits) applies ours. Many workers waiting on the
    lock would spend their time polling it instead of running tasks. Returns the seconds the
    merge took, or None where it was skipped or failed."""
    if not wait and _lock_busy(ledger):
        return None
    begun = time.monotonic()
    try:
        merge_fragments(ledger)
    except Exception as exc:  # noqa: BLE001 -- the fragments stay; a later merge applies them
        logger.warning("merging fragments into %s failed (%s); they stay for later", ledger, exc)
        return None
    return time.monotonic() - begun


def last_merge(ledger: Path, written: list[Path], owner: dict[str, Any],
                lease_seconds: float) -> None:
    """Merge until this worker's fragments are in the ledger: done once the newest is gone (a
    merge removes a fragment only once the ledger holds its records, and the merge that applied
    the newest applied the older ones, there before it) or once we merged ourselves. One
    ending worker merges at a time: the one holding the merge turn, a lease in
    ``<ledger>.work/merging/`` (taken over once its holder stops renewing it); the others look
    again a little later, one lookup each, instead of queueing on the ledger's lock for a merge
    each of every fragment."""
    if not written:
        return
    newest = written[-1]
    turns = Leases(FolderMarks(LedgerPaths.of(ledger).work / "merging", ledger),
                   lease_seconds=lease_seconds, key=str)
    deadline = time.monotonic() + _document.LOCK_TIMEOUT
    while exists_fresh(newest):
        if time.monotonic() > deadline:
            merge(ledger)
            return
        turn = turns.claim("merge", owner)
        if turn is not None:
            try:
                if exists_fresh(newest):
                    merge(ledger)
            finally:
                turns.release(turn, done=False)
            return
        time.sleep(random.uniform(0.05, 0.5))
    written.clear()


def _lock_busy(ledger: Path) -> bool:
    probe = _document.file_lock(ledger)
    try:
        probe.acquire(blocking=False)
    except filelock.Timeout:
        return True
    except OSError:
        return False  # the merge reports it
    probe.release()
    return False
