"""The columns `campaign report` plots, taken from a ledger in one read.

The ledger is read once with the public reader (`campaign.read_ledger`); array workers'
fragments not merged yet are applied and the tasks their live leases hold are shown running, as
`campaign status` does. Each field of the records becomes one numpy column (one list
comprehension per field, no per-record Python function), so a million records cost a few
seconds beyond the parse.
"""

from __future__ import annotations

import gc
from collections import Counter
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from .._status import Status
from . import MAX_POINTS as MAX_POINTS

#: The statuses, in the order of their integer codes in the columns.
STATUSES: tuple[str, ...] = tuple(s.value for s in Status)
CODE = {s: i for i, s in enumerate(STATUSES)}
PENDING, RUNNING, ACCEPTED, FAILED, INTERRUPTED = (CODE[s] for s in STATUSES)
#: Per-attempt resource fields (absent from ledgers written before they were recorded).
RESOURCES = ("cpu_s", "peak_rss_bytes", "gpu_peak_bytes")
#: At most this many numeric result columns (and item fields) are plotted.
MAX_COLUMNS = 12
#: Results looked at to find the result keys (spread over the accepted tasks).
_KEY_SAMPLE = 2000


@dataclass
class Attempts:
    """Every attempt that started: the last one of each task, then its history's entries."""

    task: np.ndarray  # index into `Data.task_ids`
    number: np.ndarray  # the attempt's number (1 = first)
    status: np.ndarray  # code into STATUSES
    lane: np.ndarray  # index into `lanes`
    lanes: list[str]  # worker (array element, dask worker) or "host pid N"
    started: np.ndarray
    ended: np.ndarray  # now for a running attempt
    resources: dict[str, np.ndarray]  # RESOURCES -> values (nan where not recorded)


@dataclass
class Failure:
    type: str
    count: int
    task_id: str
    message: str
    traceback: str


@dataclass
class Data:
    """What the page shows, as arrays and small summaries."""

    path: str
    now: float
    runs: list[dict[str, Any]]
    facts: dict[str, Any]  # `campaign status --json`'s facts
    task_ids: list[str]
    status: np.ndarray
    attempts_per_task: np.ndarray
    started: np.ndarray  # last attempt of each task
    ended: np.ndarray
    duration: np.ndarray
    attempts: Attempts
    failures: list[Failure]
    interruption_causes: Counter[str]
    results: dict[str, np.ndarray] = field(default_factory=dict)  # accepted tasks only
    item_fields: dict[str, np.ndarray] = field(default_factory=dict)  # the scatter's x axis
    columns_left_out: int = 0


def load(path: Path, now: float) -> Data:
    """Read the ledger at ``path`` (with its array fragments and leases) into `Data`."""
    from .. import read_ledger
    from .._cli._status import summarize

    gc.disable()  # a large ledger parses into millions of objects, none of them cyclic
    try:
        doc = read_ledger(path)
        leases = _overlay(doc, path)
        facts = summarize(doc, str(path), now, array_workers=leases,
                          array_active=_array_active(doc))
        return _columns(doc, facts, str(path), now)
    finally:
        gc.enable()


def _array_active(doc: dict[str, Any]) -> bool:
    """Whether an element of the last submission's job array is pending or running in Slurm
    (one query, as `campaign status` asks; False when Slurm cannot be asked from here)."""
    last = doc["runs"][-1] if doc["runs"] else {}
    if last.get("status") != "submitted" or not last.get("job"):
        return False
    from schedulers.slurm import ACTIVE_STATES

    from .._cli._status import job_array_states

    states = job_array_states(last.get("job"))
    return bool(states) and any(state in ACTIVE_STATES for state in states.values())


def _overlay(doc: dict[str, Any], ledger: Path) -> int:
    """Apply unmerged fragments; show tasks held by live leases as running (as `campaign
    status` does). Returns the number of live leases."""
    from .._array import live_leases, overlay

    overlay(doc, ledger)
    leases = live_leases(ledger)
    tasks = doc["tasks"]
    for lease in leases:
        rec = tasks.get(lease["task_id"])
        if rec is not None and rec["status"] != "accepted":
            owner = lease["owner"]
            tasks[lease["task_id"]] = dict(
                rec, status="running", host=owner.get("host"), pid=owner.get("pid"),
                worker=owner.get("worker"), started=lease["claimed"], ended=None,
                duration=None)
    return len(leases)


