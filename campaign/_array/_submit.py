"""`submit_array`: plan a campaign once and submit a Slurm job array of workers that claim its
tasks (`run_worker`); `campaign submit` is this function with a spec file's options.

The steps run in the order that leaves no trace when one fails: plan in memory
(`plan_submission`: nothing written), render the script and ``sbatch`` it held, write the
submission with its job id (the ledger's new tasks and ``submitted`` run, the task list, the log
folder; if that fails, the job is cancelled), then release the job (``scontrol release``).
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import CampaignError
from .._shell import command
from ._plan import PlannedSubmission, Submission, plan_submission

logger = logging.getLogger(__name__)

#: The keywords of `render_array_script` that `submit_array` sets itself.
_SET_HERE = frozenset({"job_name", "command", "array", "log_dir", "workdir"})
#: SIGUSR1 this many seconds before the time limit, when a ``time`` is given without it.
SIGNAL_BEFORE_END = 120


class SubmitError(CampaignError):
    """The job array was not submitted (an sbatch option Slurm would refuse, a failed
    ``sbatch``), or was submitted but not released; the message says which, and what to do."""


@dataclass(frozen=True)
class ArraySubmission:
    """What `submit_array` did.

    ``job``: the Slurm job id of the array; None when no job was submitted (nothing to run, or
    ``dry_run``). ``submission``: the ledger run's id, which the workers are given; None when
    nothing was recorded. ``to_run``, ``kept``, ``refused``: the tasks the workers claim, those
    accepted earlier and those refused (their item changed). ``elements``: the ``--array``
    range. ``script``: the sbatch script submitted (or, with ``dry_run``, that would be).
    """

    job: str | None
    submission: str | None
    ledger: Path
    elements: str
    to_run: int
    kept: int
    refused: int
    log_dir: Path
    script: str | None


def script_options() -> tuple[str, ...]:
    """The keywords of `schedulers.slurm.render_array_script` that `submit_array` passes on
    from its ``**options`` (every one but those it sets itself), in the signature's order."""
    from schedulers.slurm import render_array_script

    return tuple(name for name in inspect.signature(render_array_script).parameters
                 if name not in _SET_HERE)


def submit_array(items: Iterable[Mapping[str, Any]], *, ledger_path: str | os.PathLike[str],
                 command: Callable[[str], Sequence[str | os.PathLike[str]]], array: str,
                 resume: bool = True, log_dir: str | os.PathLike[str] | None = None,
                 job_name: str = "campaign", workdir: str | os.PathLike[str] | None = None,
                 dry_run: bool = False, on_submitted: Callable[[str], None] | None = None,
                 ignore_fields: Iterable[str] = (), **options: Any) -> ArraySubmission:
    """Plan ``items`` in the ledger once and submit a Slurm job array whose every element runs
    ``command(submission)``, a worker that claims the tasks (`run_worker`) until none is left.

    New tasks are recorded pending, changed items refused and accepted tasks kept, as
    `checkpointed_map` would. Nothing is written unless sbatch accepts the job: it is submitted
    held, then the ledger, the submission's task list (under ``<ledger>.work/``) and ``log_dir``
    are written, then the job is released. If writing fails, the job is cancelled.

    Args:
        items: the campaign's items, as for `checkpointed_map`.
        ledger_path: the ledger (created if absent).
        command: the argv of one worker, given the submission's id, e.g.
            ``lambda submission: [sys.executable, "worker.py", submission]``.
        array: the elements, as Slurm writes them: ``"0-7"`` (8 workers), ``"0-31%8"`` (32, at
            most 8 at once).
        resume: False starts the ledger over (the old file is kept beside, as
            `checkpointed_map`'s ``resume=False`` does).
        log_dir: the elements' logs, ``<job>_<index>.out`` (default ``slurm-logs/`` beside the
            ledger; created).
        job_name: the job's name.
        workdir: the folder the elements run in and sbatch runs from (default: this one).
        dry_run: only render the script (for the submission ``<submission>``, not held):
            nothing is read, written or submitted.
        on_submitted: called with the job id as soon as sbatch accepted the held job, before
            the ledger records it (``campaign submit`` prints it then): a process killed in
            between leaves a held job that nothing runs and the ledger does not know, to
            cancel with ``scancel <id>``.
        ignore_fields: as `checkpointed_map`'s.
        options: the other keywords of `schedulers.slurm.render_array_script` (`script_options`:
            ``time``, ``partition``, ``account``, ``cpus_per_task``, ``mem``, ``gpus_per_task``,
            ``signal_before_end``, ``extra_directives``, ``prologue``). With ``time`` and no
            ``signal_before_end``, SIGUSR1 comes 120 s before the limit, so that the running
            task is recorded interrupted and released.

    Returns:
        an `ArraySubmission`: the job id, the submission's id and its counts.

    Raises:
        SubmitError: an option Slurm would refuse, or sbatch failed (nothing was written), or
            the job was submitted and recorded but ``scontrol release`` failed.
        TypeError: an option that `render_array_script` does not take.
        ItemError, LedgerError, DriverBusyError: as `checkpointed_map` (nothing was written).
    """
    unknown = sorted(set(options) - set(script_options()))
    if unknown:
        raise TypeError(f"submit_array() takes no option {', '.join(map(repr, unknown))}; the "
                        f"script's options are {', '.join(script_options())}")
    if options.get("time") and options.get("signal_before_end") is None:
        options["signal_before_end"] = SIGNAL_BEFORE_END
    ledger = Path(ledger_path)
    job = _ArrayJob(command, array, Path(log_dir) if log_dir is not None else
                    ledger.resolve().parent / "slurm-logs", job_name,
                    Path(workdir) if workdir is not None else Path.cwd(), options)
    if dry_run:
        return ArraySubmission(None, None, ledger, array, 0, 0, 0, job.log_dir,
                               job.script("<submission>"))
    planned = plan_submission(items, ledger_path=ledger, resume=resume,
                              ignore_fields=ignore_fields)
    if not planned.plan.to_run:
        recorded = planned.record().id if planned.plan.refused else None  # `campaign failures`
        return ArraySubmission(None, recorded, ledger, array, 0,
                               planned.plan.kept, len(planned.plan.refused), job.log_dir, None)
    text = job.script(planned.id, hold=True)  # a bad option: refused before anything is written
    job_id = job.submit(text)
    if on_submitted is not None:  # before the ledger knows it: a kill now leaves it held
        on_submitted(job_id)
    sub = _record(planned, job_id, job)
    _release(job_id)
    return ArraySubmission(job_id, sub.id, sub.ledger, array, len(sub.plan.to_run),
                           sub.plan.kept, len(sub.plan.refused), job.log_dir, text)


