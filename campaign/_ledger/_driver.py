"""The driver's ledger: the state of a campaign in memory, its runs, and how records change.

`Ledger` is what the engine, `campaign submit` and the array workers hold: `open` loads the
file (as its driver: takes the driver's lease ``<ledger>.driver.<n>``,
`campaign._ledger._owner_lease`, takes over a dead driver's leftovers and registers a run,
`campaign._ledger._runs`), `put` changes records, `close` ends the run. Writing is the group commit
of `campaign._ledger._commit`: `put` only marks a record dirty, and one writer thread writes every
change since the last commit, retrying failed writes; a driver whose lease was taken over writes
nothing more.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from .._array._workdir import absorb_fragments, fragment_files
from .._errors import DriverBusyError, LedgerWriteError
from . import _document, _journal, _runs, _storeload, _update
from ._atomic import remove_stale_tmp, write_error_text
from ._busy import busy_message, refuse_if_leased
from ._commit import CLOSE_RETRY, GroupCommit
from ._exclusive import no_flock
from ._owner_lease import DriverLease
from ._paths import LedgerPaths
from ._status import ACCEPTED, RunStatus
from ._store import RecordStore

logger = logging.getLogger(__name__)

__all__ = ["CLOSE_RETRY", "Ledger"]


class Ledger:
    """A campaign's ledger as its driver holds it. Use `open`, then `put`/`flush`, then `close`.

    Args:
        path: the ledger file.
        min_interval: shortest time in seconds between two commits.
        write_share: the largest share of wall time spent writing; a whole-file write that
            took ``w`` seconds is followed by at least ``w * (1 - write_share) / write_share``
            seconds without another (a driver appends to its journal meanwhile), and a journal
            append by at most `campaign._ledger._commit.APPEND_PAUSE_MAX` seconds without a commit.
        compact_fraction: a driver rewrites the whole file once its journal holds this
            fraction of the file's size.
        write_retry: how long in seconds failing writes are retried before `LedgerWriteError`
            (default: the environment variable ``DIFFSOUP_LEDGER_WRITE_RETRY``, else 900).

    ``path`` may be a symlink: `path` is the file it resolves to, and every lock, merge and
    replacement acts on that file, so the link stays a link and a driver reached through it
    excludes one reached through the file's own name.
    """

    def __init__(self, path: str | os.PathLike[str], *, min_interval: float = 0.1,
                 write_share: float = 0.1, write_retry: float | None = None,
                 compact_fraction: float = _journal.COMPACT_FRACTION):
        self.paths = LedgerPaths.of(path)  # every file of the ledger, named once
        self.path = self.paths.file
        self.run_id = uuid.uuid4().hex[:12]
        self.driver = True
        self._commit = GroupCommit(self.paths, min_interval=min_interval,
                                   write_share=write_share, write_retry=write_retry,
                                   compact_fraction=compact_fraction,
                                   before_write=self._before_write, kept_runs=self._kept_runs,
                                   on_give_up=self._on_give_up)
        # the fast local path: a second driver on this host (or where locks are coherent) is
        # refused at once; the lease is what excludes drivers on other nodes
        self._driver_lock = FileLock(self.paths.driver, timeout=0, thread_local=False)
        self._lease = DriverLease(self.paths)

    # ------------------------------------------------------------------ what it holds
    @property
    def doc(self) -> dict[str, Any]:
        """The ledger's document as this process holds it (``tasks`` a `RecordStore`)."""
        return self._commit.doc

    @property
    def store(self) -> RecordStore:
        """Task id -> record (stored form), held compactly (`campaign._ledger._store`)."""
        return self._commit.store

    @property
    def commits(self) -> int:
        """Writes so far: whole-file writes (compactions) and journal appends."""
        return self._commit.commits

    @property
    def bytes_written(self) -> int:
        return self._commit.bytes_written

    @property
    def compactions(self) -> int:
        return self._commit.compactions

    @property
    def merges(self) -> int:
        """How many times a file another process wrote was merged in."""
        return self._commit.merges

    @property
    def run(self) -> dict[str, Any] | None:
        """This run's entry in the ledger's ``runs`` list (None unless opened as the driver)."""
        return _runs.find_run(self.doc, self.run_id)

    def _kept_runs(self, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        mine = self.run
        return runs if mine is None else [r for r in runs if r.get("id") != self.run_id] + [mine]

    def _on_give_up(self, error: LedgerWriteError) -> None:
        run = self.run if self.driver else None
        if run is not None:  # written if a last try succeeds
            run["error"] = str(error)
            self._commit.mark_meta()

    @property
    def tasks(self) -> RecordStore:
        """Task id -> record (stored form), a mapping that decodes each record when it is
        looked up (`campaign._ledger._store`). Read freely; change only through `put`."""
        return self.doc["tasks"]

    def open(self, *, resume: bool = True, execution: str = "serial", driver: bool = True) -> None:
        """Load (or start) the ledger; as its driver, take the driver's lock and register a run.

        With ``driver=False`` the ledger is opened as one of several writers (workers): no lock
        is held between commits, no run is registered and nothing is taken over.

        Raises `DriverBusyError` when another live driver runs on this ledger, `LedgerError`
        when the file is not a valid ledger, and `LedgerWriteError` when the ledger or the lock
        files beside it cannot be written (read-only file system, disk full: nothing ran).
        """
        try:
            self._open(resume, execution, driver)
        except OSError as exc:
            what, fix = write_error_text(exc)
            raise LedgerWriteError(
                f"cannot write ledger {self.path} or the lock files beside it ({what}); "
                f"nothing was run. Fix: {fix}, then run again", str(self.path),
                exc.errno) from exc

    def _open(self, resume: bool, execution: str, driver: bool) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        commit = self._commit
        self.driver = commit.driver = driver
        if not driver:
            with commit.file_lock:
                if self.path.exists():
                    commit.adopt(*_document.load(self.path))  # what it writes is made from
                else:
                    commit.rewrite_locked()
            commit.start()
            return
        try:
            self._driver_lock.acquire()
        except Timeout:
            raise DriverBusyError(busy_message(self.paths)) from None
        except (NotImplementedError, OSError) as exc:
            if not no_flock(exc):
                raise  # no flock on this file system: the lease alone
        try:
            self._lease.acquire()  # DriverBusyError while a live driver holds it, anywhere
            refuse_if_leased(self.paths)
            with commit.file_lock:
                settled = self._load_as_driver(resume)
                with commit.mutex:
                    _runs.add_run(self.doc, _runs.new_run(self.run_id, execution))
                    commit.mark_meta()
                commit.commit_locked()  # not retried: nothing has run yet
                for fragment in settled:
                    fragment.unlink(missing_ok=True)
        except BaseException:
            self._lease.release(unused=True)
            self._driver_lock.release()
            raise
        commit.start()

    def _before_write(self) -> None:
        if self.driver:
            self._lease.check()  # LeaseLostError once another driver took the lease over

    def writable(self) -> bool:
        """True while ledger writes succeed; False while a failed write is being retried (start
        no new task then). Raises `LedgerWriteError` once the ledger gave up, and, in a driver
        whose lease was taken over (it was stopped past it), `LeaseLostError`."""
        if self.driver:
            self._lease.check(lookups=False)
        return self._commit.writable()

    def flush(self) -> None:
        """Commit every change now; on return all of them are durable on disk. A failing
        write is retried for up to ``write_retry`` seconds, then `LedgerWriteError`."""
        self._commit.flush()

    def _load_as_driver(self, resume: bool) -> list[Path]:
        """Under ``<ledger>.lock``: read the file (its journal and array fragments merged; a
        block at a time, `campaign._ledger._storeload`), set it aside or take over its leftovers.
        Returns the fragments merged, to remove once the run's first write holds them."""
        remove_stale_tmp(self.path)
        _update.remove_stale_backup_tmp(self.path)  # a killed forget's
        if not self.path.exists():
            return []
        doc, state = _storeload.load(self.path)  # a block at a time, the records as bytes
        # the file alone is what it holds: this run can append to it
        clean = not state.journal and "generation" in doc and not fragment_files(self.path)
        doc["tasks"] = RecordStore.of(doc["tasks"])
        settled = absorb_fragments(doc, self.path)
        if not resume:
            _runs.set_aside(self.path, doc, state)
            self._commit.adopt(_document.new_document())
            return settled
        stale = _runs.take_over(doc, self.path)
        with self._commit.mutex:
            self._commit.adopt(doc, state, whole=not clean)
            self._commit.mark(stale)
        return settled

    # ------------------------------------------------------------------ updates
    def put(self, task_id: str, record: dict[str, Any]) -> bool:
        """Store a new record for a task; it reaches the disk with the next commit.

        An accepted record is final: replacing it is refused (returns False, changes nothing).
        Only `campaign forget` removes one.
        """
        with self._commit.mutex:
            tasks = self.store
            if tasks.status(task_id) == ACCEPTED:
                logger.debug("task %r is already accepted; a new record for it was dropped",
                             task_id)
                return False
            tasks[task_id] = record
            self._commit.mark((task_id,))
            return True

    def put_many(self, records: Mapping[str, dict[str, Any]]) -> None:
        """`put` for several records at once (a `RecordStore`'s are taken as they are held,
        without decoding them)."""
        pairs = records.raw_items() if isinstance(records, RecordStore) else records.items()
        with self._commit.mutex:
            tasks = self.store
            changed = []
            for task_id, record in pairs:
                if tasks.status(task_id) != ACCEPTED:
                    tasks.set_raw(task_id, record)
                    changed.append(task_id)
            self._commit.mark(changed)

    def order(self, task_ids: list[str]) -> None:
        """Put these tasks first, in this order (the items' order), the others after them."""
        with self._commit.mutex:
            tasks = self.store
            if list(tasks)[:len(task_ids)] == task_ids:
                return
            tasks.reorder(task_ids)
            self._commit.mark_meta(whole=True)  # the journal cannot say a new order

    def set_run(self, **fields: Any) -> None:
        """Change fields of this run's entry (e.g. ``refused``, ``status``)."""
        with self._commit.mutex:
            run = self.run
            if run is None:
                raise RuntimeError(f"ledger {self.path} has no run of this process to change: "
                                   "open it as its driver (open(driver=True)) first")
            run.update(fields)
            self._commit.mark_meta()

    def close(self, status: str | RunStatus) -> None:
        """Finish this run (``finished``, ``interrupted`` ...: a `RunStatus`), flush, stop the
        writer, unlock.

        A failing write is retried for up to ``write_retry`` seconds when ``status`` is
        ``finished``, else for at most `CLOSE_RETRY` seconds; if it still fails (or the ledger
        had given up already, after one more try), raises `LedgerWriteError`."""
        status = RunStatus(status)
        try:
            if self.driver:
                self.set_run(status=status.value, ended=time.time())
            self._commit.stop(None if status is RunStatus.FINISHED
                              else time.monotonic() + CLOSE_RETRY)
        finally:
            self._lease.release()
            if self._driver_lock.is_locked:
                self._driver_lock.release()
