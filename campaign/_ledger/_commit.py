"""The group commit of a ledger: one writer thread, journal appends, compactions, write retries.

One writer thread writes the ledger; changes only mark records dirty. A commit carries every
change since the previous one. A driver's commit appends the changed records to the ledger's
journal (`campaign._ledger._journal`), so its cost does not grow with the ledger; the whole file is
rewritten (compacted) when the journal reaches `COMPACT_FRACTION` of its size, at most about
``write_share`` of the wall time, and when the run opens and closes. Every commit is made under
``<ledger>.lock``: changes other processes made (another worker, ``campaign forget``) are
merged, never overwritten.

A failed write (disk full, read-only, I/O error) is retried with back-off for up to
``write_retry`` seconds; meanwhile `writable` is False, so the engine starts no new task. If the
writes keep failing the ledger gives up: `writable`, `flush` and `close` raise
`LedgerWriteError`, and the file keeps what was recorded before the first failure.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from .._errors import LedgerError, LedgerWriteError
from .._signals import block_stop_signals
from . import _document, _journal, _storeload
from ._atomic import WriteFailures, atomic_write, write_error_text, write_retry_default
from ._ownwrites import OwnWrites
from ._paths import LedgerPaths
from ._records import newer
from ._store import RecordStore, whole_file

logger = logging.getLogger(__name__)

#: At most this long (seconds) is a failing write retried when a run closes after Ctrl-C,
#: SIGTERM or an error, so that stopping never hangs for the whole write-retry window.
CLOSE_RETRY = 10.0
#: How often (seconds) an idle driver looks whether another process replaced its ledger; if
#: so it merges it and writes it again, restoring what a writer its lock did not exclude
#: dropped (`GroupCommit._merge_from_disk`).
IDLE_CHECK = 1.0
#: The longest pause (seconds) after a journal append before the next commit, however long the
#: append took, unless ``min_interval`` is longer: outcomes reach the disk within about this.
APPEND_PAUSE_MAX = 0.5


class GroupCommit:
    """A ledger document held in memory and written to its file by group commit (see the
    module's docstring); `campaign.Ledger` holds one and adds its run and the way records change.
    What changed reaches the writer through `mark` and `mark_meta` (under `mutex`), a document
    read from disk through `adopt`, and nothing else of the writer's state is set from outside;
    the runs list is its holder's (the hooks below).

    Args:
        paths: the ledger's files.
        before_write: called before every write, under ``<ledger>.lock``; raises to write
            nothing (a driver whose lease was taken over).
        kept_runs: the runs list to hold after merging a file another process wrote, given
            that file's (`campaign.Ledger` keeps its own run's entry as it holds it).
        on_give_up: called (under `mutex`) with the error once the writes failed for good;
            `campaign.Ledger` notes it in its run, written if a last try succeeds.
        min_interval, write_share, write_retry, compact_fraction: as `campaign.Ledger`'s.
    """

    def __init__(self, paths: LedgerPaths, *, min_interval: float = 0.1,
                 write_share: float = 0.1, write_retry: float | None = None,
                 compact_fraction: float = _journal.COMPACT_FRACTION,
                 before_write: Callable[[], None] = lambda: None,
                 kept_runs: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] = lambda r: r,
                 on_give_up: Callable[[LedgerWriteError], None] = lambda error: None):
        self.paths = paths
        self.path = paths.file
        self._before_write = before_write
        self._kept_runs = kept_runs
        self._on_give_up = on_give_up
        self.write_retry = write_retry_default() if write_retry is None else float(write_retry)
        if not self.write_retry >= 0:
            raise ValueError(f"write_retry must be >= 0 seconds, got {write_retry!r}")
        self.min_interval = min_interval
        self.write_share = write_share
        self.compact_fraction = compact_fraction
        self.doc: dict[str, Any] = {}
        self.adopt(_document.new_document())
        self.driver = True
        self.bytes_written = 0
        self.commits = 0  # writes: whole-file writes (compactions) and journal appends
        self.compactions = 0
        self.merges = 0
        self.mutex = threading.Lock()
        self._commit_mutex = threading.Lock()
        self._wake = threading.Condition(self.mutex)
        self._written = threading.Condition(self.mutex)  # a failing episode ended
        self._dirty: set[str] = set()
        #: what this process wrote, kept in a merge unless the process that replaced the file
        #: had read it (`_merge_from_disk`)
        self._own = OwnWrites()
        self._meta_dirty = False
        self._closing = False
        self._writer_idle = False
        self._next_commit = 0.0
        self._disk_state: _document.DiskState | None = None
        self._generation: str | None = None  # of the file as this process last wrote or read it
        self._need_whole = True  # the next commit rewrites the whole file
        self._file_bytes = 0
        self._journal_bytes = 0
        self._compact_after = 0.0  # monotonic: no compaction before, unless one is needed
        self.file_lock = _document.file_lock(self.paths)
        self._writer: threading.Thread | None = None
        self._failures = WriteFailures(self.path, self.write_retry)
        self._gave_up: LedgerWriteError | None = None

    def adopt(self, doc: dict[str, Any], state: _document.DiskState | None = None, *,
               whole: bool = True) -> None:
        """Hold ``doc`` as this ledger's document, its records in a `RecordStore`. ``state``:
        the file's `DiskState` when ``doc`` was read from it (its generation is what the next
        write is made from); ``whole``: whether the next commit rewrites the whole file (False
        only when the file alone holds everything, so this run can append to its journal)."""
        doc["tasks"] = RecordStore.of(doc["tasks"])
        self.doc = doc
        if state is not None:
            self._disk_state, self._file_bytes = state, state.size
            self._generation = doc.get("generation")
            self._need_whole = whole

    def mark(self, task_ids: Iterable[str]) -> None:
        """These records changed: the next commit writes them. The caller holds `mutex`."""
        self._dirty.update(task_ids)
        if self._writer_idle:
            self._wake.notify()

    def mark_meta(self, *, whole: bool = False) -> None:
        """The head (the runs, the order) changed; ``whole``: the next commit rewrites the
        whole file (a journal line cannot say it). The caller holds `mutex`."""
        self._meta_dirty = True
        self._need_whole = self._need_whole or whole
        self._wake.notify()

    @property
    def store(self) -> RecordStore:
        """Task id -> record (stored form), held compactly (`campaign._ledger._store`)."""
        return self.doc["tasks"]

    def flush(self) -> None:
        """Commit every change now; on return all of them are durable on disk. A failing
        write is retried for up to ``write_retry`` seconds, then `LedgerWriteError`."""
        self._commit_retrying(None)

    def writable(self) -> bool:
        """True while ledger writes succeed; False while a failed write is being retried (start
        no new task then). Raises `LedgerWriteError` once the ledger gave up."""
        if self._gave_up is not None:
            raise self._gave_up
        return self._failures.since is None

    def start(self) -> None:
        self._writer = threading.Thread(target=self._write_loop, name="ledger-writer", daemon=True)
        self._writer.start()

    def stop(self, cap: float | None) -> None:
        """Stop the writer thread and make the last commit, the whole file written (retried
        until ``cap``, a monotonic time, or without end when None); raises `LedgerWriteError`
        if the ledger gave up, after one more try."""
        with self.mutex:
            self._closing = True
            self._need_whole = True  # at the end, the file alone holds everything
            self._wake.notify()
        if self._writer is not None:
            self._writer.join()
        if self._gave_up is not None:
            if not self._attempt(quiet=True):
                raise self._gave_up
            return
        self._commit_retrying(cap)

    # ------------------------------------------------------------------ writing
    def _write_loop(self) -> None:
        block_stop_signals()
        while True:
            with self.mutex:
                while not (self._dirty or self._meta_dirty or self._closing):
                    self._writer_idle = True
                    # a driver always looks: its commits may all have come by `flush`, with
                    # nothing of its own written yet when it began to wait
                    self._wake.wait(IDLE_CHECK if self.driver else None)
                    self._writer_idle = False
                    if self.driver and self._own and self._disk_state is not None \
                            and _document.file_state(self.paths) != self._disk_state:
                        # replaced: merge it soon, and write again what it may have dropped
                        self._meta_dirty = True
                if self._closing or self._gave_up is not None:
                    return
                delay = self._next_commit - time.monotonic()
                if delay > 0:
                    self._wake.wait(delay)
                    continue
            self._attempt()

    def _commit_retrying(self, cap: float | None) -> None:
        """Commit; retry a failure until it succeeds or the ledger gives up (at ``cap``, a
        monotonic time, at the latest)."""
        while True:
            if self._gave_up is not None:
                raise self._gave_up
            if self._attempt():
                return
            with self.mutex:
                if self._gave_up is None:
                    now = time.monotonic()
                    if cap is not None and self._next_commit > cap:
                        self._give_up(now)
                    else:
                        self._written.wait(max(0.0, self._next_commit - now))

    def _attempt(self, quiet: bool = False) -> bool:
        """One commit. On failure: note it, and retry later or give up. True if it worked."""
        try:
            self._commit()
        except Exception as exc:  # noqa: BLE001 -- any error of a write is its failure: an
            # OSError is retried, any other ends the run (WriteFailures.failed decides)
            if not quiet:
                self._failed(exc)
            return False
        if self._failures.since is not None:
            with self.mutex:
                spent = self._failures.ended(time.monotonic())
                self._written.notify_all()
            logger.warning("ledger %s was written again after %.0f s of failed writes; new "
                           "tasks start again", self.path, spent)
        return True

    def _failed(self, exc: BaseException) -> None:
        now = time.monotonic()
        with self.mutex:
            first = self._failures.since is None
            retry = self._failures.failed(exc, now)
            if retry is None:
                self._give_up(now)
                return
            self._next_commit = retry
        what, _ = write_error_text(exc)
        if first:
            logger.warning("writing ledger %s failed (%s); no new task starts until a write "
                           "succeeds; retrying for up to %.0f s", self.path, what,
                           self.write_retry)
        else:
            logger.debug("writing ledger %s failed again (%s)", self.path, what)

    def _give_up(self, now: float) -> None:
        """Stop retrying (the caller holds `mutex`): the error every later call raises."""
        self._gave_up = self._failures.error(now)
        self._on_give_up(self._gave_up)
        self._written.notify_all()
        self._wake.notify_all()

    def _commit(self) -> None:
        with self._commit_mutex:
            begun = time.monotonic()
            with self.file_lock:
                with self.mutex:
                    owed = self._need_whole and self._journal_bytes  # a compaction is owed
                    if not (self._dirty or self._meta_dirty or owed):
                        return
                whole = self.commit_locked()
            now = time.monotonic()
            spent = now - begun
            rest = spent * (1 - self.write_share) / self.write_share
            if whole and self.driver:  # appends go on meanwhile; the next compaction waits
                self._compact_after = now + rest
                pause = self.min_interval
            elif whole:
                pause = max(self.min_interval, rest)
            else:
                pause = max(self.min_interval, min(rest, APPEND_PAUSE_MAX))
            self._next_commit = now + pause

    def commit_locked(self) -> bool:
        """Append the changes to the journal, or write the whole file when that is due (see
        the module's docstring). The caller holds ``<ledger>.lock``. True if the whole file
        was written."""
        self._before_write()
        generation = self._generation
        if self.driver and generation is not None \
                and _document.file_state(self.paths) == self._disk_state:
            with self.mutex:
                line, taken, meta = self._journal_line(generation)
            if line is not None:
                self._append(line, taken, meta)
                return False
        self.rewrite_locked()
        return True

    def _journal_line(self, generation: str) -> tuple[bytes | None, set[str], bool]:
        """The journal line of the changes to the file of ``generation`` (the caller holds
        `mutex`), or None when the whole file is to be written (a compaction is due or
        needed)."""
        if self._need_whole:
            return None, set(), False
        tasks = self.store
        ids = [tid for tid in self._dirty if tid in tasks]
        # sized before it is built: a line that is not appended is never made (the first
        # commit of a large campaign holds every pending record, as large as the file)
        if (self._journal_bytes + tasks.parts_size(ids) >= self.compact_fraction * self._file_bytes
                and time.monotonic() >= self._compact_after):
            return None, set(), False
        parts = tasks.parts(ids)
        now = self.doc["updated"] = time.time()
        line = _journal.encode(generation, now, parts,
                               self.doc["runs"] if self._meta_dirty else None)
        taken, self._dirty = self._dirty, set()
        meta, self._meta_dirty = self._meta_dirty, False
        return line, taken, meta

    def _append(self, line: bytes, taken: set[str], meta: bool) -> None:
        try:
            size = _journal.append(self.paths, line)
        except BaseException:
            with self.mutex:
                self._dirty |= taken
                self._meta_dirty = self._meta_dirty or meta
                self._need_whole = True  # never append after a line that may be cut short
            raise
        self._journal_bytes = size
        self._own.appended(taken, size)
        assert self._disk_state is not None
        self._disk_state = self._disk_state._replace(journal=size)
        self.bytes_written += len(line)
        self.commits += 1

    def rewrite_locked(self) -> None:
        """Merge foreign changes and write the whole file with a new generation, then remove
        the journal; the caller holds ``<ledger>.lock``."""
        with self.mutex:
            if self._disk_state is not None \
                    and _document.file_state(self.paths) != self._disk_state:
                self._merge_from_disk()
            self.doc["updated"] = time.time()
            if self._generation is not None and self._disk_state is not None:
                # what this file is made from (`_merge_from_disk`)
                self.doc["base"] = {"generation": self._generation,
                                    "journal": self._disk_state.journal}
            generation = self.doc["generation"] = _journal.new_generation()
            head = orjson.dumps({k: v for k, v in self.doc.items() if k != "tasks"})
            records = self.store.snapshot()
            taken, self._dirty = self._dirty, set()
            meta, self._meta_dirty = self._meta_dirty, False
            self._need_whole = False
        try:
            st = atomic_write(self.path, whole_file(head, records))
            _journal.remove(self.paths)  # after the replacement: see docs/ledger.md
        except BaseException:
            with self.mutex:
                self._dirty |= taken
                self._meta_dirty = self._meta_dirty or meta
                self._need_whole = True
            raise
        self._disk_state = _document.DiskState.of(st, 0)
        self._generation = generation
        self._own.wrote_file(generation, taken)
        self._file_bytes, self._journal_bytes = st.st_size, 0
        self.bytes_written += st.st_size
        self.commits += 1
        self.compactions += 1

    def _merge_from_disk(self) -> None:
        """Another process replaced the file: adopt its records, except those we changed since
        the file we last wrote or read, record by record (`newer`): the changes not written
        yet, and those we wrote that the other process did not read (`OwnWrites.unread`: the
        lock did not exclude it, and it dropped them)."""
        try:
            disk, state = _storeload.load(self.path)  # a block at a time, the records as bytes
        except LedgerError as exc:
            raise LedgerError(f"{exc} (found while merging; this run's changes are kept in "
                              "memory and the file was not overwritten)") from None
        ours = self.store
        tasks = disk["tasks"]
        unseen = self._own.unread(disk.get("base"), self._generation)
        if unseen:
            logger.warning("ledger %s was replaced by a process that had not read %d record(s) "
                           "this one wrote (its lock did not exclude this process: a shared "
                           "file system without coherent locks?); they are kept", self.path,
                           len(unseen))
        for tid in self._dirty.union(unseen):
            if tid in ours:
                tasks[tid] = newer(tasks.get(tid), ours[tid])
        disk["runs"] = self._kept_runs(disk["runs"])
        self.adopt(disk)
        self._dirty.update(unseen)  # to write again: the file holds them no more
        if isinstance(disk.get("generation"), str):  # what the next file is made from
            self._generation, self._disk_state = disk["generation"], state
            self._own.merged(disk["generation"])
        self.merges += 1
        logger.debug("merged changes made by another process into %s", self.path)

