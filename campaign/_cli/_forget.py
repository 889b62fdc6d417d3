"""``campaign forget``: remove task records so that those tasks run again."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from .._format import plural
from .._shell import command
from ._exits import BadInput
from ._options import ledger_argument, verbose_option, with_errors
from ._reading import read_ledger

#: Statuses ``--status`` may name: never accepted (results are never thrown away by status).
FORGETTABLE = ("failed", "interrupted")


@click.command("forget", short_help="Remove task records so those tasks run again.")
@ledger_argument
@click.argument("task_ids", nargs=-1, metavar="[TASK_ID]...")
@click.option("--status", "statuses", type=click.Choice(FORGETTABLE), multiple=True,
              help="Forget every task with this status (repeatable).")
@click.option("--refused", is_flag=True,
              help="Forget every task the last run refused (its item changed since it was "
                   "recorded), so that the next run runs it with its new item.")
@verbose_option
@with_errors
def forget_command(ledger: Path, task_ids: tuple[str, ...], statuses: tuple[str, ...],
                   refused: bool) -> int:
    """Remove the records of the TASK_IDs (or of all tasks with --status, or those the last run
    refused with --refused) from LEDGER, so that the next `campaign run` or `campaign submit`
    runs those tasks again, e.g. after their item changed.

    The change is made under the ledger's lock and written atomically; the ledger as it was is
    kept beside it as <stem>.before-forget-<time><suffix>. What array workers kept of those
    tasks (under LEDGER.work/) is removed too; a task an array worker runs now is refused.
    """
    if not task_ids and not statuses and not refused:
        raise click.UsageError("name the TASK_IDs to forget, or --status failed|interrupted, "
                               "or --refused")
    doc = read_ledger(ledger)
    unknown = [tid for tid in dict.fromkeys(task_ids) if tid not in doc["tasks"]]
    if unknown:
        shown = ", ".join(map(repr, unknown[:20])) + (" ..." if len(unknown) > 20 else "")
        raise BadInput(
            f"{plural(len(unknown), 'task id')} not in ledger {ledger}: {shown}; nothing was "
            f"changed (list the ids with `{command('campaign', 'status', ledger, '--tasks')}`)")
    wanted = set(task_ids)
    if refused:
        wanted.update(last_refused(doc))
    if not _chosen(doc["tasks"], wanted, statuses):
        what = [*statuses, *(["refused"] if refused else [])]
        click.echo(f"campaign: no {' or '.join(what)} task in {ledger}; nothing to forget",
                   err=True)
        return 0

    from filelock import Timeout

    from .._forget import forget

    try:  # chosen again under the lock, on the ledger as it is then
        removed, backup = forget(ledger, lambda tasks: _chosen(tasks, wanted, statuses))
    except Timeout:
        raise BadInput(f"ledger {ledger} stayed locked by another process; try again") from None
    click.echo(f"campaign: forgot {plural(len(removed), 'task')} in {ledger}; the ledger as it "
               f"was is kept as {backup}", err=True)
    they = "it runs" if len(removed) == 1 else "they run"
    click.echo(f"campaign: {they} again at the next `campaign run` or `campaign submit` on "
               f"{command(ledger)}", err=True)
    return 0


def last_refused(doc: Mapping[str, Any]) -> list[str]:
    """The task ids the ledger's last run refused: all of them (``refused_ids``, written when
    there were more than the run's entry lists with their changes), else those listed."""
    runs = doc.get("runs") or []
    if not runs:
        return []
    run = runs[-1]
    ids = run.get("refused_ids")
    if isinstance(ids, list):
        return [tid for tid in ids if isinstance(tid, str)]
    return [r["task_id"] for r in run.get("refused") or []
            if isinstance(r, dict) and isinstance(r.get("task_id"), str)]


def _chosen(tasks: Mapping[str, Any], ids: set[str], statuses: tuple[str, ...]) -> list[str]:
    """The task ids to remove, in ledger order: the named ones and those with the statuses."""
    return [tid for tid, rec in tasks.items() if tid in ids or rec["status"] in statuses]
