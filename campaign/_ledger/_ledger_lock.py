"""``<ledger>.lock``: the lock every read-merge-write of a ledger holds, exclusive without
``flock`` too.

Taking it takes two things, in this order:

1. ``flock`` on ``<ledger>.lock`` (`filelock`): the fast path. Processes on one host (or on a
   file system whose locks are coherent) queue on it without polling. Where ``flock`` fails
   with ``ENOSYS`` (Lustre mounted ``noflock``) it is skipped.
2. ``<ledger>.lock.owner``, created with ``O_CREAT | O_EXCL`` and holding its holder's
   `campaign._ledger._exclusive.identity` and a random ``token``; removed when the lock is released.
   This is what excludes processes on nodes whose ``flock`` does not exclude each other's. A
   process that finds it waits (polling, at most 50 ms apart) until it is removed.

A holder that dies leaves the file. It is *broken* when its holder is provably gone (on this
host: `campaign._ledger._exclusive.gone`) or when the file has not been touched for `LOCK_LEASE`
seconds (a holder touches it every `TOUCH_EVERY` seconds while it holds it, from one thread
per process). Breaking it is an exclusive create of ``<ledger>.lock.owner.break-<token>``, the
token of the instance being broken: of two processes that found the same dead holder, one
creates it; that one then replaces the owner file by its own (a rename). A breaker killed
between its marker and that rename leaves a marker of a dead process: the next breaker passes
it by creating the next generation (``...break-<token>.2``, ``.3``, ...), each exclusively
(`LedgerLock._claim_break`); without that, a lock whose breaker died stayed unbreakable. The
markers are removed once `campaign._ledger._owner_lease.CLEANUP_AGE` old.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import threading
import time
from pathlib import Path
from typing import Any

import orjson
from filelock import FileLock, Timeout

from .._signals import block_stop_signals
from ._atomic import atomic_write
from ._exclusive import create_exclusive, describe, gone, identity, no_flock
from ._owner_lease import CLEANUP_AGE
from ._ownership import read_object
from ._paths import LOCK

logger = logging.getLogger(__name__)

#: Seconds after its last touch that a holder's ``<ledger>.lock.owner`` may be broken.
LOCK_LEASE = 30.0
#: How often (seconds) a process touches the owner files of the locks it holds.
TOUCH_EVERY = 5.0
_POLL_MAX = 0.05


class LedgerLock:
    """The lock of a ledger (module docstring); the subset of `filelock.FileLock` that
    `campaign` uses: ``with``, `acquire` (raises `filelock.Timeout`), `release`, `is_locked`.
    Re-entrant in one process, like `filelock.FileLock`."""

    def __init__(self, lock_file: Path, *, timeout: float, poll_interval: float = 0.002):
        self.lock_file = Path(lock_file)
        self.owner = self.lock_file.with_name(self.lock_file.name + ".owner")
        self.ledger = self.lock_file.with_name(self.lock_file.name.removesuffix(LOCK))
        self.timeout = timeout
        self.poll_interval = poll_interval
        self._flock = FileLock(self.lock_file, timeout=timeout, thread_local=False,
                               poll_interval=poll_interval)
        self._count = 0
        self._token: str | None = None

    @property
    def is_locked(self) -> bool:
        return self._count > 0

    def acquire(self, timeout: float | None = None, poll_interval: float | None = None, *,
                blocking: bool = True) -> LedgerLock:
        if self._count:
            self._count += 1
            return self
        wait = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + (wait if wait >= 0 else float("inf"))
        try:
            self._flock.acquire(timeout=wait, poll_interval=poll_interval, blocking=blocking)
        except (NotImplementedError, OSError) as exc:
            if not no_flock(exc):
                raise  # no flock here (Lustre noflock): the owner file alone
        try:
            self._take(deadline, blocking and wait != 0)
        except BaseException:
            self._flock.release()
            raise
        self._count = 1
        _TOUCHER.add(self)
        return self

    def release(self) -> None:
        if self._count == 0:
            return
        self._count -= 1
        if self._count:
            return
        _TOUCHER.discard(self)
        token, self._token = self._token, None
        try:
            if token is not None and not os.path.lexists(self._marker(token)):
                found, _ = read_object(self.owner, self.ledger)
                if found is None or found.get("token") == token:  # None: a stale cached size
                    os.unlink(self.owner)
                else:
                    logger.error("ledger lock %s was taken over while this process held it "
                                 "(by %s): this process stalled past %.0f s", self.owner,
                                 describe(found), LOCK_LEASE)
        except FileNotFoundError:
            pass
        finally:
            self._flock.release()

    def __enter__(self) -> LedgerLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    # ------------------------------------------------------------------ the owner file
    def _take(self, deadline: float, blocking: bool) -> None:
        pause = self.poll_interval
        while True:
            token = secrets.token_hex(8)
            data = orjson.dumps(dict(identity(), token=token, acquired=time.time()))
            if self._create(data):
                self._token = token
                return
            try:
                found, st = read_object(self.owner, self.ledger)
            except FileNotFoundError:  # released meanwhile (or a view's cached name): again
                if not blocking or time.monotonic() > deadline:
                    raise Timeout(str(self.owner)) from None
                time.sleep(self.poll_interval)
                continue
            if self._breakable(found, st) and self._break(found, st, data, token):
                return
            if not blocking or time.monotonic() > deadline:
                raise Timeout(str(self.owner))
            time.sleep(pause)
            pause = min(2 * pause, _POLL_MAX)

    def _create(self, data: bytes) -> bool:
        """The owner file, created whole (a SIGKILL between a create and its write would leave
        an empty one, that only its age could break); on a full disk or quota, created empty
        and held so."""
        try:
            return create_exclusive(self.owner, data, whole=True)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
        return create_exclusive(self.owner, data, partial=True)

    @staticmethod
    def _breakable(found: dict[str, Any] | None, st: os.stat_result) -> bool:
        if found is not None and gone(found):
            return True
        return time.time() - st.st_mtime > LOCK_LEASE

    def _marker(self, token: str, generation: int = 1) -> Path:
        """The marker of a break of the owner file ``token``: its first generation, which a
        holder looks for to learn it was broken, or a later one (`_claim_break`)."""
        more = "" if generation == 1 else f".{generation}"
        return self.owner.with_name(f"{self.owner.name}.break-{token}{more}")

    def _claim_break(self, victim: str, data: bytes) -> Path | None:
        """The marker this process created to break the owner file ``victim``, or None while
        another live process breaks it. A marker whose breaker is gone (killed between its
        marker and its write of the owner file) is passed by creating the next generation,
        each exclusively: of two processes that find it so, one goes on."""
        generation, vanished = 1, 0
        while True:
            marker = self._marker(victim, generation)
            if create_exclusive(marker, data, whole=True):
                return marker
            try:
                breaker, st = read_object(marker, self.ledger)
            except FileNotFoundError:  # removed meanwhile (cleaned up): look again
                vanished += 1
                if vanished > 3:
                    return None
                continue
            if time.time() - st.st_mtime <= LOCK_LEASE and (breaker is None
                                                             or not gone(breaker)):
                return None  # another process breaks it now
            generation += 1

    def _break(self, found: dict[str, Any] | None, st: os.stat_result, data: bytes,
               token: str) -> bool:
        victim = _instance(found, st)
        marker = self._claim_break(victim, data)
        if marker is None:
            return False  # another process breaks it
        try:
            again, st2 = read_object(self.owner, self.ledger)
        except FileNotFoundError:
            again, st2 = None, None
        if st2 is None or _instance(again, st2) != victim:
            marker.unlink(missing_ok=True)  # released meanwhile
            return False
        atomic_write(self.owner, data, durable=False)
        self._token = token
        logger.warning("ledger lock %s: its holder %s %s; taken over", self.owner,
                       describe(found), "is gone" if found is not None and gone(found)
                       else f"had not touched it for {time.time() - st.st_mtime:.0f} s")
        self._remove_old_markers()
        return True

    def _remove_old_markers(self) -> None:
        prefix = self.owner.name + ".break-"
        now = time.time()
        for name in os.listdir(self.owner.parent):
            if name.startswith(prefix):
                path = self.owner.with_name(name)
                try:
                    if now - os.stat(path).st_mtime > CLEANUP_AGE:
                        os.unlink(path)
                except OSError:
                    pass

    def touch(self) -> None:
        """Refresh the owner file's modification time (from the toucher thread)."""
        token = self._token
        if token is None:
            return
        if os.path.lexists(self._marker(token)):
            return  # broken: the file is another holder's now
        try:
            os.utime(self.owner)
        except OSError as exc:
            logger.warning("ledger lock %s: could not refresh it (%s)", self.owner, exc)


def _instance(found: dict[str, Any] | None, st: os.stat_result) -> str:
    """What names one instance of an owner file: its token, or (being written) its inode
    and modification time."""
    token = (found or {}).get("token")
    if type(token) is str and token.isalnum():
        return token
    return f"{st.st_ino}-{st.st_mtime_ns}"


class _Toucher:
    """One thread per process that touches the owner files of the locks held for long."""

    def __init__(self) -> None:
        self._held: set[LedgerLock] = set()
        self._mutex = threading.Lock()
        self._pid: int | None = None

    def add(self, lock: LedgerLock) -> None:
        with self._mutex:
            self._held.add(lock)
            if self._pid != os.getpid():  # none yet, or a child of a fork
                self._pid = os.getpid()
                threading.Thread(target=self._loop, name="ledger-lock-touch",
                                 daemon=True).start()

    def discard(self, lock: LedgerLock) -> None:
        with self._mutex:
            self._held.discard(lock)

    def _loop(self) -> None:
        block_stop_signals()
        while True:
            time.sleep(TOUCH_EVERY)
            with self._mutex:
                held = list(self._held)
            for lock in held:
                lock.touch()


_TOUCHER = _Toucher()
