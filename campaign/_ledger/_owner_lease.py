"""The driver's lease on its ledger, made of the exclusive creates of `campaign._ledger._exclusive`.

No guarantee here rests on ``flock`` (shared file systems with local locks let two nodes hold
one lock): a create with ``O_CREAT | O_EXCL`` succeeds for one process only, a rename replaces
a name whole (docs/ledger.md, "The driver's lease").

The driver's lease is ``<ledger>.driver.<n>``, n = 1, 2, ... (its *generations*): one small JSON
object, `identity` and ``token``, ``acquired``, ``renewed``, ``expires``, ``seconds`` and
``released``. The highest generation is the lease. It is *held* unless it is released, its
holder is provably gone (`campaign._ledger._exclusive.gone`: on this host, same boot and pid
namespace, and no process with its pid and start time), or its ``expires`` has passed by the
reader's clock and its holder does not provably run on this host
(`campaign._ledger._exclusive.alive_here`). A driver takes the lease by creating generation n + 1
exclusively, after it found generation n free; of two that found it free at once, one creates
n + 1 and the other is refused by the file system. No lease file is ever removed and created
again under the same name by a taker.

The holder renews its own generation every ``seconds / 4`` from a thread (a rename of a new
version over its own name: no other process writes that name) and, at every renewal and before
every commit of the ledger (`DriverLease.check`), looks for generation n + 1: once it exists,
its lease was taken over (it stalled past ``expires``), and it stops writing the ledger.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from .._errors import DriverBusyError, LeaseLostError
from .._signals import block_stop_signals
from ._atomic import atomic_write
from ._exclusive import alive_here, create_exclusive, describe, gone, identity
from ._ownership import read_object
from ._paths import LedgerPaths

logger = logging.getLogger(__name__)

#: Seconds a driver's lease lasts unless renewed (it is renewed every quarter of it), unless
#: the environment variable `LEASE_ENV` says otherwise. A driver that died on another host is
#: taken over this long after its last renewal; one that died on this host at once.
DRIVER_LEASE = 60.0
LEASE_ENV = "DIFFSOUP_DRIVER_LEASE_SECONDS"
#: A generation older than the current one is removed only once its file is this many seconds
#: old: far longer than a shared file system caches a folder's listing (NFS ``acdirmax``,
#: 60 s by default), so a taker working from a stale listing finds every number it could
#: create still taken.
CLEANUP_AGE = 600.0


def lease_seconds_default() -> float:
    """`DRIVER_LEASE`, or the seconds the environment variable `LEASE_ENV` gives."""
    text = os.environ.get(LEASE_ENV, "").strip()
    if not text:
        return DRIVER_LEASE
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{LEASE_ENV}={text!r} is not a number of seconds > 0; set it to e.g. "
                         f"{DRIVER_LEASE:.0f}, or unset it")
    return value


def free(found: dict[str, Any] | None, st: os.stat_result, seconds: float,
         now: float | None = None) -> bool:
    """Whether a lease (as `campaign._ledger._ownership.read_object` gave it) may be taken:
    released, its holder provably gone, or expired by the reader's clock, unless its holder provably
    runs on this host (a driver stopped by Ctrl-Z keeps its lease, as it kept its ``flock``). A file
    being written
    (``found`` None) is judged by its age (its modification time, the file system's clock)
    against ``seconds``."""
    now = time.time() if now is None else now
    if found is None:
        return now - st.st_mtime > seconds
    if found.get("released") or gone(found):
        return True
    if alive_here(found):
        return False
    expires = found.get("expires")
    return not (isinstance(expires, (int, float)) and expires > now)


class DriverLease:
    """The lease ``<ledger>.driver.<n>`` of the process that drives ``ledger`` (module
    docstring). `acquire`, then `check` before each write, then `release`."""

    def __init__(self, ledger: Path | LedgerPaths, seconds: float | None = None):
        paths = LedgerPaths.of(ledger)
        self.ledger = paths.file
        self.base = paths.driver.name + "."
        self.seconds = lease_seconds_default() if seconds is None else float(seconds)
        self.generation: int | None = None
        self.expires = 0.0
        self.taken_by: dict[str, Any] | None = None  # who took it over, once it was
        self._content: dict[str, Any] = {}
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def path(self, generation: int) -> Path:
        return self.ledger.with_name(f"{self.base}{generation}")

    def generations(self) -> list[int]:
        """The generations whose files exist, as the folder lists them."""
        try:
            names = os.listdir(self.ledger.parent)
        except FileNotFoundError:
            return []
        cut = len(self.base)
        return sorted(int(n[cut:]) for n in names if n.startswith(self.base) and n[cut:].isdigit())

    def _newest(self) -> int:
        """The highest generation: the folder's listing, then the names after it looked up
        (a listing may be cached for a while; a lookup of the name past it is not)."""
        n = max(self.generations(), default=0)
        while os.path.lexists(self.path(n + 1)):
            n += 1
        return n

    def holder(self) -> dict[str, Any] | None:
        """The lease's holder while some process holds it, else None (a look, no change)."""
        for _ in range(20):
            n = self._newest()
            if n == 0:
                return None
            try:
                found, st = read_object(self.path(n), self.ledger)
            except FileNotFoundError:
                continue  # removed meanwhile: look again
            return None if free(found, st, self.seconds) else (found or {"expires": None})
        return None

    # ------------------------------------------------------------------ holding it
    def acquire(self) -> None:
        """Take the lease, or raise `DriverBusyError` naming its live holder's host and pid."""
        n = self._newest()
        for _ in range(1000):
            if n:
                try:
                    found, st = read_object(self.path(n), self.ledger)
                except FileNotFoundError:
                    n = self._newest()
                    continue
                if not free(found, st, self.seconds):
                    raise DriverBusyError(busy_text(self.ledger, self._named(n, found),
                                                    self.seconds))
                if found is not None and not found.get("released"):
                    logger.warning("ledger %s: the driver lease of %s %s; taking it over",
                                   self.ledger, describe(found),
                                   "is gone" if gone(found) else "expired")
            content = dict(identity(), token=secrets.token_hex(8), generation=n + 1,
                           seconds=self.seconds, acquired=time.time(), released=False)
            content["renewed"] = content["acquired"]
            content["expires"] = content["acquired"] + self.seconds
            if not create_exclusive(self.path(n + 1), orjson.dumps(content), durable=True,
                                    whole=True):
                n += 1  # another driver made it first: judge that one
                continue
            newest = self._newest()
            if newest > n + 1:  # a later generation was there already (a stale listing)
                self.path(n + 1).unlink(missing_ok=True)
                n = newest
                continue
            self.generation, self._content, self.expires = n + 1, content, content["expires"]
            self._cleanup()
            self._stop.clear()
            self._thread = threading.Thread(target=self._renew_loop, name="driver-lease",
                                            daemon=True)
            self._thread.start()
            return
        raise DriverBusyError(f"ledger {self.ledger}: could not take the driver lease (its "
                              "generations kept changing); another driver is starting: wait "
                              "for it, or pass another ledger_path")

    def _named(self, n: int, found: dict[str, Any] | None) -> dict[str, Any] | None:
        """The holder of generation ``n`` for a message: read again for up to a second if
        it read empty (being written, or a size cached by a view of a shared file system)."""
        deadline = time.monotonic() + 1.0
        while found is None and time.monotonic() < deadline:
            time.sleep(0.05)
            try:
                found = read_object(self.path(n), self.ledger)[0]
            except FileNotFoundError:
                break
        return found

    def check(self, *, lookups: bool = True) -> None:
        """Raise `LeaseLostError` if another process took the lease over: before every write
        (two lookups: the next generation's name and our own), and before a task starts
        (``lookups=False``: a look at the clock). Either renews the lease now if it is overdue
        (this process was stopped or stalled), which finds a takeover."""
        if self.taken_by is not None:
            raise self._lost()
        n = self.generation
        if n is None:
            return
        if time.time() > self.expires - 0.5 * self.seconds:
            self._renew()
        elif lookups and (os.path.lexists(self.path(n + 1))
                          or not os.path.lexists(self.path(n))):
            self._renew()
        if self.taken_by is not None:
            raise self._lost()

    def release(self, *, unused: bool = False) -> None:
        """Stop renewing and mark the lease released (the next driver takes it at once).
        ``unused``: the driver wrote nothing (its open failed): its generation is removed,
        leaving the folder as it found it (it is the highest: the next one takes its number)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        with self._mutex:
            n, self.generation = self.generation, None
            if n is None or self.taken_by is not None:
                return
            now = time.time()
            self._content.update(released=True, renewed=now, expires=now)
            try:
                if unused:
                    os.unlink(self.path(n))
                    return
                atomic_write(self.path(n), orjson.dumps(self._content), durable=False)
            except OSError as exc:  # it expires by itself
                logger.warning("ledger %s: could not release the driver lease %s (%s); it "
                               "expires in %.0f s", self.ledger, self.path(n), exc,
                               self.expires - now)

    # ------------------------------------------------------------------ renewing it
    def _renew_loop(self) -> None:
        block_stop_signals()
        while not self._stop.wait(self.seconds / 4):
            try:
                self._renew()
            except OSError as exc:
                logger.warning("ledger %s: renewing the driver lease failed (%s); retrying",
                               self.ledger, exc)
            if self.taken_by is not None:
                return

    def _renew(self) -> None:
        with self._mutex:
            n = self.generation
            if n is None or self.taken_by is not None:
                return
            newest = self._newest()
            if newest > n or not os.path.lexists(self.path(n)):
                taker: dict[str, Any] = {}
                if newest > n:
                    try:
                        taker = read_object(self.path(newest), self.ledger)[0] or {}
                    except FileNotFoundError:
                        pass
                self.taken_by = taker
                logger.error("ledger %s: this driver's lease was taken over by %s (this "
                             "process stalled past its lease); it writes the ledger no more",
                             self.ledger, describe(taker))
                return
            now = time.time()
            self._content.update(renewed=now, expires=now + self.seconds)
            atomic_write(self.path(n), orjson.dumps(self._content), durable=False)
            self.expires = now + self.seconds
        self._cleanup()

    def _cleanup(self) -> None:
        """Remove the generations before ours whose files are older than `CLEANUP_AGE`."""
        n = self.generation
        if n is None:
            return
        now = time.time()
        for g in self.generations():
            if g >= n:
                break
            try:
                if now - os.stat(self.path(g)).st_mtime > CLEANUP_AGE:
                    os.unlink(self.path(g))
            except OSError:
                pass

    def _lost(self) -> LeaseLostError:
        return LeaseLostError(
            f"ledger {self.ledger}: this driver's lease was taken over by the driver "
            f"{describe(self.taken_by)} (this process was stopped or stalled for longer than "
            f"its lease of {self.seconds:.0f} s), so it stopped writing the ledger: the other "
            "driver runs the tasks this one had not recorded. Fix: do not suspend a driver for "
            f"longer than its lease, or set {LEASE_ENV} to more seconds")


def busy_text(ledger: Path, holder: dict[str, Any] | None, seconds: float) -> str:
    """What `DriverBusyError` says about a driver lease held by ``holder``."""
    expires = (holder or {}).get("expires")
    left = ""
    if isinstance(expires, (int, float)):
        left = (f"; if it is gone (its node lost), its lease expires in "
                f"{max(0.0, expires - time.time()):.0f} s and a run after that takes over")
    return (f"ledger {ledger} is in use by a live campaign driver ({describe(holder)}); wait "
            f"for it to finish, stop it, or pass another ledger_path{left}")


def driver_holder(ledger: Path) -> dict[str, Any] | None:
    """The live driver of ``ledger`` (its lease's holder), or None."""
    return DriverLease(ledger).holder()
