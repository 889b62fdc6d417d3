"""``campaign results``: the accepted results of a ledger as CSV, JSON or JSON Lines.

The output is written as the ledger streams by (`campaign._ledger._scan`), a batch of rows at a
time: nothing holds every row. CSV reads the ledger twice (its header names every column, so the
first pass finds them); a bad record is then refused before any row is written. JSON and JSON
Lines read it once; a bad record in a later chunk stops the output there with exit 2 (with
``--output``, the file is left as it was)."""

from __future__ import annotations

import csv
import gc
import io
import os
import shlex
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import click
import orjson

from schedulers._usage import FIELDS as USAGE_FIELDS

from .._format import plural
from ._exits import BadInput
from ._options import ledger_argument, verbose_option
from ._reading import scan_ledger

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
    if fmt is None:
        suffix = output.suffix.lower().lstrip(".") if output is not None else ""
        fmt = suffix if suffix in FORMATS else "csv"
    gc.disable()  # a chunk of records is many objects, none of them cyclic
    try:
        head, chunks, _ = scan_ledger(ledger, with_leases=False)
        names = _csv_names(chunks, with_items, with_records) if fmt == "csv" else None
        if names is not None:  # the header needs every column: a second pass writes the rows
            head, chunks, _ = scan_ledger(ledger, with_leases=False)
        tally = _Tally(head)
        rows = tally.rows(chunks, with_items, with_records)
        if fmt == "csv":
            lines = _csv(rows, names or [])
        elif fmt == "json":
            lines = _json(rows)
        else:
            lines = _jsonl(rows)
        if output is None:
            stream = sys.stdout.buffer
            for data in lines:
                stream.write(data)
            stream.flush()
        else:
            _write_file(output, lines)
    finally:
        gc.enable()
    if output is not None:
        what = "task" if with_records else "result"
        click.echo(f"campaign: wrote {plural(tally.written, what)} to {output} ({fmt})", err=True)
    tally.note_refused()
    if not with_records:  # with them, every task is listed with its status
        tally.note_missing(ledger)
    return 0


def _write_file(output: Path, lines: Iterator[bytes]) -> None:
    """Write the output as it is made to a temporary file beside ``output``, then replace
    ``output`` by it (atomically, durably); on any error nothing is left behind."""
    from .._ledger._atomic import fsync_dir, tmp_name

    target = Path(os.path.realpath(output))
    try:
        tmp = tmp_name(target)
        f = open(tmp, "xb")
    except OSError as exc:
        raise BadInput(f"cannot write {output}: {exc.strerror or exc}") from None
    try:
        with f:
            for data in lines:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        fsync_dir(target.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise BadInput(f"cannot write {output}: {exc.strerror or exc}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class _Tally:
    """What the notes after the rows need, counted while the rows stream by."""

    def __init__(self, head: dict[str, Any]):
        runs = head["runs"]
        self.refused = {r.get("task_id") for r in (runs[-1].get("refused") or [])} \
            if runs else set()
        self.written = self.stale = self.total = 0
        self.missing: dict[str, int] = {}

    def rows(self, chunks: Iterator[dict[str, Any]], with_items: bool,
             with_records: bool) -> Iterator[dict[str, Any]]:
        refused = self.refused
        for chunk in chunks:
            self.total += len(chunk)
            for rec in chunk.values():
                if rec["status"] != "accepted":
                    self.missing[rec["status"]] = self.missing.get(rec["status"], 0) + 1
            for row in result_rows(chunk, with_items, with_records):
                self.written += 1
                if refused and row["task_id"] in refused:
                    self.stale += 1
                yield row

    def note_missing(self, ledger: Path) -> None:
        """``note: 2 of 10 tasks have no accepted result (1 failed, 1 pending)`` on stderr."""
        missing = sum(self.missing.values())
        if not missing:
            return
        how = ", ".join(f"{n} {status}" for status, n in self.missing.items())
        has = "has" if missing == 1 else "have"
        click.echo(f"campaign: note: {missing} of {plural(self.total, 'task')} {has} no "
                   f"accepted result ({how}): list them with `campaign status "
                   f"{shlex.quote(str(ledger))} --tasks`", err=True)

    def note_refused(self) -> None:
        if self.stale:
            whose = "result belongs to a task" if self.stale == 1 else "results belong to tasks"
            click.echo(
                f"campaign: note: {self.stale} {whose} refused in the last run (their item "
                "changed since; these results are for the recorded item, see --with-items and "
                "`campaign failures`)", err=True)


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


#: Rows written to the output at a time.
_BATCH = 4096


def _json(rows: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    """One JSON list, written a batch of rows at a time."""
    yield b"["
    first = True
    for batch in _batches(rows):
        body = b",".join(map(orjson.dumps, batch))
        yield body if first else b"," + body
        first = False
    yield b"]\n"


def _jsonl(rows: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    for batch in _batches(rows):
        yield b"".join(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE) for row in batch)


def _csv_names(chunks: Iterator[dict[str, Any]], with_items: bool,
               with_records: bool) -> list[str]:
    """The CSV header: task_id, the other columns in the order first seen, then the items'."""
    columns: dict[str, None] = {"task_id": None}
    items: dict[str, None] = {}
    for chunk in chunks:
        for row in result_rows(chunk, with_items, with_records):
            for key in row:
                (items if key.startswith("item.") else columns).setdefault(key, None)
    return list(columns) + list(items)


def _csv(rows: Iterable[dict[str, Any]], names: list[str]) -> Iterator[bytes]:
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(names)
    for batch in _batches(rows):
        writer.writerows([_cell(row.get(name)) for name in names] for row in batch)
        yield out.getvalue().encode("utf-8")
        out.seek(0)
        out.truncate()
    yield out.getvalue().encode("utf-8")


def _batches(rows: Iterable[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) == _BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


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
