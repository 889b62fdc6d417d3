"""``campaign results``: the accepted results of a ledger as CSV, JSON or JSON Lines."""

from __future__ import annotations

import csv
import io
import shlex
from pathlib import Path
from typing import Any, Iterable

import click
import orjson

from schedulers._usage import FIELDS as USAGE_FIELDS

from ._common import BadInput, ledger_argument, plural, read_ledger, verbose_option

FORMATS = ("csv", "json", "jsonl")
#: How non-finite floats (stored as ``{"$float": ...}``) are written in CSV.
_CSV_FLOAT = {"nan": "nan", "inf": "inf", "-inf": "-inf"}
#: The record fields --with-records adds after task_id, the last attempt's (Nextflow's trace).
RECORD_COLUMNS = ("status", "attempts", "started", "ended", "duration", "host", "worker",
                  *USAGE_FIELDS)


@click.command("results", short_help="The accepted results as CSV, JSON or JSON Lines.")
@ledger_argument
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="Output format (default: from the --output suffix, else csv).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Write to FILE (replaced atomically) instead of standard output.")
@click.option("--with-items", is_flag=True,
              help="Add each task's item fields as columns named item.<field>.")
@click.option("--with-records", is_flag=True,
              help="Every task, not only the accepted ones, with its last attempt's "
                   + ", ".join(RECORD_COLUMNS) + " after task_id.")
@verbose_option
def results_command(ledger: Path, fmt: str | None, output: Path | None, with_items: bool,
                    with_records: bool) -> int:
    """The accepted results with their task ids, in item order.

    Columns: task_id, then the result keys (in the order first seen). Non-finite floats are
    nan, inf, -inf in CSV and {"$float": "nan"} (the ledger's encoding) in JSON and JSON Lines.
    With --with-records, every task with its record's columns (empty or null where the record
    has no value, e.g. no gpu_peak_bytes without a GPU); a result key of the same name is
    renamed result.<key>.
    """
    doc = read_ledger(ledger)
    if fmt is None:
        suffix = output.suffix.lower().lstrip(".") if output is not None else ""
        fmt = suffix if suffix in FORMATS else "csv"
    rows = list(result_rows(doc["tasks"], with_items, with_records))
    data = {"csv": _csv, "json": _json, "jsonl": _jsonl}[fmt](rows)
    if output is None:
        stream = click.get_binary_stream("stdout")
        stream.write(data)
        stream.flush()
    else:
        from .._atomic import atomic_write

        try:
            atomic_write(output, data)
        except OSError as exc:
            raise BadInput(f"cannot write {output}: {exc.strerror or exc}") from None
        what = "task" if with_records else "result"
        click.echo(f"campaign: wrote {plural(len(rows), what)} to {output} ({fmt})", err=True)
    _note_refused(doc, rows)
    if not with_records:  # with them, every task is listed with its status
        _note_missing(doc["tasks"], len(rows), ledger)
    return 0


def result_rows(tasks: dict[str, Any], with_items: bool,
                with_records: bool = False) -> Iterable[dict[str, Any]]:
    """One flat dict per accepted task (per task ``with_records``): task_id, the
    `RECORD_COLUMNS` ``with_records``, result keys, then ``item.<field>``s."""
    for tid, rec in tasks.items():
        if rec["status"] != "accepted" and not with_records:
            continue
        row = {"task_id": tid}
        if with_records:
            for key in RECORD_COLUMNS:
                row[key] = rec.get(key)
        for key, value in (rec.get("result") or {}).items():
            row[f"result.{key}" if key in row else key] = value
        if with_items:
            item = rec.get("item")
            if isinstance(item, dict):
                for key, value in item.items():
                    if key != "task_id":
                        row[f"item.{key}"] = value
        yield row


def _json(rows: list[dict[str, Any]]) -> bytes:
    return orjson.dumps(rows, option=orjson.OPT_APPEND_NEWLINE)


def _jsonl(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE) for row in rows)


def _csv(rows: list[dict[str, Any]]) -> bytes:
    columns: dict[str, None] = {"task_id": None}
    items: dict[str, None] = {}
    for row in rows:
        for key in row:
            (items if key.startswith("item.") else columns).setdefault(key, None)
    names = list(columns) + list(items)
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(names)
    for row in rows:
        writer.writerow([_cell(row.get(name)) for name in names])
    return out.getvalue().encode("utf-8")


def _cell(value: Any) -> str:
    """A stored value as CSV text: null is empty, booleans true/false, nested values JSON."""
    if value is None:
        return ""
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1 and "$float" in value:
        return _CSV_FLOAT[value["$float"]]
    return orjson.dumps(value).decode()


def _note_missing(tasks: dict[str, Any], accepted: int, ledger: Path) -> None:
    """``note: 2 of 10 tasks have no accepted result (1 failed, 1 pending)`` on stderr."""
    missing = len(tasks) - accepted
    if not missing:
        return
    counts: dict[str, int] = {}
    for rec in tasks.values():
        if rec["status"] != "accepted":
            counts[rec["status"]] = counts.get(rec["status"], 0) + 1
    how = ", ".join(f"{n} {status}" for status, n in counts.items())
    has = "has" if missing == 1 else "have"
    click.echo(f"campaign: note: {missing} of {plural(len(tasks), 'task')} {has} no accepted "
               f"result ({how}): list them with `campaign status {shlex.quote(str(ledger))} "
               "--tasks`", err=True)


def _note_refused(doc: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    runs = doc["runs"]
    if not runs or not runs[-1].get("refused"):
        return
    refused = {r.get("task_id") for r in runs[-1]["refused"]}
    stale = sum(1 for row in rows if row["task_id"] in refused)
    if stale:
        whose = "result belongs to a task" if stale == 1 else "results belong to tasks"
        click.echo(
            f"campaign: note: {stale} {whose} refused in the last run (their item changed "
            "since; these results are for the recorded item, see --with-items and "
            "`campaign failures`)", err=True)
