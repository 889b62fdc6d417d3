"""What `checkpointed_map` returns: the campaign's results, failures and records."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._jsonvalue import decode, decode_flat
from ._status import Status


@dataclass(frozen=True, slots=True)
class Failure:
    """A task that did not produce an accepted result in this run.

    ``status`` is ``"failed"`` (fn raised, returned an invalid result, or lost its worker too
    often) or ``"refused"`` (its item changed since it was recorded; ``changed`` lists the fields
    as ``{"field", "old", "new"}``).
    """

    task_id: str
    status: str
    error_type: str
    message: str
    traceback: str = ""
    attempts: int = 0
    changed: tuple[dict[str, Any], ...] = ()

    def __str__(self) -> str:
        return f"task {self.task_id!r} {self.status}: {self.error_type}: {self.message}"


@dataclass(frozen=True, slots=True)
class Progress:
    """Counts for progress displays, as of one moment of a run."""

    total: int
    accepted: int
    failed: int
    refused: int
    running: int
    remaining: int
    done_this_run: int
    elapsed: float


@dataclass(frozen=True)
class Campaign:
    """The outcome of a campaign, read from its ledger when `checkpointed_map` returned.

    Attributes:
        ledger_path: the ledger file.
        task_ids: the task ids of the items, in item order.
        results: the accepted results, one dict per accepted task, in the order of items (tasks
            that failed or were refused have none; use `result` to look one up by id).
        failures: the failed and refused tasks, with their errors, in the order of items.
        records: task id -> the task's ledger record (status, attempts, item, fingerprint,
            result, error, host, pid, times, history), in the order of items.
        refused: the task ids refused because their item changed.
    """

    ledger_path: Path
    task_ids: tuple[str, ...]
    results: list[dict[str, Any]]
    failures: list[Failure]
    records: dict[str, dict[str, Any]]
    refused: tuple[str, ...] = field(default=())

    @classmethod
    def from_records(cls, ledger_path: Path, task_ids: list[str],
                     stored: dict[str, dict[str, Any]],
                     refused: dict[str, list[dict[str, Any]]]) -> Campaign:
        results, failures, records = [], [], {}
        for tid in task_ids:
            rec = stored.get(tid)
            if rec is None:
                continue
            records[tid] = _decoded(rec)
            if tid in refused:
                failures.append(Failure(
                    tid, "refused", "ItemChanged", refused_message(tid, refused[tid], str(ledger_path)),
                    attempts=rec["attempts"], changed=tuple(refused[tid])))
            elif rec["status"] == Status.ACCEPTED.value:
                results.append(records[tid]["result"])
            elif rec["status"] == Status.FAILED.value:
                error = rec["error"] or {}
                failures.append(Failure(
                    tid, "failed", error.get("type", "?"), error.get("message", ""),
                    error.get("traceback", ""), rec["attempts"]))
        return cls(Path(ledger_path), tuple(task_ids), results, failures, records,
                   tuple(refused))

    def result(self, task_id: str) -> dict[str, Any] | None:
        """The accepted result of one task, or None."""
        rec = self.records.get(task_id)
        if rec is None or task_id in self.refused or rec["status"] != Status.ACCEPTED.value:
            return None
        return rec["result"]

    @property
    def counts(self) -> dict[str, int]:
        """Number of tasks by status (``refused`` counted apart from the record's status)."""
        out = {s.value: 0 for s in Status}
        out["refused"] = len(self.refused)
        for tid, rec in self.records.items():
            if tid not in self.refused:
                out[rec["status"]] += 1
        return out

    @property
    def complete(self) -> bool:
        """True when every task is accepted."""
        return len(self.results) == len(self.task_ids)

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}={v}" for k, v in self.counts.items() if v)
        return f"Campaign({str(self.ledger_path)!r}, {len(self.task_ids)} tasks: {counts})"


def _decoded(rec: dict[str, Any]) -> dict[str, Any]:
    out = dict(rec)
    out["item"] = decode(rec["item"])
    if rec["result"] is not None:
        out["result"] = decode_flat(rec["result"])
    return out


def refused_message(task_id: str, changed: list[dict[str, Any]], ledger: str) -> str:
    fields = "; ".join(f"field {c['field']!r}: {c['old']!r} -> {c['new']!r}" for c in changed)
    return (
        f"task {task_id!r} changed since it was recorded ({fields or 'item differs'}); it was "
        f"not run and its record was kept. Run `campaign forget {ledger} {task_id}` to run it "
        "again with the new item, or give it a new task_id"
    )
