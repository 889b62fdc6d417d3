"""What `campaign status` (and the summary of `campaign report`) counts in a ledger's records.

The records stream by a chunk at a time (`campaign._ledger._scan`) with their `Columns`; `Tally`
adds each chunk up with C-level operations over the columns (sums, counts, minima), and looks at
single records only for the few that need more: failed and running tasks, retried ones. No
record is kept. `SubmissionTally` counts what a `campaign submit` run's job array did.
"""

from __future__ import annotations

from collections import Counter
from itertools import compress
from operator import and_
from pathlib import Path
from typing import Any

import orjson

from ._ledger import _ownership
from ._ledger._schema import Columns, columns
from ._ledger._status import ACCEPTED, FAILED, RUNNING, RunStatus, Status

#: While a run is live and longer than this, throughput is measured over its last this-many s.
WINDOW = 300.0
STATUSES = tuple(s.value for s in Status)
_ENDED = frozenset({ACCEPTED, FAILED})


class Tally:
    """What `campaign status` counts, added up chunk by chunk of records (`add`), so that a
    ledger is summarized while it streams by (`campaign._ledger._scan`) and no record is kept."""

    def __init__(self, runs: list[dict[str, Any]], now: float):
        self.now = now
        last = runs[-1] if runs else None
        self.since = float((last.get("started") or 0.0) if last else 0.0)
        self.counts = dict.fromkeys(STATUSES, 0)
        self.attempts = self.retried = self.most = self.interruptions = 0
        self.ended_in_run = self.ended_recent = self.failed_before = self.total = 0
        self.first_start: float | None = None  # of the attempts of this run that ended or run
        self.last_end: float | None = None
        self.by_type: dict[str, list[Any]] = {}
        self.running: list[dict[str, Any]] = []

    def add(self, tasks: dict[str, Any], cols: Columns | None = None) -> None:
        """Count the records of ``tasks`` (task id -> record), whose `Columns` are ``cols``
        (taken from ``tasks`` when not given)."""
        if cols is None:
            cols = columns(list(tasks.values()))
        n = len(cols)
        if not n:
            return
        f, counts = cols.fields, cols.counts
        self.total += n
        for status, count in counts.items():
            self.counts[status] += count
        tries = f["attempts"]
        self.attempts += sum(tries)
        retried = list(compress(range(n), map((1).__lt__, tries)))
        if retried:
            self.retried += len(retried)
            self.most = max(self.most, max(tries))
        self.interruptions += sum(f["interruptions"])
        if counts[ACCEPTED] or counts[FAILED]:
            self._ended(f, n, counts[ACCEPTED] + counts[FAILED] == n, retried)
        if counts[FAILED] or counts[RUNNING]:
            ids = list(tasks)
            if counts[FAILED]:
                self._failed(ids, f)
            if counts[RUNNING]:
                self._running(ids, f)

    def _ended(self, f: dict[str, tuple[Any, ...]], n: int, all_ended: bool,
               retried: list[int]) -> None:
        """The accepted and failed tasks: how many ended in this run, recently, and the span
        of their attempts."""
        status, since = f["status"], self.since
        if all_ended:
            ended, started = list(f["ended"]), list(f["started"])
        else:
            mask = list(map(_ENDED.__contains__, status))
            ended, started = list(compress(f["ended"], mask)), list(compress(f["started"], mask))
        if None in ended:  # no end recorded (a file made by hand): counted as 0.0
            ended = [e or 0.0 for e in ended]
        # a chunk's ends are mostly all in this run, and all or none recent: passes over them
        # only where its earliest and latest end do not decide it
        lo, last_end = min(ended), max(ended)
        if last_end < since:
            return
        count = len(ended)
        if lo < since:
            in_run = list(map(since.__le__, ended))
            count = sum(in_run)
            ended, started = list(compress(ended, in_run)), list(compress(started, in_run))
            lo = min(ended)
        self.ended_in_run += count
        recent = self.now - WINDOW
        self.ended_recent += (count if lo >= recent else 0 if last_end < recent
                              else sum(map(recent.__le__, ended)))
        if self.last_end is None or last_end > self.last_end:
            self.last_end = last_end
        if None in started:
            started = [s for s in started if s is not None]
        begun = [min(started)] if started else []
        for i in retried:  # an earlier attempt of this run may have begun first
            end = f["ended"][i] or 0.0
            if f["status"][i] in _ENDED and end >= since:
                begun.append(min([t for t in (h.get("started") for h in f["history"][i])
                                  if t is not None and t >= since]
                                 + [f["started"][i] or end]))
        if begun and (self.first_start is None or min(begun) < self.first_start):
            self.first_start = min(begun)

    def _failed(self, ids: list[str], f: dict[str, tuple[Any, ...]]) -> None:
        """The failed tasks: by error type (with one example each), and those that ended
        before this run (it runs them again)."""
        by_type, since = self.by_type, self.since
        for i in compress(range(len(ids)), map(FAILED.__eq__, f["status"])):
            if (f["ended"][i] or 0.0) < since:
                self.failed_before += 1
            error = f["error"][i] or {}
            kind = error.get("type") or "?"
            entry = by_type.get(kind)
            if entry is None:
                by_type[kind] = [1, ids[i], error.get("message") or ""]
            else:
                entry[0] += 1

    def _running(self, ids: list[str], f: dict[str, tuple[Any, ...]]) -> None:
        since, now = self.since, self.now
        for i in compress(range(len(ids)), map(RUNNING.__eq__, f["status"])):
            started = f["started"][i]
            if started is not None and started >= since and (
                    self.first_start is None or started < self.first_start):
                self.first_start = started
            self.running.append({"task_id": ids[i], "host": f["host"][i], "pid": f["pid"][i],
                                 "worker": f["worker"][i], "started": started,
                                 "age_s": None if started is None else max(0.0, now - started)})

    def facts(self, doc: dict[str, Any], path: str, array_workers: int = 0,
              array_active: bool = False) -> dict[str, Any]:
        """The facts, with ``doc``'s top-level fields (its ``tasks`` are not looked at)."""
        now, counts = self.now, self.counts
        runs = doc["runs"]
        last = runs[-1] if runs else None
        submitted = last is not None and last.get("status") == RunStatus.SUBMITTED
        active = last is not None and (last.get("status") == RunStatus.RUNNING or (
            submitted and (array_workers > 0 or array_active)))
        run_facts = throughput = eta = None
        if last is not None:
            run_facts = last_run_facts(last, doc, now, active, self.ended_in_run,
                                       self.ended_recent, self.first_start, self.last_end)
            throughput = (run_facts["throughput_tasks"] / run_facts["throughput_seconds"]
                          if run_facts["throughput_seconds"] > 0 else None)
        remaining = counts["pending"] + counts["running"] + counts["interrupted"]
        if active:
            remaining += self.failed_before  # failed in an earlier run: this run runs them again
            if throughput:
                eta = remaining / throughput
        else:
            remaining += counts["failed"]  # the next run runs them again
        failures = [{"type": k, "count": v[0], "example_task": v[1], "example_message": v[2]}
                    for k, v in sorted(self.by_type.items(), key=lambda kv: -kv[1][0])]
        refused = last.get("refused_count", len(last.get("refused") or [])) if last else 0
        total = self.total
        return {
            "ledger": path, "version": doc.get("version"), "created": doc.get("created"),
            "updated": doc.get("updated"), "now": now, "total": total, "counts": counts,
            "refused_last_run": refused, "complete": counts["accepted"] == total and not refused,
            "attempts": {"total": self.attempts, "retried_tasks": self.retried,
                         "max": self.most or min(1, self.attempts),
                         "interruptions": self.interruptions},
            "failures_by_type": failures, "running": self.running, "runs": len(runs),
            "last_run": run_facts, "active": active, "throughput_per_s": throughput,
            "remaining": remaining, "eta_s": eta, "submission": None,
        }


