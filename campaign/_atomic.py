"""Whole-file atomic replacement: a reader sees the old file or the new one, never a mix."""

from __future__ import annotations

import errno
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


def atomic_write(path: str | os.PathLike[str], data: bytes, *,
                 durable: bool = True) -> os.stat_result:
    """Replace ``path`` by ``data``: temporary file in the same folder, write, flush, fsync,
    ``os.replace``, fsync of the folder. Returns the new file's stat.

    ``durable=False`` skips both fsyncs: still atomic for readers, but a crash of the machine
    may lose the write (for hints that can be recomputed).

    A symlink is followed: the file it points to is replaced (the temporary file is made beside
    that file) and the link stays a link. An `OSError` (disk full, read-only file system, I/O
    error) leaves the old file as it was and no temporary file behind."""
    path = Path(os.path.realpath(path))
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


_WRITE_FIXES = {
    "ENOSPC": "free space on the file system that holds it",
    "EDQUOT": "free space within your quota on the file system that holds it (or raise the quota)",
    "EROFS": "its file system is mounted read-only: remount it read-write, or move the ledger to "
             "a writable folder and pass its new path",
    "EACCES": "give this user write permission on the ledger's folder",
    "EPERM": "give this user write permission on the ledger's folder",
    "EIO": "the disk or file server reported an I/O error: check it (dmesg, the file server)",
}


def write_error_text(exc: BaseException) -> tuple[str, str]:
    """An error of a write as ``(what happened, how to fix it)``, e.g. ``("ENOSPC (errno 28):
    No space left on device", "free space on the file system that holds it")``."""
    code = getattr(exc, "errno", None)
    if isinstance(exc, OSError) and code:
        name = errno.errorcode.get(code, "errno")
        return f"{name} (errno {code}): {exc.strerror or exc}", _WRITE_FIXES.get(
            name, "fix the cause shown")
    if isinstance(exc, TimeoutError):  # filelock.Timeout: another process holds the lock
        return (f"{exc}", "find the process that holds the lock file (e.g. a hung `campaign "
                "forget` or array worker) and stop it")
    return f"{type(exc).__name__}: {exc}", "fix the cause shown"