def _floats(values: list[Any]) -> np.ndarray:
    """A float column; None -> nan. Where something else than numbers and None is among the
    values (a non-finite float's tag, a string, a list), anything but a number -> nan."""
    try:  # the common case, at numpy's speed (bools and numeric strings read as numbers)
        column = np.array(values, dtype=float)
        if column.ndim == 1:
            return column
    except (TypeError, ValueError):
        pass
    return np.array([v if type(v) is float or type(v) is int else None for v in values],
                    dtype=float)


#: The record fields taken for every task, in one C-level pass (`operator.itemgetter`).
_TASK_FIELDS = ("status", "started", "ended", "duration", "attempts", "history", "worker",
                "host", "pid", "result", "item")


def _columns(doc: dict[str, Any], facts: dict[str, Any], path: str, now: float) -> Data:
    tasks = doc["tasks"]
    ids = list(tasks)
    recs = list(tasks.values())
    (statuses, started, ended, duration, tries, histories, workers, hosts, pids, results,
     items) = _fields(recs, _TASK_FIELDS)
    status = np.array(list(map(CODE.__getitem__, statuses)), dtype=np.int8)
    started, ended, duration = (_floats(c) for c in (started, ended, duration))
    tries = np.array(tries, dtype=np.int64)
    earlier = [(i, h) for i, hist in enumerate(histories) if hist for h in hist]
    ran = np.flatnonzero(~np.isnan(started))
    lanes = [workers[i] or (hosts[i], pids[i]) for i in ran.tolist()]
    data = Data(path=path, now=now, runs=doc["runs"], facts=facts, task_ids=ids, status=status,
                attempts_per_task=tries, started=started, ended=ended, duration=duration,
                attempts=_attempts(recs, ran, lanes, status, started, ended, tries, earlier,
                                   now),
                failures=_failures(ids, recs, status),
                interruption_causes=_interruption_causes(recs, status, earlier))
    accepted = np.flatnonzero(status == ACCEPTED).tolist()
    data.results, data.columns_left_out = _numeric(
        [results[i] or {} for i in accepted], exclude=())
    data.item_fields = _item_axis([items[i] for i in accepted])
    return data


