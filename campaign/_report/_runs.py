"""The runs section of `campaign report`: one entry per run the ledger records (its last 20),
with what the run recorded (start, end, scheduler, driver, command line, folder, versions, items
and refused tasks) and what its tasks' attempts say about it (accepted, failed, interrupted and
kept tasks).

A task record does not name its run: an attempt belongs to the last run that had started when
the attempt started (`run_of`). Runs follow one another (a driver holds the ledger's lease, a
submission's array workers run until the next run starts), so this is the run it ran in, up to
clock skew between hosts.
"""

from __future__ import annotations

import os
import shlex
from typing import Any

import numpy as np

from ._data import ACCEPTED, FAILED, INTERRUPTED, RUNNING, STATUSES, Data
from ._html import e, seconds, when

#: How the runs table heads its columns, with the numeric ones' indices.
_HEAD = ["run", "status", "scheduler", "driver", "started", "ended", "duration", "tasks",
         "accepted", "failed", "interrupted", "running", "refused", "kept"]
_NUMERIC = set(range(7, len(_HEAD)))


def run_of(started: np.ndarray, runs: list[dict[str, Any]]) -> np.ndarray:
    """For each start time, the index in ``runs`` of the run it falls in: the last one that
    started at or before it; -1 where none had (or the time is not finite)."""
    begins = np.array([float(r["started"]) if isinstance(r.get("started"), (int, float))
                       else np.inf for r in runs], dtype=np.float64)
    order = np.argsort(begins, kind="stable")
    at = np.searchsorted(begins[order], np.asarray(started, dtype=np.float64), side="right") - 1
    found = np.where(at >= 0, order[np.clip(at, 0, None)], -1) if len(runs) else np.full(
        len(started), -1)
    return np.where(np.isfinite(started), found, -1).astype(np.int64)


def label(index: int) -> str:
    """How the page names the run at ``index`` of the ledger's runs (numbered from 1)."""
    return f"#{index + 1}" if index >= 0 else "-"


def outcomes(data: Data) -> np.ndarray:
    """``(runs, statuses)`` counts: how many tasks ran in each run, by the status of their last
    attempt in it (from the attempts the ledger keeps: each task's last one and its history)."""
    a = data.attempts
    run = run_of(a.started, data.runs)
    ok = run >= 0
    r, t, s, begun = run[ok], a.task[ok], a.status[ok], a.started[ok]
    order = np.lexsort((begun, t, r))
    r, t, s = r[order], t[order], s[order]
    last = np.ones(r.size, dtype=bool)  # the last attempt of each (run, task)
    last[:-1] = (r[1:] != r[:-1]) | (t[1:] != t[:-1])
    counts = np.zeros((len(data.runs), len(STATUSES)), dtype=np.int64)
    np.add.at(counts, (r[last], s[last].astype(np.int64)), 1)
    return counts


def refused_of(run: dict[str, Any]) -> int:
    """How many tasks a run refused (its item changed)."""
    count = run.get("refused_count")
    if isinstance(count, int):
        return count
    listed = run.get("refused")
    return len(listed) if isinstance(listed, list) else 0


def _kept(run: dict[str, Any], ran: int) -> int | None:
    """How many of the run's tasks were accepted earlier and not run again: as the run recorded
    it; in a ledger of an earlier version, a submission's
    items less those it handed to the workers and those it refused; a finished run's items less
    those that ran and were refused. None where the ledger does not say (no item count, or a
    run that stopped before its tasks all started)."""
    if isinstance(run.get("kept"), int):  # recorded by the run
        return int(run["kept"])
    total, refused = run.get("total"), refused_of(run)
    if not isinstance(total, int):
        return None
    to_run = run.get("to_run")
    if isinstance(to_run, int):
        return max(0, total - to_run - refused)
    if run.get("status") == "finished":
        return max(0, total - ran - refused)
    return None


def _campaign_args(argv: list[str]) -> list[str] | None:
    """The arguments after the program of a ``campaign`` (or ``python -m campaign._cli``)
    command line, else None (a Python program that called `checkpointed_map`)."""
    program = argv[0].replace(os.sep, "/")
    if os.path.basename(program) == "campaign" or program.endswith("campaign/_cli/__main__.py"):
        return argv[1:]
    return None


