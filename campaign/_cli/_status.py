"""``campaign status``: where a campaign stands, read from its ledger in one pass.

Reads the file without a lock (a ledger is always replaced atomically), so it works while a run
writes the same ledger and on a copy taken to another machine. Array workers' fragments not yet
merged are counted, and the tasks they hold are listed as running with their array element.
A run made by `campaign submit` is shown as its job array: the state of every element (one
``squeue`` call), the tasks each one holds and has ended. Fast on large ledgers, in bounded
memory: the records stream by in chunks (`campaign._scan`), each counted and dropped.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path
from typing import Any

import click
import orjson

from ._common import duration, ledger_argument, plural, rate, scan_ledger, timestamp, verbose_option

#: Running tasks listed by the text output (``--json`` lists all).
RUNNING_SHOWN = 20
#: While a run is live and longer than this, throughput is measured over its last this-many s.
WINDOW = 300.0
_STATUSES = ("pending", "running", "accepted", "failed", "interrupted")
#: Array elements listed by the text output (``--json`` lists all).
ELEMENTS_SHOWN = 20


@click.command("status", short_help="Where a campaign stands (counts, speed, ETA).")
@ledger_argument
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with the same facts.")
@click.option("--tasks", "tasks_of", is_flag=False, flag_value="all", default=None,
              type=click.Choice(("all",) + _STATUSES), metavar="[STATUS]",
              help="Instead, list the task ids: TASK_ID<tab>STATUS lines by status, or with "
                   "STATUS (e.g. --tasks failed) only those ids, one per line.")
@verbose_option
def status_command(ledger: Path, as_json: bool, tasks_of: str | None) -> int:
    """Counts by status, attempts, failures by error type, running tasks, throughput and ETA;
    for a `campaign submit`, its job array's elements and the tasks they run.

    Safe while a run is writing LEDGER, and on a copy of it.
    """
    gc.disable()  # parsing a large ledger makes millions of objects; none of them cyclic
    try:
        head, chunks, over = scan_ledger(ledger)
        runs = head["runs"]
        last = runs[-1] if runs else {}
        if tasks_of is not None:
            by_status: dict[str, list[str]] = {s: [] for s in _STATUSES}
            for chunk in chunks:
                for tid, rec in chunk.items():
                    by_status[rec["status"]].append(tid)
            click.echo(list_tasks(by_status, tasks_of, as_json), nl=False)
            return 0
        submitted = last.get("status") == "submitted"
        tally = Tally(runs, time.time())
        sub = _SubmissionTally(ledger, last) if submitted else None
        for chunk in chunks:
            tally.add(chunk)
            if sub is not None:
                sub.add(chunk)
    finally:
        gc.enable()
    states = job_array_states(last.get("job")) if submitted else None
    facts = tally.facts(head, str(ledger), array_workers=len(over.leases),
                        array_active=_any_active(states))
    if sub is not None:
        facts["submission"] = sub.facts(over.leases, states)
    if as_json:
        click.echo(orjson.dumps(facts, option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(render(facts))
    return 0


def list_tasks(by_status: dict[str, list[str]], which: str, as_json: bool) -> str:
    """``--tasks``: the ids by status (in status, then item order), or the ids of one status."""
    if which != "all":
        by_status = {which: by_status[which]}
    if as_json:
        return orjson.dumps({s: ids for s, ids in by_status.items() if ids}).decode() + "\n"
    if which != "all":
        return "".join(f"{tid}\n" for tid in by_status[which])
    return "".join(f"{tid}\t{s}\n" for s, ids in by_status.items() for tid in ids)


def summarize(doc: dict[str, Any], path: str, now: float, array_workers: int = 0,
              array_active: bool = False) -> dict[str, Any]:
    """The facts `campaign status` shows, as plain JSON, of a whole document (`Tally` over
    its records). ``array_workers``: live leases; ``array_active``: an element of the
    submission's job array is pending or running (a submitted run with either is active)."""
    tally = Tally(doc["runs"], now)
    tally.add(doc["tasks"])
    return tally.facts(doc, path, array_workers=array_workers, array_active=array_active)


