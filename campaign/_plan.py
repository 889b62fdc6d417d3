"""Planning a run: which tasks are kept, which run, which are refused (their item changed)."""

from __future__ import annotations

import logging
import os
import time
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._array._workdir import fragment_files, merge_fragments, overlay
from ._campaign import Campaign, more_refused_message, refused_message
from ._errors import LedgerError
from ._items import ItemSelection, PreparedItems
from ._ledger import _document, _records, _storeload, _update
from ._ledger._driver import Ledger
from ._ledger._jsonvalue import changed_fields
from ._ledger._paths import LedgerPaths
from ._ledger._scan import Scan
from ._ledger._status import ACCEPTED, PENDING
from ._ledger._store import RecordStore

logger = logging.getLogger(__name__)

#: At most this many refused tasks are listed (with their changed fields) in the run's entry.
REFUSED_LISTED = 1000
#: At most this many refused tasks are warned about one by one; a last warning counts the rest.
REFUSED_WARNED = 20


@dataclass
class Plan:
    """What a run does with each item: ``to_run`` the items whose tasks run, in item order."""

    to_run: ItemSelection
    kept: int = 0
    refused: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def never_started(rec: dict[str, Any]) -> bool:
    """A record with nothing to protect: pending, no attempt ever started, no result."""
    return rec["status"] == PENDING and not rec.get("attempts") and rec.get("result") is None


def compare(tasks: Mapping[str, dict[str, Any]], prepared: PreparedItems
            ) -> tuple[Plan, RecordStore]:
    """What a run does with each item, given the ledger's records; reads only.

    Returns the plan and the records to store, encoded as they are made (`RecordStore.add`):
    a new pending record for each task the ledger does not know, and for each task that was
    never started whose item changed (it has no result to protect, so it takes the new item
    and its fingerprint).
    """
    refused: dict[str, list[dict[str, Any]]] = {}
    kept = 0
    to_run = array("q")  # item indices: 8 bytes a task
    new = RecordStore()
    for index, tid in enumerate(prepared.task_ids):
        rec = tasks.get(tid)
        if rec is None:
            new.add(tid, _records.new_record(prepared.stored_json(index),
                                             prepared.fingerprint(index)))
        elif not prepared.same_item(index, rec):
            if not never_started(rec):
                refused[tid] = changed_fields(rec["item"], prepared.stored(index))
                continue
            new.add(tid, _records.new_record(prepared.stored_json(index),
                                             prepared.fingerprint(index)))
        elif rec["status"] == ACCEPTED:
            kept += 1
            continue
        to_run.append(index)
    return Plan(ItemSelection(prepared, to_run), kept, refused), new


def plan(ledger: Ledger, prepared: PreparedItems) -> Plan:
    """Compare the items with the ledger's records (`compare`), record the new tasks as
    pending, put the ledger in item order, note the refusals in this run's entry, and flush."""
    out, new = compare(ledger.tasks, prepared)
    listed = [{"task_id": tid, "changed": changed}
              for tid, changed in list(out.refused.items())[:REFUSED_LISTED]]
    ledger.put_many(new)
    ledger.order(prepared.task_ids)
    fields: dict[str, Any] = {"total": len(prepared), "kept": out.kept, "refused": listed,
                              "refused_count": len(out.refused)}
    if len(out.refused) > len(listed):  # every id, for `campaign forget --refused`
        fields["refused_ids"] = list(out.refused)
    if prepared.ignore_fields:
        fields["ignore_fields"] = list(prepared.ignore_fields)
    ledger.set_run(**fields)
    if out.to_run:  # the new tasks are durable before any of them starts
        ledger.flush()
    logger.info("%s", _kept_line(ledger.path, len(prepared), out.kept, len(out.to_run),
                                 len(out.refused)))
    for tid, changed in list(out.refused.items())[:REFUSED_WARNED]:
        logger.warning("%s", refused_message(tid, changed, str(ledger.path)))
    if len(out.refused) > REFUSED_WARNED:
        logger.warning("%s", more_refused_message(len(out.refused) - REFUSED_WARNED,
                                                  str(ledger.path)))
    return out


