"""``campaign submit``: plan a campaign once and start a Slurm job array of `campaign worker`s."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import click

from .._format import plural
from .._shell import command
from ._exits import EXIT_FAILED, EXIT_OK, BadInput
from ._inputs import read_items
from ._options import verbose_option, with_errors
from ._spec import array_keys, resolve

_ARRAY = re.compile(r"^(\d+)(?:%(\d+))?$")


@click.command("submit", short_help="Start a Slurm job array of workers for a campaign.")
@click.argument("spec", metavar="SPEC.toml")
@click.option("--array", "array", required=True, metavar="N[%P]",
              help="N array elements (workers), at most P running at once.")
@click.option("--time", "time_limit", metavar="TIME",
              help="Walltime of each element, as Slurm writes it (e.g. 2:00:00).")
@click.option("--partition", metavar="NAME", help="The partition (queue).")
@click.option("--account", metavar="NAME", help="The account charged.")
@click.option("--cpus-per-task", type=click.IntRange(min=1), metavar="N", help="CPUs per element.")
@click.option("--mem", metavar="SIZE", help="Memory per element, e.g. 4G.")
@click.option("--gpus-per-task", type=click.IntRange(min=1), metavar="N", help="GPUs per element.")
@click.option("--signal-before-end", type=click.IntRange(min=1), metavar="SECONDS",
              help="Send SIGUSR1 this long before the time limit, so the running task is "
                   "recorded interrupted and released (default 120 with --time).")
@click.option("--lease-seconds", type=click.FloatRange(min=1), metavar="SECONDS",
              help="A task whose worker stops renewing its lease this long is claimed again "
                   "(default 60).")
@click.option("--no-resume", is_flag=True,
              help="Start the ledger over (the old one is kept beside as a .replaced- file).")
@click.option("--dry-run", is_flag=True, help="Print the sbatch script; write and submit nothing.")
@verbose_option
@with_errors
def submit_command(spec: str, array: str, time_limit: str | None, partition: str | None,
                   account: str | None, cpus_per_task: int | None, mem: str | None,
                   gpus_per_task: int | None, signal_before_end: int | None,
                   lease_seconds: float | None, no_resume: bool, dry_run: bool) -> int:
    """Plan the campaign of SPEC.toml (new tasks pending, changed items refused, accepted tasks
    kept), then submit a job array of N elements, each running `campaign worker`, which claim
    the tasks from the ledger until none is left. Prints the job id.

    Standard output holds one line: the job id, or a line starting with "nothing to run" when
    no job was submitted. The job is submitted held and released once the ledger records it;
    if sbatch fails, nothing is written (exit 2).

    Submitting again with the same command runs only what is left (failed, interrupted and
    never-run tasks). Options also come from the spec's [array] table; flags override it.
    """
    from .._array._submit import SubmitError, submit_array

    cfg = resolve(spec, {"resume": False if no_resume else None})
    opts = _array_options(cfg.array, cfg.spec, time=time_limit, partition=partition,
                          account=account, cpus_per_task=cpus_per_task, mem=mem,
                          gpus_per_task=gpus_per_task, signal_before_end=signal_before_end,
                          lease_seconds=lease_seconds)
    elements = _elements(array)
    items = read_items(cfg.items, cfg.id_field)
    spec_path = Path(spec).resolve()
    lease = float(opts.pop("lease_seconds", 60.0))

    def worker(submission: str) -> list[str]:
        return [sys.executable, "-m", "campaign._cli", "worker", str(spec_path),
                "--submission", submission, "--lease-seconds", f"{lease:g}"]

    def submitted(job: str) -> None:  # printed before the ledger records the job
        click.echo(f"campaign: sbatch accepted job {job}, held until the ledger records it; if "
                   "this command is killed before it prints the job id on standard output, "
                   f"nothing of it runs: cancel it with `{command('scancel', job)}`", err=True)
        sys.stderr.flush()

    try:
        done = submit_array(items, ledger_path=cfg.ledger, command=worker, array=elements,
                            on_submitted=submitted, ignore_fields=cfg.ignore_fields,
                            resume=cfg.resume, log_dir=opts.pop("log_dir", None),
                            job_name=opts.pop("job_name", None) or "campaign",
                            workdir=spec_path.parent, dry_run=dry_run, **opts)
    except SubmitError as exc:
        raise BadInput(str(exc)) from None
    if dry_run:
        click.echo(done.script, nl=False)
        return EXIT_OK
    if done.job is None:
        click.echo(f"nothing to run: {done.kept} accepted, {done.refused} refused; no job "
                   "submitted")
        click.echo(f"campaign: nothing to run in {cfg.ledger}: {done.kept} accepted, "
                   f"{done.refused} refused; nothing submitted", err=True)
        return EXIT_FAILED if done.refused else EXIT_OK
    click.echo(done.job)
    click.echo(f"campaign: submitted job array {done.job} ({elements}) for "
               f"{plural(done.to_run, 'task')} of submission {done.submission}; "
               f"{done.kept} accepted earlier"
               + (f", {done.refused} refused (see campaign failures)" if done.refused else "")
               + f". Logs: {done.log_dir}. Watch: {command('campaign', 'status', cfg.ledger)}",
               err=True)
    return EXIT_OK


def _elements(array: str) -> str:
    match = _ARRAY.match(array.strip())
    if not match or int(match.group(1)) < 1 or (match.group(2) and int(match.group(2)) < 1):
        raise BadInput(f"--array {array!r}: give the number of elements N, or N%P to run at "
                       "most P at once, e.g. --array 4 or --array 16%4")
    n, throttle = int(match.group(1)), match.group(2)
    return f"0-{n - 1}" + (f"%{throttle}" if throttle else "")


def _array_options(table: dict[str, Any], spec: Path | None, **flags: Any) -> dict[str, Any]:
    keys = array_keys()
    unknown = [k for k in table if k not in keys]
    if unknown:
        raise BadInput(f"spec file {spec}: [array] has the unknown "
                       f"{'key' if len(unknown) == 1 else 'keys'} "
                       f"{', '.join(map(repr, unknown))}; valid keys: {', '.join(keys)}")
    opts = dict(table)
    opts.update({k: v for k, v in flags.items() if v is not None})
    return opts
