"""``campaign status``: where a campaign stands, read from its ledger in one pass.

Reads the file without a lock (a ledger is always replaced atomically), so it works while a run
writes the same ledger and on a copy taken to another machine. Array workers' fragments not yet
merged are counted, and the tasks they hold are listed as running with their array element. Fast on large ledgers: one
``orjson.loads`` and one loop over the records.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path
from typing import Any

import click
import orjson

from ._common import duration, ledger_argument, rate, read_ledger, timestamp, verbose_option

#: Running tasks listed by the text output (``--json`` lists all).
RUNNING_SHOWN = 20
#: While a run is live and longer than this, throughput is measured over its last this-many s.
WINDOW = 300.0
_STATUSES = ("pending", "running", "accepted", "failed", "interrupted")


@click.command("status", short_help="Where a campaign stands (counts, speed, ETA).")
@ledger_argument
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with the same facts.")
@verbose_option
def status_command(ledger: Path, as_json: bool) -> int:
    """Counts by status, attempts, failures by error type, running tasks, throughput and ETA.

    Safe while a run is writing LEDGER, and on a copy of it.
    """
    gc.disable()  # parsing a large ledger makes millions of objects; none of them cyclic
    try:
        doc = read_ledger(ledger)
    finally:
        gc.enable()
    holders = _with_array_workers(doc, ledger)
    facts = summarize(doc, str(ledger), time.time(), array_workers=holders)
    if as_json:
        click.echo(orjson.dumps(facts, option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(render(facts))
    return 0


def _with_array_workers(doc: dict[str, Any], ledger: Path) -> int:
    """Overlay what array workers did since their last merge (fragments) and hold now (leases:
    shown as running, with the array element as worker). Returns how many leases are live."""
    from .._array import live_leases, overlay

    overlay(doc, ledger)
    leases = live_leases(ledger)
    tasks = doc["tasks"]
    for lease in leases:
        rec = tasks.get(lease["task_id"])
        if rec is not None and rec["status"] != "accepted":
            owner = lease["owner"]
            tasks[lease["task_id"]] = dict(rec, status="running", host=owner.get("host"),
                                           pid=owner.get("pid"), worker=owner.get("worker"),
                                           started=lease["claimed"])
    return len(leases)


def summarize(doc: dict[str, Any], path: str, now: float,
              array_workers: int = 0) -> dict[str, Any]:
    """The facts `campaign status` shows, as plain JSON. ``array_workers``: live leases (a
    submitted run with live leases is active)."""
    from .._atomic import HOST, pid_alive

    runs = doc["runs"]
    last = runs[-1] if runs else None
    active = last is not None and (last.get("status") == "running" or (
        last.get("status") == "submitted" and array_workers > 0))
    since = (last.get("started") or 0.0) if last else 0.0
    counts = dict.fromkeys(_STATUSES, 0)
    attempts = retried = most = interruptions = ended_in_run = ended_recent = failed_before = 0
    recent_from = now - WINDOW
    by_type: dict[str, list[Any]] = {}
    running: list[dict[str, Any]] = []
    for tid, rec in doc["tasks"].items():
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
            running.append({"task_id": tid, "host": rec.get("host"), "pid": rec.get("pid"),
                            "worker": rec.get("worker"), "started": started,
                            "age_s": None if started is None else max(0.0, now - started)})
    total = len(doc["tasks"])
    run_facts = None
    throughput = eta = None
    if last is not None:
        alive = None
        if active and last.get("host") == HOST:
            alive = pid_alive(int(last.get("pid") or -1))
        end = now if active else (last.get("ended") or doc.get("updated") or now)
        span = max(0.0, end - since)
        basis = (ended_recent, WINDOW) if active and span > WINDOW else (ended_in_run, span)
        throughput = basis[0] / basis[1] if basis[1] > 0 else None
        run_facts = {k: last.get(k) for k in ("id", "host", "pid", "execution", "status",
                                               "started", "ended", "total", "refused_count")}
        run_facts.update(driver_alive=alive, ended_tasks=ended_in_run, span_s=span,
                         throughput_tasks=basis[0], throughput_seconds=basis[1])
    remaining = counts["pending"] + counts["running"] + counts["interrupted"]
    if active:
        remaining += failed_before  # failed in an earlier run: this run runs them again
        if throughput:
            eta = remaining / throughput
    else:
        remaining += counts["failed"]  # the next run runs them again
    failures = [{"type": k, "count": v[0], "example_task": v[1], "example_message": v[2]}
                for k, v in sorted(by_type.items(), key=lambda kv: -kv[1][0])]
    refused = last.get("refused_count", len(last.get("refused") or [])) if last else 0
    return {
        "ledger": path, "version": doc.get("version"), "created": doc.get("created"),
        "updated": doc.get("updated"), "now": now, "total": total, "counts": counts,
        "refused_last_run": refused, "complete": counts["accepted"] == total and not refused,
        "attempts": {"total": attempts, "retried_tasks": retried, "max": most or min(1, attempts),
                     "interruptions": interruptions},
        "failures_by_type": failures, "running": running, "runs": len(runs), "last_run": run_facts,
        "active": active, "throughput_per_s": throughput, "remaining": remaining, "eta_s": eta,
    }


def render(f: dict[str, Any]) -> str:
    """The text form of `summarize`'s facts."""
    now, c, a = f["now"], f["counts"], f["attempts"]
    ago = duration(now - f["updated"]) + " ago" if f["updated"] else "?"
    lines = [f"ledger    {f['ledger']} (created {timestamp(f['created'])}, last written {ago})"]
    shown = ", ".join(f"{c[s]} {s}" for s in _STATUSES if c[s] or s in ("accepted", "failed"))
    lines.append(f"tasks     {f['total']}: {shown}")
    again = (f"{a['retried_tasks']} task(s) ran more than once (at most {a['max']} times)"
             if a["retried_tasks"] else "no task ran more than once")
    lines.append(f"attempts  {a['total']} in all; {again}; {a['interruptions']} interruption(s)")
    run = f["last_run"]
    if run is None:
        lines.append("runs      none yet")
    else:
        where = f"{run['execution']} on {run['host']} pid {run['pid']}"
        state = run["status"]
        if f["active"]:
            state = {True: "running (driver alive)", False: "running, but its driver is gone "
                     "(killed or crashed): `campaign run` resumes it",
                     None: f"running (driver on host {run['host']}, not checked from here)"
                     }[run["driver_alive"]]
        ended = "" if run["ended"] is None else f", ended {timestamp(run['ended'])}"
        lines.append(f"last run  {state}: {where} ({f['runs']} run(s) recorded)")
        lines.append(f"          started {timestamp(run['started'])} "
                     f"({duration(now - (run['started'] or now))} ago){ended}")
        last_part = "the last " if run["throughput_seconds"] < run["span_s"] else ""
        speed = (f"{rate(f['throughput_per_s'])} ({run['throughput_tasks']} tasks ended in "
                 f"{last_part}{duration(run['throughput_seconds'])})")
        if f["active"]:
            speed += f"; ETA {duration(f['eta_s'])} for {f['remaining']} task(s) left"
        else:
            speed += f"; {f['remaining']} task(s) left for the next run"
        lines.append(f"speed     {speed}")
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
        lines.append(f"refused   {f['refused_last_run']} task(s) in the last run (item changed): "
                     f"see `campaign failures {f['ledger']}`")
    return "\n".join(lines)