def nothing_to_run(path: str | os.PathLike[str], prepared: PreparedItems) -> Campaign | None:
    """The campaign as the ledger holds it when every item is accepted there with the same
    fingerprint (a finished campaign resumed), else None.

    Reads the ledger (its journal and array fragments included), a block at a time, and writes
    nothing, but array workers' fragments not merged yet are merged into the file first, and a
    journal left by a killed driver is compacted into it (one write each), so that the file
    alone then holds everything; no scheduler is needed. Raises `LedgerError` for a ledger that
    is not valid (it is left untouched).
    """
    begun = time.monotonic()
    path = Path(path)
    if not path.exists():
        return None
    if fragment_files(path):
        merge_fragments(path)  # into the file, not only into what is returned
        tasks = _accepted_loaded(path, prepared)
    elif not LedgerPaths.of(path).journal.exists():  # the common case, a finished ledger
        tasks = _accepted_scanned(path, prepared)
    else:  # a killed driver's journal: read again whole (a block at a time) to compact it
        tasks = _accepted_loaded(path, prepared) \
            if _accepted_scanned(path, prepared, keep=False) is not None else None
    if tasks is None:
        return None
    logger.info("%s", _kept_line(path, len(prepared), len(prepared), 0, 0))
    return Campaign.from_records(path, prepared.task_ids, tasks, {},
                                 kept=len(prepared), ran=0, elapsed=time.monotonic() - begun)


def _accepted_loaded(path: Path, prepared: PreparedItems) -> Mapping[str, Any] | None:
    """`nothing_to_run`'s records from the whole document (the journal and the array
    fragments merged; read a block at a time, `campaign._ledger._storeload`), the journal then
    compacted into the file; None if an item is not accepted with its fingerprint."""
    doc, state = _storeload.load(path)
    tasks = overlay(doc, path)["tasks"]
    ids = prepared.task_ids
    if any(tasks.status(tid) != ACCEPTED for tid in ids):  # read from the bytes
        return None
    for index, tid in enumerate(ids):
        if not prepared.same_item(index, tasks[tid]):
            return None
    if LedgerPaths.of(path).journal.exists():
        _compact(path, doc, state)
    return tasks


def _accepted_scanned(path: Path, prepared: PreparedItems, *, keep: bool = True
                      ) -> RecordStore | None:
    """`nothing_to_run`'s records, read a block at a time (`campaign._ledger._scan.Scan` with
    ``as_bytes``, checked as `campaign.read_ledger` checks them) and kept as their bytes (none
    without ``keep``), the items' tasks only; None as soon as one is not accepted with its item's
    fingerprint, or if one is missing. It stops at the first task still to run."""
    ids = prepared.task_ids
    found = bytearray(len(ids))
    where: dict[str, int] | None = None  # built only if the file is not in item order
    following = 0
    store = RecordStore()
    scan = Scan(path, as_bytes=True)
    try:
        for chunk in scan.chunks():
            for tid, rec in chunk.items():
                if following < len(ids) and ids[following] == tid:
                    index = following
                else:
                    if where is None:
                        where = {t: i for i, t in enumerate(ids)}
                    at = where.get(tid)
                    if at is None:
                        continue  # a task of the ledger that is not among the items
                    index = at
                if rec["status"] != ACCEPTED or not prepared.same_item(index, rec):
                    return None
                following, found[index] = index + 1, 1
                if keep:
                    store.add(ids[index], rec)
    finally:
        scan.close()
    return store if found.count(0) == 0 else None


def _compact(path: Path, doc: dict[str, Any], state: _document.DiskState) -> None:
    """Write ``doc`` as the whole file and remove the journal, if the ledger is still as
    ``state`` says (else it is read again under the lock); a failure is only logged (what
    it held stays on disk, in the file and the journal)."""
    try:
        _update.compact(path, doc, state)
    except (LedgerError, OSError) as exc:
        logger.warning("%s", exc)


def _kept_line(path: Any, total: int, kept: int, to_run: int, refused: int) -> str:
    """What a run does, for the log: ``... 3 kept from the ledger (accepted earlier), 2 to run
    now`` or ``... nothing to run``."""
    now = f"{to_run} to run now" if to_run else "nothing to run"
    tasks = f"{total} task" + ("" if total == 1 else "s")
    return (f"campaign {path}: {tasks}, {kept} kept from the ledger (accepted earlier), "
            f"{now}" + (f", {refused} refused (item changed)" if refused else ""))
