"""Checking the items of a campaign before any task runs, and their fingerprints."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from ._errors import ItemError
from ._jsonvalue import encode_item, fingerprint, unwritable_message

_SCALARS = frozenset({str, int, bool, type(None)})
_PREFIX = "sha256:"


class PreparedItem:
    """An item as the user gave it (passed to fn), its stored form and its fingerprint.

    One is held for every task of a run, so compactly: a flat item of plain scalars (a dict
    of str keys to str, int, bool, None and finite floats) is its own stored form, so only
    the item is kept, and the fingerprint is kept as its 32-byte digest.
    """

    __slots__ = ("_digest", "_stored", "item", "task_id")

    def __init__(self, task_id: str, item: Mapping[str, Any], stored: dict[str, Any],
                 fingerprint: str):
        self.task_id = task_id
        self.item = item
        self._stored = None if _own_stored_form(item) else stored
        self._digest = bytes.fromhex(fingerprint[len(_PREFIX):]) \
            if fingerprint.startswith(_PREFIX) and len(fingerprint) == 71 else fingerprint

    @property
    def stored(self) -> dict[str, Any]:
        """The item in its stored form (docs/ledger.md: non-finite floats tagged)."""
        return self.item if self._stored is None else self._stored  # type: ignore[return-value]

    @property
    def fingerprint(self) -> str:
        """``sha256:`` and the 64 hex digits of the item's fingerprint."""
        digest = self._digest
        return _PREFIX + digest.hex() if isinstance(digest, bytes) else digest

    def __repr__(self) -> str:
        return f"PreparedItem({self.task_id!r}, {self.item!r})"


def _own_stored_form(item: Any) -> bool:
    """True if `encode_item` gives back a dict equal to ``item`` holding the same objects: a
    dict of plain scalars (a float only when finite)."""
    if type(item) is not dict:
        return False
    values = item.values()
    kinds = set(map(type, values))
    if float in kinds:
        kinds.discard(float)
        if not all(math.isfinite(v) for v in values if type(v) is float):
            return False
    return _SCALARS.issuperset(kinds) and all(type(k) is str for k in item)


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
            stored = encode_item(item if type(item) is dict else dict(item), where)
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