def last_run_facts(last: dict[str, Any], doc: dict[str, Any], now: float, active: bool,
                   ended_in_run: int, ended_recent: int, first_start: float | None,
                   last_end: float | None) -> dict[str, Any]:
    """The last run's entry with its driver's liveness and the basis of its throughput: over
    the last `WINDOW` seconds of a long live run, else over its span -- from its start (a run
    of `campaign run`) or its first attempt's start (a submission: elements may wait in the
    queue), to now while it is live, else to its end (a submission: its last task's end)."""
    from ._ledger._atomic import HOST, pid_alive

    submitted = last.get("status") == RunStatus.SUBMITTED
    alive = None
    if active and not submitted and last.get("host") == HOST:
        alive = pid_alive(int(last.get("pid") or -1))
    if submitted:
        begun = first_start if first_start is not None else now
        end = now if active else (last_end if last_end is not None else begun)
    else:
        begun = last.get("started") or 0.0
        end = now if active else (last.get("ended") or doc.get("updated") or now)
    span = max(0.0, end - begun)
    basis = (ended_recent, WINDOW) if active and span > WINDOW else (ended_in_run, span)
    facts = {k: last.get(k) for k in ("id", "host", "pid", "execution", "status", "started",
                                       "ended", "total", "refused_count")}
    facts.update(driver_alive=alive, ended_tasks=ended_in_run, span_s=span,
                 work_started=first_start, throughput_tasks=basis[0],
                 throughput_seconds=basis[1])
    return facts


