"""One row block on disk: an ``.npy`` file of ``[A | y | w | group]``, written atomically, read
back with its SHA-256 checked."""

from __future__ import annotations

import hashlib
import io
import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._errors import BlockError, recompute_hint

_HOST = socket.gethostname()


@dataclass(frozen=True)
class Block:
    """The rows of one block: design matrix ``A`` (rows x cols), targets ``y``, weights ``w``
    (the objective is ``sum w * (A x - y)**2``) and integer row groups ``groups``."""

    A: np.ndarray
    y: np.ndarray
    w: np.ndarray
    groups: np.ndarray

    def weights(self, group_weights: np.ndarray | None) -> np.ndarray:
        """``w``, times ``group_weights[group]`` of each row when given."""
        return self.w if group_weights is None else self.w * group_weights[self.groups]


@dataclass(frozen=True)
class BlockRef:
    """Where a block lies and what it must be: as recorded in a task's result."""

    task_id: str | None
    path: str
    rows: int
    cols: int
    sha256: str


def pack(A: np.ndarray, y: np.ndarray, w: np.ndarray, groups: np.ndarray) -> bytes:
    """The ``.npy`` bytes of the block: one float64 array ``[A | y | w | group]``."""
    table = np.empty((A.shape[0], A.shape[1] + 3))
    table[:, :-3], table[:, -3], table[:, -2], table[:, -1] = A, y, w, groups
    buf = io.BytesIO()
    np.save(buf, table, allow_pickle=False)
    return buf.getvalue()


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data``: temporary file beside it, write, fsync, ``os.replace``,
    fsync of the folder. A reader (or a crash) sees the old file or the new one, never a mix."""
    tmp = path.with_name(f".{path.name}.tmp-{_HOST}-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # gone after the rename; left only by a failed write
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def read_block(ref: BlockRef, *, verify: bool = True, ledger: str | None = None) -> Block:
    """The block of ``ref``; with ``verify``, its bytes must match the recorded SHA-256.

    Raises `BlockError` (with the way out) for a missing, damaged or reshaped file.
    """
    try:
        data = Path(ref.path).read_bytes()
    except FileNotFoundError:
        raise BlockError(f"the block file {ref.path} of task {ref.task_id!r} is missing; "
                         f"{recompute_hint(ref.task_id, ledger)}", ref.task_id) from None
    if verify:
        digest = hashlib.sha256(data).hexdigest()
        if digest != ref.sha256:
            raise BlockError(
                f"the block file {ref.path} of task {ref.task_id!r} changed since it was "
                f"written: its sha256 is {digest[:16]}..., the result recorded "
                f"{ref.sha256[:16]}...; {recompute_hint(ref.task_id, ledger)}", ref.task_id)
    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                  else np.lib.format.read_array_header_2_0)
        shape, fortran, dtype = header(stream)
    except ValueError as exc:
        raise BlockError(f"the block file {ref.path} of task {ref.task_id!r} is not a block "
                         f"({exc}); {recompute_hint(ref.task_id, ledger)}", ref.task_id) from None
    if shape != (ref.rows, ref.cols + 3) or fortran or dtype != np.float64:
        raise BlockError(
            f"the block file {ref.path} of task {ref.task_id!r} holds a {shape} {dtype} array, "
            f"the result recorded {ref.rows} rows x {ref.cols} columns; "
            f"{recompute_hint(ref.task_id, ledger)}", ref.task_id)
    table = np.frombuffer(data, np.float64, ref.rows * (ref.cols + 3), offset=stream.tell())
    table = table.reshape(ref.rows, ref.cols + 3)
    return Block(table[:, :-3], table[:, -3], table[:, -2], table[:, -1].astype(np.intp))
