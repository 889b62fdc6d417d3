"""Checking the items of a campaign before any task runs, and holding them compactly.

`prepare_items` reads the items once (an iterator is consumed as it goes: no item is kept as
the object it was given as unless it has to be) and returns `PreparedItems`: per item its task
id, its fingerprint (the 32-byte SHA-256 digest) and its stored form as JSON bytes. An item
that is its own stored form (dicts with str keys, lists, str, int, bool, None and finite
floats: what JSON reads back as equal values of the same types) is kept as those bytes alone
and decoded when its task is handed out; any other item (a tuple, a non-finite float, a numpy
scalar, a `Mapping` that is not a dict) is kept as given beside the bytes, since ``fn`` is
given the item as the user gave it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

import orjson

from ._errors import ItemError
from ._ledger._jsonvalue import encode_item, fingerprint, unwritable_message

_SCALARS = frozenset({str, int, bool, type(None)})
_CONTAINERS = frozenset({dict, list})
_PREFIX = "sha256:"
_DIGEST = 32  # bytes of a SHA-256 digest, first in every entry's bytes


class PreparedItems(Sequence["PreparedItem"]):
    """The checked items of a run, in item order, held compactly.

    ``task_ids`` lists the task ids. Each entry is ``digest + JSON of the stored form`` (a
    `bytes`), or, for an item that is not its own stored form, the pair ``(item, bytes)``.
    Indexing gives a `PreparedItem` that reads its entry when asked. `release` drops an entry
    that is no longer needed (its task ran, or it does not run); its task id stays.
    """

    __slots__ = ("_entries", "ignore_fields", "task_ids")

    def __init__(self, ignore_fields: Sequence[str] = ()) -> None:
        self.task_ids: list[str] = []
        self._entries: list[bytes | tuple[Any, bytes] | None] = []
        #: top-level fields that do not count when an item is compared with its record
        self.ignore_fields: tuple[str, ...] = tuple(ignore_fields)

    def _add(self, task_id: str, item: Any, stored: Any, digest: str) -> None:
        data = bytes.fromhex(digest[len(_PREFIX):]) + orjson.dumps(stored)
        self.task_ids.append(task_id)
        self._entries.append(data if _plain(item) else (item, data))

    def _bytes(self, index: int) -> bytes:
        entry = self._entries[index]
        if isinstance(entry, bytes):
            return entry
        if entry is None:
            raise LookupError(f"item {index} (task {self.task_ids[index]!r}) was released: its "
                              "task needs it no more")
        return entry[1]

    def item(self, index: int) -> Any:
        """The item as ``fn`` is given it (equal to the one given to `prepare_items`)."""
        entry = self._entries[index]
        if isinstance(entry, bytes):
            return orjson.loads(memoryview(entry)[_DIGEST:])
        return entry[0] if entry is not None else self._bytes(index)  # (raises)

    def stored(self, index: int) -> Any:
        """The item in its stored form (docs/ledger.md: non-finite floats tagged)."""
        return orjson.loads(memoryview(self._bytes(index))[_DIGEST:])

    def stored_json(self, index: int) -> orjson.Fragment:
        """The stored form as JSON, to put in a record that is encoded at once."""
        return orjson.Fragment(self._bytes(index)[_DIGEST:])

    def fingerprint(self, index: int) -> str:
        """``sha256:`` and the 64 hex digits of the item's fingerprint."""
        return _PREFIX + self._bytes(index)[:_DIGEST].hex()

    def same_item(self, index: int, rec: Mapping[str, Any]) -> bool:
        """Whether the record ``rec`` is of this item: the same fingerprint, or, with
        ``ignore_fields``, items that differ in those top-level fields only."""
        if rec["fingerprint"] == self.fingerprint(index):
            return True
        if not self.ignore_fields or not isinstance(rec.get("item"), dict):
            return False
        return fingerprint(_without(rec["item"], self.ignore_fields)) \
            == fingerprint(_without(self.stored(index), self.ignore_fields))

    def release(self, index: int) -> None:
        """Drop the item's entry (its task id stays)."""
        self._entries[index] = None

    def keep_only(self, indices: Sequence[int]) -> None:
        """Release every entry but these (ascending indices)."""
        entries = self._entries
        if len(indices) == len(entries):
            return
        wanted = iter(indices)
        following = next(wanted, None)
        for i in range(len(entries)):
            if i == following:
                following = next(wanted, None)
            else:
                entries[i] = None

    @overload
    def __getitem__(self, index: int) -> PreparedItem: ...
    @overload
    def __getitem__(self, index: slice) -> list[PreparedItem]: ...

    def __getitem__(self, index: int | slice) -> PreparedItem | list[PreparedItem]:
        if isinstance(index, slice):
            return [PreparedItem(self, i) for i in range(len(self))[index]]
        if not -len(self) <= index < len(self):
            raise IndexError(f"item index {index} out of range for {len(self)} items")
        return PreparedItem(self, index % len(self))

    def __iter__(self) -> Iterator[PreparedItem]:
        return (PreparedItem(self, i) for i in range(len(self)))

    def __len__(self) -> int:
        return len(self.task_ids)

    def __repr__(self) -> str:
        return f"<{len(self)} prepared items>"


