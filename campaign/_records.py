"""Task records: how one task's record moves from status to status, and how two versions merge.

A record is a plain dict (the ledger's JSON object for one task, docs/ledger.md). Records are
never mutated in place once stored: each transition returns a new dict, so a snapshot being
serialized is never half-updated.
"""

from __future__ import annotations

from itertools import chain, compress
from operator import itemgetter, methodcaller
from typing import Any

from schedulers._usage import FIELDS as USAGE_FIELDS

from ._status import ACCEPTED, HISTORY_LIMIT, INTERRUPTED, PENDING, RUNNING, RunStatus, Status


def new_record(item: Any, fingerprint: str) -> dict[str, Any]:
    """The record of a task the campaign knows but has not started."""
    return {
        "status": PENDING,
        "attempts": 0,
        "interruptions": 0,
        "item": item,
        "fingerprint": fingerprint,
        "result": None,
        "error": None,
        "host": None,
        "pid": None,
        "worker": None,
        "device_group": None,
        "started": None,
        "ended": None,
        "duration": None,
        "history": [],
    }


def _history_entry(rec: dict[str, Any]) -> dict[str, Any]:
    error = rec["error"]
    entry = {
        "attempt": rec["attempts"],
        "status": rec["status"],
        "host": rec["host"],
        "pid": rec["pid"],
        "worker": rec["worker"],
        "started": rec["started"],
        "ended": rec["ended"],
        "duration": rec["duration"],
        "error": None if error is None else {"type": error["type"], "message": error["message"]},
    }
    for key in USAGE_FIELDS:  # what the attempt used, where it was measured
        if key in rec:
            entry[key] = rec[key]
    return entry


def started(
    rec: dict[str, Any],
    *,
    host: str,
    pid: int,
    worker: str | None,
    device_group: list[int] | None,
    at: float,
) -> dict[str, Any]:
    """A new attempt begins: the previous attempt (if any) moves to the history."""
    history = rec["history"]
    if rec["attempts"] > 0:
        history = (history + [_history_entry(rec)])[-HISTORY_LIMIT:]
    new = dict(rec)
    for key in USAGE_FIELDS:  # the previous attempt's, now in the history
        new.pop(key, None)
    new.update(
        status=RUNNING,
        attempts=rec["attempts"] + 1,
        result=None,
        error=None,
        host=host,
        pid=pid,
        worker=worker,
        device_group=device_group,
        started=at,
        ended=None,
        duration=None,
        history=history,
    )
    return new


