"""The driver's read of its ledger a block at a time, every record kept as its JSON bytes.

`campaign._ledger._document.load` parses the whole file and its journal into Python dicts: about
3.5 GB for a million tasks. A driver keeps its records as bytes anyway (`campaign._ledger._store`),
so `load` here reads the file with `campaign._ledger._scan.Scan` (a block at a time, every record
checked as `campaign._ledger._document.check` checks it, the same `LedgerError`s) and the journal a
line at a time (``as_bytes``: `campaign._ledger._journal.read`), and keeps only each record's bytes:
its memory is about the records' bytes plus one block's records as dicts. The document it returns is
the one `campaign._ledger._document.load` returns (the journal's records in place of the file's, its
new tasks last, its runs and ``updated``), with ``tasks`` a `RecordStore`.

A file `Scan` cannot split (written by hand, pretty-printed) is read whole, as `Scan` does, and
so is a ledger that another process changed while it was read (the caller did not hold
``<ledger>.lock``): the same answer, without the memory bound.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from . import _document, _scan
from ._scan import Scan
from ._store import RecordStore

logger = logging.getLogger(__name__)
#: Bytes read from the file at a time.
BLOCK = _scan.BLOCK


def load(path: str | os.PathLike[str], *, block: int | None = None
         ) -> tuple[dict[str, Any], _document.DiskState]:
    """`campaign._ledger._document.load`, read ``block`` bytes at a time (default `BLOCK`): the
    document (its ``tasks`` a `RecordStore` of bytes) and the `DiskState` of what was read.
    Raises `LedgerError` as `campaign._ledger._document.load` does; nothing is written."""
    path = Path(path)
    before = _document.file_state(path)
    store = RecordStore()
    scan = Scan(path, block=block or BLOCK, as_bytes=True)
    journal = RecordStore.of(scan.journal)  # as held: bytes
    try:
        for chunk in scan.chunks():
            for task_id, rec in chunk.items():
                held = journal.raw(task_id)  # the journal's record is ``rec``: its bytes shared
                if held is None:
                    store.add(task_id, rec)
                else:
                    store.set_raw(task_id, held)
    finally:
        scan.close()
    if before is None or scan.fell_back or _document.file_state(path) != before:
        # changed while it was read, or read cut short or garbled (a stale cache), or not in
        # the writer's layout: read whole (retried: `campaign._ledger._stale`), one version of it
        logger.debug("ledger %s changed or read wrong a block at a time; read whole", path)
        return _document.load(path)
    doc = {k: v for k, v in scan.head.items() if k != "tasks"}
    doc["tasks"] = store
    return doc, before