class PreparedItem:
    """One item of `PreparedItems`: its task id, the item as given (passed to fn), its stored
    form and its fingerprint, read from the compact entry when asked."""

    __slots__ = ("_index", "_items")

    def __init__(self, items: PreparedItems, index: int):
        self._items = items
        self._index = index

    @property
    def task_id(self) -> str:
        return self._items.task_ids[self._index]

    @property
    def item(self) -> Any:
        return self._items.item(self._index)

    @property
    def stored(self) -> Any:
        return self._items.stored(self._index)

    @property
    def fingerprint(self) -> str:
        return self._items.fingerprint(self._index)

    def __repr__(self) -> str:
        return f"PreparedItem({self.task_id!r}, {self.item!r})"


class ItemSelection(Sequence[PreparedItem]):
    """Some of a run's items (e.g. those a plan runs), in item order, by their indices."""

    __slots__ = ("indices", "items")

    def __init__(self, items: PreparedItems, indices: Sequence[int]):
        self.items = items
        self.indices = indices

    @overload
    def __getitem__(self, index: int) -> PreparedItem: ...
    @overload
    def __getitem__(self, index: slice) -> list[PreparedItem]: ...

    def __getitem__(self, index: int | slice) -> PreparedItem | list[PreparedItem]:
        if isinstance(index, slice):
            return [PreparedItem(self.items, i) for i in self.indices[index]]
        return PreparedItem(self.items, self.indices[index])

    def __iter__(self) -> Iterator[PreparedItem]:
        return (PreparedItem(self.items, i) for i in self.indices)

    def __len__(self) -> int:
        return len(self.indices)

    def __repr__(self) -> str:
        return f"<{len(self)} of {len(self.items)} prepared items>"


def _plain(value: Any) -> bool:
    """True if JSON of ``value`` reads back as an equal value of the same types: dicts with
    str keys, lists, str, int, bool, None and finite floats (nested no deeper than
    `encode_item` allows, which checked it first)."""
    kind = type(value)
    if kind is dict:
        if not all(type(k) is str for k in value):
            return False
        values: Iterable[Any] = value.values()
    elif kind is list:
        values = value
    else:
        return kind in _SCALARS or (kind is float and math.isfinite(value))
    kinds = set(map(type, values))
    if float in kinds:
        kinds.discard(float)
        if not all(math.isfinite(v) for v in values if type(v) is float):
            return False
    if kinds & _CONTAINERS:
        if not all(_plain(v) for v in values if type(v) in _CONTAINERS):
            return False
        kinds -= _CONTAINERS
    return _SCALARS.issuperset(kinds)


def prepare_items(items: Iterable[Mapping[str, Any]],
                  ignore_fields: Iterable[str] = ()) -> PreparedItems:
    """Check every item and compute its fingerprint. Raises `ItemError` on the first problem
    (naming the item's index, its task id and the path inside it), except for duplicate task
    ids, which are all listed together once every item was checked. ``ignore_fields``: the
    top-level fields an item may gain, lose or change and still be its task's
    (`PreparedItems.same_item`); checked by `check_ignore_fields`."""
    if isinstance(items, (str, bytes, Mapping)):
        raise ItemError(
            f"items must be a list of dicts, each with a 'task_id'; got a {type(items).__name__}"
        )
    prepared = PreparedItems(check_ignore_fields(ignore_fields))
    for index, item in enumerate(items):
        task_id = _task_id(index, item)
        where = f"items[{index}]"
        try:
            stored = encode_item(item if type(item) is dict else dict(item), where)
            digest = fingerprint(stored)
        except ItemError as exc:
            raise ItemError(f"task {task_id!r}: {exc}") from None
        except TypeError:  # orjson refused a string: find which one
            raise ItemError(f"task {task_id!r}: {unwritable_message(stored, where)}") from None
        prepared._add(task_id, item, stored, digest)
    _refuse_duplicates(prepared.task_ids)
    return prepared


def check_ignore_fields(fields: Iterable[str]) -> tuple[str, ...]:
    """``ignore_fields`` as a tuple of field names; `ValueError` for anything else, and for
    ``task_id`` (the task's name is never ignored)."""
    if isinstance(fields, (str, bytes)):
        raise ValueError(f"ignore_fields must be a list of field names, got the string "
                         f"{fields!r}; write ignore_fields=({fields!r},)")
    names = tuple(fields)
    bad = [name for name in names if type(name) is not str or not name]
    if bad:
        raise ValueError(f"ignore_fields must be field names (non-empty strings), got {bad[0]!r}")
    if "task_id" in names:
        raise ValueError("ignore_fields cannot hold 'task_id': it names the task; give the "
                         "changed items new task ids instead")
    return tuple(dict.fromkeys(names))


def _without(item: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in fields}


def _task_id(index: int, item: Any) -> str:
    """The item's task id, or `ItemError` saying what is wrong with the item."""
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
    return task_id


def _refuse_duplicates(task_ids: list[str]) -> None:
    if len(set(task_ids)) == len(task_ids):
        return
    counts = Counter(task_ids)
    duplicates = [tid for tid, n in counts.items() if n > 1]
    shown = ", ".join(f"{tid!r} ({counts[tid]}x)" for tid in duplicates[:20])
    more = f" and {len(duplicates) - 20} more" if len(duplicates) > 20 else ""
    raise ItemError(
        f"{len(duplicates)} task_id(s) appear more than once: {shown}{more}; every item "
        "needs its own task_id"
    )
