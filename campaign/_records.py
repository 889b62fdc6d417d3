"""Task records: how one task's record moves from status to status, and how two versions merge.

A record is a plain dict (the ledger's JSON object for one task, docs/ledger.md). Records are
never mutated in place once stored: each transition returns a new dict, so a snapshot being
serialized is never half-updated.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import chain, compress, repeat
from operator import is_not, itemgetter
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


def superseded(rec: dict[str, Any], by: dict[str, Any], *, at: float) -> dict[str, Any]:
    """The attempt ``rec`` (ended) as it is recorded once its worker's lease was taken over by
    ``by`` (an owner: worker, host, pid) while it ran: ``interrupted`` (``WorkerLost``), its
    outcome named in the message but not kept, marked ``superseded`` (`fold_superseded`)."""
    outcome = rec["status"] if rec["error"] is None else f"{rec['status']}, {rec['error']['type']}"
    new = dict(rec, status=INTERRUPTED, result=None, ended=at, superseded=True,
               interruptions=rec.get("interruptions", 0) + 1)
    new["duration"] = None if rec["started"] is None else max(0.0, at - rec["started"])
    new["error"] = {
        "type": "WorkerLost",
        "message": f"lease taken over by {by.get('host')}:{by.get('pid')} (worker "
                   f"{by.get('worker')}) while this attempt ran, so it ran twice; its outcome "
                   f"({outcome}) was not recorded as the task's",
        "traceback": ""}
    return new


def fold_superseded(have: dict[str, Any] | None, rec: dict[str, Any]) -> dict[str, Any]:
    """The record of a task once the superseded attempt ``rec`` (`superseded`) is merged into
    ``have``: ``rec`` itself where nothing newer is known; else ``have`` with ``rec`` in its
    history, in place of the entry of the same attempt (the taker's note that this attempt
    was lost)."""
    plain = {k: v for k, v in rec.items() if k != "superseded"}
    if have is None or (have["attempts"] <= rec["attempts"] and have["status"] != ACCEPTED):
        return plain
    if is_folded(have, rec):
        return have
    entry = _history_entry(plain)
    history = [e for e in have["history"] if e.get("attempt") != rec["attempts"]] + [entry]
    history.sort(key=lambda e: e.get("attempt", 0))
    return dict(have, history=history[-HISTORY_LIMIT:])


def is_folded(have: dict[str, Any], rec: dict[str, Any]) -> bool:
    """Whether ``have`` already holds the superseded attempt ``rec`` (as itself or in its
    history)."""
    if (have["attempts"], have["status"], have["ended"]) == (rec["attempts"], rec["status"],
                                                             rec["ended"]):
        return True
    return any(e.get("attempt") == rec["attempts"] and e.get("pid") == rec["pid"]
               and e.get("host") == rec["host"] and e.get("ended") == rec["ended"]
               for e in have["history"])


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
