"""The task records a driver holds, compactly: each as its JSON bytes, decoded when looked up.

A ledger of 10⁶ tasks held as Python dicts takes gigabytes; as the bytes the file stores it
takes about the file's size. `RecordStore` is the ``tasks`` mapping of a `campaign.Ledger`: a
record put since the last commit is held as the dict it was put as; a commit encodes it
(`encode`, `parts`) and keeps only its bytes, which the file and the journal are then written
from without encoding it again. Looking a record up decodes it (a new dict each time: records
are never changed in place, `campaign._ledger._records`). `status` reads a record's status from its
bytes without decoding the rest.

A record orjson refuses (a string that is not valid UTF-8 that got past validation) never blocks
the others: it is replaced by the task recorded failed with the reason
(`unwritable_record`), or, if even that cannot be written, left out of the
file and kept as it is; both are logged as errors.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any

import orjson

from ._jsonvalue import unwritable_message
from ._status import FAILED

logger = logging.getLogger(__name__)

Record = dict[str, Any]
#: How many records one chunk of a whole-file write holds (`chunks`).
CHUNK = 4096
#: Where a record's status begins in its bytes when ``status`` is its first key (it is in the
#: records this package makes: `campaign._ledger._records.new_record` puts it first).
_HEAD = b'{"status":"'
_STATUSES: dict[bytes, str] = {}


class RecordStore(MutableMapping[str, Record]):
    """Task id -> record, in the ledger's order; values held as bytes once encoded."""

    __slots__ = ("_values",)

    def __init__(self, records: Mapping[str, Record] | None = None):
        self._values: dict[str, Record | bytes] = dict(records) if records else {}

    @classmethod
    def of(cls, tasks: Mapping[str, Record]) -> RecordStore:
        """``tasks`` itself if it is a store, else a store of its records."""
        return tasks if isinstance(tasks, RecordStore) else cls(tasks)

    def __getitem__(self, task_id: str) -> Record:
        value = self._values[task_id]
        return orjson.loads(value) if isinstance(value, bytes) else value

    def get(self, task_id: str, default: Any = None) -> Any:  # the hot path: no KeyError
        value = self._values.get(task_id, default)
        return orjson.loads(value) if isinstance(value, bytes) else value

    def __setitem__(self, task_id: str, record: Record) -> None:
        self._values[task_id] = record

    def __delitem__(self, task_id: str) -> None:
        del self._values[task_id]

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"<{len(self)} task records>"

    def status(self, task_id: str) -> str | None:
        """The record's ``status``, read without decoding the record; None if there is none."""
        value = self._values.get(task_id)
        if value is None:
            return None
        if not isinstance(value, bytes):
            return value["status"]
        if value.startswith(_HEAD):
            end = value.find(b'"', len(_HEAD))
            raw = value[len(_HEAD):end]
            known = _STATUSES.get(raw)
            if known is None and raw.isalpha():
                known = _STATUSES.setdefault(raw, raw.decode())
            if known is not None:
                return known
        return orjson.loads(value)["status"]

    def add(self, task_id: str, record: Record) -> None:
        """Store ``record`` encoded at once (a record of many written soon, e.g. a plan's
        new pending records: they never exist as dicts all at the same time)."""
        data = _encode(task_id, record)
        self._values[task_id] = record if data is None else data

    def raw_items(self) -> Iterator[tuple[str, Record | bytes]]:
        """(task id, record as held: a dict or its bytes), nothing decoded."""
        return iter(self._values.items())

    def raw(self, task_id: str) -> Record | bytes | None:
        """The record as held (a dict or its bytes), nothing decoded; None if there is none."""
        return self._values.get(task_id)

    def set_raw(self, task_id: str, value: Record | bytes) -> None:
        """Store a value of `raw_items` of another store."""
        self._values[task_id] = value

    def reorder(self, task_ids: list[str]) -> None:
        """Put these tasks first, in this order, the others after them (nothing decoded)."""
        values = self._values
        ordered = {tid: values[tid] for tid in task_ids if tid in values}
        ordered.update((tid, v) for tid, v in values.items() if tid not in ordered)
        self._values = ordered

    # ------------------------------------------------------------------ encoding
    def encoded(self, task_id: str) -> bytes | None:
        """The record's JSON bytes, encoded now if it was held as a dict (and then kept as
        bytes); None for a record that cannot be written at all (see the module)."""
        value = self._values[task_id]
        if isinstance(value, bytes):
            return value
        data = _encode(task_id, value)
        if data is not None:
            self._values[task_id] = data
        return data

    def parts_size(self, task_ids: Iterable[str]) -> int:
        """The length of `parts`' JSON, without building it (a task id that JSON escapes
        counts its characters unescaped)."""
        total = 0
        for task_id in task_ids:
            data = self.encoded(task_id)
            if data is not None:
                total += len(task_id) + 3 + len(data)  # "<task id>":<record>
        return total

    def parts(self, task_ids: Iterable[str]) -> list[bytes]:
        """The ``"<task id>":<record>`` JSON of these tasks (the journal's ``tasks``)."""
        out = []
        for task_id in task_ids:
            data = self.encoded(task_id)
            if data is not None:
                out.append(orjson.dumps({task_id: orjson.Fragment(data)})[1:-1])
        return out

    def snapshot(self) -> dict[str, bytes]:
        """Every record encoded (`encoded`), as a new mapping of bytes that later changes to
        the store do not touch: what a whole-file write writes, outside the lock."""
        values = self._values
        for task_id, value in values.items():
            if not isinstance(value, bytes):
                data = _encode(task_id, value)
                if data is not None:
                    values[task_id] = data  # same key: the dict being iterated keeps its size
        return {tid: v for tid, v in values.items() if isinstance(v, bytes)}