def invocation(run: dict[str, Any]) -> tuple[str, str]:
    """The target and the items file of a run of ``campaign run`` or ``campaign submit``, as its
    command line gives them (``-`` for a Python program's run, ``?`` where it says nothing)."""
    argv = run.get("argv")
    if not isinstance(argv, list) or not argv:
        return "?", "?"
    args = _campaign_args([str(a) for a in argv])
    if args is None:
        return "-", "-"
    words = [a for a in args if not a.startswith("-")]
    command = words[0] if words else ""
    rest = args[args.index(command) + 1:] if command else []
    items, target = None, None
    for i, arg in enumerate(rest):
        if arg == "--items" and i + 1 < len(rest):
            items = rest[i + 1]
        elif arg.startswith("--items="):
            items = arg.split("=", 1)[1]
        elif (target is None and not arg.startswith("-") and (i == 0 or rest[i - 1] != "--items")
              and (":" in arg or arg.endswith(".toml"))):
            target = arg
    if target is None:
        return "?", items or "?"
    spec = target.endswith(".toml")
    return (f"in {target}" if spec else target), (items or (f"in {target}" if spec else "?"))


def command_of(run: dict[str, Any]) -> str:
    """The run's command line as recorded (runs of earlier versions have none)."""
    argv = run.get("argv")
    if not isinstance(argv, list) or not argv:
        return "?"
    return shlex.join(str(a) for a in argv)


def versions_of(run: dict[str, Any]) -> str:
    found = run.get("versions")
    if not isinstance(found, dict) or not found:
        return "?"
    return ", ".join(f"{k} {v}" for k, v in found.items())


def _duration(run: dict[str, Any], now: float) -> str:
    begun, end = run.get("started"), run.get("ended")
    if not isinstance(begun, (int, float)):
        return "?"
    if isinstance(end, (int, float)):
        return seconds(end - begun)
    return f"{seconds(now - begun)} so far" if run.get("status") == "running" else "?"


def _scheduler(run: dict[str, Any]) -> str:
    name = str(run.get("execution") or "?")
    return f"{name} (job {run['job']})" if run.get("job") else name


def _details(run: dict[str, Any]) -> str:
    """The run's second line: command line, folder, target, items file, versions (HTML)."""
    target, items = invocation(run)
    cwd = run.get("cwd")
    parts = [f"<b>command</b> <code>{e(command_of(run))}</code>"
             + (f" in <code>{e(cwd)}</code>" if isinstance(cwd, str) else ""),
             f"<b>target</b> {e(target)}", f"<b>items</b> {e(items)}",
             f"<b>versions</b> {e(versions_of(run))}"]
    ignored = run.get("ignore_fields")
    if isinstance(ignored, list) and ignored:
        parts.append(f"<b>ignored fields</b> {e(', '.join(map(str, ignored)))}")
    if run.get("error"):
        parts.append(f"<b>error</b> {e(run['error'])}")
    return " &middot; ".join(parts)


def section(data: Data) -> str:
    """The runs table (HTML): a row of times and counts per run, oldest first, each followed by
    a row with its command line, folder, target, items file and versions."""
    if not data.runs:
        return "<p>No run recorded yet.</p>"
    counts = outcomes(data)
    rows = []
    for i, run in enumerate(data.runs):
        c = counts[i]
        ran = int(c.sum())
        total, kept = run.get("total"), _kept(run, ran)
        cells = [f"{label(i)} <code>{e(run.get('id'))}</code>", e(run.get("status")),
                 e(_scheduler(run)), e(f"{run.get('host')} pid {run.get('pid')}"),
                 e(when(run.get("started"))), e(when(run.get("ended"))),
                 e(_duration(run, data.now)), total if isinstance(total, int) else "?",
                 int(c[ACCEPTED]), int(c[FAILED]), int(c[INTERRUPTED]), int(c[RUNNING]),
                 refused_of(run), "?" if kept is None else kept]
        rows.append("<tr>" + "".join(f'<td class="n">{e(v)}</td>' if j in _NUMERIC
                                     else f"<td>{v}</td>" for j, v in enumerate(cells)) + "</tr>")
        rows.append(f'<tr class="detail"><td colspan="{len(_HEAD)}">{_details(run)}</td></tr>')
    head = "".join(f"<th>{e(h)}</th>" for h in _HEAD)
    note = ('<p class="note">Accepted, failed, interrupted, running: the tasks that ran in the '
            "run, by the outcome of their last attempt in it (an attempt belongs to the last run "
            "that had started when it started), as far as the ledger keeps them: each task's last "
            "attempt and up to 5 before it, none of a task forgotten since (`campaign forget`). "
            "Kept: tasks accepted earlier and not run again (? where the ledger does not say: a "
            "run that stopped before all its tasks started). The ledger keeps its last 20 "
            "runs.</p>")
    return f'<table class="runs"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody>' \
           f"</table>{note}"
