"""Who started this process: Slurm, our launcher, MPI, explicit arguments or nobody.

Pure functions of an environment mapping, so that every launcher is recognised the same way by
`initialize`, by `run` and by the tests. Nothing here imports JAX.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["COORDINATOR", "NUM_PROCESSES", "PROCESS_ID", "Launch", "detect", "first_host",
           "nodes", "parse_address", "slurm_port"]

#: The variables our launcher sets (and the coordinator an MPI launch is given).
COORDINATOR = "DIFFSOUP_COORDINATOR"
NUM_PROCESSES = "DIFFSOUP_NUM_PROCESSES"
PROCESS_ID = "DIFFSOUP_PROCESS_ID"

#: Slurm coordinator ports: a block high in the unprivileged range, two ports per step
#: (the JAX coordinator, and the evaluation transport of `run` one above it).
_SLURM_PORT_BASE, _SLURM_PORT_SPAN = 61000, 4000


@dataclass(frozen=True)
class Launch:
    """How this process was started, as `initialize` and `run` understand it.

    Attributes:
        source: ``"slurm"``, ``"launcher"`` (``python -m solvers.distributed.launch``),
            ``"mpi"``, ``"arguments"`` (explicit ``initialize`` arguments) or ``"none"``.
        coordinator: process 0's ``host:port`` (``None`` for an MPI launch without
            ``DIFFSOUP_COORDINATOR``, and for ``"none"``).
        num_processes: the number of processes (1 for ``"none"``).
        process_id: this process's rank, 0 ... ``num_processes - 1``.
        initialized: whether `initialize` started JAX's distributed runtime (``False`` for a
            no-op, and in the result of `detect`).
    """

    source: str
    coordinator: str | None
    num_processes: int
    process_id: int
    initialized: bool = False

    @property
    def multi(self) -> bool:
        """Whether more than one process takes part."""
        return self.num_processes > 1


NONE = Launch("none", None, 1, 0)


def parse_address(address: str | None, what: str) -> tuple[str, int]:
    """``"host:port"`` as ``(host, port)``; a clear error naming ``what`` otherwise."""
    host, sep, port = str(address).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65535:
        raise ValueError(f"{what} must be 'host:port' with a port below 65535, got {address!r}; "
                         "e.g. DIFFSOUP_COORDINATOR=node01:61234")
    return host.strip("[]"), int(port)


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list: ``"gpu[07-09,12],cpu1"`` gives ``"gpu07"``."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not match or not match.group(1):
        raise ValueError(f"cannot read the Slurm node list {nodelist!r}")
    prefix, ranges = match.groups()
    if ranges is None:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def slurm_port(job_id: str, step_id: str) -> int:
    """The coordinator port of a Slurm step: the same on every task, distinct between steps."""
    digest = zlib.crc32(f"{job_id}.{step_id}".encode())
    return _SLURM_PORT_BASE + 2 * (digest % (_SLURM_PORT_SPAN // 2))


def nodes(env: Mapping[str, str]) -> int:
    """How many nodes the job spans, as far as its launcher says (1 when it does not).

    Slurm gives the step's node count; OpenMPI's local size below the world size means more
    than one node (reported as 2). Our launcher is one node.
    """
    if PROCESS_ID in env and NUM_PROCESSES in env:
        return 1
    count = env.get("SLURM_STEP_NUM_NODES", env.get("SLURM_JOB_NUM_NODES", ""))
    if "SLURM_PROCID" in env and count.isdigit():
        return int(count)
    local, world = env.get("OMPI_COMM_WORLD_LOCAL_SIZE", ""), env.get("OMPI_COMM_WORLD_SIZE", "")
    if local.isdigit() and world.isdigit() and int(local) < int(world):
        return 2
    return 1


def _int(env: Mapping[str, str], name: str) -> int:
    value = env[name]
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"the environment variable {name}={value!r} is not an integer") from None


def detect(env: Mapping[str, str]) -> Launch:
    """Recognise the launcher from environment variables (``initialized`` is ``False``).

    Order: our launcher (its three variables), Slurm (a step of more than one task), MPI
    (OpenMPI's ``OMPI_COMM_WORLD_*`` or MPICH/PMI's ``PMI_*``); otherwise ``"none"``.
    """
    if PROCESS_ID in env and NUM_PROCESSES in env:
        coordinator = env.get(COORDINATOR)
        if not coordinator:
            raise ValueError(f"{PROCESS_ID} and {NUM_PROCESSES} are set but {COORDINATOR} is not;"
                             " start the program with python -m solvers.distributed.launch, "
                             "which sets all three")
        parse_address(coordinator, COORDINATOR)
        return Launch("launcher", coordinator, _int(env, NUM_PROCESSES), _int(env, PROCESS_ID))
    tasks = env.get("SLURM_STEP_NUM_TASKS", env.get("SLURM_NTASKS"))
    if tasks is not None and int(tasks) > 1 and "SLURM_PROCID" in env:
        nodes = env.get("SLURM_STEP_NODELIST", env.get("SLURM_JOB_NODELIST"))
        if not nodes:
            raise ValueError("a Slurm step of several tasks without SLURM_STEP_NODELIST; start "
                             "the program with srun")
        job = env.get("SLURM_JOB_ID", env.get("SLURM_JOBID", "0"))
        port = slurm_port(job, env.get("SLURM_STEP_ID", env.get("SLURM_STEPID", "0")))
        return Launch("slurm", f"{first_host(nodes)}:{port}", int(tasks), _int(env, "SLURM_PROCID"))
    for size, rank in (("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"), ("PMI_SIZE", "PMI_RANK")):
        if size in env and rank in env and int(env[size]) > 1:
            coordinator = env.get(COORDINATOR) or None
            if coordinator is not None:
                parse_address(coordinator, COORDINATOR)
            return Launch("mpi", coordinator, _int(env, size), _int(env, rank))
    return NONE
