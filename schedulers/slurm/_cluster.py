"""execution="slurm": the dask scheduler, its workers started as Slurm jobs by dask-jobqueue.

Everything the dask scheduler does (batches of small tasks, outcomes streamed back, a lost
worker's tasks run again) holds here; this module adds the `SLURMCluster`: its job options, the
same Python environment on every worker, adaptive scaling between ``min_jobs`` and ``max_jobs``,
worker jobs that ended replaced, and workers that retire (``--lifetime``) before the walltime
so that their tasks move to other workers instead of dying with the job.
dask and dask-jobqueue are imported only when the scheduler starts.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._events import Report
from ..dask import DaskScheduler
from ._batch import run_slurm_batch
from ._commands import SlurmCommandError, scancel
from ._script import parse_walltime

logger = logging.getLogger(__name__)

_MEMORY = re.compile(r"\s*\d+(\.\d+)?\s*([kKMGTP]i?B|B)?\s*")


class SlurmScheduler(DaskScheduler):
    """Run tasks on dask workers that are Slurm jobs (dask-jobqueue's `SLURMCluster`).

    Each worker job asks Slurm for ``cores`` CPUs, ``memory`` and ``gpus_per_job`` GPUs for
    ``walltime``, and runs ``processes`` dask workers (``cores / processes`` threads each).
    Between ``min_jobs`` and ``max_jobs`` jobs run, as the load asks; a job that ends (its
    workers retired, walltime, ``scancel``) is replaced while tasks remain.

    Args:
        queue: the partition of the worker jobs (``#SBATCH -p``); None: the cluster's default.
        partition: the same as ``queue`` (give one of them).
        account: the account charged (``#SBATCH -A``).
        walltime: each worker job's walltime, in Slurm's form (``"01:00:00"``).
        cores: CPUs per worker job (``--cpus-per-task``).
        memory: memory per worker job, e.g. ``"4GB"`` (``--mem``; the workers' memory limit).
        processes: dask worker processes per job; ``cores`` must be a multiple of it.
        gpus_per_job: GPUs per worker job (``--gres=gpu:N``).
        job_extra_directives: further sbatch options, e.g. ``["--qos=long"]``.
        job_script_prologue: shell lines each worker job runs before its workers start. None
            (the default): make the driver's Python environment the workers'
            (`default_prologue`: ``source <venv>/bin/activate`` in a virtual environment, else
            the folder of ``sys.executable`` first on ``PATH``; and the driver's own import
            folders on ``PYTHONPATH``); ``[]``: nothing.
        interface: the network interface of the dask scheduler and workers (``"ib0"``,
            ``"eth0"``; ``"lo"`` when every job runs on this host). None: dask's default.
        log_directory: the folder of the worker jobs' Slurm logs (created); None: Slurm's
            default (``slurm-<job id>.out`` in the current folder).
        min_jobs: worker jobs kept running.
        max_jobs: the most worker jobs at once (default ``min_jobs``).
        lifetime_margin: seconds (or a Slurm time, ``"10:00"``) before the walltime at which
            workers begin to retire, so that no task dies with its job: a retiring worker
            takes no new task, finishes the ones it runs, hands its results over and exits,
            and a new job takes its place. Default: 10 % of the walltime, at least 60 s and
            at most half of it. Of the margin M, the workers drain for M/2, then dask's
            ``--lifetime`` closes them whatever they run (those tasks run again elsewhere),
            M/2 before the walltime; each worker's times vary by up to M/4
            (``--lifetime-stagger``), so that they do not all leave at once.
        job_name: the name of the worker jobs (``#SBATCH -J``).
        start_timeout: seconds to wait for the first worker (jobs may wait in the queue);
            None: wait as long as it takes.
        scheduler_options: options of the dask scheduler (default: dashboard on a free port
            of 127.0.0.1).
        worker_extra_args: further ``dask worker`` arguments.
        death_timeout: seconds a worker waits for a lost scheduler before it exits.
        local_directory: the workers' scratch folder (dask's default: a temporary folder).
        python: the Python that runs the workers (default: ``sys.executable``).
        security: TLS between the driver, the dask scheduler and the workers: a
            `distributed.security.Security` (certificate files every job can read), or True
            for a certificate made for the run, which dask-jobqueue writes to
            ``jobqueue.slurm.shared_temp_directory`` (a folder the jobs read: set it); None:
            dask's configuration (``distributed.comm.tls``; plain TCP by default).
        batch_seconds, max_batch: see `DaskScheduler`.
    """

    name = "slurm"
    run_batch = staticmethod(run_slurm_batch)

    def __init__(self, *, queue: str | None = None, partition: str | None = None,
                 account: str | None = None, walltime: str = "01:00:00", cores: int = 1,
                 memory: str = "2GB", processes: int = 1, gpus_per_job: int | None = None,
                 job_extra_directives: Sequence[str] = (),
                 job_script_prologue: Sequence[str] | None = None,
                 interface: str | None = None, log_directory: str | os.PathLike[str] | None = None,
                 min_jobs: int = 1, max_jobs: int | None = None,
                 lifetime_margin: float | str | None = None, job_name: str = "campaign-worker",
                 start_timeout: float | None = None,
                 scheduler_options: dict[str, Any] | None = None,
                 worker_extra_args: Sequence[str] = (), death_timeout: float = 60,
                 local_directory: str | None = None, python: str | None = None,
                 security: Any = None, batch_seconds: float = 0.3, max_batch: int = 1000):
        super().__init__(batch_seconds=batch_seconds, max_batch=max_batch)
        if queue is not None and partition is not None and queue != partition:
            raise ValueError(f"queue={queue!r} and partition={partition!r} name the same "
                             "thing; give one of them")
        for what, value in (("cores", cores), ("processes", processes), ("min_jobs", min_jobs)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{what}={value!r} must be an integer >= 1")
        if cores % processes:
            raise ValueError(f"cores={cores} is not a multiple of processes={processes}: each "
                             "dask worker process gets cores / processes threads")
        max_jobs = min_jobs if max_jobs is None else max_jobs
        if not isinstance(max_jobs, int) or isinstance(max_jobs, bool) or max_jobs < min_jobs:
            raise ValueError(f"max_jobs={max_jobs!r} must be an integer >= min_jobs={min_jobs}")
        if gpus_per_job is not None and (not isinstance(gpus_per_job, int)
                                         or isinstance(gpus_per_job, bool) or gpus_per_job < 1):
            raise ValueError(f"gpus_per_job={gpus_per_job!r} must be an integer >= 1")
        if not isinstance(memory, str) or not _MEMORY.fullmatch(memory):
            raise ValueError(f"memory={memory!r} is not a memory size; write e.g. '4GB' or "
                             "'500MB' (per worker job)")
        for what, lines in (("job_extra_directives", job_extra_directives),
                            ("worker_extra_args", worker_extra_args),
                            ("job_script_prologue", job_script_prologue)):
            if isinstance(lines, str):
                raise ValueError(f"{what} must be a list of strings, got the string {lines!r}; "
                                 f"write {what}=[{lines!r}]")
        self.walltime_seconds = parse_walltime(walltime)
        self.lifetime, self.stagger, self.drain = worker_lifetime(self.walltime_seconds,
                                                                 lifetime_margin)
        self.min_jobs, self.max_jobs, self.processes = min_jobs, max_jobs, processes
        self.start_timeout = start_timeout
        directives = list(job_extra_directives)
        if gpus_per_job is not None:
            directives.append(f"--gres=gpu:{gpus_per_job}")
        self.cluster_options: dict[str, Any] = {
            "queue": queue if queue is not None else partition,
            "account": account,
            "walltime": walltime,
            "cores": cores,
            "memory": memory,
            "processes": processes,
            "job_extra_directives": directives,
            "job_script_prologue": (default_prologue() if job_script_prologue is None
                                    else list(job_script_prologue)),
            "interface": interface,
            "log_directory": None if log_directory is None else os.fspath(log_directory),
            "job_name": job_name,
            "death_timeout": death_timeout,
            "local_directory": local_directory,
            "python": python or sys.executable,
            "worker_extra_args": [*worker_extra_args,
                                  "--lifetime", f"{self.lifetime:g}s",
                                  "--lifetime-stagger", f"{self.stagger:g}s"],
            "scheduler_options": {"dashboard_address": "127.0.0.1:0",
                                  **(scheduler_options or {})},
        }
        if security is not None:
            self.cluster_options["security"] = security
        self.cluster: Any = None

    def requested(self) -> dict[str, int]:
        """Each dask worker process's share of a worker job: ``cores / processes`` CPUs and
        ``memory / processes`` bytes (dask's units: ``"2GB"`` is 2e9 bytes, ``"2GiB"`` 2**30)."""
        from dask.utils import parse_bytes

        processes = self.processes
        return {"cpus": self.cluster_options["cores"] // processes,
                "memory_bytes": int(parse_bytes(self.cluster_options["memory"])) // processes}

    @property
    def slots(self) -> int:
        # As many tasks in flight as the largest cluster runs at once (twice over), not the
        # few workers there are when the first job starts.
        threads = self.max_jobs * self.cluster_options["cores"]
        return max(2, 2 * threads * self._batch_size)

    def job_script(self) -> str:
        """The sbatch script of one worker job (submits nothing; a dask scheduler starts for
        the moment it takes)."""
        from dask_jobqueue import SLURMCluster

        cluster = SLURMCluster(**self.cluster_options)
        try:
            return cluster.job_script()
        finally:
            cluster.close()

    def start(self, fn: Callable[[Any], Any], report: Report) -> None:
        super().start(fn, report)
        try:
            from ._drain import DrainBeforeLifetime

            self.client.register_plugin(DrainBeforeLifetime(self.drain))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        forget = getattr(getattr(self.cluster, "_adaptive", None), "forget_leaving", None)
        leaving = forget() if forget is not None else []
        super().stop()  # closes the cluster, which cancels the jobs in its plan
        for job_id in leaving:  # jobs that were retiring when the campaign ended
            try:
                scancel(job_id)
            except SlurmCommandError as exc:
                logger.warning("could not cancel worker job %s: %s", job_id, exc)

    def _embedded_cluster(self) -> Any:
        from dask_jobqueue import SLURMCluster

        from ._adaptive import ReplacingAdaptive

        cluster = SLURMCluster(**self.cluster_options)
        self.cluster = cluster
        try:
            cluster.scale(jobs=self.min_jobs)
            cluster.adapt(minimum_jobs=self.min_jobs, maximum_jobs=self.max_jobs,
                          Adaptive=ReplacingAdaptive, interval="1s")
            logger.info("slurm: waiting for the first worker (%d job(s) asked; logs in %s)",
                        self.min_jobs, self.cluster_options["log_directory"] or "the current "
                        "folder")
            try:
                cluster.wait_for_workers(1, timeout=self.start_timeout)
            except TimeoutError:
                jobs = {name: job.job_id for name, job in cluster.workers.items()}
                raise TimeoutError(
                    f"no dask worker started within {self.start_timeout:g} s of asking Slurm "
                    f"for worker jobs {sorted(jobs.values())}: see `squeue --me` (still "
                    "pending? raise start_timeout) and the job logs in "
                    f"{self.cluster_options['log_directory'] or 'the current folder'}"
                ) from None
        except BaseException:
            cluster.close()
            self.cluster = None
            raise
        return cluster


def worker_lifetime(walltime: float, margin: float | str | None
                    ) -> tuple[float, float, float]:
    """For a job of ``walltime`` seconds and a ``margin`` (see `SlurmScheduler`): the
    ``--lifetime`` of its workers, their ``--lifetime-stagger``, and how many seconds before
    their lifetime they begin to drain."""
    if margin is None:
        margin = min(max(0.1 * walltime, 60.0), 0.5 * walltime)
    elif isinstance(margin, str):
        margin = float(parse_walltime(margin))
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or \
            not 0 < margin < walltime:
        raise ValueError(f"lifetime_margin={margin!r} must be more than 0 and less than the "
                         f"walltime ({walltime:g} s)")
    return float(walltime - margin / 2), margin / 4, margin / 2


def default_prologue(*, prefix: str | os.PathLike[str] | None = None,
                     base_prefix: str | os.PathLike[str] | None = None,
                     exec_prefix: str | os.PathLike[str] | None = None,
                     executable: str | os.PathLike[str] | None = None,
                     path: Sequence[str] | None = None) -> list[str]:
    """The shell lines that give a worker job the driver's Python environment: its Python first
    on ``PATH`` (or its virtual environment activated), and the folders it imports from that
    are not part of that Python (a script's folder, ``PYTHONPATH``, a target file's folder)
    first on ``PYTHONPATH``.

    Args:
        prefix, base_prefix, exec_prefix, executable, path: the Python environment to give
            the workers; each defaults to this interpreter's (``sys.prefix``,
            ``sys.base_prefix``, ``sys.exec_prefix``, ``sys.executable``, ``sys.path``). A
            virtual environment is one whose ``prefix`` differs from its ``base_prefix`` and
            that has ``bin/activate``.
    """
    prefix = Path(sys.prefix if prefix is None else prefix)
    base_prefix = Path(sys.base_prefix if base_prefix is None else base_prefix)
    exec_prefix = Path(sys.exec_prefix if exec_prefix is None else exec_prefix)
    executable = Path(sys.executable if executable is None else executable)
    path = sys.path if path is None else path
    activate = prefix / "bin" / "activate"
    if prefix != base_prefix and activate.exists():
        lines = [f"source {shlex.quote(str(activate))}"]
    else:
        lines = [f'export PATH={shlex.quote(str(executable.parent))}:"$PATH"']
    own = tuple(str(p.resolve()) for p in {prefix, base_prefix, exec_prefix})
    extra: list[str] = []
    for entry in path:
        if not entry or not os.path.isdir(entry):
            continue
        folder = str(Path(entry).resolve())
        if folder not in extra and not folder.startswith(own):
            extra.append(folder)
    if extra:
        lines.append(f'export PYTHONPATH={shlex.quote(os.pathsep.join(extra))}'
                     '${PYTHONPATH:+:"$PYTHONPATH"}')
    return lines
