"""`TcpTransport`: one socket from each worker to process 0; no MPI needed.

Process 0 listens on the address it was given (loopback for our launcher), and every new
connection must first pass the handshake of `_auth` (each side proves the job's secret to the
other) before a single byte of it is unpickled. A connection that fails the handshake is closed
unread and logged (``logger.warning`` naming the peer's address); it takes no worker's slot, and
the real worker may still connect afterwards.
"""

from __future__ import annotations

import ipaddress
import logging
import pickle
import selectors
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from ._auth import (
    ANSWER_SIZE,
    CHALLENGE_SIZE,
    PROOF_SIZE,
    SECRET,
    answer,
    challenge,
    check_answer,
    check_proof,
    context,
    proof,
)
from ._transport import Transport, WorkerLost

__all__ = ["HANDSHAKE_TIMEOUT", "TcpTransport", "listen", "resolve"]

logger = logging.getLogger(__name__)

_HEADER = struct.Struct("!Q")
#: Seconds a new connection has to complete the handshake before it is dropped.
HANDSHAKE_TIMEOUT = 30.0


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
    """One message from an authenticated peer, or ``EOFError`` when it closed the connection."""
    try:
        head = _exact(sock, _HEADER.size)
        data = None if head is None else _exact(sock, _HEADER.unpack(head)[0])
    except (ConnectionResetError, BrokenPipeError) as exc:
        raise EOFError(str(exc)) from None
    if data is None:
        raise EOFError("connection closed")
    return pickle.loads(data)


def _address(sockaddr: tuple) -> str:
    host, port = sockaddr[0], sockaddr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def resolve(host: str, port: int, nodes: int = 1) -> tuple[int, int, int, tuple]:
    """``(family, type, proto, sockaddr)`` that process 0 binds for ``host:port``.

    Raises:
        OSError: when ``host`` does not resolve.
        ValueError: when it resolves to a loopback address but the job spans ``nodes > 1``
            nodes (the others could not connect).
    """
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(host, port,
                                                              type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise OSError(f"process 0 cannot resolve its host {host!r} to listen on ({exc}); give a "
                      "host name or address of process 0's node") from None
    if nodes > 1 and ipaddress.ip_address(str(sockaddr[0]).split("%")[0]).is_loopback:
        raise ValueError(f"process 0's host {host!r} resolves to the loopback address "
                         f"{sockaddr[0]} on its own node, but the job spans {nodes} nodes, which "
                         "could not connect there; make the node's name resolve to its network "
                         f"address on the node itself (e.g. drop a '{sockaddr[0]} {host}' line "
                         "from /etc/hosts)")
    return family, kind, proto, sockaddr


def listen(host: str, port: int, backlog: int = 16, *, nodes: int = 1) -> socket.socket:
    """A socket listening on the address ``host`` resolves to (never every interface)."""
    family, kind, proto, sockaddr = resolve(host, port, nodes)
    server = socket.socket(family, kind, proto)
    try:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(sockaddr)
        server.listen(backlog)
    except OSError as exc:
        server.close()
        raise OSError(f"process 0 cannot listen on {_address(sockaddr)} for the evaluations of "
                      f"run() ({exc}); the port after the coordinator's must be free: choose "
                      "another coordinator port") from None
    return server


@dataclass
class _Pending:
    """A connection in its handshake: who, our nonce, what it sent so far, until when."""

    peer: str
    nonce: bytes
    until: float
    data: bytearray = field(default_factory=bytearray)


class _Door:
    """Process 0's listening socket: admits authenticated workers, drops everyone else."""

    def __init__(self, host: str, port: int, size: int, key: bytes, nodes: int):
        self.size, self.key, self.ctx = size, key, context(port, size)
        self.server = listen(host, port, max(16, size), nodes=nodes)
        self.server.setblocking(False)
        self.bound = _address(self.server.getsockname())
        self.peers: dict[int, socket.socket] = {}
        self.pending: dict[socket.socket, _Pending] = {}
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.server, selectors.EVENT_READ)

    def drop(self, conn: socket.socket, reason: str) -> None:
        state = self.pending.pop(conn)
        self.sel.unregister(conn)
        conn.close()
        logger.warning("refused the connection from %s to the run() transport on %s: %s; it was "
                       "closed unread (a process of this job needs the same %s)", state.peer,
                       self.bound, reason, SECRET)

    def admit(self) -> None:
        try:
            conn, addr = self.server.accept()
        except OSError:  # nothing to accept after all, or a connection aborted at once
            return
        message, nonce = challenge()
        try:
            conn.settimeout(HANDSHAKE_TIMEOUT)
            conn.sendall(message)
            conn.setblocking(False)
        except OSError:
            conn.close()
            return
        self.pending[conn] = _Pending(_address(addr), nonce, time.monotonic() + HANDSHAKE_TIMEOUT)
        self.sel.register(conn, selectors.EVENT_READ)

    def progress(self, conn: socket.socket) -> None:
        state = self.pending[conn]
        try:
            chunk = conn.recv(ANSWER_SIZE - len(state.data))
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            return self.drop(conn, f"its connection failed ({exc})")
        if not chunk:
            return self.drop(conn, "it closed the connection before the handshake ended")
        state.data += chunk
        if len(state.data) < ANSWER_SIZE:
            return
        got = check_answer(self.key, self.ctx, state.nonce, bytes(state.data))
        if got is None:
            return self.drop(conn, "it did not prove the job's secret")
        rank, theirs = got
        if rank in self.peers or not 0 < rank < self.size:
            why = "connected already" if rank in self.peers else f"not in 1..{self.size - 1}"
            return self.drop(conn, f"it proved the secret but claims process {rank}, {why}")
        del self.pending[conn]
        self.sel.unregister(conn)
        try:
            conn.settimeout(HANDSHAKE_TIMEOUT)
            conn.sendall(proof(self.key, self.ctx, state.nonce, theirs, rank))
        except OSError as exc:
            logger.warning("process %d (%s) went away during its handshake (%s)", rank,
                           state.peer, exc)
            conn.close()
            return
        conn.settimeout(None)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.peers[rank] = conn
        logger.debug("tcp transport: process %d connected from %s", rank, state.peer)

    def wait(self, connect_timeout: float) -> dict[int, socket.socket]:
        """Every worker, authenticated, keyed by rank."""
        deadline = time.monotonic() + connect_timeout
        while len(self.peers) < self.size - 1:
            now = time.monotonic()
            if now >= deadline:
                missing = sorted(set(range(1, self.size)) - set(self.peers))
                raise WorkerLost(f"processes {missing} did not connect to {self.bound} within "
                                 f"connect_timeout={connect_timeout:g} s; check that all "
                                 f"{self.size} processes started with the same {SECRET}",
                                 missing[0])
            wake = min([deadline] + [p.until for p in self.pending.values()])
            for key, _ in self.sel.select(max(0.0, wake - now)):
                if key.fileobj is self.server:
                    self.admit()
                elif key.fileobj in self.pending:
                    self.progress(key.fileobj)
            now = time.monotonic()
            for conn in [c for c, p in self.pending.items() if p.until <= now]:
                self.drop(conn, f"it sent no complete handshake within {HANDSHAKE_TIMEOUT:g} s")
        return self.peers

    def close(self, keep: bool) -> None:
        """Stop listening; ``keep`` the authenticated workers (else close them too)."""
        why = "every process had joined" if keep else "process 0 stopped waiting"
        for conn in list(self.pending):
            self.drop(conn, f"it was still in its handshake when {why}")
        if not keep:
            for conn in self.peers.values():
                conn.close()
        self.sel.close()
        self.server.close()


