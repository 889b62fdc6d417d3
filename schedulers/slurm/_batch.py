"""What runs on a worker of execution="slurm": a batch of tasks, noting the Slurm job."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..dask._batch import run_batch


def run_slurm_batch(fn: Callable[[Any], Any], tasks: list[tuple[str, int, Any]]
                    ) -> tuple[Any, list]:
    """`run_batch`, with the worker named ``slurm-job-<id>/<dask worker>`` where it ran."""
    (host, pid, worker, group), outcomes = run_batch(fn, tasks)
    job = os.environ.get("SLURM_JOB_ID")
    if job:
        worker = f"slurm-job-{job}" + (f"/{worker}" if worker else "")
    return (host, pid, worker, group), outcomes
