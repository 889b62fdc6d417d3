"""``campaign worker``: one element of a job array claims tasks from the ledger and runs them."""

from __future__ import annotations

import click

from .._shell import command
from ._exits import BadInput
from ._options import verbose_option, with_errors
from ._spec import resolve
from ._target import load_target


@click.command("worker", short_help="Claim and run tasks of a submission (one array element).")
@click.argument("spec", metavar="SPEC.toml")
@click.option("--submission", required=True, metavar="ID",
              help="The submission to work on (printed by `campaign submit`).")
@click.option("--lease-seconds", type=click.FloatRange(min=1), default=60.0, show_default=True,
              metavar="SECONDS",
              help="A task whose worker stops renewing its lease for this long is claimed again.")
@click.option("--merge-every", type=click.FloatRange(min=0), default=5.0, show_default=True,
              metavar="SECONDS",
              help="Merge the workers' records into the ledger about this often (all workers "
                   "together).")
@verbose_option
@with_errors
def worker_command(spec: str, submission: str, lease_seconds: float, merge_every: float) -> int:
    """Claim pending tasks of SUBMISSION from the ledger named in SPEC.toml, one at a time, run
    them and record their outcomes, until none is left. Each Slurm array element of
    `campaign submit` runs this; it may also be started by hand on any machine that sees the
    ledger's folder.

    SIGUSR1 (Slurm --signal before the time limit) or SIGTERM records the running task as
    interrupted and releases it for another worker.
    """
    from .._array._worker import run_worker

    cfg = resolve(spec, {})
    fn = load_target(cfg.target, cfg.base)
    if not cfg.ledger.exists():
        submit = command("campaign", "submit", spec)
        raise BadInput(f"no ledger at {cfg.ledger}: run `{submit}` first")
    summary = run_worker(fn, cfg.ledger, submission, lease_seconds=lease_seconds,
                         merge_every=merge_every, retries=cfg.retries,
                         max_interruptions=cfg.max_interruptions)
    click.echo(f"campaign worker: ran {summary.ran}: {summary.accepted} accepted, "
               f"{summary.failed} failed, {summary.interrupted} interrupted"
               + (f"; stopped by signal {summary.stopped_by}" if summary.stopped_by else ""),
               err=True)
    return 0
