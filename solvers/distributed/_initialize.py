"""`initialize`: start JAX's multi-process runtime from whatever launched this process."""

from __future__ import annotations

import logging
import os
import socket
import time

import jax

from ._launch_info import COORDINATOR, NONE, Launch, detect, nodes, parse_address
from ._tcp import resolve

__all__ = ["initialize"]

logger = logging.getLogger(__name__)

_state: Launch | None = None


def _arguments(coordinator_address: str | None, num_processes: int | None,
               process_id: int | None) -> Launch | None:
    given = {"coordinator_address": coordinator_address, "num_processes": num_processes,
             "process_id": process_id}
    if all(v is None for v in given.values()):
        return None
    missing = [k for k, v in given.items() if v is None]
    if missing:
        shown = ", ".join(f"{k}={v!r}" for k, v in given.items() if v is not None)
        raise ValueError(f"initialize() got {shown} but not {', '.join(missing)}; give "
                         "coordinator_address='host:port', num_processes= and process_id= "
                         "together, or none of them inside a launcher (srun, python -m "
                         "solvers.distributed.launch, or mpirun with DIFFSOUP_COORDINATOR)")
    parse_address(coordinator_address, "coordinator_address")
    if not (isinstance(num_processes, int) and num_processes >= 1 and isinstance(process_id, int)
            and 0 <= process_id < num_processes):
        raise ValueError(f"initialize() needs 0 <= process_id < num_processes, got "
                         f"process_id={process_id!r}, num_processes={num_processes!r}")
    return Launch("arguments", coordinator_address, num_processes, process_id)


def _cpu_setup(cpu_devices: int | None) -> None:
    """Collectives between processes on CPU need gloo; emulated CPU devices per process."""
    try:
        # jax.config's options are attributes it sets at run time, unseen by type checkers
        option = jax.config.jax_cpu_collectives_implementation  # type: ignore[attr-defined]
        if option in (None, "none"):
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except AttributeError:  # pragma: no cover (a JAX without the option: gloo is built in)
        pass
    if cpu_devices is not None:
        jax.config.update("jax_num_cpu_devices", int(cpu_devices))


def _reach(launch: Launch, timeout: float) -> float:
    """Wait until process 0's coordinator accepts connections; the seconds that remain.

    JAX's client ends the whole process (no exception) when it cannot register, so the
    coordinator is probed here first, and an unreachable one becomes an exception.
    """
    host, port = parse_address(launch.coordinator, "the coordinator address")
    deadline = time.monotonic() + timeout
    if launch.process_id == 0:
        return timeout
    last: OSError | None = None
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=min(2.0, timeout)):
                return max(1.0, deadline - time.monotonic())
        except OSError as exc:
            last = exc
            time.sleep(0.1)
    raise RuntimeError(
        f"process {launch.process_id} of {launch.num_processes} could not reach the coordinator "
        f"{launch.coordinator} within timeout={timeout:g} s ({launch.source} launch; last error: "
        f"{last}); check that process 0 runs on that host and listens on that port, or raise "
        "initialize(timeout=...)")


def _bind_address(launch: Launch) -> str | None:
    """Process 0: the coordinator listens on the address its host resolves to, not on all.

    ``None`` (JAX's choice) on the other processes, and where the user set JAX's own
    ``JAX_COORDINATOR_BIND_ADDRESS``.
    """
    if launch.process_id != 0 or os.environ.get("JAX_COORDINATOR_BIND_ADDRESS"):
        return None
    host, port = parse_address(launch.coordinator, "the coordinator address")
    address = resolve(host, port, nodes(os.environ))[3][0]
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, *, cpu_devices: int | None = None,
               timeout: int = 60) -> Launch:
    """Join this process to a multi-process JAX job; call it before any array is created.

    Recognises, in this order: explicit arguments (all three together); our launcher
    (``python -m solvers.distributed.launch``, which sets ``DIFFSOUP_COORDINATOR``,
    ``DIFFSOUP_NUM_PROCESSES`` and ``DIFFSOUP_PROCESS_ID``); a Slurm step of several tasks
    (``srun``: the coordinator is the step's first node, on a port derived from the job and step
    ids); an MPI launch (``mpirun``; process 0's ``host:port`` comes from
    ``DIFFSOUP_COORDINATOR``). Without any of these it does nothing, so one script runs alone
    and under a launcher. Afterwards `jax.devices()` and `global_mesh` span every process.
    Process 0's coordinator listens on the address its host resolves to only (loopback for
    ``127.0.0.1``), unless ``JAX_COORDINATOR_BIND_ADDRESS`` says otherwise.
    Calling it again with the same settings returns the same `Launch` and changes nothing, so a
    function run many times in one long-lived worker process may call it every time.

    Arguments:
        coordinator_address: process 0's ``"host:port"`` (it listens there).
        num_processes: how many processes take part.
        process_id: this process's rank, ``0 <= process_id < num_processes``.
        cpu_devices: emulated JAX CPU devices in this process (``jax_num_cpu_devices``), for
            running multi-device programs on CPUs; ``None`` leaves JAX's default.
        timeout: seconds to wait for every process to reach the coordinator.

    Returns:
        A `Launch`: where the settings came from, rank, size, and ``initialized`` (``False``
        for the no-op).

    Raises:
        ValueError: for some but not all of the three arguments, or malformed ones; for an MPI
            launch without ``DIFFSOUP_COORDINATOR``; on process 0, for a coordinator host that
            resolves to loopback on a job that spans several nodes.
        RuntimeError: when the coordinator is not reached within ``timeout`` seconds, or when
            called twice with different settings.
    """
    global _state
    launch = _arguments(coordinator_address, num_processes, process_id) or detect(os.environ)
    if _state is not None:
        same = (not launch.multi if not _state.initialized else  # one process: any no-op
                (_state.coordinator, _state.num_processes, _state.process_id)
                == (launch.coordinator, launch.num_processes, launch.process_id))
        if not same:
            raise RuntimeError(
                f"initialize() was already called in this process ({_state}); it cannot join "
                f"another job ({launch}). A process belongs to one job: call initialize() with "
                "the same settings every time, or start a new process for the other job")
        return _state
    if launch.source == "none" or not launch.multi:
        if cpu_devices is not None:
            _cpu_setup(cpu_devices)
        logger.debug("initialize: no launcher and no arguments; one process")
        _state = NONE
        return NONE
    if launch.coordinator is None:
        raise ValueError(f"this is an MPI launch of {launch.num_processes} processes but "
                         f"{COORDINATOR} is not set; export {COORDINATOR}=<host of rank 0>:<free "
                         "port> for every rank (mpirun -x DIFFSOUP_COORDINATOR ...)")
    _cpu_setup(cpu_devices)
    logger.info("initialize: %s launch, process %d of %d, coordinator %s", launch.source,
                launch.process_id, launch.num_processes, launch.coordinator)
    bind = _bind_address(launch)
    left = _reach(launch, timeout)
    jax.distributed.initialize(launch.coordinator, launch.num_processes, launch.process_id,
                               initialization_timeout=max(1, int(left)),
                               coordinator_bind_address=bind)
    _state = Launch(launch.source, launch.coordinator, launch.num_processes, launch.process_id,
                    initialized=True)
    return _state
