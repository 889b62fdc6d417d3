"""What each attempt used against what its run requested, for the report's distributions:
CPU use (CPU seconds over wall seconds, as a share of the CPUs requested) and peak memory as
a share of the memory requested, as Nextflow's report sets ``%cpu`` and ``%mem`` against a
process's ``cpus`` and ``memory``.

A run's entry holds ``requested`` (``cpus``, ``memory_bytes``) where a resource manager gave
its workers them (`schedulers.Scheduler.requested`: execution="slurm", and each element of
`campaign submit`); an attempt belongs to the run it started in. Where a run requested no
CPUs (a local run shares the machine) its attempts are set against one core.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ._data import Data
from ._runs import run_of


@dataclass
class Use:
    """Per attempt (the rows of `Data.attempts`): CPU use in % of the CPUs requested, peak
    memory in % of the memory requested (NaN where its run requested none or nothing was
    measured), and how many attempts had a request of each."""

    cpu_pct: np.ndarray
    memory_pct: np.ndarray
    cpus_requested: int  # attempts whose run requested CPUs
    memory_requested: int  # attempts whose run requested memory


def of(data: Data) -> Use:
    a = data.attempts
    run = run_of(a.started, data.runs)
    cpus = np.array([_requested(r, "cpus") for r in data.runs] + [np.nan])
    memory = np.array([_requested(r, "memory_bytes") for r in data.runs] + [np.nan])
    # -1 (no run) picks the last entry: NaN, nothing requested
    cpus_of, memory_of = cpus[run], memory[run]
    wall = a.ended - a.started
    with np.errstate(divide="ignore", invalid="ignore"):
        cpu_pct = np.where(wall > 0, 100.0 * a.resources["cpu_s"]
                           / (wall * np.where(np.isnan(cpus_of), 1.0, cpus_of)), np.nan)
        memory_pct = 100.0 * a.resources["peak_rss_bytes"] / memory_of
    return Use(cpu_pct, memory_pct, int(np.isfinite(cpus_of).sum()),
               int(np.isfinite(memory_of).sum()))


def _requested(run: dict[str, Any], key: str) -> float:
    value = (run.get("requested") or {}).get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return np.nan


def note(use: Use, attempts: int) -> str:
    """A sentence on the two, in the words of the plots' titles."""
    parts = []
    cpu = use.cpu_pct[np.isfinite(use.cpu_pct)]
    if cpu.size:
        if use.cpus_requested == attempts:
            against = "the CPUs their runs requested"
        elif use.cpus_requested:
            against = "the CPUs requested, or one core where a run requested none"
        else:
            against = "one core (no run requested CPUs)"
        parts.append(f"CPU use, against {against}: median {np.median(cpu):.0f} %, "
                     f"{int((cpu < 50).sum()):,} of {cpu.size:,} attempts under 50 %.")
    mem = use.memory_pct[np.isfinite(use.memory_pct)]
    if mem.size:
        parts.append(f"Peak memory against the memory requested: median {np.median(mem):.0f} %, "
                     f"largest {mem.max():.0f} %, {int((mem > 90).sum()):,} of {mem.size:,} "
                     "attempts over 90 %.")
    elif attempts:
        parts.append("No run requested memory (execution='slurm' and campaign submit's mem "
                     "do): peak memory is shown in MiB only.")
    return " ".join(parts)
