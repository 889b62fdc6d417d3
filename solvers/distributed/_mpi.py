"""`MpiTransport`: point-to-point messages over ``MPI.COMM_WORLD`` (mpi4py)."""

from __future__ import annotations

import time
from typing import Any

from ._transport import Transport, WorkerLost

__all__ = ["MpiTransport", "mpi_available"]

_TAG = 7121


def mpi_available() -> bool:
    """Whether mpi4py imports (it initialises MPI on import)."""
    try:
        import mpi4py  # noqa: F401 -- imported only to learn whether it imports
    except ImportError:
        return False
    return True


class MpiTransport(Transport):
    """Messages between rank 0 and the others of ``MPI.COMM_WORLD``.

    Process 0 polls for replies, so a ``timeout`` bounds a wait; a rank that dies is usually
    noticed by ``mpirun`` first, which then ends every rank.
    """

    def __init__(self) -> None:
        from mpi4py import MPI

        self._comm = MPI.COMM_WORLD
        self.rank, self.size = self._comm.Get_rank(), self._comm.Get_size()

    def broadcast(self, message: Any) -> None:
        requests = [self._comm.isend(message, dest=r, tag=_TAG) for r in self.workers]
        for request in requests:
            request.wait()

    def gather(self, timeout: float | None = None) -> list[Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        replies: dict[int, Any] = {}
        pause = 1e-5
        while len(replies) < self.size - 1:
            got = False
            for r in self.workers:
                if r not in replies and self._comm.iprobe(source=r, tag=_TAG):
                    replies[r] = self._comm.recv(source=r, tag=_TAG)
                    got = True
            if got:
                pause = 1e-5
                continue
            if deadline is not None and time.monotonic() >= deadline:
                rank = min(set(self.workers) - set(replies))
                raise WorkerLost(f"rank {rank} did not answer within timeout={timeout:g} s", rank)
            time.sleep(pause)
            pause = min(2 * pause, 1e-3)
        return [replies[r] for r in sorted(replies)]

    def receive(self) -> Any:
        # Polling with a short sleep: a blocking receive spins a core for as long as process 0
        # runs its block, which starves process 0 when ranks share cores.
        pause = 1e-5
        while not self._comm.iprobe(source=0, tag=_TAG):
            time.sleep(pause)
            pause = min(2 * pause, 2e-3)
        return self._comm.recv(source=0, tag=_TAG)

    def reply(self, message: Any) -> None:
        self._comm.send(message, dest=0, tag=_TAG)
