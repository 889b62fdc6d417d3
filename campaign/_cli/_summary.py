"""What `campaign run` says when it ends: the summary (a message on stderr, or with ``--json``
one JSON object on stdout), and where ``--no-resume`` put the old ledger."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import click
import orjson

from .._format import duration
from ._exits import EXIT_FAILED, EXIT_OK


def replaced_backups(ledger: Path) -> set[Path]:
    """The ``<stem>.replaced-*<suffix>`` files beside ``ledger`` (a run started over adds one)."""
    return set(ledger.parent.glob(f"{ledger.stem}.replaced-*{ledger.suffix}"))


def say_replaced(ledger: Path, before: set[Path]) -> None:
    """``--no-resume``: name the file the old ledger was kept as, if this run made one."""
    for saved in sorted(replaced_backups(ledger) - before):
        click.echo(f"campaign: started over; the old ledger was kept as {saved}", err=True)


def summary_facts(camp: Any, ledger: Path) -> dict[str, Any]:
    """The ``--json`` summary of a finished run: counts by status, kept and ran, the ledger."""
    counts = camp.counts
    facts: dict[str, Any] = {"ledger": str(ledger), "total": len(camp.task_ids)}
    facts.update({k: counts[k] for k in ("accepted", "failed", "refused", "interrupted",
                                         "pending")})
    facts.update({"kept": camp.kept, "ran": camp.ran, "elapsed_s": round(camp.elapsed, 3),
                  "complete": camp.complete, "stopped_by": None})
    return facts


def finish(camp: Any, ledger: Path, as_json: bool) -> int:
    """Print the summary of a run that ended and return its exit code (0: all accepted)."""
    if as_json:
        click.echo(orjson.dumps(summary_facts(camp, ledger), option=orjson.OPT_INDENT_2).decode())
    else:
        counts = camp.counts
        parts = [f"{counts['accepted']}/{len(camp.task_ids)} accepted"]
        parts += [f"{counts[k]} {k}" for k in ("failed", "refused", "interrupted", "pending")
                  if counts[k]]
        click.echo(f"campaign: {', '.join(parts)} in {duration(camp.elapsed)} ({camp.summary}); "
                   f"ledger {ledger}", err=True)
    if camp.complete:
        return EXIT_OK
    click.echo(f"campaign: see why with: campaign failures {shlex.quote(str(ledger))}", err=True)
    return EXIT_FAILED


def stopped_facts(last: Any, ledger: Path, why: str) -> dict[str, Any]:
    """The ``--json`` summary of a run stopped by a signal, from the last `Progress` seen."""
    facts: dict[str, Any] = {"ledger": str(ledger), "total": None, "accepted": None,
                             "failed": None, "refused": None, "complete": False,
                             "stopped_by": why}
    if last is not None:
        facts.update({"total": last.total, "accepted": last.accepted, "failed": last.failed,
                      "refused": last.refused})
    return facts


def say_stopped(last: Any, ledger: Path, why: str, as_json: bool) -> None:
    if as_json:
        click.echo(orjson.dumps(stopped_facts(last, ledger, why),
                                option=orjson.OPT_INDENT_2).decode())
