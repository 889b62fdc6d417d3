"""Whole-file atomic replacement: a reader sees the old file or the new one, never a mix."""

from __future__ import annotations

import errno
import glob
import os
import secrets
import socket
import stat
from collections.abc import Iterable
from pathlib import Path

from .._errors import LedgerWriteError

HOST = socket.gethostname()
TMP_MARK = ".tmp-"
#: How long (seconds) failing ledger writes are retried before the run stops, unless the
#: environment variable `RETRY_ENV` or ``Ledger(write_retry=)`` says otherwise.
WRITE_RETRY = 900.0
RETRY_ENV = "DIFFSOUP_LEDGER_WRITE_RETRY"
#: The longest pause between two retries of a failing write (the first is 0.5 s, then doubled).
RETRY_PAUSE_MAX = 30.0


def tmp_name(path: Path) -> Path:
    """A unique temporary file beside ``path``: ``.<name>.tmp-<host>-<pid>-<random>``."""
    return path.with_name(f".{path.name}{TMP_MARK}{HOST}-{os.getpid()}-{secrets.token_hex(4)}")


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: The extended attribute that holds a file's POSIX access ACL (`setfacl`).
ACL_XATTR = "system.posix_acl_access"


def keep_modes(fd: int, like: str | os.PathLike[str]) -> None:
    """Give the open file ``fd`` the permission bits, group and access ACL of the file
    ``like`` (the file it will replace), where ``like`` exists: a rewrite of a ``chmod 600``
    ledger stays private, a group-shared one stays shared. A group this user is not a member
    of, or an ACL the file system does not keep, is left as it is (the bits are kept)."""
    try:
        st = os.stat(like)
    except FileNotFoundError:
        return
    if st.st_gid != os.fstat(fd).st_gid:
        try:
            os.fchown(fd, -1, st.st_gid)
        except PermissionError:
            pass
    os.fchmod(fd, stat.S_IMODE(st.st_mode))  # after the chown, which may clear set-id bits
    try:
        acl = os.getxattr(like, ACL_XATTR)
    except OSError:  # none (ENODATA), or not kept by this file system (ENOTSUP)
        return
    try:
        os.setxattr(fd, ACL_XATTR, acl)
    except OSError:
        pass


def atomic_write(path: str | os.PathLike[str], data: bytes | Iterable[bytes], *,
                 durable: bool = True, like: str | os.PathLike[str] | None = None,
                 mode: int = 0o644) -> os.stat_result:
    """Replace ``path`` by ``data``: temporary file in the same folder, write, flush, fsync,
    ``os.replace``, fsync of the folder. Returns the new file's stat.

    ``data`` is the bytes, or an iterable of chunks of them (written as they come, so the
    whole text need not be in memory).

    ``durable=False`` skips both fsyncs: still atomic for readers, but a crash of the machine
    may lose the write (for hints that can be recomputed).

    A symlink is followed: the file it points to is replaced (the temporary file is made beside
    that file) and the link stays a link. An `OSError` (disk full, read-only file system, I/O
    error) leaves the old file as it was and no temporary file behind.

    The new file keeps the mode, group and ACL of the file it replaces, or of ``like`` where
    given (`keep_modes`); a file new under ``path`` and without ``like`` is created with
    ``mode`` (less the umask)."""
    path = Path(os.path.realpath(path))
    tmp = tmp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        keep_modes(fd, path if like is None else like)
        for chunk in (data,) if isinstance(data, bytes) else data:
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
        written = os.fstat(fd)
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
    try:
        return os.stat(path)
    except FileNotFoundError:  # another process removed it already (a merged fragment)
        return written


def remove_stale_tmp(path: Path) -> list[Path]:
    """Remove the temporary files of ``path`` and of the sidecars beside it named after it
    (``.<name>.tmp-…``, ``.<name>.lock.owner.tmp-…``, ``.<name>.lock.owner.break-….tmp-…``)
    left on this host by processes that are gone; also the doubled names (``..<name>….tmp-….tmp-…``)
    that earlier versions' exclusive creates left."""
    removed = []
    mark = f"{TMP_MARK}{HOST}-"
    for tmp in path.parent.glob(f".*{glob.escape(path.name)}*{glob.escape(mark)}*"):
        bare = tmp.name.lstrip(".")
        if not (bare.startswith(f"{path.name}.") and len(tmp.name) - len(bare) <= 2):
            continue
        pid_text = tmp.name.rsplit(mark, 1)[-1].split("-", 1)[0]
        if pid_text.isdigit() and not pid_alive(int(pid_text)):
            try:
                tmp.unlink(missing_ok=True)
            except OSError:  # another user's, in a shared (sticky) folder: not ours to remove
                continue
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


def write_retry_default() -> float:
    """`WRITE_RETRY`, or the seconds given by the environment variable ``RETRY_ENV``."""
    text = os.environ.get(RETRY_ENV, "").strip()
    if not text:
        return WRITE_RETRY
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ValueError(f"{RETRY_ENV}={text!r} is not a number of seconds >= 0; set it to "
                         f"e.g. {WRITE_RETRY:.0f}, or unset it")
    return value


class WriteFailures:
    """One episode of failing writes of a file: since when, how often, when to try again, and
    the error to raise once retrying for ``window`` seconds did not help. Not thread-safe: its
    owner holds a lock."""

    def __init__(self, path: Path, window: float):
        self.path, self.window = path, window
        self.since: float | None = None  # monotonic time of the first failure, None if none
        self.count = 0
        self.last: BaseException | None = None
        self._pause = 0.5

    def failed(self, exc: BaseException, now: float) -> float | None:
        """Note a failure; returns the monotonic time to try again, or None: give up (the
        window is over, or ``exc`` is not an `OSError` and retrying cannot help)."""
        if self.since is None:
            self.since, self._pause = now, 0.5
        self.count += 1
        self.last = exc
        spent = now - self.since
        if not isinstance(exc, OSError) or spent >= self.window:
            return None
        retry = now + min(self._pause, self.window - spent)
        self._pause = min(2 * self._pause, RETRY_PAUSE_MAX)
        return retry

    def ended(self, now: float) -> float:
        """A write succeeded: the episode is over. Returns how long it lasted."""
        spent = 0.0 if self.since is None else now - self.since
        self.since, self.count = None, 0
        return spent

    def error(self, now: float) -> LedgerWriteError:
        """The error that stops the run: the file, the error, what was kept, the fix."""
        exc = self.last
        assert exc is not None and self.since is not None
        if not isinstance(exc, OSError):
            message = f"writing ledger {self.path} failed, so the run was stopped: {exc}"
        else:
            what, fix = write_error_text(exc)
            message = (
                f"writing ledger {self.path} failed {self.count} time(s) over "
                f"{now - self.since:.0f} s ({what}), so the run was stopped: no new task was "
                "handed out after the first failed write, every task recorded before it is kept "
                f"in the file, and the others run again on resume. Fix: {fix}, then run again "
                f"(to wait longer for a passing error, set {RETRY_ENV} to more seconds than "
                f"{self.window:.0f})")
        error = LedgerWriteError(message, str(self.path), getattr(exc, "errno", None))
        error.__cause__ = exc
        return error
