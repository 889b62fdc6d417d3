"""A block of task records parsed and checked in one pass into typed records (`campaign status`,
`campaign report`).

`campaign._ledger._scan.Scan.blocks` parses a block of records with ``orjson`` into dicts, then
checks their fields over the chunk's columns (`campaign._ledger._schema.valid_columns`). `decode`
here parses a block with ``msgspec`` into `Record`s, made from the schema
(`campaign._ledger._schema.RECORD_FIELDS`, each field with its JSON types, narrowed where the parse
can check more): the parse itself checks the types, the statuses, the counts >= 0 and the results'
values (in C, as it goes) and makes no dict per record; `typed_columns` checks the rest
(fingerprints, a result for each accepted task, errors) over the columns as `valid_columns` does.
The fields hold the Python values ``orjson`` gives (``item``, ``result``, ``error`` and the
``history`` entries are plain dicts).

Every doubt goes the plain way, whose check names the task and the field: `decode` raises
`Invalid` for a record its types refuse, and for one with a key the tables do not list (allowed,
but not declared here, so that no part of a record goes unparsed), and `typed_columns` returns
None for a chunk that breaks a rule. One difference from ``orjson`` remains: an integer beyond
2**64 where the ledger allows any number (times, results, ``item``, ``error``, ``history``) is a
Python int here and a float there, and one beyond about 1e308 is accepted here and is a JSON
error there. No writer writes such integers, and the fields that must be ints (``attempts``,
``interruptions``, ``pid``, ``device_group``) are bounded: none is accepted here that the reader
refuses.
"""

from __future__ import annotations

from collections import Counter
from operator import attrgetter
from types import GenericAlias
from typing import Annotated, Any, Literal

import msgspec

from schedulers._usage import FIELDS as USAGE_FIELDS

from ._schema import COLUMNS, RECORD_FIELDS, Columns, values_valid

#: The values of a field that must be an int: int64 (msgspec's bounds). ``orjson`` reads ints
#: up to uint64 as ints (those beyond int64 go the plain way) and larger ones as floats.
_Int = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]
_Count = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]
#: Where any number is allowed, ints are not bounded (bounds in a union with float make the
#: parse about a third slower): one beyond 2**64 is an int here, a float in ``orjson``.
_Number = int | float | None
#: A non-finite float in a result, as the ledger stores it (``{"$float": "nan"}``).
_FloatTag = Annotated[dict[Literal["$float"], Literal["nan", "inf", "-inf"]],
                      msgspec.Meta(min_length=1)]
_Scalar = str | int | float | bool | None | _FloatTag
#: The task statuses (`campaign._ledger._status.Status`; a test checks that they are the same).
StatusName = Literal["pending", "running", "accepted", "failed", "interrupted"]


#: A field's type where the parse checks more than its JSON types (`RECORD_FIELDS`) say: the
#: values `campaign._ledger._schema.record_problem` checks that are cheap to check while parsing.
_NARROWER: dict[str, Any] = {
    "status": StatusName,
    "result": dict[str, _Scalar] | None,
    "device_group": list[_Int] | None,
    "history": list[dict[str, Any]],
}
#: The type of each set of JSON types the schema gives a field.
_OF_KINDS: dict[frozenset[type], Any] = {
    frozenset({str}): str,
    frozenset({str, type(None)}): str | None,
    frozenset({int}): _Count,  # a record's integers are counts (docs/ledger.md)
    frozenset({int, type(None)}): _Int | None,
    frozenset({int, float, type(None)}): _Number,
    frozenset({dict}): dict[str, Any],
    frozenset({dict, type(None)}): dict[str, Any] | None,
}


def _field_type(key: str, kinds: frozenset[type]) -> Any:
    if key in _NARROWER:
        return _NARROWER[key]
    try:
        return _OF_KINDS[kinds]
    except KeyError:
        raise TypeError(f"record field {key!r}: no typed parse for the JSON types "
                        f"{sorted(k.__name__ for k in kinds)}; add them to _OF_KINDS or the "
                        "field to _NARROWER") from None


if not _NARROWER.keys() <= RECORD_FIELDS.keys():
    raise TypeError(f"_NARROWER names fields the schema has not: "
                    f"{sorted(_NARROWER.keys() - RECORD_FIELDS.keys())}")
#: A task record (docs/ledger.md), its fields typed: what `decode` gives for each task. Made
#: from the schema (`RECORD_FIELDS`, in its order, each required), then the resource fields
#: of the last attempt (`schedulers._usage.FIELDS`), which may be absent and are not checked,
#: as in the reader.
Record: type[msgspec.Struct] = msgspec.defstruct(
    "Record",
    [(key, _field_type(key, kinds)) for key, (kinds, _) in RECORD_FIELDS.items()]
    + [(key, Any, msgspec.UNSET) for key in USAGE_FIELDS],
    forbid_unknown_fields=True, gc=False, module=__name__)


class Invalid(Exception):
    """A block that parses as JSON but holds a record its types refuse."""


#: ``dict[str, Record]``, spelled as the value it is (`Record` is made, not declared)
_DECODE = msgspec.json.Decoder(GenericAlias(dict, (str, Record))).decode


def decode(data: bytes) -> dict[str, Any] | None:
    """The records of ``data`` (one JSON object: task id -> record), or None when ``data`` is
    not one JSON object (a block cut in the wrong place). Raises `Invalid` when it is, but a
    record's field has a type (or value) it may not have, or a record has another key."""
    try:
        return _DECODE(data)
    except msgspec.ValidationError:
        raise Invalid from None
    except msgspec.DecodeError:
        return None


def typed_columns(recs: list[Any]) -> Columns | None:
    """The `Columns` of ``recs`` (from `decode`), or None when one breaks a rule of the ledger
    that their types do not say (`campaign._ledger._schema.values_valid`): look record by record.
    Each column is made when it is first asked for (``cols.fields[key]``)."""
    fields = _Fields(recs)
    cols = Columns(fields, Counter(fields["status"]))
    return cols if values_valid(cols, check=False) else None


class _Fields(dict[str, tuple[Any, ...]]):
    """The columns of `Record`s (`campaign._ledger._schema.COLUMNS`), each made on first use."""

    def __init__(self, recs: list[Any]):
        super().__init__()
        self.recs = recs

    def __missing__(self, key: str) -> tuple[Any, ...]:
        get = _GETTERS[key]  # KeyError: not a column
        column = self[key] = tuple(map(get, self.recs))
        return column


_GETTERS = {key: attrgetter(key) for key in COLUMNS}
