"""Whether a ledger is free to take, and what `DriverBusyError` says when it is not: array
workers hold task leases on it, or a live driver holds its lease (``<ledger>.driver.<n>``, on
any node) or its ``flock`` (``<ledger>.driver``, on this host or where locks are coherent).

`check_free` looks and creates nothing (`campaign submit` plans before anything is written); a
driver takes the lease and the ``flock`` itself (`campaign.Ledger`), then asks `refuse_if_leased`.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from .._array._leases import live_leases
from .._errors import DriverBusyError, LedgerError
from ._owner_lease import DriverLease, busy_text
from ._paths import LedgerPaths
from ._scan import Scan
from ._status import RunStatus


def check_free(ledger: Path | LedgerPaths, *, then: str = "submit again") -> None:
    """Raise `DriverBusyError` if array workers or a live driver use the ledger; creates no file.
    ``then``: what the user does once it is free, in the message."""
    paths = LedgerPaths.of(ledger)
    refuse_if_leased(paths, then=then)
    lease = DriverLease(paths)
    holder = lease.holder()  # a driver on any node
    if holder is not None:
        raise DriverBusyError(busy_text(paths.file, holder, lease.seconds))
    try:
        fd = os.open(paths.driver, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP):
            return  # no flock here: the lease said it all
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        raise DriverBusyError(busy_message(paths)) from None
    finally:
        os.close(fd)  # closing releases the lock


def refuse_if_leased(ledger: Path | LedgerPaths, *, then: str = "run again") -> None:
    """Raise `DriverBusyError` while array workers hold unexpired task leases on the ledger."""
    path = LedgerPaths.of(ledger).file
    leases = live_leases(path)
    if leases:
        owner = leases[0]["owner"]
        held = f"{len(leases)} task lease" + ("" if len(leases) == 1 else "s")
        raise DriverBusyError(
            f"ledger {path} is in use by array workers holding {held} (e.g. "
            f"{owner.get('worker')} on {owner.get('host')}); wait for them to finish or cancel "
            f"their job, then {then}")


def busy_message(ledger: Path | LedgerPaths) -> str:
    """What `DriverBusyError` says when another driver holds ``<ledger>.driver``: its host and
    pid, as its lease names them, else as its ``running`` entry in the ledger does."""
    paths = LedgerPaths.of(ledger)
    lease = DriverLease(paths)
    holder = lease.holder()
    if holder is not None and "pid" in holder:
        return busy_text(paths.file, holder, lease.seconds)
    run = None
    try:
        scan = Scan(paths.file, as_bytes=True)  # the runs only: the records are not read
        scan.close()
        runs = scan.head["runs"]
        run = next((r for r in reversed(runs) if r.get("status") == RunStatus.RUNNING), None)
    except LedgerError:
        pass
    who = f"pid {run['pid']} on host {run['host']}" if run else "another process"
    return (
        f"ledger {paths.file} is in use by a live campaign driver ({who}); wait for it to "
        "finish, stop it, or pass another ledger_path"
    )