@dataclass(frozen=True)
class _ArrayJob:
    """The job array of a submission: its script and its sbatch."""

    command: Callable[[str], Sequence[str | os.PathLike[str]]]
    array: str
    log_dir: Path
    job_name: str
    workdir: Path
    options: dict[str, Any]

    def script(self, submission: str, *, hold: bool = False) -> str:
        from schedulers.slurm import render_array_script

        extra = dict(self.options)
        given = extra.get("extra_directives") or []
        if hold and not isinstance(given, str):  # released once the ledger records it
            extra["extra_directives"] = [*given, "--hold"]
        try:
            return render_array_script(job_name=self.job_name, command=self.command(submission),
                                       array=self.array, log_dir=self.log_dir,
                                       workdir=self.workdir, **extra)
        except (TypeError, ValueError) as exc:
            raise SubmitError(str(exc)) from exc

    def requested(self) -> dict[str, int]:
        """What each element asks Slurm for: ``cpus`` (``cpus_per_task``, Slurm's default of
        one without it) and, with ``mem``, ``memory_bytes`` (a partition's default memory is
        not known here)."""
        from schedulers.slurm import slurm_memory_bytes

        cpus = self.options.get("cpus_per_task")
        out = {"cpus": int(cpus) if cpus else 1}
        if self.options.get("mem"):
            out["memory_bytes"] = slurm_memory_bytes(self.options["mem"])
        return out

    def submit(self, text: str) -> str:
        from schedulers.slurm import SlurmCommandError, sbatch

        try:
            return sbatch(text, cwd=self.workdir)
        except (SlurmCommandError, OSError) as exc:
            raise SubmitError(f"sbatch failed, nothing was submitted or written: {exc}") from exc


def _record(planned: PlannedSubmission, job: str, array: _ArrayJob) -> Submission:
    """Write the submitted job (held until now) to the ledger; if writing fails, cancel the
    job, so that nothing runs that the ledger does not know of."""
    from schedulers.slurm import SlurmCommandError, array_elements, scancel

    try:
        array.log_dir.mkdir(parents=True, exist_ok=True)
        return planned.record(job, array.requested(), array_elements(array.array))
    except BaseException:
        try:
            scancel(job)
        except SlurmCommandError as exc:
            logger.error("could not cancel job %s; cancel it with `%s` (%s)", job,
                         command("scancel", job), exc)
        raise


def _release(job: str) -> None:
    """``scontrol release JOB``: the held job array may start."""
    from schedulers.slurm import SlurmCommandError, release

    try:
        release(job)
    except SlurmCommandError as exc:
        how = (f"exited with code {exc.returncode} ({exc.stderr.strip()})"
               if exc.returncode not in (None, 127) else f"failed ({exc.stderr.strip() or exc})")
        raise SubmitError(f"job {job} was submitted held and recorded in the ledger, but "
                          f"`{command('scontrol', 'release', job)}` {how}; run it to start the "
                          "job") from None
