"""``campaign run``: run a function over the items of a file, recording every task."""

from __future__ import annotations

import logging
import shlex
import signal
from typing import Any

import click

from ._exits import EXIT_SIGINT, BadInput
from ._inputs import read_items
from ._options import verbose_option, with_errors
from ._progress import MODES, make_progress
from ._reading import read_ledger
from ._spec import RunConfig, resolve
from ._summary import finish, replaced_backups, say_replaced, say_stopped
from ._target import load_target

logger = logging.getLogger(__name__)


@click.command("run", short_help="Run a function over items, recording each task.")
@click.argument("target", metavar="TARGET|SPEC.toml")
@click.option("--items", metavar="FILE",
              help="The items: .json (a list of objects), .jsonl (one object per line) or .csv "
                   "(a header row; numbers become numbers, empty cells null).")
@click.option("--ledger", metavar="FILE", help="The ledger file (created if missing).")
@click.option("--execution", metavar="NAME",
              help="Where tasks run: serial (this process; the default), processes (one "
                   "worker process per GPU or CPU core), or another scheduler of this version.")
@click.option("--retries", type=click.IntRange(min=0), metavar="N",
              help="Run a task that raised up to N more times in this run (default 0).")
@click.option("--max-interruptions", type=click.IntRange(min=0), metavar="N",
              help="Run a task whose worker was lost up to N more times in this run "
                   "(default 3).")
@click.option("--resume/--no-resume", default=None,
              help="Keep the accepted tasks of an existing ledger and run the others (default); "
                   "--no-resume starts over, keeping the old ledger beside as a .replaced- file.")
@click.option("--id-field", metavar="NAME",
              help="Take each item's task_id from this field (as a string).")
@click.option("--ignore-field", "ignore_fields", metavar="NAME", multiple=True,
              help="An item field that may be added, removed or changed without refusing the "
                   "task: its accepted result is kept (repeatable; metadata columns such as "
                   "notes). Adds to the spec's ignore_fields.")
@click.option("--progress", "progress_mode", type=click.Choice(MODES), default="auto",
              show_default=True,
              help="auto: a bar when stderr is a terminal, else plain lines.")
@click.option("--progress-interval", type=click.FloatRange(min=0), default=10.0,
              show_default=True, metavar="SECONDS",
              help="Seconds between two plain progress lines.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the summary as one JSON object on stdout (counts, kept, ran, ledger).")
@verbose_option
@with_errors
def run_command(target: str, items: str | None, ledger: str | None, execution: str | None,
                retries: int | None, max_interruptions: int | None, resume: bool | None,
                id_field: str | None, ignore_fields: tuple[str, ...], progress_mode: str,
                progress_interval: float, as_json: bool) -> int:
    """Run TARGET over the items of a file, recording each task in the ledger as it ends.

    TARGET is path/to/file.py:function or package.module:function: a function of one item (a
    dict) returning a flat dict of results. Or give a spec file, SPEC.toml, naming the target,
    items, ledger and options (target = "fit.py:fit", items = "items.csv", ledger = "runs.json",
    retries = 1, ...); options given here override it.

    Tasks already accepted in the ledger are not run again: the last line says how many were
    kept from the ledger and how many ran now, or "nothing to run" (exit 0 when every task is
    accepted); it is a message, on stderr, or with --json one JSON object on stdout. Ctrl-C or
    SIGTERM stops the run after recording the running tasks as interrupted; run the same
    command to resume.
    """
    flags = {"items": items, "ledger": ledger, "execution": execution, "retries": retries,
             "max_interruptions": max_interruptions, "resume": resume, "id_field": id_field,
             "ignore_fields": list(ignore_fields) or None}
    cfg = resolve(target, flags)
    the_items = read_items(cfg.items, cfg.id_field)
    fn = load_target(cfg.target, cfg.base)
    scheduler = _scheduler(cfg)
    if cfg.ledger.exists():
        read_ledger(cfg.ledger)  # a foreign or corrupt ledger: exit 2 before anything is written
    display = make_progress(progress_mode, progress_interval)
    backups = replaced_backups(cfg.ledger)
    again = resume_command(target, flags, cfg)

    from .. import Interrupted, checkpointed_map

    logger.info("running %s over %d items of %s (execution %s); ledger %s", cfg.target,
                len(the_items), cfg.items, cfg.execution, cfg.ledger)
    try:
        with display.logging_context():
            camp = checkpointed_map(
                fn, the_items, ledger_path=cfg.ledger, resume=cfg.resume, execution=scheduler,
                retries=cfg.retries, max_interruptions=cfg.max_interruptions, progress=display,
                ignore_fields=cfg.ignore_fields)
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        display.close(note="stopped: ")
        why = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        say_replaced(cfg.ledger, backups)
        say_stopped(display.last, cfg.ledger, why, as_json)
        click.echo(
            f"campaign: stopped by {why}; tasks still running were recorded as interrupted and "
            f"the ledger {cfg.ledger} was written.\nResume with: {again}", err=True)
        return 128 + int(signum) if signum != signal.SIGINT else EXIT_SIGINT
    display.close()
    say_replaced(cfg.ledger, backups)
    return finish(camp, cfg.ledger, as_json)


def _scheduler(cfg: RunConfig) -> Any:
    """The scheduler named by ``execution`` with the spec's ``[options]``; exit 2 if invalid."""
    from schedulers import make_scheduler

    try:
        return make_scheduler(cfg.execution, **cfg.options)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    except TypeError:
        names = ", ".join(map(repr, cfg.options))
        raise BadInput(
            f"execution {cfg.execution!r} takes no option(s) {names}; remove them from the "
            "spec's [options] table"
        ) from None


def resume_command(target: str, flags: dict[str, Any], cfg: RunConfig) -> str:
    """The command that resumes this run: the same one, but never ``--no-resume``."""
    words = ["campaign", "run", target]
    for key, value in flags.items():
        if value is None or key == "resume":
            continue
        if key == "ignore_fields":
            for name in value:
                words += ["--ignore-field", name]
            continue
        words += [f"--{key.replace('_', '-')}", str(value)]
    if cfg.spec is not None and not cfg.resume:
        words.append("--resume")  # the spec says resume = false
    return shlex.join(words)