def _handshake(sock: socket.socket, where: str, rank: int, key: bytes, ctx: bytes) -> None:
    """A worker: answer process 0's challenge and check its proof (nothing is unpickled)."""
    try:
        first = _exact(sock, CHALLENGE_SIZE)
        if first is None:
            raise EOFError("closed before sending its challenge")
        message, nonces = answer(key, ctx, first, rank)
        sock.sendall(message)
        reply = _exact(sock, PROOF_SIZE)
        if reply is None:
            raise EOFError("closed after reading this process's answer")
    except ValueError as exc:
        raise ConnectionError(f"process {rank}: {exc} at {where}; is {where} process 0 of this "
                              "job?") from None
    except (OSError, EOFError) as exc:
        raise ConnectionError(f"process {rank}: process 0 at {where} refused this process's "
                              f"proof of the job's secret ({exc}); every process needs the same "
                              f"{SECRET} (process 0 logs the refusal)") from None
    if not check_proof(key, ctx, *nonces, rank, reply):
        raise ConnectionError(f"process {rank}: the process listening at {where} did not prove "
                              f"the job's secret; it is not process 0 of this job, or its {SECRET}"
                              " differs: nothing it sent was read")


class TcpTransport(Transport):
    """Process 0 listens on ``host:port``; every worker connects there and authenticates.

    Arguments:
        host, port: where process 0 listens (by convention the coordinator's port + 1); it
            binds exactly that address, e.g. loopback only for ``127.0.0.1``.
        rank, size: this process and the number of processes.
        secret: the job's secret (`_auth.job_secret`), the same in every process.
        nodes: how many nodes the job spans, when known (a loopback ``host`` is refused for
            more than one).
        connect_timeout: seconds for all workers to connect (process 0) or for process 0 to
            accept (a worker).
    """

    def __init__(self, host: str, port: int, rank: int, size: int, *, secret: bytes,
                 nodes: int = 1, connect_timeout: float = 120.0):
        self.rank, self.size = rank, size
        self._peers: dict[int, socket.socket] = {}
        self._sock: socket.socket | None = None
        where = f"{host}:{port}"
        if rank == 0:
            door, ok = _Door(host, port, size, secret, nodes), False
            try:
                self._peers = door.wait(connect_timeout)
                ok = True
            finally:
                door.close(keep=ok)
            logger.debug("tcp transport: %d workers connected to %s", size - 1, door.bound)
            return
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
        self._sock.settimeout(max(HANDSHAKE_TIMEOUT, deadline - time.monotonic()))
        try:
            _handshake(self._sock, where, rank, secret, context(port, size))
        except BaseException:
            self.close()
            raise
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.settimeout(None)

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
                        replies[rank] = _recv(self._peers[rank])
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
