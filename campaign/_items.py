"""Checking the items of a campaign before any task runs, and their fingerprints."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ._errors import ItemError
from ._jsonvalue import encode_item, fingerprint, unwritable_message


@dataclass(frozen=True, slots=True)
class PreparedItem:
    """An item as the user gave it (passed to fn), its stored form and its fingerprint."""

    task_id: str
    item: Mapping[str, Any]
    stored: dict[str, Any]
    fingerprint: str


def prepare_items(items: Iterable[Mapping[str, Any]]) -> list[PreparedItem]:
    """Check every item and compute its fingerprint. Raises `ItemError` on the first problem
    (naming the item's index, its task id and the path inside it), except for duplicate task
    ids, which are all listed together."""
    if isinstance(items, (str, bytes, Mapping)):
        raise ItemError(
            f"items must be a list of dicts, each with a 'task_id'; got a {type(items).__name__}"
        )
    prepared = []
    for index, item in enumerate(items):
        where = f"items[{index}]"
        if not isinstance(item, Mapping):
            raise ItemError(
                f"{where} is a {type(item).__name__}, not a dict; each item is a dict with a "
                "'task_id', e.g. {'task_id': 'A', 'temperature': 300}"
            )
        if "task_id" not in item:
            keys = ", ".join(repr(k) for k in list(item)[:6]) or "none"
            raise ItemError(
                f"{where} has no 'task_id' (its keys: {keys}); give every item a 'task_id' "
                "string that stays the same across restarts"
            )
        task_id = item["task_id"]
        if not isinstance(task_id, str) or not task_id:
            raise ItemError(
                f"{where} has the task_id {task_id!r}; a task_id is a non-empty string, e.g. "
                f"'{index}' or 'sample-{index}'"
            )
        try:
            stored = encode_item(dict(item), where)
            digest = fingerprint(stored)
        except ItemError as exc:
            raise ItemError(f"task {task_id!r}: {exc}") from None
        except TypeError:  # orjson refused a string: find which one
            raise ItemError(f"task {task_id!r}: {unwritable_message(stored, where)}") from None
        prepared.append(PreparedItem(task_id, item, stored, digest))
    counts = Counter(p.task_id for p in prepared)
    duplicates = [tid for tid, n in counts.items() if n > 1]
    if duplicates:
        shown = ", ".join(f"{tid!r} ({counts[tid]}x)" for tid in duplicates[:20])
        more = f" and {len(duplicates) - 20} more" if len(duplicates) > 20 else ""
        raise ItemError(
            f"{len(duplicates)} task_id(s) appear more than once: {shown}{more}; every item "
            "needs its own task_id"
        )
    return prepared
