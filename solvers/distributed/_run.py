"""`run`: a fit whose experiments are split over the processes of a job.

Process 0 runs the ``with`` block; every other process lowers its own experiments, answers
process 0's evaluation requests until the block ends, then leaves with ``SystemExit(0)`` (its
``with`` body never runs, and nothing after the block runs on it either).
"""

from __future__ import annotations

import logging
import os
import traceback
from types import TracebackType
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from .._mesh import Layout
from ..inference._lower import LoweredProblem, Plan, _place, lower
from ..inference._problem import InferenceProblem
from ..inference._structure import BucketPlan
from . import _initialize
from ._auth import job_secret
from ._launch_info import COORDINATOR, Launch, detect, nodes, parse_address
from ._mpi import MpiTransport, mpi_available
from ._remote import Remote, register, unregister
from ._share import Share, assign, compressed, share
from ._tcp import TcpTransport
from ._transport import Transport, WorkerLost

__all__ = ["run"]

logger = logging.getLogger(__name__)


def _launch() -> Launch:
    state = _initialize._state
    return state if state is not None and state.multi else detect(os.environ)


#: What each launch is called in the error for a missing secret.
_KINDS = {"slurm": "an srun step", "mpi": "an mpirun job without mpi4py",
          "launcher": "a job with the launcher's variables",
          "arguments": "a job joined by initialize() arguments"}


def _transport(launch: Launch, connect_timeout: float) -> Transport:
    if launch.source == "mpi" and mpi_available():
        return MpiTransport()
    if launch.coordinator is None:
        raise ValueError(f"this is an MPI launch of {launch.num_processes} processes but mpi4py "
                         f"is not installed and {COORDINATOR} is not set; pip install mpi4py, "
                         f"or export {COORDINATOR}=<host of rank 0>:<free port> to every rank")
    host, port = parse_address(launch.coordinator, "the coordinator address")
    secret = job_secret(os.environ, f"{_KINDS.get(launch.source, launch.source)} of "
                                    f"{launch.num_processes} processes")
    return TcpTransport(host, port + 1, launch.process_id, launch.num_processes, secret=secret,
                        nodes=nodes(os.environ), connect_timeout=connect_timeout)


