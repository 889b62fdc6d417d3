"""The Slurm state of a submission's job array, as `campaign status` and `campaign report` ask
it (one ``squeue`` call)."""

from __future__ import annotations


def job_array_states(job: str | None) -> dict[str, str] | None:
    """The Slurm state of every element of a job array (one ``squeue`` call), or None when
    Slurm cannot be asked from here (no Slurm commands, slurmctld not answering)."""
    if not job:
        return None
    from schedulers.slurm import SlurmCommandError, job_states

    try:
        states = job_states(job)
    except (SlurmCommandError, OSError):
        return None
    return {k: v for k, v in states.items() if "_" in k}  # "132_4", or pending "132_[5-9]"


def any_active(states: dict[str, str] | None) -> bool:
    if not states:
        return False
    from schedulers.slurm import ACTIVE_STATES

    return any(state in ACTIVE_STATES for state in states.values())
