"""What `checkpointed_map` returns: the campaign's results, failures and records."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

from ._ledger._jsonvalue import decode, decode_flat
from ._ledger._status import ACCEPTED, FAILED, Status
from ._shell import command


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
        ledger_writes: how many times this run wrote the ledger (group commits: journal
            appends and whole-file writes).
        ledger_bytes_written: how many bytes those writes wrote (journal lines and files).
        kept: how many tasks were accepted in the ledger before this run and not run again.
        ran: how many tasks this run ran (at least one attempt ended in this run).
        elapsed: how long this run took, in seconds.
    """

    ledger_path: Path
    task_ids: tuple[str, ...]
    results: Sequence[dict[str, Any]]
    failures: list[Failure]
    records: Mapping[str, dict[str, Any]]
    refused: tuple[str, ...] = field(default=())
    ledger_writes: int = 0
    ledger_bytes_written: int = 0
    kept: int = 0
    ran: int = 0
    elapsed: float = 0.0

    @classmethod
    def from_records(cls, ledger_path: Path, task_ids: list[str],
                     stored: Mapping[str, dict[str, Any]],
                     refused: dict[str, list[dict[str, Any]]], **stats: Any) -> Campaign:
        """The campaign of ``task_ids`` (item order) as ``stored`` (task id -> stored record,
        e.g. a `RecordStore`) holds them. Only failed and refused records are decoded now;
        `results` and `records` decode each one when it is looked up."""
        accepted, failures = [], []
        present = []
        for tid in task_ids:
            status = _status_of(stored, tid)
            if status is None:
                continue
            present.append(tid)
            if tid in refused:
                failures.append(Failure(
                    tid, "refused", "ItemChanged",
                    refused_message(tid, refused[tid], str(ledger_path)),
                    attempts=stored[tid]["attempts"], changed=tuple(refused[tid])))
            elif status == ACCEPTED:
                accepted.append(tid)
            elif status == FAILED:
                rec = stored[tid]
                error = rec["error"] or {}
                failures.append(Failure(
                    tid, "failed", error.get("type", "?"), error.get("message", ""),
                    error.get("traceback", ""), rec["attempts"]))
        records = _Records(stored, present)
        return cls(Path(ledger_path), tuple(task_ids), _Results(records, accepted), failures,
                   records, tuple(refused), **stats)

    def result(self, task_id: str) -> dict[str, Any] | None:
        """The accepted result of one task, or None."""
        if task_id not in self.records or task_id in self.refused:
            return None
        if _status_of(self.records, task_id) != ACCEPTED:
            return None
        return self.records[task_id]["result"]

    @property
    def counts(self) -> dict[str, int]:
        """Number of tasks by status (``refused`` counted apart from the record's status)."""
        out = {s.value: 0 for s in Status}
        out["refused"] = len(self.refused)
        refused = set(self.refused)
        for tid in self.records:
            status = _status_of(self.records, tid)
            if tid not in refused and status is not None:
                out[status] += 1
        return out

    @property
    def complete(self) -> bool:
        """True when every task is accepted."""
        return len(self.results) == len(self.task_ids)

    @property
    def summary(self) -> str:
        """What this run did: ``3 kept from the ledger, nothing to run`` or ``1 kept from the
        ledger, 2 ran now`` (kept: accepted by an earlier run, not run again)."""
        now = f"{self.ran} ran now" if self.ran else "nothing to run"
        return f"{self.kept} kept from the ledger, {now}"

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}={v}" for k, v in self.counts.items() if v)
        return f"Campaign({str(self.ledger_path)!r}, {len(self.task_ids)} tasks: {counts})"


def _status_of(records: Mapping[str, dict[str, Any]], task_id: str) -> str | None:
    """The status of a task's record (None if there is none), without decoding the record
    where the mapping can say it (`RecordStore`, `_Records`)."""
    status = getattr(records, "status", None)
    if status is not None:
        return status(task_id)
    rec = records.get(task_id)
    return None if rec is None else rec["status"]


class _Records(Mapping[str, dict[str, Any]]):
    """Task id -> record of the campaign's tasks, in item order, decoded from the stored form
    (item and result decoded too) when looked up."""

    def __init__(self, stored: Mapping[str, dict[str, Any]], task_ids: list[str]):
        self._stored = stored
        self._ids = task_ids  # those of the items that have a record, in item order
        self._members: frozenset[str] | None = None  # made when first asked

    def __getitem__(self, task_id: str) -> dict[str, Any]:
        if task_id not in self:
            raise KeyError(task_id)
        rec = self._stored[task_id]
        out = dict(rec)
        out["item"] = decode(rec["item"])
        if rec["result"] is not None:
            out["result"] = decode_flat(rec["result"])
        return out

    def __contains__(self, task_id: object) -> bool:
        if self._members is None:
            self._members = frozenset(self._ids)
        return task_id in self._members

    def status(self, task_id: str) -> str | None:
        return _status_of(self._stored, task_id) if task_id in self else None

    def result(self, task_id: str) -> dict[str, Any]:
        """The decoded result of an accepted task."""
        return decode_flat(self._stored[task_id]["result"])

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def __repr__(self) -> str:
        return f"<{len(self)} task records>"


class _Results(Sequence[dict[str, Any]]):
    """The accepted results in item order, each decoded when it is looked up. Equal to a list
    of the same results."""

    def __init__(self, records: _Records, task_ids: list[str]):
        self._records = records
        self._ids = task_ids

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self._records.result(tid) for tid in self._ids[index]]
        return self._records.result(self._ids[index])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return map(self._records.result, self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (_Results, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which are unhashable

    def __repr__(self) -> str:
        return repr(list(self))


def refused_message(task_id: str, changed: list[dict[str, Any]], ledger: str) -> str:
    fields = "; ".join(_change_text(c) for c in changed)
    text = (
        f"task {task_id!r} changed since it was recorded ({fields or 'item differs'}); it was "
        f"not run and its record was kept. Run `{command('campaign', 'forget', ledger, task_id)}`"
        f" to run it again with the new item (or `{command('campaign', 'forget', ledger)} "
        "--refused` for every task the run refused), or give it a new task_id"
    )
    columns = added_or_removed(changed)
    if columns:
        flags = " ".join(f"--ignore-field {command(name)}" for name in columns)
        text += (f"; if {'that field does' if len(columns) == 1 else 'those fields do'} not change "
                 f"the result, run with {flags} (checkpointed_map(ignore_fields="
                 f"{tuple(columns)!r})) to keep the results")
    return text


def more_refused_message(more: int, ledger: str) -> str:
    return (f"... and {more} more task(s) were refused for the same reason; `campaign status "
            f"{command(ledger)}` counts them, `{command('campaign', 'forget', ledger)} --refused` "
            "forgets every task the last run refused")


def _change_text(change: dict[str, Any]) -> str:
    if change["old"] == "<missing>":
        return f"field {change['field']!r} added: {change['new']!r}"
    if change["new"] == "<missing>":
        return f"field {change['field']!r} removed (was {change['old']!r})"
    return f"field {change['field']!r}: {change['old']!r} -> {change['new']!r}"


def added_or_removed(changed: list[dict[str, Any]]) -> list[str]:
    """The top-level fields named by ``changed`` (`campaign._ledger._jsonvalue.changed_fields`) when
    every change is such a field added or removed, else []."""
    names = []
    for c in changed:
        whole = "." not in c["field"] and c["field"] != "<item>"
        if not (whole and "<missing>" in (c["old"], c["new"])):
            return []
        names.append(c["field"])
    return names
