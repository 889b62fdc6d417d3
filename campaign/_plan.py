"""Planning a run: which tasks are kept, which run, which are refused (their item changed)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from . import _records
from ._campaign import refused_message
from ._items import PreparedItem
from ._jsonvalue import changed_fields
from ._ledger import Ledger
from ._status import ACCEPTED

logger = logging.getLogger(__name__)

#: At most this many refused tasks are listed (with their changed fields) in the run's entry.
REFUSED_LISTED = 1000


@dataclass
class Plan:
    """What a run does with each item."""

    to_run: list[PreparedItem] = field(default_factory=list)
    kept: int = 0
    refused: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def plan(ledger: Ledger, prepared: list[PreparedItem]) -> Plan:
    """Compare the items with the ledger's records, record the new tasks as pending, put the
    ledger in item order, note the refusals in this run's entry, and flush."""
    tasks = ledger.tasks
    out = Plan()
    new = {}
    for p in prepared:
        rec = tasks.get(p.task_id)
        if rec is None:
            new[p.task_id] = _records.new_record(p.stored, p.fingerprint)
        elif rec["fingerprint"] != p.fingerprint:
            out.refused[p.task_id] = changed_fields(rec["item"], p.stored)
            continue
        elif rec["status"] == ACCEPTED:
            out.kept += 1
            continue
        out.to_run.append(p)
    listed = [{"task_id": tid, "changed": changed}
              for tid, changed in list(out.refused.items())[:REFUSED_LISTED]]
    ledger.put_many(new)
    ledger.order([p.task_id for p in prepared])
    ledger.set_run(total=len(prepared), refused=listed, refused_count=len(out.refused))
    ledger.flush()
    logger.info("campaign %s: %d tasks, %d accepted earlier, %d to run, %d refused",
                ledger.path, len(prepared), out.kept, len(out.to_run), len(out.refused))
    for tid, changed in list(out.refused.items())[:20]:
        logger.warning("%s", refused_message(tid, changed, str(ledger.path)))
    return out