def finished(
    rec: dict[str, Any],
    status: str,
    *,
    at: float,
    began: float | None = None,
    where: dict[str, Any] | None = None,
    result: dict[str, Any] | None = None,
    error: dict[str, str] | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The running attempt ends with ``status`` ``accepted``, ``failed`` or ``interrupted``.

    ``began`` and ``where`` (host, pid, worker, device_group), when the scheduler knows them
    better at the end than at the start (a batch on a dask worker), replace the start's.
    ``usage`` (``cpu_s``, ``peak_rss_bytes``, ``gpu_peak_bytes``, those measured) is what the
    attempt used; without it the record has none of these fields.
    """
    new = dict(rec)
    if where is not None:
        new.update(where)
    if usage:
        new.update(usage)
    begun = rec["started"] if began is None else began
    new.update(
        status=status,
        result=result,
        error=error,
        started=begun,
        ended=at,
        duration=None if begun is None else max(0.0, at - begun),
    )
    if status == INTERRUPTED:
        new["interruptions"] = rec.get("interruptions", 0) + 1
    return new


def merge(on_disk: dict[str, Any] | None, mine: dict[str, Any]) -> dict[str, Any]:
    """The record to keep when this process changed a task that another process also wrote.

    An accepted record on disk is never replaced: a task once accepted keeps its result and is
    never run again. Otherwise this process's newer record wins.
    """
    if on_disk is not None and on_disk["status"] == ACCEPTED:
        return on_disk
    return mine


# ---------------------------------------------------------------------- the schema (docs/ledger.md)
class _Absent:
    def __repr__(self) -> str:
        return "missing"


#: What `record_problem` and `run_problem` report as the value of a field that is absent.
MISSING = _ABSENT = _Absent()
_NONE = type(None)
_TEXT, _OPT_TEXT = frozenset({str}), frozenset({str, _NONE})
_COUNT, _OPT_INT = frozenset({int}), frozenset({int, _NONE})
_NUMBER, _OPT_NUMBER = frozenset({int, float}), frozenset({int, float, _NONE})
_OPT_DICT, _LIST, _OPT_LIST = frozenset({dict, _NONE}), frozenset({list}), frozenset({list, _NONE})

#: Every field of a task record: the JSON types it may have, and how docs/ledger.md says it.
RECORD_FIELDS: dict[str, tuple[frozenset[type], str]] = {
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
RUN_FIELDS: dict[str, tuple[frozenset[type], str]] = {
    "id": (_TEXT, "a string"),
    "host": (_TEXT, "a string"),
    "pid": (_COUNT, "an integer"),
    "execution": (_TEXT, "a string"),
    "started": (_NUMBER, "a number"),
    "ended": (_OPT_NUMBER, "a number or null"),
    "status": (_TEXT, "one of " + ", ".join(RUN_STATUSES)),
    "refused": (_LIST, "a list of objects"),
}
RUN_OPTIONAL: dict[str, tuple[frozenset[type], str]] = {
    "total": (_COUNT, "an integer"),
    "refused_count": (_COUNT, "an integer"),
    "submission": (_TEXT, "a string"),
    "to_run": (_COUNT, "an integer"),
    "job": (_TEXT, "a string"),
    "error": (_OPT_TEXT, "a string or null"),
}
_STATUSES = frozenset(s.value for s in Status)
_RUN_STATUSES = frozenset(RUN_STATUSES)
_HEX = "0123456789abcdef"
_SCALARS = frozenset({str, int, float, bool, _NONE})
#: (keys, their value types) of records found valid: one set lookup checks the types of a
#: record shaped like one seen before (a ledger's records have a handful of shapes).
_good_shapes: set[tuple[tuple[str, ...], tuple[type, ...]]] = set()


def record_problem(rec: Any) -> tuple[str, Any, str] | None:
    """What is wrong with a loaded task record, as ``(field, value, expected)``; None if valid.

    Called for every record on every load, so the common case is one set lookup for the
    fields' types, then a few value checks (about 1 us a record)."""
    if type(rec) is not dict:
        return ("<record>", rec, "an object")
    status = rec.get("status", _ABSENT)
    if type(status) is not str or status not in _STATUSES:
        return ("status", status, RECORD_FIELDS["status"][1])
    shape = (tuple(rec), tuple(map(type, rec.values())))
    if shape not in _good_shapes:
        for key, (kinds, expected) in RECORD_FIELDS.items():
            value = rec.get(key, _ABSENT)
            if type(value) not in kinds:
                return (key, value, expected)
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

    The whole ledger is checked column by column with C-level operations (about 0.3 us a
    record), in chunks that bound the memory used; only a chunk that fails is checked record by
    record (`record_problem`) to name the task and the field."""
    ids, recs = list(tasks), list(tasks.values())
    for begin in range(0, len(ids), _CHUNK):
        chunk = recs[begin:begin + _CHUNK]
        if _chunk_valid(chunk):
            continue
        for tid, rec in zip(ids[begin:begin + _CHUNK], chunk):
            problem = record_problem(rec)
            if problem is not None:
                return tid, problem
    return None


_CHUNK = 2048
_GETTERS = {key: itemgetter(key) for key in RECORD_FIELDS}
_KEPT = frozenset({"status", "attempts", "interruptions", "fingerprint", "result", "error",
                   "device_group", "history"})  # the columns whose values are checked too
_PREFIXED = methodcaller("startswith", "sha256:")
_HEX_BYTES = _HEX.encode()


def _chunk_valid(recs: list[Any]) -> bool:
    """True if every record of ``recs`` is valid; False means: look record by record."""
    if set(map(type, recs)) != {dict}:
        return False
    columns = {}
    try:
        for key, (kinds, _) in RECORD_FIELDS.items():
            if key in _KEPT:
                column = columns[key] = list(map(_GETTERS[key], recs))
            else:
                column = map(_GETTERS[key], recs)
            if not kinds.issuperset(map(type, column)):
                return False
    except KeyError:
        return False
    status, fps, results = columns["status"], columns["fingerprint"], columns["result"]
    if not _STATUSES.issuperset(status) or min(columns["attempts"]) < 0 \
            or min(columns["interruptions"]) < 0:
        return False
    # each starts with "sha256:" and is 71 long: deleting every hex digit leaves "sh:" of each
    joined = "".join(fps)
    if set(map(len, fps)) != {71} or not all(map(_PREFIXED, fps)) or not joined.isascii() \
            or joined.encode().translate(None, _HEX_BYTES) != b"sh:" * len(fps):
        return False
    if None in compress(results, map(ACCEPTED.__eq__, status)):
        return False
    values = list(chain.from_iterable(map(dict.values, filter(None, results))))
    kinds = set(map(type, values))
    if not _SCALARS.issuperset(kinds) and not (
            _SCALARS.issuperset(kinds - {dict})
            and all(_float_tag(v) for v in values if type(v) is dict)):
        return False
    for error in filter(None, columns["error"]):
        if type(error.get("type")) is not str or type(error.get("message")) is not str:
            return False
    groups = chain.from_iterable(filter(None, columns["device_group"]))
    entries = chain.from_iterable(columns["history"])
    return {int}.issuperset(map(type, groups)) and {dict}.issuperset(map(type, entries))


def _float_tag(value: Any) -> bool:
    return (type(value) is dict and len(value) == 1
            and value.get("$float") in ("nan", "inf", "-inf"))


def run_problem(run: Any) -> tuple[str, Any, str] | None:
    """What is wrong with one entry of the ledger's ``runs``, as ``(field, value, expected)``."""
    if type(run) is not dict:
        return ("<run>", run, "an object")
    for fields, required in ((RUN_FIELDS, True), (RUN_OPTIONAL, False)):
        for key, (kinds, expected) in fields.items():
            value = run.get(key, _ABSENT)
            if (required or value is not _ABSENT) and type(value) not in kinds:
                return (key, value, expected)
    if run["status"] not in _RUN_STATUSES:
        return ("status", run["status"], RUN_FIELDS["status"][1])
    return None
