"""How process 0 and the other processes of `run` exchange messages: one small interface.

Process 0 (the manager) sends every other process (a worker) the same message and gathers one
reply from each; a worker receives and replies. Messages are pickled Python objects (tuples of
NumPy arrays). Two implementations: `TcpTransport` (sockets to process 0, for our launcher and
``srun``; each connection proves the job's secret both ways before any pickle is read) and
`MpiTransport` (mpi4py, for ``mpirun``).
"""

from __future__ import annotations

import abc
import logging
from typing import Any

__all__ = ["Transport", "WorkerLost"]

logger = logging.getLogger(__name__)


class WorkerLost(RuntimeError):
    """A process that evaluates experiments for `run` died or stopped answering.

    Attributes:
        rank: the process that was lost.
    """

    def __init__(self, message: str, rank: int):
        super().__init__(message)
        self.rank = rank

    def __reduce__(self):
        return (type(self), (self.args[0], self.rank))


class Transport(abc.ABC):
    """Messages between process 0 and the others.

    Attributes:
        rank: this process's number, 0 for the manager.
        size: how many processes take part.
    """

    rank: int
    size: int

    @property
    def workers(self) -> range:
        """The ranks that evaluate for process 0."""
        return range(1, self.size)

    @abc.abstractmethod
    def broadcast(self, message: Any) -> None:
        """Process 0: send ``message`` to every worker."""

    @abc.abstractmethod
    def gather(self, timeout: float | None = None) -> list[Any]:
        """Process 0: one reply from each worker, in rank order.

        Raises:
            WorkerLost: when a worker's connection ends, or no reply comes within ``timeout``
                seconds (``None``: no limit; a dead worker is still detected where the
                transport can see it).
        """

    @abc.abstractmethod
    def receive(self) -> Any:
        """A worker: the next message from process 0 (blocks)."""

    @abc.abstractmethod
    def reply(self, message: Any) -> None:
        """A worker: answer process 0."""

    def close(self) -> None:  # noqa: B027 -- an optional hook: a transport with nothing to release keeps it
        """Release connections (idempotent)."""
