"""Read-merge-write of a whole ledger file under its lock: `update`, `compact`, and the backups
they keep beside it (docs/ledger.md, "When a write fails").

A write that fails (disk full, read-only) raises `LedgerWriteError` and leaves the file as it
was; a symlink is followed: its target is locked and replaced, and the link stays.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._errors import LedgerWriteError
from . import _journal
from ._atomic import atomic_write, write_error_text
from ._document import DiskState, document_chunks, dumps, file_lock, file_state, load
from ._paths import LedgerPaths


def backup_path(path: Path, why: str) -> Path:
    """``<stem>.<why>-<UTC time><suffix>`` beside ``path``, e.g.
    ``run.replaced-20261130T131400Z.json``."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    candidate = path.with_name(f"{path.stem}.{why}-{stamp}{path.suffix}")
    n = 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.stem}.{why}-{stamp}-{n}{path.suffix}")
    return candidate


#: The backups `backup_path` names: `update`'s (``campaign forget``) and a run started over.
BACKUP_KINDS = ("before-forget", "replaced")


def remove_stale_backup_tmp(path: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporary files of backups of ``path`` (``.<stem>.before-forget-<time>
    <suffix>.tmp-<host>-<pid>-<random>``, and of ``.replaced-``) left on this host by processes
    that are gone (a ``campaign forget`` killed while it wrote its backup); as
    `campaign._ledger._atomic.remove_stale_tmp` does for the ledger's own."""
    import glob

    from ._atomic import HOST, TMP_MARK, pid_alive

    path = LedgerPaths.of(path).file
    mark = f"{TMP_MARK}{HOST}-"
    removed = []
    for why in BACKUP_KINDS:
        pattern = f".{glob.escape(path.stem)}.{why}-*{glob.escape(mark)}*"
        for tmp in path.parent.glob(pattern):
            pid_text = tmp.name.rsplit(mark, 1)[-1].split("-", 1)[0]
            if pid_text.isdigit() and not pid_alive(int(pid_text)):
                tmp.unlink(missing_ok=True)
                removed.append(tmp)
    return removed


def update(
    path: str | os.PathLike[str],
    mutate: Callable[[dict[str, Any]], Any],
    *,
    backup: str | None = None,
    locked: bool = False,
) -> tuple[Any, Path | None]:
    """Read-merge-write ``path`` under its lock: ``mutate(doc)`` changes the document in place.

    With ``backup``, the file as it was is kept beside under a name containing ``backup``
    (written only once ``mutate`` has returned), and the temporary files of backups that
    killed processes left are removed (`remove_stale_backup_tmp`). Returns what ``mutate``
    returned and the backup's path (None without ``backup``). ``locked``: the caller holds
    `file_lock` already. A symlink is followed: its target is locked and replaced, and the
    link stays. A write that fails (disk full, read-only) raises `LedgerWriteError` and leaves
    the file as it was, without a backup.
    """
    path = LedgerPaths.of(path).file
    if locked:
        return _update_locked(path, mutate, backup)
    with file_lock(path):
        return _update_locked(path, mutate, backup)


def _update_locked(path: Path, mutate: Callable[[dict[str, Any]], Any],
                   backup: str | None) -> tuple[Any, Path | None]:
    doc, state = load(path)
    original = None
    if backup is not None:  # with a journal: the file and its journal, as one file
        remove_stale_backup_tmp(path)
        original = dumps(doc) if state.journal else path.read_bytes()
    answer = mutate(doc)
    saved = None
    try:
        if original is not None:
            saved = backup_path(path, backup or "backup")
            atomic_write(saved, original, like=path)  # as private as the ledger
        doc["updated"] = time.time()
        made_from(doc, state)
        doc["generation"] = _journal.new_generation()
        atomic_write(path, dumps(doc))
    except OSError as exc:  # the file is as it was (atomic_write leaves no temporary file)
        what, fix = write_error_text(exc)
        if saved is not None and saved.exists():
            saved.unlink()
        raise LedgerWriteError(
            f"cannot write ledger {path} ({what}); it was left as it was. Fix: {fix}, then "
            "try again", str(path), exc.errno) from exc
    _journal.remove(path)  # the file holds it all now (a stale journal would be skipped)
    return answer, saved


def compact(path: str | os.PathLike[str], doc: dict[str, Any], state: DiskState) -> None:
    """Write ``doc`` (as `load` read it, with ``state``) as the whole file and remove the
    journal, under the lock; if the ledger changed since it was read, read it again under the
    lock (`update`). Raises `LedgerWriteError` as `update` does."""
    path = LedgerPaths.of(path).file
    with file_lock(path):
        if file_state(path) == state:
            doc["updated"] = time.time()
            made_from(doc, state)
            doc["generation"] = _journal.new_generation()
            try:  # a RecordStore's records in chunks: never the whole text in memory
                atomic_write(path, dumps(doc) if type(doc["tasks"]) is dict
                             else document_chunks(doc))
            except OSError as exc:
                what, fix = write_error_text(exc)
                raise LedgerWriteError(
                    f"cannot write ledger {path} ({what}); it was left as it was. Fix: {fix}, "
                    "then try again", str(path), exc.errno) from exc
            _journal.remove(path)
            return
    update(path, lambda fresh: None)


def made_from(doc: dict[str, Any], state: DiskState) -> None:
    """Name in ``doc`` what it was read from before it is written with a new generation:
    ``base``, the generation read and how much of its journal (a driver keeps the records of
    its journal that the writer did not read: `campaign._ledger._commit`)."""
    if type(doc.get("generation")) is str:
        doc["base"] = {"generation": doc["generation"], "journal": state.journal}
