"""The driver's ledger: the state of a campaign in memory, written to disk by group commit.

One writer thread writes the ledger; `Ledger.put` only marks a record dirty. A commit carries
every change since the previous one. A driver's commit appends the changed records to the
ledger's journal (`campaign._journal`), so its cost does not grow with the ledger; the whole
file is rewritten (compacted) when the journal reaches `COMPACT_FRACTION` of its size, at most
about ``write_share`` of the wall time, and when the run opens and closes. Every commit is made
under ``<ledger>.lock``: changes other processes made (another worker, ``campaign forget``) are
merged, never overwritten.

A failed write (disk full, read-only, I/O error) is retried with back-off for up to
``write_retry`` seconds; meanwhile `writable` is False, so the engine starts no new task. If the
writes keep failing the ledger gives up: `writable`, `flush` and `close` raise
`LedgerWriteError`, and the file keeps what was recorded before the first failure.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from . import _document, _journal
from ._array import absorb_fragments, fragment_files, live_leases, work_root
from ._atomic import (
    HOST,
    WriteFailures,
    atomic_write,
    pid_alive,
    remove_stale_tmp,
    write_error_text,
    write_retry_default,
)
from ._errors import DriverBusyError, LedgerError, LedgerWriteError
from ._records import merge
from ._status import ACCEPTED, INTERRUPTED, RUNNING, RUNS_LIMIT

logger = logging.getLogger(__name__)

#: At most this long (seconds) is a failing write retried when a run closes after Ctrl-C,
#: SIGTERM or an error, so that stopping never hangs for the whole write-retry window.
CLOSE_RETRY = 10.0
#: The longest pause (seconds) after a journal append before the next commit, however long the
#: append took, unless ``min_interval`` is longer: outcomes reach the disk within about this.
APPEND_PAUSE_MAX = 0.5


class Ledger:
    """A campaign's ledger as its driver holds it. Use `open`, then `put`/`flush`, then `close`.

    Args:
        path: the ledger file.
        min_interval: shortest time in seconds between two commits.
        write_share: the largest share of wall time spent writing; a whole-file write that
            took ``w`` seconds is followed by at least ``w * (1 - write_share) / write_share``
            seconds without another (a driver appends to its journal meanwhile), and a journal
            append by at most `APPEND_PAUSE_MAX` seconds without a commit.
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
        self.path = _document.real_path(path)
        self.write_retry = write_retry_default() if write_retry is None else float(write_retry)
        if not self.write_retry >= 0:
            raise ValueError(f"write_retry must be >= 0 seconds, got {write_retry!r}")
        self.min_interval = min_interval
        self.write_share = write_share
        self.compact_fraction = compact_fraction
        self.doc: dict[str, Any] = _document.new_document()
        self.run_id = uuid.uuid4().hex[:12]
        self.bytes_written = 0
        self.commits = 0  # writes: whole-file writes (compactions) and journal appends
        self.compactions = 0
        self.merges = 0
        self._state = threading.Lock()
        self._commit_mutex = threading.Lock()
        self._wake = threading.Condition(self._state)
        self._dirty: set[str] = set()
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
        self._serializer = _document.Serializer()
        self._file_lock = _document.file_lock(self.path)
        self._driver_lock = FileLock(self.path.with_name(self.path.name + ".driver"),
                                     timeout=0, thread_local=False)
        self._writer: threading.Thread | None = None
        self.driver = True
        self._written = threading.Condition(self._state)  # a failing episode ended
        self._failures = WriteFailures(self.path, self.write_retry)
        self._gave_up: LedgerWriteError | None = None

    # ------------------------------------------------------------------ opening
    @property
    def tasks(self) -> dict[str, dict[str, Any]]:
        """Task id -> record (stored form). Read freely; change only through `put`."""
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
        self.driver = driver
        if not driver:
            with self._file_lock:
                if self.path.exists():
                    self.doc, self._disk_state = _document.load(self.path)
                else:
                    self._write_locked()
            self._start_writer()
            return
        try:
            self._driver_lock.acquire()
        except Timeout:
            raise DriverBusyError(self._busy_message()) from None
        try:
            leases = live_leases(self.path)
            if leases:
                owner = leases[0]["owner"]
                raise DriverBusyError(
                    f"ledger {self.path} is in use by {len(leases)} array worker(s) holding "
                    f"task leases (e.g. {owner.get('worker')} on {owner.get('host')}); wait for "
                    "them to finish or cancel their job, then run again")
            with self._file_lock:
                remove_stale_tmp(self.path)
                settled: list[Path] = []
                clean = False  # the file alone is what it holds: this run can append to it
                if self.path.exists():
                    doc, state = _document.load(self.path)
                    clean = not state[3] and "generation" in doc \
                        and not fragment_files(self.path)
                    settled = absorb_fragments(doc, self.path)
                    if not resume:
                        self._set_aside(doc, state)
                        doc = _document.new_document()
                    else:
                        self._dirty.update(self._take_over(doc))
                        self._disk_state, self._file_bytes = state, state[1]
                        self._generation = doc.get("generation")
                        self._need_whole = not clean
                    self.doc = doc
                now = time.time()
                self.doc["runs"] = (self.doc["runs"] + [{
                    "id": self.run_id, "host": HOST, "pid": os.getpid(), "execution": execution,
                    "started": now, "ended": None, "status": "running", "refused": [],
                }])[-RUNS_LIMIT:]
                self._meta_dirty = True
                self._write_or_append_locked()  # not retried: nothing has run yet
                for fragment in settled:
                    fragment.unlink(missing_ok=True)
        except BaseException:
            self._driver_lock.release()
            raise
        self._start_writer()

    def _start_writer(self) -> None:
        self._writer = threading.Thread(target=self._write_loop, name="ledger-writer", daemon=True)
        self._writer.start()

    def _busy_message(self) -> str:
        run = None
        try:
            runs = _document.read(self.path)["runs"]
            run = next((r for r in reversed(runs) if r.get("status") == "running"), None)
        except LedgerError:
            pass
        who = f"pid {run['pid']} on host {run['host']}" if run else "another process"
        return (
            f"ledger {self.path} is in use by a live campaign driver ({who}); wait for it to "
            "finish, stop it, or pass another ledger_path"
        )

    def _set_aside(self, doc: dict[str, Any], state: _document.DiskState) -> None:
        """resume=False: keep the old ledger (with its journal merged) beside, with its array
        work folder, under a name that says so."""
        saved = _document.backup_path(self.path, "replaced")
        if state[3]:  # a journal: the file alone does not hold everything
            atomic_write(saved, _document.dumps(doc))
        else:
            os.replace(self.path, saved)
        if work_root(self.path).exists():  # its array fragments go with it
            os.replace(work_root(self.path), work_root(saved))
        logger.info("resume=False: the old ledger was kept as %s", saved)

    def _take_over(self, doc: dict[str, Any]) -> list[str]:
        """We hold the driver's lock, so no earlier driver is alive: its leftovers are ours.
        Returns the tasks whose records changed."""
        for run in doc["runs"]:
            if run.get("status") == "running":
                same_host_alive = run.get("host") == HOST and run.get("pid") != os.getpid() \
                    and pid_alive(run.get("pid", -1))
                if same_host_alive:
                    logger.warning("ledger %s names a live driver (pid %s) that does not hold the "
                                   "driver lock; taking over", self.path, run.get("pid"))
                run["status"] = "crashed"
        tasks = doc["tasks"]
        stale = [tid for tid, rec in tasks.items() if rec["status"] == RUNNING]
        for tid in stale:
            rec = dict(tasks[tid])
            rec.update(status=INTERRUPTED,
                       interruptions=rec.get("interruptions", 0) + 1,
                       error={"type": "DriverLost",
                              "message": "the driver stopped while this task ran (killed, "
                                         "crashed or lost its node)", "traceback": ""})
            tasks[tid] = rec
        if stale:
            logger.info("%d task(s) left running by a dead driver are now interrupted", len(stale))
        return stale

    # ------------------------------------------------------------------ updates
    @property
    def run(self) -> dict[str, Any] | None:
        """This run's entry in the ledger's ``runs`` list (None unless opened as the driver)."""
        return next((r for r in self.doc["runs"] if r["id"] == self.run_id), None)

    def put(self, task_id: str, record: dict[str, Any]) -> bool:
        """Store a new record for a task; it reaches the disk with the next commit.

        An accepted record is final: replacing it is refused (returns False, changes nothing).
        Only `campaign forget` removes one.
        """
        with self._state:
            tasks = self.doc["tasks"]
            current = tasks.get(task_id)
            if current is not None and current["status"] == ACCEPTED:
                logger.debug("task %r is already accepted; a new record for it was dropped",
                             task_id)
                return False
            tasks[task_id] = record
            self._dirty.add(task_id)
            if self._writer_idle:
                self._wake.notify()
            return True

    def put_many(self, records: dict[str, dict[str, Any]]) -> None:
        """`put` for several records at once."""
        with self._state:
            tasks = self.doc["tasks"]
            for task_id, record in records.items():
                current = tasks.get(task_id)
                if current is None or current["status"] != ACCEPTED:
                    tasks[task_id] = record
                    self._dirty.add(task_id)
            self._wake.notify()

    def order(self, task_ids: list[str]) -> None:
        """Put these tasks first, in this order (the items' order), the others after them."""
        with self._state:
            tasks = self.doc["tasks"]
            if list(tasks)[:len(task_ids)] == task_ids:
                return
            ordered = {tid: tasks[tid] for tid in task_ids if tid in tasks}
            ordered.update((tid, rec) for tid, rec in tasks.items() if tid not in ordered)
            self.doc["tasks"] = ordered
            self._meta_dirty = True
            self._need_whole = True  # the journal cannot say a new order

    def set_run(self, **fields: Any) -> None:
        """Change fields of this run's entry (e.g. ``refused``, ``status``)."""
        with self._state:
            self.run.update(fields)
            self._meta_dirty = True
            self._wake.notify()

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

    def close(self, status: str) -> None:
        """Finish this run (``finished``, ``interrupted`` ...), flush, stop the writer, unlock.

        A failing write is retried for up to ``write_retry`` seconds when ``status`` is
        ``finished``, else for at most `CLOSE_RETRY` seconds; if it still fails (or the ledger
        had given up already, after one more try), raises `LedgerWriteError`."""
        try:
            if self.driver:
                self.set_run(status=status, ended=time.time())
            with self._state:
                self._closing = True
                self._need_whole = True  # at the end, the file alone holds everything
                self._wake.notify()
            if self._writer is not None:
                self._writer.join()
            if self._gave_up is not None:
                if not self._attempt(quiet=True):
                    raise self._gave_up
                return
            self._commit_retrying(None if status == "finished"
                                  else time.monotonic() + CLOSE_RETRY)
        finally:
            if self._driver_lock.is_locked:
                self._driver_lock.release()

    # ------------------------------------------------------------------ writing
    def _write_loop(self) -> None:
        while True:
            with self._state:
                while not (self._dirty or self._meta_dirty or self._closing):
                    self._writer_idle = True
                    self._wake.wait()
                    self._writer_idle = False
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
            with self._state:
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
        except Exception as exc:
            if not quiet:
                self._failed(exc)
            return False
        if self._failures.since is not None:
            with self._state:
                spent = self._failures.ended(time.monotonic())
                self._written.notify_all()
            logger.warning("ledger %s was written again after %.0f s of failed writes; new "
                           "tasks start again", self.path, spent)
        return True

    def _failed(self, exc: BaseException) -> None:
        now = time.monotonic()
        with self._state:
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
        """Stop retrying (the caller holds ``_state``): the error every later call raises."""
        self._gave_up = self._failures.error(now)
        run = self.run if self.driver else None
        if run is not None:  # written if a last try succeeds
            run["error"] = str(self._gave_up)
            self._meta_dirty = True
        self._written.notify_all()
        self._wake.notify_all()

    def _commit(self) -> None:
        with self._commit_mutex:
            begun = time.monotonic()
            with self._file_lock:
                with self._state:
                    owed = self._need_whole and self._journal_bytes  # a compaction is owed
                    if not (self._dirty or self._meta_dirty or owed):
                        return
                whole = self._write_or_append_locked()
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

    def _write_or_append_locked(self) -> bool:
        """Append the changes to the journal, or write the whole file when that is due (see
        the module's docstring). The caller holds ``<ledger>.lock``. True if the whole file
        was written."""
        if self.driver and self._generation is not None \
                and _document.file_state(self.path) == self._disk_state:
            with self._state:
                line, taken, meta = self._journal_line()
            if line is not None:
                self._append(line, taken, meta)
                return False
        self._write_locked()
        return True

    def _journal_line(self) -> tuple[bytes | None, set[str], bool]:
        """The journal line of the changes (the caller holds ``_state``), or None when the
        whole file is to be written (a compaction is due or needed)."""
        if self._need_whole:
            return None, set(), False
        tasks = self.doc["tasks"]
        parts = self._serializer.parts(tasks, [tid for tid in self._dirty if tid in tasks])
        size = sum(map(len, parts))
        if (self._journal_bytes + size >= self.compact_fraction * self._file_bytes
                and time.monotonic() >= self._compact_after):
            return None, set(), False
        now = self.doc["updated"] = time.time()
        line = _journal.encode(self._generation, now, parts,
                               self.doc["runs"] if self._meta_dirty else None)
        taken, self._dirty = self._dirty, set()
        meta, self._meta_dirty = self._meta_dirty, False
        return line, taken, meta

    def _append(self, line: bytes, taken: set[str], meta: bool) -> None:
        try:
            size = _journal.append(self.path, line)
        except BaseException:
            with self._state:
                self._dirty |= taken
                self._meta_dirty = self._meta_dirty or meta
                self._need_whole = True  # never append after a line that may be cut short
            raise
        self._journal_bytes = size
        assert self._disk_state is not None
        self._disk_state = self._disk_state[:3] + (size,)
        self.bytes_written += len(line)
        self.commits += 1

    def _write_locked(self) -> None:
        """Merge foreign changes and write the whole file with a new generation, then remove
        the journal; the caller holds ``<ledger>.lock``."""
        with self._state:
            if self._disk_state is not None and _document.file_state(self.path) != self._disk_state:
                self._merge_from_disk()
            self.doc["updated"] = time.time()
            generation = self.doc["generation"] = _journal.new_generation()
            data = self._serializer.dumps(self.doc)
            taken, self._dirty = self._dirty, set()
            meta, self._meta_dirty = self._meta_dirty, False
            self._need_whole = False
        try:
            st = atomic_write(self.path, data)
            _journal.remove(self.path)  # after the replacement: see docs/ledger.md
        except BaseException:
            with self._state:
                self._dirty |= taken
                self._meta_dirty = self._meta_dirty or meta
                self._need_whole = True
            raise
        self._disk_state = (st.st_ino, st.st_size, st.st_mtime_ns, 0)
        self._generation = generation
        self._file_bytes, self._journal_bytes = len(data), 0
        self.bytes_written += len(data)
        self.commits += 1
        self.compactions += 1

    def _merge_from_disk(self) -> None:
        """Another process replaced the file: adopt its records except those we changed."""
        try:
            disk = _document.read(self.path)
        except LedgerError as exc:
            raise LedgerError(f"{exc} (found while merging; this run's changes are kept in "
                              "memory and the file was not overwritten)") from None
        ours = self.doc["tasks"]
        tasks = disk["tasks"]
        for tid in self._dirty:
            tasks[tid] = merge(tasks.get(tid), ours[tid])
        mine = self.run
        if mine is not None:
            disk["runs"] = [r for r in disk["runs"] if r.get("id") != self.run_id] + [mine]
        self.doc = disk
        self.merges += 1
        logger.debug("merged changes made by another process into %s", self.path)
