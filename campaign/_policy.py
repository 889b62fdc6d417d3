"""The outcome policy: what the end of one attempt does to its task's record, for every path.

The engine (`checkpointed_map`, under any scheduler) and the array worker (`campaign worker`)
both call `settle` when an attempt ends and `stopped` when a run stops under a running task, so
the two paths record the same status, attempts, interruptions and error, and retry alike:

- a valid result: ``accepted`` (final).
- an invalid result: ``failed`` with a `ResultError` naming the key and the type; no traceback
  (the mistake is in the returned value, and a traceback would only show the checker).
- an error (``fn`` raised, or its task timed out): ``failed`` with the error's type, message
  and traceback; run again in this run while the task's tries in this run are at most
  ``retries + 1``.
- a loss (the infrastructure lost the attempt: a dead worker process, a lost dask worker, an
  array worker's expired lease): ``interrupted``, run again at once, unless the task was lost
  more than ``max_interruptions`` times in this run: then ``failed``, with the cause's type, and
  a message that says how often it was lost.
- a stop (Ctrl-C, SIGTERM, SIGUSR1, ``scancel``): ``interrupted``, not counted against
  ``max_interruptions``; the run ends and a later run (or array worker) runs the task again.

A *run* is one call of `checkpointed_map` (or ``campaign run``); for array workers it is one
submission (``campaign submit``). Interruptions of earlier runs, a new driver taking over the
``running`` records of a dead one, and stops are never counted: the record's ``interruptions``
field counts every interrupted attempt over all runs, and the per-run count is the caller's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schedulers import ErrorInfo, OutcomeKind

from ._errors import ResultError
from ._ledger import _records
from ._ledger._jsonvalue import encode_result
from ._ledger._status import ACCEPTED, FAILED, INTERRUPTED

#: The limits' defaults, for every caller that takes them (`checkpointed_map`, `run_worker`,
#: `campaign run` and its spec).
RETRIES = 0
MAX_INTERRUPTIONS = 3


@dataclass(frozen=True, slots=True)
class Limits:
    """How often a task is run again within one run.

    ``retries``: after it failed (raised, timed out, returned an invalid result).
    ``max_interruptions``: after the infrastructure lost it.
    """

    retries: int = RETRIES
    max_interruptions: int = MAX_INTERRUPTIONS

    def __post_init__(self) -> None:
        for name in ("retries", "max_interruptions"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class Decision:
    """The record that ends the attempt, and whether the task runs again in this run."""

    record: dict[str, Any]
    again: bool

    @property
    def status(self) -> str:
        return self.record["status"]


def settle(rec: dict[str, Any], kind: OutcomeKind, *, limits: Limits, tries: int, lost: int,
           at: float, began: float | None = None, where: dict[str, Any] | None = None,
           result: Any = None, error: ErrorInfo | None = None,
           usage: dict[str, Any] | None = None) -> Decision:
    """The end of the running attempt recorded in ``rec``.

    Args:
        rec: the task's record, status ``running`` (the attempt that ended).
        kind: how it ended: ``RESULT`` (``result`` is fn's return value, checked here),
            ``ERROR`` or ``LOST`` (``error`` says why).
        limits: the run's retry bounds.
        tries: how many attempts of this task ended with a result or an error in this run,
            this one included.
        lost: how many attempts of this task were lost in this run, this one included.
        at, began, where: when the attempt ended, and (if the scheduler knows them better at
            the end) when it began and where it ran.
        usage: what ``fn`` used in the attempt (`schedulers.Outcome.usage`), recorded with it.

    Returns:
        the new record and whether to run the task again now.
    """
    def ended(status: str, **what: Any) -> dict[str, Any]:
        return _records.finished(rec, status, at=at, began=began, where=where, usage=usage,
                                 **what)

    if kind is OutcomeKind.RESULT:
        try:
            stored = encode_result(result, task_id=rec["item"].get("task_id"))
        except ResultError as exc:
            error = ErrorInfo("ResultError", str(exc))
        else:
            return Decision(ended(ACCEPTED, result=stored), False)
        kind = OutcomeKind.ERROR
    if error is None:
        raise ValueError(f"an outcome of kind {kind.value!r} needs the error that caused it")
    if kind is OutcomeKind.ERROR:
        return Decision(ended(FAILED, error=error.as_dict()),
                        tries <= limits.retries)
    new = ended(INTERRUPTED, error=error.as_dict())
    if lost <= limits.max_interruptions:
        return Decision(new, True)
    new["status"] = FAILED
    new["error"] = ErrorInfo(error.type, lost_too_often(lost, limits, error.message),
                             error.traceback).as_dict()
    return Decision(new, False)


def stopped(rec: dict[str, Any], *, at: float, error: ErrorInfo) -> dict[str, Any]:
    """The record of a running task whose run was stopped (Ctrl-C, a signal): interrupted,
    not counted against ``max_interruptions``; it runs again in a later run."""
    return _records.finished(rec, INTERRUPTED, at=at, error=error.as_dict())


#: The error of a task a dead driver left ``running``.
DRIVER_LOST = ErrorInfo("DriverLost", "the driver stopped while this task ran (killed, crashed or "
                                      "lost its node)")


def orphaned(rec: dict[str, Any]) -> dict[str, Any]:
    """The record of a task that a driver now gone left ``running``, when a new driver takes over
    the ledger: interrupted with `DRIVER_LOST`, counted in the record's ``interruptions`` but in
    no run's ``max_interruptions``; its start stays, and it has no end (none is known)."""
    new = dict(rec)
    new.update(status=INTERRUPTED, interruptions=rec.get("interruptions", 0) + 1,
               error=DRIVER_LOST.as_dict())
    return new


def lost_too_often(lost: int, limits: Limits, cause: str) -> str:
    """The message of a task failed because it was lost more than ``max_interruptions`` times."""
    return (f"lost {lost} times in this run (max_interruptions={limits.max_interruptions}); "
            f"last cause: {cause}. If the task itself kills its worker (memory, a crash), fix it; "
            "otherwise raise max_interruptions (--max-interruptions)")