def chunks(records: Mapping[str, bytes]) -> Iterator[bytes]:
    """The ``"<task id>":<record>,...`` JSON of ``records`` (encoded records), `CHUNK` records
    at a time, the chunks separated by commas."""
    ids = list(records)
    for begin in range(0, len(ids), CHUNK):
        block = orjson.dumps({tid: orjson.Fragment(records[tid])
                              for tid in ids[begin:begin + CHUNK]})
        yield (b"," if begin else b"") + block[1:-1]


def whole_file(head: bytes, records: Mapping[str, bytes]) -> Iterator[bytes]:
    """The bytes of a ledger file, in chunks: ``head`` is the JSON of the document without
    ``tasks``, ``records`` the encoded records (`RecordStore.snapshot`); ``tasks`` comes last."""
    yield head[:-1] + (b',"tasks":{' if len(head) > 2 else b'{"tasks":{')
    yield from chunks(records)
    yield b"}}\n"


def unwritable_record(task_id: str, rec: Record) -> Record:
    """The record of a task whose record orjson refused: failed, without its result, and the
    reason (the path of the first string that is not valid UTF-8) as its error."""
    why = unwritable_message(rec, f"task {task_id!r}: its record")
    kind = "ResultError" if "record['result']" in why else "LedgerError"
    return dict(rec, status=FAILED, result=None, error={
        "type": kind, "traceback": "",
        "message": f"{why}; the task was recorded failed instead (the ledger writes only valid "
                   "UTF-8)"})


def _encode(task_id: str, record: Record) -> bytes | None:
    """The record's JSON, in a bytes object of its own size (orjson's output keeps a buffer
    of at least 4 KB: held a million times, that would be 4 GB)."""
    try:
        return bytes(memoryview(orjson.dumps(record)))
    except TypeError:
        pass
    new = unwritable_record(task_id, record)
    try:
        data = bytes(memoryview(orjson.dumps(new)))
    except TypeError:
        logger.error("task %r cannot be written to the ledger at all (%s); it is left out of "
                     "the file and runs again on resume", task_id,
                     unwritable_message(record, "its record"))
        return None
    logger.error("%s", new["error"]["message"])
    return data
