"""The Slurm commands the project uses: sbatch, scancel, scontrol release, squeue (job states)
and sinfo.

Job states come from ``squeue -t all`` alone, one call per poll: they work on clusters without
an accounting database (no ``sacct``), where Slurm keeps an ended job visible for ``MinJobAge``
seconds (300 by default).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Iterable

logger = logging.getLogger(__name__)

#: States of a job (or array element) that has not ended yet.
ACTIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED",
                           "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SIGNALING",
                           "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", "SPECIAL_EXIT"})
#: States of a job (or array element) that has ended, successfully or not.
ENDED_STATES = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
                          "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REVOKED"})

#: Seconds a Slurm command may take before it counts as failed (a hung slurmctld).
COMMAND_TIMEOUT = 60.0


class SlurmCommandError(RuntimeError):
    """A Slurm command failed: the command, its exit code (None: it timed out), stdout, stderr."""

    def __init__(self, command: list[str], returncode: int | None, stdout: str, stderr: str):
        self.command = list(command)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        how = (f"exited with code {returncode}" if returncode is not None
               else f"did not answer within {COMMAND_TIMEOUT:g} s")
        super().__init__(f"Slurm command {how}.\nCommand: {' '.join(self.command)}\n"
                         f"stdout:\n{stdout.rstrip()}\nstderr:\n{stderr.rstrip()}")

    def __reduce__(self):  # picklable: it crosses process boundaries
        return type(self), (self.command, self.returncode, self.stdout, self.stderr)


def _call(command: list[str], *, input: str | None = None,
          cwd: str | os.PathLike[str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command; return it completed, whatever its exit code; raise only on a timeout."""
    logger.debug("running %s", " ".join(command))
    try:
        return subprocess.run(command, input=input, cwd=cwd, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        raise SlurmCommandError(command, None, out, err) from None
    except FileNotFoundError:
        raise SlurmCommandError(command, 127, "", f"{command[0]}: command not found; is this "
                                "a Slurm login node (or is Slurm's client installed)?") from None


def _checked(command: list[str], **kwargs) -> str:
    done = _call(command, **kwargs)
    if done.returncode != 0:
        raise SlurmCommandError(command, done.returncode, done.stdout, done.stderr)
    return done.stdout


def sbatch(script_text: str, *, cwd: str | os.PathLike[str]) -> str:
    """Submit a batch script (its text, e.g. from `render_array_script`); return the job id.

    Args:
        script_text: the script; sbatch reads it from standard input.
        cwd: the folder sbatch runs in: the job's working folder unless the script sets
            ``--chdir``, and the base of relative paths in the script.

    Raises:
        SlurmCommandError: sbatch failed (with command, exit code, stdout and stderr).
    """
    out = _checked(["sbatch", "--parsable"], input=script_text, cwd=os.fspath(cwd))
    job_id = out.strip().split(";", 1)[0]  # "<id>" or "<id>;<cluster>"
    if not job_id.isdigit():
        raise SlurmCommandError(["sbatch", "--parsable"], 0, out,
                                "could not read a job id in sbatch's output")
    return job_id


def scancel(job_id: str | int, *, signal: str | None = None) -> None:
    """Cancel a job, an array (``"123"``) or one array element (``"123_4"``).

    With ``signal`` (e.g. ``"USR1"``), send that signal instead, to the batch shell and its
    children too (``scancel --full --signal``); the job goes on unless it exits.
    Cancelling a job that has already ended is not an error.

    Raises:
        SlurmCommandError: scancel failed for another reason.
    """
    command = ["scancel"]
    if signal is not None:
        command += ["--full", f"--signal={signal}"]
    done = _call(command + [str(job_id)])
    if done.returncode != 0 and not _gone(done.stderr):
        raise SlurmCommandError(command + [str(job_id)], done.returncode, done.stdout,
                                done.stderr)
    if done.stderr.strip():
        logger.debug("scancel %s: %s", job_id, done.stderr.strip())


def release(job_id: str | int) -> None:
    """``scontrol release JOB``: a job (or array) submitted held (``--hold``) may start.

    Raises:
        SlurmCommandError: scontrol failed (exit code 127: it is not installed).
    """
    _checked(["scontrol", "release", str(job_id)])


def job_states(job_id: str | int | Iterable[str | int]) -> dict[str, str]:
    """The state of every element of a job array, or of a job, with one ``squeue`` call.

    Args:
        job_id: a job id (``123``), an array's id (every element is listed), an element
            (``"123_4"``), or several of these.

    Returns:
        a dict from ``"123_4"`` (array elements) or ``"124"`` (jobs) to Slurm's state name:
        ``PENDING``, ``RUNNING``, ``COMPLETED``, ``FAILED``, ``CANCELLED``, ``TIMEOUT``, ...
        (see `ACTIVE_STATES`, `ENDED_STATES`). A job Slurm no longer knows (ended more than
        ``MinJobAge`` ago, or never existed) is absent.

    Raises:
        SlurmCommandError: squeue failed (slurmctld down or not answering).
    """
    ids = [str(job_id)] if isinstance(job_id, (str, int)) else [str(j) for j in job_id]
    if not ids:
        return {}
    command = ["squeue", "--noheader", "--array", "--states=all", f"--jobs={','.join(ids)}",
               "--format=%i|%T"]
    done = _call(command)
    if done.returncode != 0:
        if _gone(done.stderr):
            return {}
        raise SlurmCommandError(command, done.returncode, done.stdout, done.stderr)
    states: dict[str, str] = {}
    for line in done.stdout.splitlines():
        key, sep, state = line.strip().partition("|")
        if sep:
            states[key] = state.strip()
    return states


def slurm_available() -> bool:
    """Whether Slurm's commands are installed and slurmctld answers (``sinfo``)."""
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return False
    try:
        done = subprocess.run(["sinfo", "--noheader", "--format=%P"], capture_output=True,
                              text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and bool(done.stdout.strip())


def _gone(stderr: str) -> bool:
    """Slurm says the job is unknown or has already ended."""
    text = stderr.lower()
    return "invalid job id" in text or "already completing or completed" in text
