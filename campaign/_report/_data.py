"""The columns `campaign report` plots, taken from a ledger as it streams by.

The ledger is read chunk by chunk (`campaign._ledger._scan`: each chunk checked as
`campaign.read_ledger` checks the whole file, array workers' fragments not merged yet applied, the
tasks their live leases hold shown running, as `campaign status` does). Of each chunk only the
fields the page shows are kept, as numpy columns (one C-level pass per chunk, no per-record Python
function); the records themselves are dropped, so a million records need a few hundred MB, not the
several GB of the parsed file.
"""

from __future__ import annotations

import gc
from collections import Counter
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np

from .._ledger._schema import Columns, columns
from .._ledger._status import Status
from . import MAX_POINTS as MAX_POINTS
from . import MAX_TASK_ROWS
from ._numeric import Numeric, floats, item_axis, numeric_columns, row_values

#: The statuses, in the order of their integer codes in the columns.
STATUSES: tuple[str, ...] = tuple(s.value for s in Status)
CODE = {s: i for i, s in enumerate(STATUSES)}
PENDING, RUNNING, ACCEPTED, FAILED, INTERRUPTED = (CODE[s] for s in STATUSES)
#: Per-attempt resource fields (absent from ledgers written before they were recorded).
RESOURCES = ("cpu_s", "peak_rss_bytes", "gpu_peak_bytes")
_RESOURCE_ATTRS = attrgetter(*RESOURCES)
#: Bytes of the ledger read at a time: four times the scan's default
#: (`campaign._ledger._scan.BLOCK`), as each block's records cost the report numpy calls and passes
#: of their own. On a million records, `campaign report` took about 13 % less CPU time than with 64
#: KB blocks.
BLOCK = 256 << 10
#: The first line of an error message is kept up to this many characters.
MESSAGE_CHARS = 200


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
    last: int  # the first `last` rows are the tasks' last attempts (one per task that started)


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
    #: task index -> (error type, the message's first line) of the first MAX_TASK_ROWS failed
    #: and the first MAX_TASK_ROWS interrupted tasks, in ledger order (what the tasks table
    #: can show of them)
    errors: dict[int, tuple[str, str]] = field(default_factory=dict)


def load(path: Path, now: float) -> Data:
    """Read the ledger at ``path`` (with its array fragments and leases) into `Data`."""
    from .._ledger._overlay import scan_columns
    from .._tally import Tally

    gc.disable()  # a chunk parses into many objects, none of them cyclic
    try:
        # typed: records parsed into `campaign._ledger._typed.Record`s, checked as they are parsed
        head, blocks, over = scan_columns(path, block=BLOCK, typed=True)
        tally = Tally(head["runs"], now)
        taken = _Columns(now, over.held)
        for chunk, cols in blocks:
            tally.add(chunk, cols)
            taken.add(chunk, cols)
        facts = tally.facts(head, str(path), array_workers=len(over.leases),
                            array_active=_array_active(head))
        return taken.data(str(path), head["runs"], facts)
    finally:
        gc.enable()


def _array_active(head: dict[str, Any]) -> bool:
    """Whether an element of the last submission's job array is pending or running in Slurm
    (one query, as `campaign status` asks; False when Slurm cannot be asked from here)."""
    last = head["runs"][-1] if head["runs"] else {}
    if last.get("status") != "submitted" or not last.get("job"):
        return False
    from schedulers.slurm import ACTIVE_STATES

    from .._jobs import job_array_states

    states = job_array_states(last.get("job"))
    return states is not None and any(state in ACTIVE_STATES for state in states.values())


def _resources(recs: list[Any]) -> list[tuple[Any, ...]]:
    """The RESOURCES of records (dicts, or the scan's typed records:
    `campaign._ledger._typed.Record`, whose absent fields are ``msgspec.UNSET``, which `floats`
    reads as nan), one tuple each."""
    if not recs or type(recs[0]) is dict:
        return row_values(recs, list(RESOURCES))
    return list(zip(*map(_RESOURCE_ATTRS, recs)))