class Tally:
    """What `campaign status` counts, added up chunk by chunk of records (`add`), so that a
    ledger is summarized while it streams by (`campaign._scan`) and no record is kept."""

    def __init__(self, runs: list[dict[str, Any]], now: float):
        self.now = now
        last = runs[-1] if runs else None
        self.since = (last.get("started") or 0.0) if last else 0.0
        self.counts = dict.fromkeys(_STATUSES, 0)
        self.attempts = self.retried = self.most = self.interruptions = 0
        self.ended_in_run = self.ended_recent = self.failed_before = self.total = 0
        self.first_start: float | None = None  # of the attempts of this run that ended or run
        self.last_end: float | None = None
        self.by_type: dict[str, list[Any]] = {}
        self.running: list[dict[str, Any]] = []

    def add(self, tasks: dict[str, Any]) -> None:
        """Count the records of ``tasks`` (task id -> record)."""
        counts, since, recent_from, now = self.counts, self.since, self.now - WINDOW, self.now
        by_type, running = self.by_type, self.running
        attempts = retried = interruptions = ended_in_run = ended_recent = failed_before = 0
        most, first_start, last_end = self.most, self.first_start, self.last_end
        self.total += len(tasks)
        for tid, rec in tasks.items():
            status = rec["status"]
            counts[status] += 1
            n = rec.get("attempts") or 0
            attempts += n
            if n > 1:
                retried += 1
                most = max(most, n)
            interruptions += rec.get("interruptions") or 0
            if status == "accepted" or status == "failed":
                ended = rec.get("ended") or 0.0
                if ended >= since:
                    ended_in_run += 1
                    if ended >= recent_from:
                        ended_recent += 1
                    begun = rec.get("started")
                    if n > 1:  # an earlier attempt of this run may have begun first
                        begun = min([t for t in (h.get("started") for h in rec.get("history")
                                                 or ()) if t is not None and t >= since]
                                    + [begun or ended])
                    if begun is not None and (first_start is None or begun < first_start):
                        first_start = begun
                    if last_end is None or ended > last_end:
                        last_end = ended
                elif status == "failed":
                    failed_before += 1
                if status == "failed":
                    error = rec.get("error") or {}
                    kind = error.get("type") or "?"
                    entry = by_type.get(kind)
                    if entry is None:
                        by_type[kind] = [1, tid, error.get("message") or ""]
                    else:
                        entry[0] += 1
            elif status == "running":
                started = rec.get("started")
                if started is not None and started >= since and (
                        first_start is None or started < first_start):
                    first_start = started
                running.append({"task_id": tid, "host": rec.get("host"), "pid": rec.get("pid"),
                                "worker": rec.get("worker"), "started": started,
                                "age_s": None if started is None else max(0.0, now - started)})
        self.attempts += attempts
        self.retried += retried
        self.interruptions += interruptions
        self.ended_in_run += ended_in_run
        self.ended_recent += ended_recent
        self.failed_before += failed_before
        self.most, self.first_start, self.last_end = most, first_start, last_end

    def facts(self, doc: dict[str, Any], path: str, array_workers: int = 0,
              array_active: bool = False) -> dict[str, Any]:
        """The facts, with ``doc``'s top-level fields (its ``tasks`` are not looked at)."""
        now, counts = self.now, self.counts
        runs = doc["runs"]
        last = runs[-1] if runs else None
        submitted = last is not None and last.get("status") == "submitted"
        active = last is not None and (last.get("status") == "running" or (
            submitted and (array_workers > 0 or array_active)))
        run_facts = throughput = eta = None
        if last is not None:
            run_facts = _last_run_facts(last, doc, now, active, self.ended_in_run,
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


def _last_run_facts(last: dict[str, Any], doc: dict[str, Any], now: float, active: bool,
                    ended_in_run: int, ended_recent: int, first_start: float | None,
                    last_end: float | None) -> dict[str, Any]:
    """The last run's entry with its driver's liveness and the basis of its throughput: over
    the last `WINDOW` seconds of a long live run, else over its span -- from its start (a run
    of `campaign run`) or its first attempt's start (a submission: elements may wait in the
    queue), to now while it is live, else to its end (a submission: its last task's end)."""
    from .._atomic import HOST, pid_alive

    submitted = last.get("status") == "submitted"
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


def job_array_states(job: str | None) -> dict[str, str] | None:
    """The Slurm state of every element of a job array (one ``squeue`` call), or None when
    Slurm cannot be asked from here (no Slurm commands, slurmctld not answering)."""
    if not job:
        return None
    from schedulers.slurm import SlurmCommandError, job_states

    try:
        states = job_states(job)
    except (SlurmCommandError, OSError):
        return None
    return {k: v for k, v in states.items() if "_" in k}  # "132_4", or pending "132_[5-9]"


def _any_active(states: dict[str, str] | None) -> bool:
    if not states:
        return False
    from schedulers.slurm import ACTIVE_STATES

    return any(state in ACTIVE_STATES for state in states.values())


class _SubmissionTally:
    """What a `campaign submit` run is doing, added up chunk by chunk: how many of its tasks
    ended in it, and by which job array element."""

    def __init__(self, ledger: Path, run: dict[str, Any]):
        from .._worker import task_list_path

        self.run = run
        self.since = run.get("started") or 0.0
        self.job = run.get("job")
        try:
            self.to_run: list[str] | None = orjson.loads(
                task_list_path(ledger, run.get("submission") or run["id"]).read_bytes())
        except (FileNotFoundError, orjson.JSONDecodeError):
            self.to_run = None
        self.wanted = None if self.to_run is None else set(self.to_run)
        self.done = 0
        self.ended_by: dict[str, int] = {}

    def add(self, tasks: dict[str, Any]) -> None:
        wanted, since, job = self.wanted, self.since, self.job
        for tid, rec in tasks.items():
            if wanted is not None and tid not in wanted:
                continue
            if rec["status"] not in ("accepted", "failed") or (rec.get("ended") or 0.0) < since:
                continue
            self.done += 1
            worker = rec.get("worker")
            if worker and (job is None or worker.startswith(f"{job}_")):
                self.ended_by[worker] = self.ended_by.get(worker, 0) + 1

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


def render(f: dict[str, Any]) -> str:
    """The text form of `summarize`'s facts."""
    now, c, a = f["now"], f["counts"], f["attempts"]
    ago = duration(now - f["updated"]) + " ago" if f["updated"] else "?"
    lines = [f"ledger    {f['ledger']} (created {timestamp(f['created'])}, last written {ago})"]
    shown = ", ".join(f"{c[s]} {s}" for s in _STATUSES if c[s] or s in ("accepted", "failed"))
    lines.append(f"tasks     {f['total']}: {shown}")
    again = (f"{plural(a['retried_tasks'], 'task')} ran more than once (at most {a['max']} "
             "times)" if a["retried_tasks"] else "no task ran more than once")
    lines.append(f"attempts  {a['total']} in all; {again}; "
                 f"{plural(a['interruptions'], 'interruption')}")
    run = f["last_run"]
    if run is None:
        lines.append("runs      none yet")
    else:
        lines += _run_lines(f, run, f["submission"])
    if f["failures_by_type"]:
        lines.append("failures by error type:")
        for e in f["failures_by_type"]:
            msg = e["example_message"].splitlines()[0] if e["example_message"] else ""
            msg = msg if len(msg) <= 100 else msg[:97] + "..."
            lines.append(f"  {e['type']}: {e['count']} (e.g. task {e['example_task']!r}: {msg})")
    if f["running"]:
        lines.append(f"running tasks ({len(f['running'])}):")
        for r in f["running"][:RUNNING_SHOWN]:
            lines.append(f"  {r['task_id']}  host {r['host']}  pid {r['pid']}  "
                         f"worker {r['worker'] or '-'}  age {duration(r['age_s'])}")
        if len(f["running"]) > RUNNING_SHOWN:
            lines.append(f"  and {len(f['running']) - RUNNING_SHOWN} more")
    if f["refused_last_run"]:
        lines.append(f"refused   {plural(f['refused_last_run'], 'task')} in the last run (item "
                     f"changed): see `campaign failures {f['ledger']}`")
    return "\n".join(lines)


def _run_lines(f: dict[str, Any], run: dict[str, Any], sub: dict[str, Any] | None) -> list[str]:
    """The lines about the last run: its state, times, job array elements and speed."""
    now = f["now"]
    recorded = plural(f["runs"], "run")
    if sub is not None:
        lines = [f"last run  {_submission_state(f, sub)} ({recorded} recorded)",
                 f"          submitted {timestamp(run['started'])} from {run['host']}"
                 + ("" if run["work_started"] is None else
                    f"; work began {timestamp(run['work_started'])}")]
        lines += _element_lines(sub)
    else:
        state = run["status"]
        if f["active"]:
            state = {True: "running (driver alive)", False: "running, but its driver is gone "
                     "(killed or crashed): `campaign run` resumes it",
                     None: f"running (driver on host {run['host']}, not checked from here)"
                     }[run["driver_alive"]]
        ended = "" if run["ended"] is None else f", ended {timestamp(run['ended'])}"
        lines = [f"last run  {state}: {run['execution']} on {run['host']} pid {run['pid']} "
                 f"({recorded} recorded)",
                 f"          started {timestamp(run['started'])} "
                 f"({duration(now - (run['started'] or now))} ago){ended}"]
    last_part = "the last " if run["throughput_seconds"] < run["span_s"] else ""
    speed = (f"{rate(f['throughput_per_s'])} ({plural(run['throughput_tasks'], 'task')} ended "
             f"in {last_part}{duration(run['throughput_seconds'])})")
    if f["active"]:
        speed += f"; ETA {duration(f['eta_s'])} for {plural(f['remaining'], 'task')} left"
    else:
        after = "submission" if sub is not None else "run"
        speed += f"; {plural(f['remaining'], 'task')} left for the next {after}"
    lines.append(f"speed     {speed}")
    return lines


def _submission_state(f: dict[str, Any], sub: dict[str, Any]) -> str:
    """``job array 123 (2 elements: 1 RUNNING, 1 PENDING): 5 of 12 tasks done``."""
    elements = sub["elements"]
    by_state: dict[str, int] = {}
    for e in elements.values():
        by_state[e["state"] or "not listed by Slurm"] = \
            by_state.get(e["state"] or "not listed by Slurm", 0) + 1
    what = f"job array {sub['job']}" if sub["job"] else "a submission without a job"
    if elements:
        what += (f" ({plural(len(elements), 'element')}: "
                 + ", ".join(f"{n} {s}" for s, n in by_state.items()) + ")")
    if sub["job"] and not sub["slurm_asked"]:
        what += " (Slurm not asked from here)"
    done = f"{sub['done']} of {sub['to_run']}" if sub["to_run"] is not None else sub["done"]
    state = "running" if f["active"] else "ended" if sub["job"] else "submitted"
    return f"{state}: {what}: {done} tasks done in submission {sub['id']}"


def _element_lines(sub: dict[str, Any]) -> list[str]:
    out = []
    for i, (key, e) in enumerate(sub["elements"].items()):
        if i == ELEMENTS_SHOWN:
            out.append(f"          and {len(sub['elements']) - ELEMENTS_SHOWN} more elements")
            break
        held = f"running {', '.join(e['running'])}; " if e["running"] else ""
        out.append(f"{'elements' if i == 0 else '':<10}{key}  {e['state'] or '-'}  {held}"
                   f"{plural(e['ended_tasks'], 'task')} ended")
    return out
