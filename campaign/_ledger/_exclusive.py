"""Who a process is, whether it is provably gone, and the exclusive creates every lease of
`campaign` rests on (the driver's lease, `<ledger>.lock`'s owner file, the array workers'
task leases).

No guarantee here rests on ``flock``: shared file systems with local locks (NFS ``nolock`` or
``local_lock=all``, Lustre ``localflock``, sshfs, most FUSE file systems) let two nodes hold one
lock. What they all keep atomic is used instead: a create with ``O_CREAT | O_EXCL`` succeeds for
one process only (docs/ledger.md, "Exclusion without file locks").
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

from ._atomic import HOST, tmp_name


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


BOOT_ID = (_read_text("/proc/sys/kernel/random/boot_id") or "").strip()


def _pid_namespace() -> int | None:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def process_start(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot (``/proc/<pid>/stat``'s
    22nd field), or None when there is no such process, or only its zombie (or no ``/proc``)."""
    text = _read_text(f"/proc/{pid}/stat")
    if text is None:
        return None
    try:
        fields = text[text.rindex(")") + 2:].split()
        return None if fields[0] in ("Z", "X") else int(fields[19])
    except (ValueError, IndexError):
        return None


def identity() -> dict[str, Any]:
    """Who this process is, as its leases name it: host, pid, the boot's id, the pid
    namespace and the process's start time (so a reused pid is never taken for it)."""
    pid = os.getpid()
    return {"host": HOST, "pid": pid, "boot_id": BOOT_ID, "pidns": _pid_namespace(),
            "start": process_start(pid)}


def _same_machine(holder: dict[str, Any]) -> bool:
    return (holder.get("host") == HOST and bool(BOOT_ID) and holder.get("boot_id") == BOOT_ID
            and holder.get("pidns") == _pid_namespace() and type(holder.get("pid")) is int)


def gone(holder: dict[str, Any]) -> bool:
    """True when the holder is provably dead: it ran on this host, in this boot and pid
    namespace, and no process has its pid and start time now. A holder elsewhere is never
    known gone (its lease's expiry decides)."""
    if not _same_machine(holder):
        return False
    start = process_start(holder["pid"])
    return start is None or start != holder.get("start")


def alive_here(holder: dict[str, Any]) -> bool:
    """True when the holder provably runs now: on this host, and its process is there."""
    return _same_machine(holder) and not gone(holder)


def describe(holder: dict[str, Any] | None) -> str:
    """``pid 123 on host node1``, as messages name a lease's holder."""
    if not holder or "pid" not in holder:
        return "a process whose lease file is being written or cannot be read"
    return f"pid {holder.get('pid')} on host {holder.get('host')}"


def create_exclusive(path: Path, data: bytes, *, durable: bool = False,
                     whole: bool = False, partial: bool = False) -> bool:
    """Create ``path`` holding ``data`` if no file has that name; True if this call created it.

    A lost race is False: ``EEXIST``, and also ``EPERM`` or ``EACCES`` when the name exists
    now (sshfs reports a lost ``O_EXCL`` race that way). Any other error is raised, and a file
    this call created but could not fill is removed.

    ``whole``: the name appears with all of ``data`` in it (a temporary file, filled, then
    ``link``-ed to the name: NFS's classic lock; a link whose reply was lost is known by the
    temporary file's link count), so no reader ever finds it empty; where ``link`` is not
    supported, as without ``whole``. ``partial``: a file created but not filled (disk full,
    quota) is kept, as this call's (a lock's owner file: judged by its age)."""
    if whole:
        made = _link_exclusive(path, data, durable)
        if made is not None:
            return made
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    except PermissionError:
        if os.path.lexists(path):
            return False
        raise
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if durable:
            os.fsync(fd)
    except OSError as exc:
        os.close(fd)
        if partial and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        try:
            os.unlink(path)
        except OSError:
            pass
        raise
    except BaseException:
        os.close(fd)
        try:
            os.unlink(path)
        except OSError:
            pass
        raise
    os.close(fd)
    return True


def _link_exclusive(path: Path, data: bytes, durable: bool) -> bool | None:
    """`create_exclusive` by ``link``; None where the file system has no hard links."""
    tmp = tmp_name(path)
    # a whole file under a name of its own (one name: `campaign._ledger._atomic.remove_stale_tmp`
    # removes it where a SIGKILL left it)
    create_exclusive(tmp, data, durable=durable)
    try:
        try:
            os.link(tmp, path)
        except FileExistsError:
            return os.stat(tmp).st_nlink == 2  # the link was made, its reply lost (NFS)
        except OSError as exc:
            if os.path.lexists(path):
                return os.stat(tmp).st_nlink == 2
            if exc.errno in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS,
                             errno.EMLINK, errno.EXDEV):
                return None
            raise
        return True
    finally:
        tmp.unlink(missing_ok=True)


#: What ``flock`` fails with on a file system that has none (Lustre ``noflock``).
NO_FLOCK = frozenset({errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP})


def no_flock(exc: BaseException) -> bool:
    """Whether ``exc`` (from taking a `filelock.FileLock`) says the file system has no
    ``flock``: then the leases alone exclude."""
    return isinstance(exc, NotImplementedError) or (
        isinstance(exc, OSError) and exc.errno in NO_FLOCK)
