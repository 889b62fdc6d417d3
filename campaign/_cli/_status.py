"""``campaign status``: where a campaign stands, read from its ledger in one pass.

Reads the file without a lock (a ledger is always replaced atomically), so it works while a run
writes the same ledger and on a copy taken to another machine. Array workers' fragments not yet
merged are counted, and the tasks they hold are listed as running with their array element.
A run made by `campaign submit` is shown as its job array: the state of every element (one
``squeue`` call), the tasks each one holds and has ended. Fast on large ledgers, in bounded
memory: the records stream by in chunks (`campaign._ledger._scan`), each counted and dropped.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import orjson

from .._array._skew import FRACTION, skewed
from .._format import duration, plural, rate, timestamp
from .._jobs import any_active, job_array_states
from .._ledger._schema import Columns
from .._ledger._status import RunStatus, Status
from .._shell import command
from .._tally import STATUSES, SubmissionTally, Tally
from ._exits import BadInput
from ._options import ledger_argument, verbose_option
from ._reading import ledger_message

#: Running tasks listed by the text output (``--json`` lists all).
RUNNING_SHOWN = 20
_STATUSES = STATUSES
#: Array elements listed by the text output (``--json`` lists all).
ELEMENTS_SHOWN = 20


class _TaskStatus(click.Choice):
    """``--tasks``' choices; a ledger path given in their place (``status --tasks L``) gets
    told to come first."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, str) and value not in self.choices and (
                value.endswith(".json") or Path(value).is_file()):
            self.fail(f"{value!r} is not a task status ({', '.join(self.choices)}): it looks "
                      "like the ledger; --tasks takes an optional STATUS, so give the ledger "
                      f"first: {command('campaign', 'status', value, '--tasks')}", param, ctx)
        return super().convert(value, param, ctx)


@click.command("status", short_help="Where a campaign stands (counts, speed, ETA).")
@ledger_argument
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with the same facts.")
@click.option("--tasks", "tasks_of", is_flag=False, flag_value="all", default=None,
              type=_TaskStatus(("all",) + _STATUSES), metavar="[STATUS]",
              help="Instead, list the task ids: with no STATUS or `all`, TASK_ID<tab>STATUS "
                   "lines by status; with STATUS (" + ", ".join(_STATUSES) + ", e.g. --tasks "
                   "failed) only those ids, one per line. Give it after LEDGER.")
@verbose_option
def status_command(ledger: Path, as_json: bool, tasks_of: str | None) -> int:
    """Counts by status, attempts, failures by error type, running tasks, throughput and ETA;
    for a `campaign submit`, its job array's elements and the tasks they run.

    Safe while a run is writing LEDGER, and on a copy of it.
    """
    gc.disable()  # parsing a large ledger makes millions of objects; none of them cyclic
    try:
        head, blocks, over = scan_blocks(ledger)
        runs = head["runs"]
        last = runs[-1] if runs else {}
        if tasks_of is not None:
            by_status: dict[str, list[str]] = {s: [] for s in _STATUSES}
            for chunk, cols in blocks:
                for tid, status in zip(chunk, cols.fields["status"]):
                    by_status[status].append(tid)
            click.echo(list_tasks(by_status, tasks_of, as_json), nl=False)
            return 0
        submitted = last.get("status") == RunStatus.SUBMITTED
        tally = Tally(runs, time.time())
        sub = SubmissionTally(ledger, last) if submitted else None
        for chunk, cols in blocks:
            tally.add(chunk, cols)
            if sub is not None:
                sub.add(chunk, cols)
    finally:
        gc.enable()
    states = job_array_states(last.get("job")) if submitted else None
    facts = tally.facts(head, str(ledger), array_workers=len(over.leases),
                        array_active=any_active(states))
    if sub is not None:
        facts["submission"] = sub.facts(over.leases, states)
    facts["clock_skew"] = skewed(over.leases)
    if as_json:
        click.echo(orjson.dumps(facts, option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(render(facts))
    return 0


def scan_blocks(path: Path) -> tuple[dict[str, Any], Iterator[tuple[dict[str, Any], Columns]],
                                     Any]:
    """Stream a ledger without any lock (`campaign._ledger._overlay.scan_columns`): its top-level
    fields, its checked records and their columns chunk by chunk (array fragments applied, leased
    tasks running) and the overlay; a problem found at the start or in a later chunk exits 2."""
    from .._errors import LedgerError
    from .._ledger._overlay import scan_columns

    try:
        head, blocks, over = scan_columns(path, typed=True)
    except LedgerError as exc:
        raise BadInput(ledger_message(path, str(exc))) from None

    def checked() -> Iterator[tuple[dict[str, Any], Columns]]:
        try:
            yield from blocks
        except LedgerError as exc:
            raise BadInput(str(exc)) from None

    return head, checked(), over


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


def render(f: dict[str, Any]) -> str:
    """The text form of `summarize`'s facts."""
    now, c, a = f["now"], f["counts"], f["attempts"]
    ago = duration(now - f["updated"]) + " ago" if f["updated"] else "?"
    lines = [f"ledger    {f['ledger']} (created {timestamp(f['created'])}, last written {ago})"]
    shown = ", ".join(f"{c[s]} {s}" for s in _STATUSES
                      if c[s] or s in (Status.ACCEPTED, Status.FAILED))
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
    for w in f.get("clock_skew", ()):
        lines.append(f"clock     worker {w['worker'] or '-'} on host {w['host']} is "
                     f"{w['seconds']:+.1f} s off the file server's; its leases of "
                     f"{w['lease_seconds']:g} s tolerate {w['lease_seconds'] * FRACTION:g} s: "
                     "synchronise the clocks (NTP) or raise --lease-seconds")
    if f["refused_last_run"]:
        lines.append(f"refused   {plural(f['refused_last_run'], 'task')} in the last run (item "
                     f"changed): see `{command('campaign', 'failures', f['ledger'])}`")
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
