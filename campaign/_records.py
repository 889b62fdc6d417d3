"""Task records: how one task's record moves from status to status, and how two versions merge.

A record is a plain dict (the ledger's JSON object for one task, docs/ledger.md). Records are
never mutated in place once stored: each transition returns a new dict, so a snapshot being
serialized is never half-updated.
"""

from __future__ import annotations

from typing import Any

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
    return {
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
) -> dict[str, Any]:
    """The running attempt ends with ``status`` ``accepted``, ``failed`` or ``interrupted``.

    ``began`` and ``where`` (host, pid, worker, device_group), when the scheduler knows them
    better at the end than at the start (a batch on a dask worker), replace the start's.
    """
    new = dict(rec)
    if where is not None:
        new.update(where)
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