def _stack(replies: list[Any], n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rs, js, s_total = [], [], np.zeros((n, n))
    for rank, reply in enumerate(replies, start=1):
        if reply[0] != "ok":
            raise RuntimeError(f"process {rank} failed to evaluate its experiments:\n{reply[1]}")
        _, c, rho, upper, s = reply
        rs += [c, np.reshape(rho, 1)]
        js += [upper, np.zeros((1, n))]
        s_total = s_total + s
    return np.concatenate(rs), np.concatenate(js), s_total


def _serve(transport: Transport, problem: InferenceProblem, owned: list[str]) -> None:
    """A worker: load the owned experiments, then answer until process 0 says stop."""
    rank = transport.rank
    try:
        mine = share(problem, owned)
    except Exception:
        transport.reply(("error", traceback.format_exc()))
        raise
    transport.reply(("ok",))
    served = 0
    while True:
        try:
            message = transport.receive()
        except EOFError:
            raise ConnectionError(f"process {rank}: process 0 closed the connection after "
                                  f"{served} evaluations without saying stop; it died or was "
                                  "killed (see its output)") from None
        if message[0] == "stop":
            logger.debug("process %d: stop after %d evaluations", rank, served)
            return
        _, theta, second = message
        try:
            transport.reply(("ok",) + compressed(mine, theta, second))
        except Exception:  # noqa: BLE001 -- any error in this share's evaluation goes to process 0, which raises it
            transport.reply(("error", traceback.format_exc()))
        served += 1


class _Run:
    """The context manager `run` returns."""

    def __init__(self, problem: InferenceProblem, layout: Layout | None, timeout: float | None,
                 connect_timeout: float):
        if not isinstance(problem, InferenceProblem):
            raise TypeError(f"distributed.run() takes an InferenceProblem (or Study), got "
                            f"{type(problem).__name__}")
        self.problem, self.layout = problem, layout
        self.timeout, self.connect_timeout = timeout, connect_timeout
        self._transport: Transport | None = None
        self._key: int | None = None
        self._lost: WorkerLost | None = None

    def __enter__(self) -> LoweredProblem:
        launch = _launch()
        if not launch.multi:
            return lower(self.problem, self.layout)
        if self.layout is not None and self.layout.mesh is not None:
            logger.info("distributed.run: each of the %d processes evaluates its experiments on "
                        "its first local device; the layout's mesh is not used",
                        launch.num_processes)
        owned = assign(self.problem, launch.num_processes)
        transport = _transport(launch, self.connect_timeout)
        if transport.rank != 0:
            try:
                _serve(transport, self.problem, owned[transport.rank])
            finally:
                transport.close()
            raise SystemExit(0)
        self._transport = transport
        try:
            lowered = self._lower(share(self.problem, owned[0]), owned)
            ready = transport.gather(self.connect_timeout)
        except BaseException:
            self._stop()
            raise
        for rank, reply in enumerate(ready, start=1):
            if reply[0] != "ok":
                self._stop()
                raise RuntimeError(f"process {rank} could not load its experiments "
                                   f"{owned[rank]}:\n{reply[1]}")
        logger.info("distributed.run: %d processes, experiments per process %s",
                    launch.num_processes, [len(o) for o in owned])
        return lowered

    def _fetch(self, theta: np.ndarray, second: bool
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        assert self._transport is not None
        try:
            self._transport.broadcast(("eval", theta, second))
            return _stack(self._transport.gather(self.timeout), theta.shape[0])
        except WorkerLost as exc:
            self._lost = exc
            raise

    def _lower(self, mine: Share, owned: list[list[str]]) -> LoweredProblem:
        flat, problem = mine.flat, self.problem
        n = len(flat.names)
        rows = (len(owned) - 1) * (n + 1)
        self._key = register(self._fetch)
        remote = BucketPlan(Remote(self._key, flat.names, rows), flat.names, None, 1, True)
        sharding = NamedSharding(mine.mesh, PartitionSpec("data"))
        dtype = jnp.result_type(float)

        def one(a: Any) -> jax.Array:
            return _place(np.asarray(a)[None], sharding)

        data = {"times": one(np.zeros(rows, dtype)), "conditions": {},
                "index": one(np.arange(n, dtype=np.int32)),
                "obs": one(np.arange(rows, dtype=np.int32)),
                "weights": one(np.ones(rows, dtype)), "values": one(np.zeros(rows, dtype))}
        replicated = NamedSharding(mine.mesh, PartitionSpec())

        def put(a: Any) -> jax.Array:
            return _place(np.asarray(a, dtype=dtype), replicated)

        x0, lo, hi, typical = flat.internal()
        noise_known = all(m.noise is not None for e in problem.experiments
                          for m in e.measurements)
        return LoweredProblem(
            problem=problem, layout=Layout(), plan=Plan(mine.mesh, mine.plans + (remote,),
                                                        flat.log),
            flat=flat, data=mine.data + (data,), x0=put(x0), lower=put(lo), upper=put(hi),
            typical=put(typical), assignment=tuple(tuple(o) for o in owned), work=None,
            experiment_work={}, balanced=False, n_residuals=mine.n_residuals,
            noise_known=noise_known)

    def _stop(self) -> None:
        if self._key is not None:
            unregister(self._key)
            self._key = None
        if self._transport is not None:
            try:
                self._transport.broadcast(("stop",))
            except WorkerLost:
                pass
            self._transport.close()
            self._transport = None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        self._stop()
        if exc is not None and self._lost is not None and exc is not self._lost:
            raise self._lost from exc
        return False


def run(study: InferenceProblem, *, layout: Layout | None = None, timeout: float | None = None,
        connect_timeout: float = 120.0) -> _Run:
    """Split a study's experiments over the processes of a job; process 0 fits.

    ``with distributed.run(study) as lowered:`` gives process 0 a lowered problem for
    `optsolve` whose cost, gradient and curvature sum every process's experiments, so the fit
    equals the one-process fit (to rounding). Every other process loads only its own experiments
    (a `Measurement` whose values are a function is called there alone), answers process 0's
    evaluations while the block runs, and when the block ends raises ``SystemExit(0)``: its
    ``with`` body and whatever follows the block do not run, so write results inside the block.
    In one process (no launcher) the block runs as written on ``lower(study, layout)``.

    Start it with ``mpirun -n K python -m mpi4py script.py`` (mpi4py messages), ``srun -n K
    python script.py`` or ``python -m solvers.distributed.launch -n K script.py`` (TCP messages
    to process 0, which listens on the coordinator's host and port + 1 only). Over TCP every
    connection first proves the job's secret both ways: the launcher sets a fresh
    ``DIFFSOUP_SECRET``; under ``srun`` or ``mpirun`` export one (or ``DIFFSOUP_SECRET_FILE``)
    to every process. `initialize` is not needed for this.

    Arguments:
        study: an `InferenceProblem` / `Study`.
        layout: used in one process; with several, each process evaluates its experiments on
            its first local device.
        timeout: seconds process 0 waits for the replies to one evaluation; ``None`` waits as
            long as the workers are alive (a worker that dies is noticed at once over TCP).
        connect_timeout: seconds for the processes to connect and load their experiments.

    Returns:
        A context manager; entering it gives the `LoweredProblem` (process 0) or raises
        ``SystemExit(0)`` after serving (the others).

    Raises:
        WorkerLost: on process 0, from the block, when a worker dies or stops answering.
        RuntimeError: when a worker cannot load or evaluate its experiments (its traceback is
            shown).
        ValueError: over TCP, when the job's secret is not set (the message shows how to set
            it), or process 0's host resolves to loopback on a job of several nodes.
        ConnectionError: on a worker, when process 0 refuses its proof of the secret (another
            secret) or the listener does not prove it.
    """
    return _Run(study, layout, timeout, connect_timeout)
