"""Whose files a ledger reads beside its own (as ssh's ``StrictModes`` checks ``~/.ssh``).

A ledger ``L`` is read together with its sidecars: the journal ``L.journal``, the driver's lease
and lock files ``L.driver*`` and ``L.lock*``, and ``L.work/`` with everything in it (array
workers' leases, fragments, marks). A record read from any of them counts as the ledger's own,
so each must have been written by the ledger's owner. The rule, checked on the open file before
a byte of it is read (`read_bytes`, `check`):

- it is owned by the user who owns ``L`` (before ``L`` exists: this process's user);
- it is not writable by other users, and writable by its group only where ``L`` itself is
  writable by that same group (a group sharing the ledger by mode).

Anything else raises `LedgerError` naming the path, its owner and mode, and the fix: a file
another user planted in a shared folder (a world-writable scratch, the system's temporary
folder) is never read. ``L.work/`` and its folders are created ``0700`` (``0750`` and the
ledger's group when ``L`` is readable by its group: `folder_mode`), so that nobody else can add
a file to them; `new_file_mode` gives new sidecar files the ledger's own permission bits.

The multi-user model: one owner writes a ledger and its sidecars; a group may read them where
the owner's modes allow, and write them only where the owner made the ledger group-writable.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path
from typing import Any

import orjson

from .._errors import LedgerError
from .._shell import command

#: A ledger's (uid, gid, mode), by its path, as `_ledger_stat` last found it.
_known: dict[str, tuple[int, int | None, int]] = {}


def _ledger_stat(ledger: Path, *, fresh: bool = False) -> tuple[int, int | None, int]:
    key = os.fspath(ledger)
    if not fresh and key in _known:
        return _known[key]
    try:
        st = os.stat(ledger)
        found: tuple[int, int | None, int] = (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))
    except FileNotFoundError:
        found = (os.geteuid(), None, 0)
    _known[key] = found
    return found


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _allowed(st: os.stat_result, owner: tuple[int, int | None, int]) -> bool:
    uid, gid, mode = owner
    if st.st_uid != uid or st.st_mode & stat.S_IWOTH:
        return False
    return not st.st_mode & stat.S_IWGRP or (gid == st.st_gid and bool(mode & stat.S_IWGRP))


def check(path: Path, st: os.stat_result, ledger: Path) -> None:
    """Raise `LedgerError` unless ``path`` (whose stat is ``st``) may be read as a sidecar of
    ``ledger`` (the module's rule)."""
    if _allowed(st, _ledger_stat(ledger)) or _allowed(st, _ledger_stat(ledger, fresh=True)):
        return
    uid, _, mode = _ledger_stat(ledger)
    whose = f"owned by {_user(st.st_uid)}, mode {stat.S_IMODE(st.st_mode):04o}"
    if st.st_uid != uid:
        why = f"the ledger's owner is {_user(uid)}"
        remove = command("rm", "-r", path)
        fix = (f"if you did not make it, another user did: remove it (`{remove}`, as its owner "
               "or an administrator) and keep ledgers in a folder only you can write (e.g. "
               "`mkdir -m 700`)")
    else:
        why = ("it is writable by other users" if st.st_mode & stat.S_IWOTH else
               f"it is writable by its group, and the ledger (mode {mode:04o}) is not shared "
               "with that group for writing")
        fix = (f"`{command('chmod', 'go-w', path)}` (or `{command('chmod', 'g+w', ledger)}` to "
               "share it with the group)")
    raise LedgerError(f"refusing {path} ({whose}): {why}, so records in it may not be the "
                      f"ledger's; nothing of it was read. Fix: {fix}")


def read_bytes(path: Path, ledger: Path) -> bytes:
    """The bytes of the sidecar ``path`` of ``ledger``, checked (`check`) on the open file.

    Raises FileNotFoundError where it is gone, `LedgerError` where the rule refuses it."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        check(path, os.fstat(fd), ledger)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


def read_json(path: Path, ledger: Path) -> Any:
    """The JSON value of the sidecar ``path`` of ``ledger`` (a task list, a fragment, a lease,
    a count), read as `read_bytes` reads it: the one decoder of the files beside a ledger.

    Raises FileNotFoundError where it is gone, `LedgerError` where the rule refuses it,
    ``orjson.JSONDecodeError`` (a ValueError) where it is not JSON: half written, or foreign."""
    return orjson.loads(read_bytes(path, ledger))


def read_object(path: Path, ledger: Path | None = None) -> tuple[dict[str, Any] | None,
                                                                os.stat_result]:
    """A lease file's object (None while it is being written, or when it cannot be parsed)
    and its stat. Raises `FileNotFoundError` when there is no such file; with ``ledger``,
    `LedgerError` when it is not the ledger owner's (`check`)."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if ledger is not None:
            check(path, st, ledger)
        data = f.read()
    return parse_object(data), st


def parse_object(data: bytes) -> dict[str, Any] | None:
    """``data`` parsed, if it is one JSON object (a lease, a journal line, a chunk of a ledger's
    records, a head); else None: half written, or foreign."""
    try:
        found = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return found if type(found) is dict else None


def check_folder(path: Path, ledger: Path) -> bool:
    """Check the folder ``path`` (``L.work/`` or one of its folders) by the rule, the link
    itself too where it is a symlink. Returns False where it does not exist."""
    try:
        link = os.lstat(path)
        if stat.S_ISLNK(link.st_mode):
            check(path, link, ledger)
        st = os.stat(path)
    except FileNotFoundError:
        return False
    check(path, st, ledger)
    return True


def folder_mode(ledger: Path) -> tuple[int, int | None]:
    """The mode and group of the ledger's new folders: ``0700``, or ``0750`` in the ledger's
    group where the ledger is readable by its group."""
    _, gid, mode = _ledger_stat(ledger, fresh=True)
    if gid is not None and mode & stat.S_IRGRP:
        return 0o750, gid
    return 0o700, None


def make_folder(path: Path, ledger: Path) -> None:
    """Create the folder ``path`` (and its missing parents, up to ``L.work/``) with
    `folder_mode`; a folder that exists is checked (`check_folder`) instead."""
    if check_folder(path, ledger):
        return
    mode, gid = folder_mode(ledger)
    missing = []
    at = path
    while not at.exists():
        missing.append(at)
        at = at.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, mode)
        except FileExistsError:
            check_folder(folder, ledger)
            continue
        os.chmod(folder, mode)  # past the umask
        if gid is not None:
            try:
                os.chown(folder, -1, gid)
            except PermissionError:  # not a member of the ledger's group: the owner's only
                os.chmod(folder, 0o700)


def new_file_mode(ledger: Path) -> int:
    """The permission bits of a new sidecar file: the ledger's own read and write bits (0o600
    before the ledger exists), so that a private ledger's journal is private too."""
    _, gid, mode = _ledger_stat(ledger, fresh=True)
    return (mode & 0o666) if gid is not None else 0o600
