"""Whole-file atomic replacement: a reader sees the old file or the new one, never a mix."""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path

HOST = socket.gethostname()
TMP_MARK = ".tmp-"


def tmp_name(path: Path) -> Path:
    """A unique temporary file beside ``path``: ``.<name>.tmp-<host>-<pid>-<random>``."""
    return path.with_name(f".{path.name}{TMP_MARK}{HOST}-{os.getpid()}-{secrets.token_hex(4)}")


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, durable: bool = True) -> os.stat_result:
    """Replace ``path`` by ``data``: temporary file in the same folder, write, flush, fsync,
    ``os.replace``, fsync of the folder. Returns the new file's stat.

    ``durable=False`` skips both fsyncs: still atomic for readers, but a crash of the machine
    may lose the write (for hints that can be recomputed)."""
    tmp = tmp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)
    return os.stat(path)


def remove_stale_tmp(path: Path) -> list[Path]:
    """Remove temporary files of ``path`` left on this host by processes that are gone."""
    removed = []
    prefix = f".{path.name}{TMP_MARK}{HOST}-"
    for tmp in path.parent.glob(f".{path.name}{TMP_MARK}*"):
        if not tmp.name.startswith(prefix):
            continue
        pid_text = tmp.name[len(prefix) :].split("-", 1)[0]
        if pid_text.isdigit() and not pid_alive(int(pid_text)):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def pid_alive(pid: int) -> bool:
    """True while a process with this pid exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
