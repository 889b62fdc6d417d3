"""``campaign submit``: plan a campaign once and start a Slurm job array of `campaign worker`s."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from typing import Any

import click

from ._common import BadInput, plural, verbose_option, with_errors
from ._inputs import read_items
from ._spec import resolve

#: Keys of the spec's ``[array]`` table (each also a command-line option).
ARRAY_KEYS = ("time", "partition", "account", "cpus_per_task", "mem", "gpus_per_task",
              "signal_before_end", "extra_directives", "prologue", "lease_seconds", "log_dir",
              "job_name")
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
    from schedulers.slurm import SlurmCommandError, render_array_script, sbatch

    cfg = resolve(spec, {"resume": False if no_resume else None})
    opts = _array_options(cfg.array, cfg.spec, time=time_limit, partition=partition,
                          account=account, cpus_per_task=cpus_per_task, mem=mem,
                          gpus_per_task=gpus_per_task, signal_before_end=signal_before_end,
                          lease_seconds=lease_seconds)
    elements = _elements(array)
    items = read_items(cfg.items, cfg.id_field)
    spec_path = Path(spec).resolve()
    log_dir = Path(opts.pop("log_dir", None) or cfg.ledger.resolve().parent / "slurm-logs")
    lease = float(opts.pop("lease_seconds", 60.0))
    job_name = opts.pop("job_name", None) or "campaign"
    if opts.get("time") and "signal_before_end" not in opts:
        opts["signal_before_end"] = 120

    def script(submission: str, hold: bool = False) -> str:
        command = [sys.executable, "-m", "campaign._cli", "worker", str(spec_path),
                   "--submission", submission, "--lease-seconds", f"{lease:g}"]
        extra = dict(opts)
        given = extra.get("extra_directives") or []
        if hold and not isinstance(given, str):  # released once the ledger records it
            extra["extra_directives"] = [*given, "--hold"]
        try:
            return render_array_script(job_name=job_name, command=command, array=elements,
                                       log_dir=log_dir, workdir=spec_path.parent, **extra)
        except (TypeError, ValueError) as exc:
            raise BadInput(str(exc)) from None

    if dry_run:
        click.echo(script("<submission>"), nl=False)
        return 0
    from .._submit import plan_submission

    planned = plan_submission(items, ledger_path=cfg.ledger, resume=cfg.resume)
    if not planned.plan.to_run:
        refused = len(planned.plan.refused)
        if refused:  # recorded, so that `campaign failures` lists them
            planned.record()
        click.echo(f"nothing to run: {planned.plan.kept} accepted, {refused} refused; no job "
                   "submitted")
        click.echo(f"campaign: nothing to run in {cfg.ledger}: {planned.plan.kept} accepted, "
                   f"{refused} refused; nothing submitted", err=True)
        return 0 if not refused else 1
    text = script(planned.id, hold=True)  # a bad option: exit 2 before anything is written
    try:
        job = sbatch(text, cwd=spec_path.parent)
    except (SlurmCommandError, OSError) as exc:
        raise BadInput(f"sbatch failed, nothing was submitted or written: {exc}") from None
    sub = _record(planned, job, log_dir)
    click.echo(job)
    click.echo(f"campaign: submitted job array {job} ({elements}) for "
               f"{plural(len(sub.plan.to_run), 'task')} of submission {sub.id}; "
               f"{sub.plan.kept} accepted earlier"
               + (f", {len(sub.plan.refused)} refused (see campaign failures)"
                  if sub.plan.refused else "")
               + f". Logs: {log_dir}. Watch: campaign status {shlex.quote(str(cfg.ledger))}",
               err=True)
    return 0


def _record(planned: Any, job: str, log_dir: Path) -> Any:
    """Write the submitted job (held until now) to the ledger, then release it; if writing
    fails, cancel the job, so that nothing runs that the ledger does not know of."""
    from schedulers.slurm import SlurmCommandError, scancel

    try:
        log_dir.mkdir(parents=True, exist_ok=True)
        sub = planned.record(job)
    except BaseException:
        try:
            scancel(job)
        except SlurmCommandError as exc:
            click.echo(f"campaign: could not cancel job {job}; cancel it with `scancel {job}` "
                       f"({exc})", err=True)
        raise
    _release(job)
    return sub


def _release(job: str) -> None:
    """``scontrol release JOB``: the held job array may start."""
    import subprocess

    command = ["scontrol", "release", job]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BadInput(f"job {job} was submitted held and recorded in the ledger, but "
                       f"`{' '.join(command)}` failed ({exc}); run it to start the job") from None
    if done.returncode != 0:
        raise BadInput(f"job {job} was submitted held and recorded in the ledger, but "
                       f"`{' '.join(command)}` exited with code {done.returncode} "
                       f"({done.stderr.strip()}); run it to start the job")


def _elements(array: str) -> str:
    match = _ARRAY.match(array.strip())
    if not match or int(match.group(1)) < 1 or (match.group(2) and int(match.group(2)) < 1):
        raise BadInput(f"--array {array!r}: give the number of elements N, or N%P to run at "
                       "most P at once, e.g. --array 4 or --array 16%4")
    n, throttle = int(match.group(1)), match.group(2)
    return f"0-{n - 1}" + (f"%{throttle}" if throttle else "")


def _array_options(table: dict[str, Any], spec: Path | None, **flags: Any) -> dict[str, Any]:
    unknown = [k for k in table if k not in ARRAY_KEYS]
    if unknown:
        raise BadInput(f"spec file {spec}: [array] has the unknown "
                       f"{'key' if len(unknown) == 1 else 'keys'} "
                       f"{', '.join(map(repr, unknown))}; valid keys: {', '.join(ARRAY_KEYS)}")
    opts = dict(table)
    opts.update({k: v for k, v in flags.items() if v is not None})
    return opts
