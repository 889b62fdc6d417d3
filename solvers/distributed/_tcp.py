"""`TcpTransport`: one socket from each worker to process 0; no MPI needed."""

from __future__ import annotations

import logging
import pickle
import selectors
import socket
import struct
import time
from typing import Any

from ._transport import Transport, WorkerLost

__all__ = ["TcpTransport"]

logger = logging.getLogger(__name__)

_HEADER = struct.Struct("!Q")


def _send(sock: socket.socket, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_HEADER.pack(len(data)) + data)


def _exact(sock: socket.socket, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _recv(sock: socket.socket) -> Any:
    """One message, or ``EOFError`` when the peer closed the connection."""
    try:
        head = _exact(sock, _HEADER.size)
        data = None if head is None else _exact(sock, _HEADER.unpack(head)[0])
    except (ConnectionResetError, BrokenPipeError) as exc:
        raise EOFError(str(exc)) from None
    if data is None:
        raise EOFError("connection closed")
    return pickle.loads(data)


class TcpTransport(Transport):
    """Process 0 listens on ``port`` (all interfaces); every worker connects to ``host:port``.

    Arguments:
        host, port: where process 0 listens (by convention the coordinator's port + 1).
        rank, size: this process and the number of processes.
        connect_timeout: seconds for all workers to connect (process 0) or for process 0 to
            accept (a worker).
    """

    def __init__(self, host: str, port: int, rank: int, size: int, *,
                 connect_timeout: float = 120.0):
        self.rank, self.size = rank, size
        self._peers: dict[int, socket.socket] = {}
        self._sock: socket.socket | None = None
        where = f"{host}:{port}"
        if rank == 0:
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                server.bind(("", port))
            except OSError as exc:
                server.close()
                raise OSError(f"process 0 cannot listen on port {port} for the evaluations of "
                              f"run() ({exc}); the port after the coordinator's must be free: "
                              "choose another coordinator port") from None
            server.listen(size)
            server.settimeout(connect_timeout)
            deadline = time.monotonic() + connect_timeout
            try:
                while len(self._peers) < size - 1:
                    server.settimeout(max(0.01, deadline - time.monotonic()))
                    try:
                        conn, _ = server.accept()
                    except TimeoutError:
                        missing = sorted(set(self.workers) - set(self._peers))
                        raise WorkerLost(f"processes {missing} did not connect to {where} within "
                                         f"connect_timeout={connect_timeout:g} s; check that all "
                                         f"{size} processes started", missing[0]) from None
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    conn.settimeout(None)
                    self._peers[int(_recv(conn))] = conn
            finally:
                server.close()
            logger.debug("tcp transport: %d workers connected on port %d", size - 1, port)
        else:
            deadline, last = time.monotonic() + connect_timeout, None
            while self._sock is None:
                try:
                    self._sock = socket.create_connection((host, port), timeout=5.0)
                except OSError as exc:
                    last = exc
                    if time.monotonic() > deadline:
                        raise ConnectionError(f"process {rank} could not connect to process 0 at "
                                              f"{where} within {connect_timeout:g} s ({last}); "
                                              "is process 0 running?") from None
                    time.sleep(0.05)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock.settimeout(None)
            _send(self._sock, rank)

    def broadcast(self, message: Any) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        for rank, conn in self._peers.items():
            try:
                conn.sendall(_HEADER.pack(len(data)) + data)
            except OSError as exc:
                raise WorkerLost(f"process {rank} is gone: sending to it failed ({exc})",
                                 rank) from None

    def gather(self, timeout: float | None = None) -> list[Any]:
        replies: dict[int, Any] = {}
        deadline = None if timeout is None else time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            for rank, conn in self._peers.items():
                sel.register(conn, selectors.EVENT_READ, rank)
            while len(replies) < len(self._peers):
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                events = sel.select(wait)
                if not events and deadline is not None and time.monotonic() >= deadline:
                    rank = min(set(self._peers) - set(replies))
                    raise WorkerLost(f"process {rank} did not answer within timeout={timeout:g} "
                                     "s", rank)
                for key, _ in events:
                    rank = key.data
                    try:
                        replies[rank] = _recv(key.fileobj)
                    except EOFError:
                        raise WorkerLost(f"process {rank} died: its connection to process 0 "
                                         "closed before it answered (see its output for the "
                                         "cause, e.g. killed by a signal or out of memory)",
                                         rank) from None
                    sel.unregister(key.fileobj)
        return [replies[r] for r in sorted(replies)]

    def receive(self) -> Any:
        assert self._sock is not None
        return _recv(self._sock)

    def reply(self, message: Any) -> None:
        assert self._sock is not None
        _send(self._sock, message)

    def close(self) -> None:
        for conn in self._peers.values():
            conn.close()
        self._peers.clear()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
