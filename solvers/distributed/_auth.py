"""The job's secret, and the challenge-response that proves it before any pickle is read.

Every process of a `run` over TCP holds the same secret: ``DIFFSOUP_SECRET`` (our launcher
generates a fresh one per launch; under ``srun`` or ``mpirun`` the user exports one), or the
contents of the file named by ``DIFFSOUP_SECRET_FILE``, which only this user may read.

The handshake, on every new connection to process 0, in fixed-size raw bytes (nothing is
unpickled, and no length is read from the peer, before it ends):

1. process 0 sends ``MAGIC + n0`` (``n0``: 32 fresh random bytes);
2. the worker sends ``n1 + HMAC(secret, "worker" | context | n0 | n1 | rank) + rank``;
3. process 0 checks that digest (`hmac.compare_digest`) and answers
   ``HMAC(secret, "manager" | context | n0 | n1 | rank)``, which the worker checks.

Each side proves the secret to the other over nonces the other just chose, so a recorded
handshake cannot be replayed, and the labels keep one side's proof from serving as the other's.
``context`` names the port and the number of processes, so a proof for one job's transport does
not open another's. HMAC-SHA-256 throughout (the pattern of ``multiprocessing.connection``'s
``deliver_challenge``/``answer_challenge``, in both directions).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import struct
from collections.abc import Mapping

__all__ = ["ANSWER_SIZE", "CHALLENGE_SIZE", "PROOF_SIZE", "SECRET", "SECRET_FILE",
           "answer", "challenge", "check_answer", "check_proof", "context", "job_secret",
           "new_secret", "proof"]

#: The variable that carries the job's secret to every process.
SECRET = "DIFFSOUP_SECRET"
#: Or a file holding it, readable by its owner only.
SECRET_FILE = "DIFFSOUP_SECRET_FILE"
#: Fewest characters a secret may have (``secrets.token_hex(16)`` has 32).
MIN_LENGTH = 32

MAGIC = b"diffsoup-run-auth-1\n"
_NONCE = 32
_DIGEST = hashlib.sha256().digest_size
_RANK = struct.Struct("!Q")
CHALLENGE_SIZE = len(MAGIC) + _NONCE
ANSWER_SIZE = _NONCE + _DIGEST + _RANK.size
PROOF_SIZE = _DIGEST

_HOW = (f"export {SECRET}=$(python -c 'import secrets; print(secrets.token_hex(32))') before "
        f"srun (srun passes the environment on) or mpirun (add -x {SECRET}), or set "
        f"{SECRET_FILE} to a file that only you can read (chmod 600); python -m "
        "solvers.distributed.launch sets a fresh one itself")


def new_secret() -> str:
    """A fresh random secret (64 hex digits)."""
    return secrets.token_hex(32)


def _from_file(path: str) -> str:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise ValueError(f"{SECRET_FILE}={path!r} cannot be read ({exc}); {_HOW}") from None
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ValueError(
                f"{SECRET_FILE}={path!r} is owned by uid {info.st_uid} with mode "
                f"{stat.S_IMODE(info.st_mode):o}: other users could read or replace the job's "
                f"secret; it must be yours with mode 600 (chmod 600 {path})")
        return os.read(fd, 4096).decode("utf-8", "replace").strip()
    finally:
        os.close(fd)


def job_secret(env: Mapping[str, str], launch: str) -> bytes:
    """The job's secret from ``env``; ``launch`` describes the launch for the error messages.

    Raises:
        ValueError: when neither variable is set, the file is not private to this user, or
            the secret is shorter than `MIN_LENGTH` characters; the message gives the fix.
    """
    value, origin = env.get(SECRET) or None, SECRET
    if value is None and env.get(SECRET_FILE):
        value, origin = _from_file(env[SECRET_FILE]), f"the file {SECRET_FILE}={env[SECRET_FILE]}"
    if value is None:
        raise ValueError(f"distributed.run() over TCP in {launch} needs the job's secret, so "
                         f"that no other process can join it, but neither {SECRET} nor "
                         f"{SECRET_FILE} is set; give every process the same one: {_HOW}")
    if len(value) < MIN_LENGTH:
        raise ValueError(f"the job's secret in {origin} has {len(value)} characters, fewer than "
                         f"{MIN_LENGTH}: too easy to guess; {_HOW}")
    return value.encode()


def context(port: int, size: int) -> bytes:
    """What a proof is bound to: the transport's port and the number of processes."""
    return b"diffsoup-run|%d|%d" % (port, size)


def _mac(key: bytes, label: bytes, ctx: bytes, n0: bytes, n1: bytes, rank: int) -> bytes:
    data = b"|".join((label, ctx, n0, n1, _RANK.pack(rank)))
    return hmac.new(key, data, hashlib.sha256).digest()


def challenge() -> tuple[bytes, bytes]:
    """Process 0: the first message of a connection, and its nonce."""
    nonce = secrets.token_bytes(_NONCE)
    return MAGIC + nonce, nonce


def answer(key: bytes, ctx: bytes, message: bytes, rank: int
           ) -> tuple[bytes, tuple[bytes, bytes]]:
    """A worker: its answer to process 0's challenge ``message``, and both nonces.

    Raises:
        ValueError: when ``message`` is not our challenge (something else listens there).
    """
    if len(message) != CHALLENGE_SIZE or not message.startswith(MAGIC):
        raise ValueError(f"the peer's first bytes {message[:24]!r} are not process 0's challenge")
    n0, n1 = message[len(MAGIC):], secrets.token_bytes(_NONCE)
    return n1 + _mac(key, b"worker", ctx, n0, n1, rank) + _RANK.pack(rank), (n0, n1)


def check_answer(key: bytes, ctx: bytes, n0: bytes, message: bytes) -> tuple[int, bytes] | None:
    """Process 0: ``(rank, worker's nonce)`` when ``message`` proves the secret, else ``None``."""
    if len(message) != ANSWER_SIZE:
        return None
    n1, digest = message[:_NONCE], message[_NONCE:_NONCE + _DIGEST]
    (rank,) = _RANK.unpack(message[_NONCE + _DIGEST:])
    if not hmac.compare_digest(digest, _mac(key, b"worker", ctx, n0, n1, rank)):
        return None
    return rank, n1


def proof(key: bytes, ctx: bytes, n0: bytes, n1: bytes, rank: int) -> bytes:
    """Process 0: its proof of the secret to the worker that sent nonce ``n1``."""
    return _mac(key, b"manager", ctx, n0, n1, rank)


def check_proof(key: bytes, ctx: bytes, n0: bytes, n1: bytes, rank: int, message: bytes) -> bool:
    """A worker: whether process 0's ``message`` proves the secret."""
    return hmac.compare_digest(message, proof(key, ctx, n0, n1, rank))