def _fields(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> list[tuple[Any, ...]]:
    """The values of ``keys`` (present in every row) as one tuple per key."""
    if not rows:
        return [()] * len(keys)
    if len(keys) == 1:
        return [tuple(map(itemgetter(keys[0]), rows))]
    return list(zip(*map(itemgetter(*keys), rows)))


def _attempts(recs: list[dict[str, Any]], ran: np.ndarray, lanes: list[Any],
              status: np.ndarray, started: np.ndarray, ended: np.ndarray, tries: np.ndarray,
              earlier: list[tuple[int, dict[str, Any]]], now: float) -> Attempts:
    last = list(map(recs.__getitem__, ran.tolist()))
    earlier = [(i, h) for i, h in earlier if h.get("started") is not None]
    hist = [h for _, h in earlier]
    keys = lanes + [h.get("worker") or (h.get("host"), h.get("pid")) for h in hist]
    index = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    status_codes = np.concatenate([status[ran], np.array(
        [CODE.get(h.get("status"), INTERRUPTED) for h in hist], dtype=np.int8)])
    end = np.concatenate([ended[ran], _floats([h.get("ended") for h in hist])])
    end = np.where(np.isnan(end) & (status_codes == RUNNING), now, end)
    return Attempts(
        task=np.concatenate([ran, np.array([i for i, _ in earlier], dtype=np.int64)]),
        number=np.concatenate([tries[ran], np.array([h.get("attempt") or 0 for h in hist],
                                                     dtype=np.int64)]),
        status=status_codes, lane=np.array(list(map(index.__getitem__, keys)), dtype=np.int64),
        lanes=[k if type(k) is str else f"{k[0]} pid {k[1]}" for k in index],
        started=np.concatenate([started[ran], _floats([h.get("started") for h in hist])]),
        ended=end,
        resources=_resources(last, hist))


def _resources(last: list[dict[str, Any]], hist: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """The RESOURCES columns of the attempts (one pass over the records for all of them)."""
    a, b, c = RESOURCES
    mine = _columns_of([(r.get(a), r.get(b), r.get(c)) for r in last], 3)
    earlier = _columns_of([(h.get(a), h.get(b), h.get(c)) for h in hist], 3)
    return {k: np.concatenate([_floats(mine[j]), _floats(earlier[j])])
            for j, k in enumerate(RESOURCES)}


def _columns_of(rows: list[tuple[Any, ...]], width: int) -> list[tuple[Any, ...]]:
    return list(zip(*rows)) if rows else [()] * width


def _failures(ids: list[str], recs: list[dict[str, Any]], status: np.ndarray) -> list[Failure]:
    """The failed tasks grouped by their error's type, most frequent first."""
    groups: dict[str, Failure] = {}
    for i in np.flatnonzero(status == FAILED).tolist():
        error = recs[i]["error"] or {}
        kind = error.get("type") or "?"
        group = groups.get(kind)
        if group is None:
            groups[kind] = Failure(kind, 1, ids[i], error.get("message") or "",
                                   error.get("traceback") or "")
        else:
            group.count += 1
    return sorted(groups.values(), key=lambda f: -f.count)


def _interruption_causes(recs: list[dict[str, Any]], status: np.ndarray,
                         earlier: list[tuple[int, dict[str, Any]]]) -> Counter[str]:
    """Interrupted attempts (last attempts and history) by their cause's error type."""
    causes: Counter[str] = Counter()
    for i in np.flatnonzero(status == INTERRUPTED).tolist():
        causes[(recs[i]["error"] or {}).get("type") or "?"] += 1
    for _, h in earlier:
        if h.get("status") == "interrupted":
            causes[(h.get("error") or {}).get("type") or "?"] += 1
    return causes


def _spread(n: int) -> list[int]:
    """Up to _KEY_SAMPLE row indices spread evenly over ``n`` rows."""
    return np.unique(np.linspace(0, n - 1, min(n, _KEY_SAMPLE)).astype(np.int64)).tolist()


def _item_axis(items: list[Any]) -> dict[str, np.ndarray]:
    """The numeric top-level item field with the most distinct values in a sample of the items
    (a field of distinct integers, likely an index or a seed, only when no other varies), as
    ``{name: column}``; empty when no numeric field varies."""
    seen: dict[str, set[float]] = {}
    sampled: Counter[str] = Counter()
    for j in _spread(len(items)) if items else []:
        item = items[j]
        if type(item) is dict:
            for key, value in item.items():
                if key != "task_id" and (type(value) is float or type(value) is int):
                    seen.setdefault(key, set()).add(value)
                    sampled[key] += 1
    varied = [k for k, values in seen.items() if len(values) > 1]
    if not varied:
        return {}
    # integers that are all distinct are most likely an index or a seed: others first
    counters = {k for k in varied if len(seen[k]) == sampled[k]
                and all(type(v) is int for v in seen[k])}
    key = max(varied, key=lambda k: (k not in counters, len(seen[k])))
    return {key: _floats([i.get(key) if type(i) is dict else None for i in items])}


def _numeric(rows: list[dict[str, Any]], exclude: tuple[str, ...]
             ) -> tuple[dict[str, np.ndarray], int]:
    """The numeric keys of flat dicts as float columns (at most MAX_COLUMNS; keys in the order
    first seen in a sample of the rows); returns them and how many were left out."""
    if not rows:
        return {}, 0
    keys: dict[str, None] = {}
    for j in _spread(len(rows)):
        for key, value in rows[j].items():
            if key not in exclude and (type(value) is float or type(value) is int):
                keys[key] = None
    if not keys:
        return {}, 0
    try:  # every row has every key: one C-level pass
        values = dict(zip(keys, _fields(rows, tuple(keys))))
    except KeyError:
        values = {key: [row.get(key) for row in rows] for key in keys}
    columns = {}
    for key in keys:
        column = _floats(values.pop(key))
        finite = column[np.isfinite(column)]
        if finite.size and (finite.size > 1 or len(rows) == 1):
            columns[key] = column
    names = list(columns)
    return {k: columns[k] for k in names[:MAX_COLUMNS]}, max(0, len(names) - MAX_COLUMNS)
