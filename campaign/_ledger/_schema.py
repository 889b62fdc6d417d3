"""The schema of the ledger's records and runs (docs/ledger.md), and the checks derived from it.

`RECORD_FIELDS` and `RUN_FIELDS` name every field and its JSON types; `record_problem`,
`records_problem` and `run_problem` check one object against them and name the first field that
does not match; `valid_columns` checks a chunk of records at once with C-level operations over
its `Columns` (what `campaign status` counts from), falling back to the record-by-record checks
only for a chunk it doubts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import chain, compress, repeat
from operator import is_not, itemgetter
from typing import Any

from ._status import ACCEPTED, RunStatus, Status


class _Absent:
    def __repr__(self) -> str:
        return "missing"


#: What `record_problem` and `run_problem` report as the value of a field that is absent.
MISSING = _ABSENT = _Absent()
_NONE: type = type(None)
Kinds = frozenset[type]
_TEXT: Kinds = frozenset({str})
_OPT_TEXT: Kinds = frozenset({str, _NONE})
_COUNT: Kinds = frozenset({int})
_OPT_INT: Kinds = frozenset({int, _NONE})
_NUMBER: Kinds = frozenset({int, float})
_OPT_NUMBER: Kinds = frozenset({int, float, _NONE})
_OPT_DICT: Kinds = frozenset({dict, _NONE})
_LIST: Kinds = frozenset({list})
_OPT_LIST: Kinds = frozenset({list, _NONE})
#: A field's JSON types and how docs/ledger.md says them.
Fields = dict[str, tuple[Kinds, str]]

#: Every field of a task record: the JSON types it may have, and how docs/ledger.md says it.
RECORD_FIELDS: Fields = {
    "status": (_TEXT, "one of " + ", ".join(s.value for s in Status)),
    "attempts": (_COUNT, "an integer >= 0"),
    "interruptions": (_COUNT, "an integer >= 0"),
    "item": (frozenset({dict}), "an object (the item)"),
    "fingerprint": (_TEXT, "'sha256:' followed by 64 hex digits"),
    "result": (_OPT_DICT, "an object or null (an object when the status is accepted)"),
    "error": (_OPT_DICT, "null or an object with string 'type' and 'message'"),
    "host": (_OPT_TEXT, "a string or null"),
    "pid": (_OPT_INT, "an integer or null"),
    "worker": (_OPT_TEXT, "a string or null"),
    "device_group": (_OPT_LIST, "a list of integers or null"),
    "started": (_OPT_NUMBER, "a number or null"),
    "ended": (_OPT_NUMBER, "a number or null"),
    "duration": (_OPT_NUMBER, "a number or null"),
    "history": (_LIST, "a list of objects"),
}
#: The statuses of a run in the ledger's ``runs`` list.
RUN_STATUSES = tuple(s.value for s in RunStatus)
#: The fields of a run: required ones, then those only some runs have.
RUN_FIELDS: Fields = {
    "id": (_TEXT, "a string"),
    "host": (_TEXT, "a string"),
    "pid": (_COUNT, "an integer"),
    "execution": (_TEXT, "a string"),
    "started": (_NUMBER, "a number"),
    "ended": (_OPT_NUMBER, "a number or null"),
    "status": (_TEXT, "one of " + ", ".join(RUN_STATUSES)),
    "refused": (_LIST, "a list of objects"),
}
RUN_OPTIONAL: Fields = {
    "total": (_COUNT, "an integer"),
    "kept": (_COUNT, "an integer"),
    "refused_count": (_COUNT, "an integer"),
    "submission": (_TEXT, "a string"),
    "to_run": (_COUNT, "an integer"),
    "job": (_TEXT, "a string"),
    "error": (_OPT_TEXT, "a string or null"),
    "refused_ids": (_LIST, "a list of task ids"),
    "ignore_fields": (_LIST, "a list of field names"),
    "argv": (_LIST, "a list of strings"),
    "cwd": (_TEXT, "a string"),
    "versions": (frozenset({dict}), "an object"),
    "requested": (frozenset({dict}), "an object"),
}
_STATUSES = frozenset(s.value for s in Status)
_RUN_STATUSES = frozenset(RUN_STATUSES)
_HEX = "0123456789abcdef"
_SCALARS: Kinds = frozenset({str, int, float, bool, _NONE})
#: (keys, their value types) of records found valid: one set lookup checks the types of a
#: record shaped like one seen before (a ledger's records have a handful of shapes).
_good_shapes: set[tuple[tuple[str, ...], tuple[type, ...]]] = set()


def _wrong_field(obj: dict[str, Any], fields: Fields,
                 required: bool = True) -> tuple[str, Any, str] | None:
    """The first of ``fields`` whose value in ``obj`` has a type it may not have, as
    ``(field, value, expected)``; an absent field is wrong only when ``required``."""
    for key, (kinds, expected) in fields.items():
        value = obj.get(key, _ABSENT)
        if type(value) not in kinds and (required or value is not _ABSENT):
            return (key, value, expected)
    return None


def record_problem(rec: Any) -> tuple[str, Any, str] | None:
    """What is wrong with a loaded task record, as ``(field, value, expected)``; None if valid.

    The check that names the field: `valid_columns` checks a whole chunk of records faster and
    this one is called for the records of a chunk it did not find valid."""
    if type(rec) is not dict:
        return ("<record>", rec, "an object")
    status = rec.get("status", _ABSENT)
    if type(status) is not str or status not in _STATUSES:
        return ("status", status, RECORD_FIELDS["status"][1])
    shape = (tuple(rec), tuple(map(type, rec.values())))
    if shape not in _good_shapes:
        wrong = _wrong_field(rec, RECORD_FIELDS)
        if wrong is not None:
            return wrong
        if len(_good_shapes) < 1000:
            _good_shapes.add(shape)
    fp = rec["fingerprint"]
    if len(fp) != 71 or fp[:7] != "sha256:" or fp[7:].strip(_HEX):
        return ("fingerprint", fp, RECORD_FIELDS["fingerprint"][1])
    if rec["attempts"] < 0 or rec["interruptions"] < 0:
        key = "attempts" if rec["attempts"] < 0 else "interruptions"
        return (key, rec[key], "an integer >= 0")
    result = rec["result"]
    if result is None:
        if status == ACCEPTED:
            return ("result", None, "an object: the task is accepted")
    elif not _SCALARS.issuperset(map(type, result.values())):
        for key, value in result.items():
            if type(value) not in _SCALARS and not _float_tag(value):
                return (f"result.{key}", value, "a number, string, bool or null")
    error = rec["error"]
    if error is not None and not (type(error.get("type")) is str
                                  and type(error.get("message")) is str):
        return ("error", error, RECORD_FIELDS["error"][1])
    group = rec["device_group"]
    if group is not None and not all(type(g) is int for g in group):
        return ("device_group", group, RECORD_FIELDS["device_group"][1])
    if rec["history"] and not all(type(entry) is dict for entry in rec["history"]):
        return ("history", rec["history"], RECORD_FIELDS["history"][1])
    return None


def records_problem(tasks: dict[str, Any]) -> tuple[str, tuple[str, Any, str]] | None:
    """The first invalid record of ``tasks`` as ``(task_id, (field, value, expected))``, or
    None if every record is valid.

    Checked a chunk at a time (`valid_columns`, C-level operations over the chunk's columns);
    only a chunk that fails is checked record by record (`record_problem`) to name the task
    and the field."""
    ids, recs = list(tasks), list(tasks.values())
    for begin in range(0, len(ids), _CHUNK):
        chunk = recs[begin:begin + _CHUNK]
        if valid_columns(chunk) is not None:
            continue
        for tid, rec in zip(ids[begin:begin + _CHUNK], chunk):
            problem = record_problem(rec)
            if problem is not None:
                return tid, problem
    return None


_CHUNK = 2048
#: The fields `columns` gives, in this order.
COLUMNS = tuple(RECORD_FIELDS)
_GET_COLUMNS = itemgetter(*COLUMNS)
#: The fields whose types `valid_columns` checks column by column (status and fingerprint are
#: checked by what their values must be).
_TYPED = tuple((key, kinds) for key, (kinds, _) in RECORD_FIELDS.items()
               if key not in ("status", "fingerprint"))
_HEX_BYTES = _HEX.encode()
_PREFIX = "sha256:"


@dataclass
class Columns:
    """The values of each field of `RECORD_FIELDS` in a chunk of records, in record order, and
    how many records have each status: what `campaign status` and `campaign report` count."""

    fields: dict[str, tuple[Any, ...]]
    counts: Counter[str]

    def __len__(self) -> int:
        return len(self.fields["status"])


def columns(recs: list[dict[str, Any]]) -> Columns:
    """The `Columns` of records known to be valid."""
    if not recs:
        return Columns(dict.fromkeys(COLUMNS, ()), Counter())
    fields = dict(zip(COLUMNS, zip(*map(_GET_COLUMNS, recs))))
    return Columns(fields, Counter(fields["status"]))


def valid_columns(recs: list[Any]) -> Columns | None:
    """The `Columns` of ``recs`` if every record is valid; None means: look record by record
    (`record_problem`), which names the field. It accepts only what `record_problem` accepts,
    with C-level operations over each column (no Python code per record)."""
    try:
        cols = columns(recs)
    except (KeyError, TypeError):  # a record lacks a field, or is not an object
        return None
    fields, counts = cols.fields, cols.counts
    if not _STATUSES.issuperset(counts):  # only a string equals a status (JSON has no others)
        return None
    for key, kinds in _TYPED:
        if not kinds.issuperset(map(type, fields[key])):
            return None
    if not recs:
        return cols
    if min(fields["attempts"]) < 0 or min(fields["interruptions"]) < 0:
        return None
    if not values_valid(cols):
        return None
    groups = chain.from_iterable(filter(None, fields["device_group"]))
    entries = chain.from_iterable(fields["history"])
    if {int}.issuperset(map(type, groups)) and {dict}.issuperset(map(type, entries)):
        return cols
    return None


def values_valid(cols: Columns, check: bool = True) -> bool:
    """Whether the values of ``cols`` (of records whose fields have their types) keep the rules
    their types do not say: each fingerprint ``sha256:`` and 64 hex digits, a result for each
    accepted record, results of scalars or non-finite floats' tags (unless not ``check``:
    known), errors with string ``type`` and ``message``. C-level operations over the columns."""
    fields, counts = cols.fields, cols.counts
    if not _fingerprints_valid(fields["fingerprint"]):
        return False
    results, status = fields["result"], fields["status"]
    if counts[ACCEPTED] and None in (results if counts[ACCEPTED] == len(results) else
                                     compress(results, map(ACCEPTED.__eq__, status))):
        return False
    values = list(chain.from_iterable(map(dict.values, filter(None, results)))) if check else []
    found = set(map(type, values))
    if not _SCALARS.issuperset(found) and not (
            _SCALARS.issuperset(found - {dict})
            and all(_float_tag(v) for v in values if type(v) is dict)):
        return False
    errors = fields["error"]
    for error in compress(errors, map(is_not, errors, repeat(None))):
        if type(error.get("type")) is not str or type(error.get("message")) is not str:
            return False
    return True


def _fingerprints_valid(fps: tuple[Any, ...]) -> bool:
    """Each of ``fps`` (known to be strings) is ``sha256:`` and 64 lowercase hex digits."""
    try:
        joined = "".join(fps)
    except TypeError:
        return False
    n = len(fps)
    if set(map(len, fps)) != {71}:
        return False
    # each 71 long: the prefix's letters lie every 71 characters; deleting every hex digit then
    # leaves the prefix's other letters ("sh:") once per fingerprint and nothing else
    if any(joined[i::71] != _PREFIX[i] * n for i in range(len(_PREFIX))):
        return False
    return joined.isascii() and joined.encode().translate(None, _HEX_BYTES) == b"sh:" * n


def _float_tag(value: Any) -> bool:
    return (type(value) is dict and len(value) == 1
            and value.get("$float") in ("nan", "inf", "-inf"))


def run_problem(run: Any) -> tuple[str, Any, str] | None:
    """What is wrong with one entry of the ledger's ``runs``, as ``(field, value, expected)``."""
    if type(run) is not dict:
        return ("<run>", run, "an object")
    wrong = _wrong_field(run, RUN_FIELDS) or _wrong_field(run, RUN_OPTIONAL, required=False)
    if wrong is not None:
        return wrong
    if run["status"] not in _RUN_STATUSES:
        return ("status", run["status"], RUN_FIELDS["status"][1])
    return None