class SubmissionTally:
    """What a `campaign submit` run is doing, added up chunk by chunk: how many of its tasks
    ended in it, and by which job array element."""

    def __init__(self, ledger: Path, run: dict[str, Any]):
        from ._array._workdir import task_list_path

        self.run = run
        self.since = run.get("started") or 0.0
        self.job = run.get("job")
        try:
            self.to_run: list[str] | None = _ownership.read_json(
                task_list_path(ledger, run.get("submission") or run["id"]), ledger)
        except (FileNotFoundError, orjson.JSONDecodeError):
            self.to_run = None
        self.wanted = None if self.to_run is None else set(self.to_run)
        self.done = 0
        self.ended_by: dict[str, int] = {}

    def add(self, tasks: dict[str, Any], cols: Columns | None = None) -> None:
        """Count the tasks of ``tasks`` (one chunk, whose `Columns` are ``cols``) that ended
        in this submission, by their array element: C-level operations over the columns."""
        if cols is None:
            cols = columns(list(tasks.values()))
        f = cols.fields
        if not len(cols) or not (cols.counts[ACCEPTED] or cols.counts[FAILED]):
            return
        keep = map(_ENDED.__contains__, f["status"])
        if self.wanted is not None:
            keep = map(and_, keep, map(self.wanted.__contains__, tasks))
        chosen = list(compress(range(len(cols)), keep))
        ended = list(map(f["ended"].__getitem__, chosen))
        if None in ended:  # no end recorded (a file made by hand): counted as 0.0
            ended = [e or 0.0 for e in ended]
        chosen = list(compress(chosen, map(self.since.__le__, ended)))
        self.done += len(chosen)
        prefix = None if self.job is None else f"{self.job}_"
        ended_by = self.ended_by
        for worker, n in Counter(map(f["worker"].__getitem__, chosen)).items():
            if worker and (prefix is None or worker.startswith(prefix)):
                ended_by[worker] = ended_by.get(worker, 0) + n

    def facts(self, leases: list[dict[str, Any]],
              states: dict[str, str] | None) -> dict[str, Any]:
        """Its job array's elements (Slurm state, the tasks each one runs now and how many it
        ended in this submission) and how many tasks are done."""
        run, job = self.run, self.job
        elements: dict[str, dict[str, Any]] = {
            key: {"state": state, "running": [], "ended_tasks": 0}
            for key, state in sorted((states or {}).items(), key=lambda kv: _element_order(kv[0]))}

        def element(key: str) -> dict[str, Any]:  # one Slurm no longer lists (or never asked)
            return elements.setdefault(key, {"state": None, "running": [], "ended_tasks": 0})

        for worker, n in self.ended_by.items():
            element(worker)["ended_tasks"] += n
        for lease in leases:
            worker = lease["owner"].get("worker")
            if worker and (job is None or worker.startswith(f"{job}_")):
                element(worker)["running"].append(lease["task_id"])
        to_run = self.to_run
        return {"id": run.get("submission") or run["id"], "job": job,
                "to_run": run.get("to_run", None if to_run is None else len(to_run)),
                "done": self.done, "slurm_asked": states is not None, "elements": elements}


def _element_order(key: str) -> tuple[int, str]:
    index = key.rpartition("_")[2]
    return (int(index), key) if index.isdigit() else (1 << 62, key)
