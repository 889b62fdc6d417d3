"""``campaign failures``: every failed task with its error, and the refused tasks of the last
run with their changed fields and the fix. The ledger streams by (`campaign._ledger._scan`): only
the failed records are kept."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import click
import orjson

from .._format import plural
from ._exits import EXIT_FAILED, EXIT_OK
from ._options import ledger_argument, verbose_option
from ._reading import scan_ledger


@click.command("failures", short_help="Failed tasks with their errors; refused tasks.")
@ledger_argument
@click.option("--lines", "tb_lines", type=click.IntRange(min=0), default=5, show_default=True,
              metavar="N", help="Lines of the end of each traceback to show.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON list: an object per failed task (task_id, status, attempts, "
                   "error_type, message, traceback), then one per refused task (task_id, "
                   "status \"refused\", changed).")
@verbose_option
def failures_command(ledger: Path, tb_lines: int, as_json: bool) -> int:
    """Every failed task with its error type, message and the end of its traceback; then the
    tasks refused in the last run (item changed) with the changed fields.

    Exits 1 when it lists any failed or refused task, 0 when there is none.
    """
    head, chunks, _ = scan_ledger(ledger, with_leases=False)
    last = head["runs"][-1] if head["runs"] else {}
    named = {r.get("task_id") for r in last.get("refused") or []}
    failed: list[tuple[str, dict[str, Any]]] = []
    interrupted, known = 0, set()
    for chunk in chunks:  # only the failed records are kept
        failed += [(tid, rec) for tid, rec in chunk.items() if rec["status"] == "failed"]
        interrupted += sum(1 for rec in chunk.values() if rec["status"] == "interrupted")
        known.update(named.intersection(chunk))
    refused = [r for r in last.get("refused") or [] if r.get("task_id") in known]
    unlisted = max(0, (last.get("refused_count") or 0) - len(last.get("refused") or []))
    if as_json:
        click.echo(orjson.dumps(failure_objects(failed, refused),
                                option=orjson.OPT_INDENT_2).decode())
        return EXIT_FAILED if failed or refused or unlisted else EXIT_OK
    out: list[str] = []
    if failed:
        out.append(f"{plural(len(failed), 'failed task')}:")
    for tid, rec in failed:
        out += [""] + describe_failure(tid, rec, tb_lines)
    if refused or unlisted:
        if out:
            out.append("")
        out.append(f"{plural(len(refused) + unlisted, 'task')} refused in the last run: the "
                   "item changed since the task was recorded, so it was not run:")
        quoted = shlex.quote(str(ledger))
        for entry in refused:
            tid = entry["task_id"]
            fields = "; ".join(f"{c['field']}: {c['old']!r} -> {c['new']!r}"
                               for c in entry.get("changed") or []) or "the item differs"
            out.append(f"  {tid}: {fields}")
        if unlisted:
            out.append(f"  and {unlisted} more (the ledger lists the first "
                       f"{len(last.get('refused') or [])})")
        example = shlex.quote(refused[0]["task_id"]) if refused else "TASK_ID"
        out.append(f"  to run one again with its new item: campaign forget {quoted} {example}")
    note = (f"{plural(interrupted, 'task')} interrupted (not failures; they run again when the "
            "campaign resumes)") if interrupted else ""
    if not failed and not refused and not unlisted:
        click.echo("no failed or refused tasks" + (f"; {note}" if note else ""))
        return EXIT_OK
    if note:
        out += ["", note]
    click.echo("\n".join(out))
    return EXIT_FAILED


def failure_objects(failed: list[tuple[str, dict[str, Any]]],
                    refused: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``--json``: the failed tasks with their last error, then the refused ones."""
    out: list[dict[str, Any]] = []
    for tid, rec in failed:
        error = rec.get("error") or {}
        out.append({"task_id": tid, "status": "failed", "attempts": rec.get("attempts") or 0,
                    "error_type": error.get("type"), "message": error.get("message"),
                    "traceback": error.get("traceback"), "ended": rec.get("ended"),
                    "host": rec.get("host"), "worker": rec.get("worker")})
    for entry in refused:
        out.append({"task_id": entry["task_id"], "status": "refused",
                    "changed": entry.get("changed") or []})
    return out


def describe_failure(tid: str, rec: dict[str, Any], tb_lines: int) -> list[str]:
    """The lines for one failed task: id and attempts, ``Type: message``, traceback end."""
    error = rec.get("error") or {}
    lines = [f"task {tid} (failed, {plural(rec.get('attempts') or 0, 'attempt')})"]
    message = (error.get("message") or "").splitlines() or [""]
    lines.append(f"  {error.get('type') or '?'}: {message[0]}")
    lines += [f"    {m}" for m in message[1:]]
    tail = traceback_tail(error.get("traceback") or "", tb_lines)
    lines += [f"  | {t}" for t in tail]
    return lines


def traceback_tail(text: str, n: int) -> list[str]:
    """The last ``n`` lines of a traceback's frames (the final ``Type: message`` line, already
    shown, left out), counting only lines that say something: the ``~~~^^^`` lines under the
    source (Python 3.11 and later) are left out."""
    lines = [line for line in text.rstrip().splitlines()
             if line != "Traceback (most recent call last):"]
    frames_end = max((i for i, line in enumerate(lines) if line.startswith(" ")), default=-1)
    frames = [line for line in lines[: frames_end + 1] if not _CARETS.fullmatch(line)]
    return frames[-n:] if n else []


#: A line of a traceback that only points at the source above it.
_CARETS = re.compile(r"\s*[~^]+[\s~^]*")
