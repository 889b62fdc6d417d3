"""Reads through a shared file system's caches: a ledger that reads cut short or garbled is read
again, for a while, before it is called corrupt.

A node of a cluster may see another node's replacement of a file late: NFS caches a file's
attributes, its size among them, for up to ``actimeo`` seconds (3 to 60 s by default), FUSE file
systems (sshfs, bindfs) for their ``attr_timeout`` and, with ``kernel_cache``, keep its old pages.
Read through such a cache, a file another node just replaced by a bigger one reads cut short
at the old size, or as a mixture of old and new pages, for up to that long, though the file
itself is whole. So a reader that finds a file empty, not JSON, or shorter than its size says
raises `Unsettled`, and `retried` reads it again (re-opened, bypassing the page cache where the
file system allows it: ``O_DIRECT``), after 10 ms, doubling to at most 1 s apart, for up to
`window` seconds (``DIFFSOUP_STALE_READ_SECONDS``, default `WINDOW`, which covers NFS's default
``acregmax`` of 60 s). Only a file that still reads wrong then is refused, with `LedgerError`
saying a cache may be the cause and how to tell. On a local file system (`LOCAL`), whose reads
are never stale, a file that reads wrong is refused after `TRIES` reads (some 30 ms).

Nothing here writes: a file that reads wrong is never overwritten, however long it is retried.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import logging
import mmap
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from .._errors import LedgerError

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: The environment variable that sets `window` (seconds; 0 reads a bad file only `TRIES` times).
ENV = "DIFFSOUP_STALE_READ_SECONDS"
#: Seconds a file that reads wrong on a file system that may cache is read again before it is
#: refused: NFS's default longest attribute cache (``acregmax``, 60 s).
WINDOW = 60.0
#: Reads of a file that reads wrong before it is refused, on any file system.
TRIES = 3
#: File systems whose reads are never stale (Linux's names, /proc/self/mountinfo).
LOCAL = frozenset({
    "ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "overlay", "zfs", "f2fs", "jfs",
    "reiserfs", "bcachefs", "vfat", "exfat", "hfsplus", "squashfs", "devtmpfs",
})


class Unsettled(LedgerError):
    """A file read wrong in a way a stale cache explains (empty, not JSON, shorter than its
    size): `retried` reads it again before it calls it corrupt."""


def window() -> float:
    """`WINDOW`, or the seconds ``DIFFSOUP_STALE_READ_SECONDS`` gives."""
    text = os.environ.get(ENV)
    if text is None:
        return WINDOW
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also NaN
        raise LedgerError(f"{ENV}={text!r} is not a number of seconds >= 0: set it to, e.g., "
                          f"{WINDOW:g} (the default), or unset it")
    return seconds


_mounts: dict[int, tuple[str, str]] = {}


def file_system(path: str | os.PathLike[str]) -> tuple[str, str]:
    """The type and mount point of the file system that holds ``path`` (a file or its folder),
    from /proc/self/mountinfo; ``("", "")`` where that cannot be told."""
    target = Path(path)
    try:
        dev = os.stat(target if target.exists() else target.parent).st_dev
    except OSError:
        return "", ""
    if dev not in _mounts:
        _mounts[dev] = ("", "")
        number = f"{os.major(dev)}:{os.minor(dev)}"
        try:
            with open("/proc/self/mountinfo") as f:
                for line in f:
                    fields = line.split()
                    if len(fields) > 4 and fields[2] == number and " - " in line:
                        fstype = line.split(" - ", 1)[1].split()[0]
                        _mounts[dev] = (fstype, fields[4].replace("\\040", " "))
        except OSError:
            pass
    return _mounts[dev]


def may_be_stale(path: str | os.PathLike[str]) -> bool:
    """Whether reads of ``path`` may come from a stale cache: not a `LOCAL` file system."""
    return file_system(path)[0] not in LOCAL


class Attributes(NamedTuple):
    """The attributes `fresh_stat` gives (those of `os.stat_result` that tell a file changed)."""

    st_ino: int
    st_size: int
    st_mtime_ns: int


class _Timestamp(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_int64), ("tv_nsec", ctypes.c_uint32),
                ("_reserved", ctypes.c_int32)]


class _Statx(ctypes.Structure):  # struct statx of <linux/stat.h>
    _fields_ = [("stx_mask", ctypes.c_uint32), ("stx_blksize", ctypes.c_uint32),
                ("stx_attributes", ctypes.c_uint64), ("stx_nlink", ctypes.c_uint32),
                ("stx_uid", ctypes.c_uint32), ("stx_gid", ctypes.c_uint32),
                ("stx_mode", ctypes.c_uint16), ("_pad", ctypes.c_uint16),
                ("stx_ino", ctypes.c_uint64), ("stx_size", ctypes.c_uint64),
                ("stx_blocks", ctypes.c_uint64), ("stx_attributes_mask", ctypes.c_uint64),
                ("stx_atime", _Timestamp), ("stx_btime", _Timestamp),
                ("stx_ctime", _Timestamp), ("stx_mtime", _Timestamp),
                ("stx_rdev_major", ctypes.c_uint32), ("stx_rdev_minor", ctypes.c_uint32),
                ("stx_dev_major", ctypes.c_uint32), ("stx_dev_minor", ctypes.c_uint32),
                ("_spare", ctypes.c_uint64 * 14)]  # 256 bytes in all


_AT_FDCWD, _AT_STATX_FORCE_SYNC, _STATX_BASIC_STATS = -100, 0x2000, 0x7FF
_statx: Any = None  # libc's statx, once looked up (False: there is none)


def fresh_stat(path: str | os.PathLike[str]) -> os.stat_result | Attributes:
    """`os.stat` of ``path``, or where the file system may cache (`may_be_stale`), its
    attributes asked of the file system itself: ``statx`` with ``AT_STATX_FORCE_SYNC``, which
    NFS and FUSE file systems answer past their attribute cache (a FUSE daemon with a cache of
    its own, as sshfs, may still answer from it). Raises `FileNotFoundError` and other
    `OSError`s as `os.stat` does."""
    global _statx
    if not may_be_stale(path):
        return os.stat(path)
    if _statx is None:
        try:
            _statx = ctypes.CDLL(None, use_errno=True).statx
        except (AttributeError, OSError):  # a libc older than glibc 2.28
            _statx = False
    if _statx is False:
        return os.stat(path)
    buf = _Statx()
    if _statx(_AT_FDCWD, os.fsencode(path), _AT_STATX_FORCE_SYNC, _STATX_BASIC_STATS,
              ctypes.byref(buf)) != 0:
        code = ctypes.get_errno()
        if code == errno.ENOSYS:
            _statx = False
            return os.stat(path)
        raise OSError(code, os.strerror(code), str(path))
    mtime = buf.stx_mtime.tv_sec * 1_000_000_000 + buf.stx_mtime.tv_nsec
    return Attributes(buf.stx_ino, buf.stx_size, mtime)


def read_bytes(path: str | os.PathLike[str], *, fresh: bool = False
               ) -> tuple[bytes, os.stat_result]:
    """The bytes of the file at ``path`` and its `os.fstat` after the read. ``fresh``: around
    the page cache (``O_DIRECT``) where the file system allows it (the size `os.fstat` gives
    may still be a cached one). Raises `Unsettled` when a plain read gave fewer bytes than the
    size says, or the file system said its handle is stale (``ESTALE``); other `OSError`s as
    `open` raises them."""
    try:
        fd = _open(path, fresh)
        try:
            data = _read_direct(fd) if fresh else _read(fd)
            st = os.fstat(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.errno == errno.ESTALE:
            raise Unsettled(f"ledger {path} could not be read ({exc})") from None
        raise
    if len(data) < st.st_size and not fresh:  # a fresh read's data is the server's, its size
        raise Unsettled(f"ledger {path} read {len(data)} bytes though its size is {st.st_size}: "
                        "it is cut short")
    return data, st


def _open(path: str | os.PathLike[str], fresh: bool) -> int:
    if fresh and hasattr(os, "O_DIRECT"):
        try:
            return os.open(path, os.O_RDONLY | os.O_DIRECT)
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # EINVAL: this file system has no O_DIRECT
                raise
    return os.open(path, os.O_RDONLY)


def _read(fd: int) -> bytes:
    with open(fd, "rb", closefd=False) as f:
        return f.read()


def _read_direct(fd: int) -> bytes:
    """Read to the end into an aligned buffer, as ``O_DIRECT`` needs. Where the file system
    refuses such a read (EINVAL: an alignment it wants), ``O_DIRECT`` is turned off and the
    rest is read plainly."""
    buf = mmap.mmap(-1, 1 << 20)
    parts = []
    try:
        while True:
            try:
                n = os.readv(fd, [buf])
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_DIRECT)
                parts.append(_read(fd))
                return b"".join(parts)
            if n <= 0:
                return b"".join(parts)
            parts.append(buf[:n])
    finally:
        buf.close()


class FreshReader:
    """A file read a block at a time around the page cache (``O_DIRECT``), for `Scan`:
    ``read(n)`` (``n`` a multiple of 4096, as ``O_DIRECT`` wants), ``tell``, ``fileno``,
    ``close``. `open_fresh` gives one where it works."""

    def __init__(self, fd: int):
        self._fd = fd
        self._buf: mmap.mmap | None = None
        self._pos = 0

    def read(self, n: int) -> bytes:
        if self._buf is None or len(self._buf) != n:
            if self._buf is not None:
                self._buf.close()
            self._buf = mmap.mmap(-1, n)
        got = os.readv(self._fd, [self._buf])
        self._pos += got
        return self._buf[:got]

    def tell(self) -> int:
        return self._pos

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        if self._buf is not None:
            self._buf.close()
            self._buf = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def open_fresh(path: str | os.PathLike[str], block: int) -> Any:
    """``path`` opened for reading ``block`` bytes at a time: around the page cache
    (`FreshReader`) where the file system may cache and takes ``O_DIRECT`` with such blocks,
    else as `open` (``"rb"``) opens it. Raises what `open` raises."""
    if block % 4096 == 0 and hasattr(os, "O_DIRECT") and may_be_stale(path):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
        else:
            reader = FreshReader(fd)
            try:
                probe = reader.read(block)  # some refuse the first read (an alignment of theirs)
            except OSError as exc:
                reader.close()
                if exc.errno != errno.EINVAL:
                    raise
            else:
                os.lseek(fd, 0, os.SEEK_SET)
                reader._pos = 0
                del probe
                return reader
    return open(path, "rb")


def retried(path: str | os.PathLike[str], attempt: Callable[[bool], T]) -> T:
    """``attempt(fresh)`` until it does not raise `Unsettled` (``fresh``: True where the file
    system may cache, `may_be_stale`), as the module says; then `LedgerError` with the last
    problem and, where the file system may cache, what to check."""
    start = time.monotonic()
    stale = may_be_stale(path)
    deadline = start + (window() if stale else 0.0)
    delay, tries = 0.01, 0
    while True:
        try:
            return attempt(stale)
        except Unsettled as exc:
            tries += 1
            now = time.monotonic()
            if tries >= TRIES and now >= deadline:
                if not stale:
                    raise LedgerError(str(exc)) from None
                raise LedgerError(f"{exc}. {_cache_hint(path, tries, now - start)}") from None
            if tries == 1 and stale:
                logger.info("%s; reading it again for up to %g s (a shared file system's cache "
                            "may be stale)", exc, deadline - now)
            time.sleep(max(0.0, min(delay, deadline - now)))
            delay = min(delay * 2, 1.0)


def _cache_hint(path: str | os.PathLike[str], tries: int, seconds: float) -> str:
    fstype, mount = file_system(path)
    where = f"{fstype or 'an unknown file system'} at {mount or '?'}"
    return (f"It read so {tries} times over {seconds:.0f} s, through {where}, whose cache may "
            "be stale: a file another node replaced can read cut short or garbled here until "
            "this node's cache expires. To tell: read it on the file server or another node "
            f"(`python -m json.tool {path} >/dev/null`); if it is whole there, this node's "
            f"cache is the cause: mount with a shorter attribute cache (NFS: actimeo) or set "
            f"{ENV} (now {window():g} s) above it. If it is wrong there too, it is corrupt")
