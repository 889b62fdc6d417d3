"""Task records: how one task's record moves from status to status, and how two versions merge.

A record is a plain dict (the ledger's JSON object for one task, docs/ledger.md). Records are
never mutated in place once stored: each transition returns a new dict, so a snapshot being
serialized is never half-updated.
"""

from __future__ import annotations

from typing import Any

from schedulers._usage import FIELDS as USAGE_FIELDS

from ._status import ACCEPTED, HISTORY_LIMIT, INTERRUPTED, PENDING, RUNNING


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


def from_fragment(have: dict[str, Any] | None, rec: dict[str, Any]) -> dict[str, Any] | None:
    """The record of a task once an array worker's fragment record ``rec`` is applied to
    ``have`` (None: the task is not in the ledger): a superseded attempt (`superseded`) is
    folded in (`fold_superseded`); any other record is merged (`merge`) unless ``have`` holds
    a newer attempt or another item (the task was forgotten and planned anew: its fingerprint
    differs), which is kept as it is. The one rule for merging fragments into the ledger and
    for showing them before they are merged (`campaign._ledger._overlay`)."""
    same_item = have is None or have["fingerprint"] == rec.get("fingerprint")
    if rec.get("superseded"):
        return fold_superseded(have, rec) if same_item else have
    if same_item and (have is None or have["attempts"] <= rec["attempts"]):
        return merge(have, rec)
    return have


def merge(on_disk: dict[str, Any] | None, mine: dict[str, Any]) -> dict[str, Any]:
    """The record to keep when this process changed a task that another process also wrote.

    An accepted record on disk is never replaced: a task once accepted keeps its result and is
    never run again. Otherwise this process's newer record wins.
    """
    if on_disk is not None and on_disk["status"] == ACCEPTED:
        return on_disk
    return mine


def newer(on_disk: dict[str, Any] | None, mine: dict[str, Any]) -> dict[str, Any]:
    """The record to keep of two versions of one task, as fragments are merged: the newer
    attempt (more ``attempts``); of one attempt, ours, except that an accepted record on disk is
    never replaced (`merge`)."""
    if on_disk is not None and on_disk["attempts"] > mine["attempts"]:
        return on_disk
    return merge(on_disk, mine)