class _Columns:
    """The page's columns, added chunk by chunk of records (`add`); `data` ends them."""

    def __init__(self, now: float, held: dict[str, Any]):
        self.now, self.held = now, held
        self.ids: list[str] = []
        self.tasks: dict[str, list[np.ndarray]] = {
            k: [] for k in ("status", "tries", "started", "ended", "duration")}
        self.last: dict[str, list[np.ndarray]] = {
            k: [] for k in ("task", "lane") + RESOURCES}
        self.hist: dict[str, list[np.ndarray]] = {  # the earlier attempts that started
            k: [] for k in ("task", "number", "status", "started", "ended", "lane") + RESOURCES}
        self.hist_lanes: dict[Any, int] = {}  # their lane keys -> index, in the order seen
        self.lanes: dict[Any, int] = {}  # lane key -> index, last attempts' lanes first
        self.groups: dict[str, Failure] = {}
        self.causes: Counter[str] = Counter()
        self.errors: dict[int, tuple[str, str]] = {}
        self.kept_errors = {FAILED: 0, INTERRUPTED: 0}
        self.results = Numeric()
        self.items = Numeric(exclude=("task_id",))

    def add(self, tasks: dict[str, Any], cols: Columns | None = None) -> None:
        """Take the columns of ``tasks`` (one chunk: task id -> record), whose `Columns` are
        ``cols`` (taken from ``tasks`` when not given)."""
        held = self.held.keys() & tasks.keys()
        for tid in held:  # a leased task runs: no end yet
            tasks[tid] = dict(tasks[tid], ended=None, duration=None)
        first = len(self.ids)
        self.ids.extend(tasks)
        recs = list(tasks.values())
        if not recs:
            return
        if cols is None or held:
            cols = columns(recs)
        f = cols.fields
        status = np.fromiter(map(CODE.__getitem__, f["status"]), dtype=np.int8, count=len(recs))
        started = floats(f["started"])
        t = self.tasks
        t["status"].append(status)
        t["tries"].append(np.array(f["attempts"], dtype=np.int64))
        t["started"].append(started)
        t["ended"].append(floats(f["ended"]))
        t["duration"].append(floats(f["duration"]))
        self._last(recs, f, np.flatnonzero(~np.isnan(started)), first)
        histories = f["history"]
        earlier = [(i, h) for i in compress(range(len(recs)), histories) for h in histories[i]]
        causes = self.causes
        for _, h in earlier:
            if h.get("status") == "interrupted":
                causes[(h.get("error") or {}).get("type") or "?"] += 1
        self._history([(first + i, h) for i, h in earlier if h.get("started") is not None])
        errors = f["error"]
        for i in np.flatnonzero(status == INTERRUPTED).tolist():
            causes[(errors[i] or {}).get("type") or "?"] += 1
        self._keep_errors(status, errors, first)
        groups = self.groups
        for i in np.flatnonzero(status == FAILED).tolist():
            error = errors[i] or {}
            kind = error.get("type") or "?"
            group = groups.get(kind)
            if group is None:
                groups[kind] = Failure(kind, 1, self.ids[first + i], error.get("message") or "",
                                       error.get("traceback") or "")
            else:
                group.count += 1
        accepted = np.flatnonzero(status == ACCEPTED).tolist()
        if len(accepted) == len(recs):
            results, items = f["result"], f["item"]
        else:
            results = tuple(map(f["result"].__getitem__, accepted))
            items = tuple(map(f["item"].__getitem__, accepted))
        self.results.add([r or {} for r in results] if None in results
                         else list(results))
        self.items.add(list(items))

    def _keep_errors(self, status: np.ndarray, errors: tuple[Any, ...], first: int) -> None:
        """Keep the error type and message line of failed and interrupted tasks of a chunk
        (its first task: ``first``), up to MAX_TASK_ROWS of each status."""
        for code, count in self.kept_errors.items():
            if count >= MAX_TASK_ROWS:
                continue
            for i in np.flatnonzero(status == code)[:MAX_TASK_ROWS - count].tolist():
                error = errors[i] or {}
                message = error.get("message") or ""
                line = message.splitlines()[0] if message else ""
                self.errors[first + i] = (error.get("type") or "?", line[:MESSAGE_CHARS])
                self.kept_errors[code] += 1

    def _last(self, recs: list[dict[str, Any]], f: dict[str, tuple[Any, ...]], ran: np.ndarray,
              first: int) -> None:
        """The last attempts of the tasks that started (``ran``: their indices in ``recs``):
        their tasks, lanes and resources."""
        n = len(recs)
        every = len(ran) == n
        pick = ran.tolist()
        workers = f["worker"] if every else tuple(map(f["worker"].__getitem__, pick))
        if None in workers or "" in workers:  # no worker name: the lane is host and pid
            hosts = f["host"] if every else tuple(map(f["host"].__getitem__, pick))
            pids = f["pid"] if every else tuple(map(f["pid"].__getitem__, pick))
            keys: Any = [w or (h, p) for w, h, p in zip(workers, hosts, pids)]
        else:
            keys = workers
        lanes = self.lanes
        for key in dict.fromkeys(keys):  # new lanes numbered in the order first seen
            if key not in lanes:
                lanes[key] = len(lanes)
        self.last["task"].append(ran + first)
        self.last["lane"].append(np.fromiter(map(lanes.__getitem__, keys), dtype=np.int64,
                                             count=len(keys)))
        ran_recs = recs if every else list(map(recs.__getitem__, pick))
        for key, column in zip(RESOURCES, _resources(ran_recs)):
            self.last[key].append(floats(column))

    def _history(self, earlier: list[tuple[int, dict[str, Any]]]) -> None:
        """Take the columns of the earlier attempts (task index, history entry) that started."""
        if not earlier:
            return
        hist, lanes = self.hist, self.hist_lanes
        entries = [h for _, h in earlier]
        hist["task"].append(np.array([i for i, _ in earlier], dtype=np.int64))
        hist["number"].append(np.array([h.get("attempt") or 0 for h in entries], dtype=np.int64))
        hist["status"].append(np.array([CODE.get(h.get("status") or "", INTERRUPTED)
                                        for h in entries], dtype=np.int8))
        hist["lane"].append(np.array([lanes.setdefault(
            h.get("worker") or (h.get("host"), h.get("pid")), len(lanes)) for h in entries],
            dtype=np.int64))
        for key in ("started", "ended") + RESOURCES:
            hist[key].append(floats([h.get(key) for h in entries]))

    def data(self, path: str, runs: list[dict[str, Any]], facts: dict[str, Any]) -> Data:
        t = {k: np.concatenate(v) if v else np.empty(0) for k, v in self.tasks.items()}
        status = t["status"].astype(np.int8)
        data = Data(path=path, now=self.now, runs=runs, facts=facts, task_ids=self.ids,
                    status=status, attempts_per_task=t["tries"].astype(np.int64),
                    started=t["started"], ended=t["ended"], duration=t["duration"],
                    attempts=self._attempts(status, t),
                    failures=sorted(self.groups.values(), key=lambda f: -f.count),
                    interruption_causes=self.causes, errors=self.errors)
        data.results, data.columns_left_out = numeric_columns(self.results)
        data.item_fields = item_axis(self.items)
        return data

    def _attempts(self, status: np.ndarray, t: dict[str, np.ndarray]) -> Attempts:
        last = {k: np.concatenate(v) if v else np.empty(0) for k, v in self.last.items()}
        hist = {k: np.concatenate(v) if v else np.empty(0) for k, v in self.hist.items()}
        ran = last["task"].astype(np.int64)
        lanes = self.lanes  # the last attempts' lanes first, then those only earlier ones had
        to_lane = np.array([lanes.setdefault(k, len(lanes)) for k in self.hist_lanes],
                           dtype=np.int64)
        codes = np.concatenate([status[ran], hist["status"].astype(np.int8)])
        end = np.concatenate([t["ended"][ran], hist["ended"]])
        end = np.where(np.isnan(end) & (codes == RUNNING), self.now, end)
        return Attempts(
            task=np.concatenate([ran, hist["task"].astype(np.int64)]),
            number=np.concatenate([t["tries"][ran].astype(np.int64),
                                   hist["number"].astype(np.int64)]),
            status=codes,
            lane=np.concatenate([last["lane"].astype(np.int64),
                                 to_lane[hist["lane"].astype(np.int64)]]),
            lanes=[k if type(k) is str else f"{k[0]} pid {k[1]}" for k in lanes],
            started=np.concatenate([t["started"][ran], hist["started"]]),
            ended=end,
            resources={k: np.concatenate([last[k].astype(float), hist[k].astype(float)])
                       for k in RESOURCES},
            last=len(ran))
