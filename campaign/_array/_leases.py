"""Task leases of array workers: claim a task, renew the claim by a heartbeat, release it.

``<ledger>.work/leases/<key>.json`` (shared by all submissions) says who runs a task now. It is
created with ``O_CREAT | O_EXCL`` (one winner), refreshed by a heartbeat (atomic replace) and
deleted when the task ends. A lease whose ``expires`` has passed belongs to a dead worker and is
taken over by an exclusive create of its next generation, ``<key>.<g + 1>.json`` (the first is
``<key>.json``): of two workers that found it expired, one creates it; no lock is needed, and
none is trusted. The highest generation is the lease; a holder whose next generation exists
was taken over (`Leases.taken_over`: it stalled past its lease), and records its outcome as a
superseded attempt. Done marks and the layout are campaign/_array/_workdir.py's.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import orjson

from .._ledger import _ownership
from .._ledger._atomic import atomic_write
from .._ledger._exclusive import create_exclusive
from .._signals import block_stop_signals
from . import _skew
from ._workdir import checked_root, read_json, task_key

logger = logging.getLogger(__name__)


class Marks(Protocol):
    """Where leases live and how their tasks end: a `WorkDir` for tasks, the shares' folder
    for shares (`campaign._array._shares.ShareMarks`)."""

    leases: Path
    latest: Path

    def is_done(self, task_id: str) -> bool: ...

    def mark_done(self, task_id: str, *, accepted: bool) -> None: ...


class FolderMarks:
    """`Leases` marks of a folder whose leases never end a task: the merge turn
    (`campaign._array._worker`), one holder at a time, taken over once its holder is dead."""

    def __init__(self, folder: Path, ledger: Path):
        self.leases = self.latest = folder
        _ownership.make_folder(folder, ledger)

    def is_done(self, task_id: str) -> bool:
        return False

    def mark_done(self, task_id: str, *, accepted: bool) -> None:
        pass


M = TypeVar("M", bound=Marks)


class Leases(Generic[M]):
    """The claims of one submission's workers on its tasks (a `WorkDir`), or on its shares
    (``key``: the name of a lease's file from what it leases; by default the task's key)."""

    def __init__(self, work: M, *, lease_seconds: float = 60.0,
                 key: Callable[[str], str] = task_key):
        self.work = work
        self.lease_seconds = lease_seconds
        self._key = key
        self._mutex = threading.Lock()
        self._next_skew = 0.0  # when a claim measures the clock skew again (`_clock_skew`)

    def _path(self, task_id: str, generation: int = 1) -> Path:
        key = self._key(task_id)
        return self.work.leases / (f"{key}.json" if generation == 1 else
                                   f"{key}.{generation}.json")

    def _current(self, task_id: str) -> int:
        """The task's lease's highest generation (1 when there is none), by lookups upward."""
        generation = 1
        while exists_fresh(self._path(task_id, generation + 1)):
            generation += 1
        return generation

    def taken_over(self, lease: dict[str, Any]) -> dict[str, Any] | None:
        """The owner of the lease that took ``lease`` over, or None while ``lease`` is the
        task's lease; two lookups. Taken over: its next generation exists, or its own file is
        gone (the taker ended the task and removed the generations before its own; then the
        taker is the one whose record `latest/` holds)."""
        task_id = lease["task_id"]
        generation = lease.get("generation", 1)
        if exists_fresh(self._path(task_id, generation + 1)):
            taker = read_json(self._path(task_id, self._current(task_id)))
            owner = taker.get("owner") if type(taker) is dict else None
        elif not lease.get("released") and not exists_fresh(self._path(task_id, generation)):
            rec = read_json(self.work.latest / f"{task_key(task_id)}.json")
            owner = {key: rec.get(key) for key in ("worker", "host", "pid")} \
                if type(rec) is dict else None
        else:
            return None
        return owner if type(owner) is dict else {"worker": "unknown"}

    def claim(self, task_id: str, owner: dict[str, Any]) -> dict[str, Any] | None:
        """Take the lease of a task, or None if another worker holds it or it is done.

        Returns the lease; its ``stolen_from`` names the dead owner whose expired lease was taken.
        """
        if self.work.is_done(task_id):
            return None
        path = self._path(task_id)
        lease = self._new_lease(task_id, owner)
        if _create(path, lease):
            self._clock_skew(lease, path)
            if exists_fresh(self._path(task_id, 2)):  # a later generation is being released
                path.unlink(missing_ok=True)
                return None
            return self._unless_done(path, lease)
        generation = self._current(task_id)
        path = self._path(task_id, generation)
        old = read_json(path)
        if old is None:  # being written, or left empty by a crash: judge by its age
            try:
                age = time.time() - path.stat().st_mtime
            except FileNotFoundError:
                return None
            if age < self.lease_seconds:
                return None
            old = {"owner": {"worker": "unknown"}, "expires": 0.0}
        elif old["expires"] > time.time():
            return None
        # rare: taking over a dead worker's lease, by creating its next generation
        lease.update(generation=generation + 1, stolen_from=old["owner"])
        path = self._path(task_id, generation + 1)
        if not create_exclusive(path, orjson.dumps(lease)):
            return None  # another worker took it over first
        self._clock_skew(lease, path)
        logger.info("task %r: the lease of %s expired; taken over", task_id, old["owner"])
        return self._unless_done(path, lease)

    def _unless_done(self, path: Path, lease: dict[str, Any]) -> dict[str, Any] | None:
        if self.work.is_done(lease["task_id"]):  # it ended between our look and our claim
            path.unlink(missing_ok=True)
            return None
        return lease

    def _new_lease(self, task_id: str, owner: dict[str, Any]) -> dict[str, Any]:
        now = time.time()
        return {"task_id": task_id, "owner": owner, "claimed": now, "heartbeat": now,
                "expires": now + self.lease_seconds}

    def heartbeat(self, lease: dict[str, Any]) -> bool:
        """Extend a lease we hold. False if it is no longer ours (released or taken over)."""
        path = self._path(lease["task_id"], lease.get("generation", 1))
        with self._mutex:  # never re-create a lease that `release` just removed
            if lease.get("released"):
                return True
            if self.taken_over(lease) is not None:
                return False
            current = read_json(path)
            if current is None or current["owner"] != lease["owner"]:
                return False
            now = time.time()
            lease.update(heartbeat=now, expires=now + self.lease_seconds)
            st = atomic_write(path, orjson.dumps(lease), durable=False)
            self._clock_skew(lease, path, st)
        return True

    def _clock_skew(self, lease: dict[str, Any], path: Path,
                    st: os.stat_result | None = None) -> None:
        """This host's clock against the file server's, measured on the lease just written
        (``st``: its stat; a claim stats it, at most once per ``lease_seconds``): kept as the
        lease's ``clock_skew``, written with its next renewal (a claim's past
        `campaign._array._skew.FRACTION` * ``lease_seconds`` at once, for `campaign status`), and
        warned about once past that bound."""
        claimed = st is None
        if st is None:
            if time.monotonic() < self._next_skew:
                return
            try:
                st = os.stat(path)
            except OSError:
                return
        self._next_skew = time.monotonic() + self.lease_seconds
        lease["clock_skew"] = skew = _skew.measure(lease["heartbeat"], st)
        _skew.warn_once(skew, self.lease_seconds, f"the lease of task {lease['task_id']!r}")
        if claimed and _skew.excess(skew, self.lease_seconds) is not None:
            try:
                atomic_write(path, orjson.dumps(lease), durable=False)
            except OSError as exc:
                logger.debug("lease %s: its clock_skew not written (%s)", path, exc)

    def release(self, lease: dict[str, Any], *, done: bool, accepted: bool = False) -> None:
        """The task ended: mark it done (accepted or failed) if so, then drop the lease."""
        if done:
            self.work.mark_done(lease["task_id"], accepted=accepted)
        task_id, generation = lease["task_id"], lease.get("generation", 1)
        with self._mutex:
            lease["released"] = True
            if self.taken_over(lease) is not None:
                return  # the task's lease is another worker's now: its files stay
            path = self._path(task_id, generation)
            current = read_json(path)
            if current is not None and current["owner"] != lease["owner"]:
                return
            # the earlier generations first, ours last: a worker that claims the task meanwhile
            # finds a later generation there and leaves it
            for earlier in range(1, generation):
                self._path(task_id, earlier).unlink(missing_ok=True)
            path.unlink(missing_ok=True)

    def holders(self) -> list[dict[str, Any]]:
        """The leases held now, one per task, its highest generation (for `campaign status`)."""
        return _newest_per_task(self.work.leases)


def exists_fresh(path: Path) -> bool:
    """Whether the lease file ``path`` exists, asked of the file server by an open: a stat may
    answer from the client's attribute cache (NFS ``acregmin``, FUSE ``attr_timeout``) for
    seconds after another node deleted the file, an open revalidates it (NFS close-to-open,
    FUSE's ``OPEN``). A file that exists but may not be opened counts as existing."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    os.close(fd)
    return True


def _create(path: Path, lease: dict[str, Any]) -> bool:
    """The claim's exclusive create of a first lease: False when another worker's exists (a lost
    race, also where sshfs reports it as ``EPERM``: `create_exclusive`)."""
    return create_exclusive(path, orjson.dumps(lease))


def live_leases(ledger: Path) -> list[dict[str, Any]]:
    """Leases of any submission of this ledger that have not expired."""
    root = checked_root(ledger)
    if root is None:
        return []
    now = time.time()
    return [lease for lease in _newest_per_task(root / "leases") if lease["expires"] > now]


def _newest_per_task(folder: Path) -> list[dict[str, Any]]:
    """The leases in ``folder``, of each task the highest generation that could be read."""
    newest: dict[str, dict[str, Any]] = {}
    for path in folder.glob("*.json"):
        lease = read_json(path)
        if lease is None:
            continue
        have = newest.get(lease["task_id"])
        if have is None or lease.get("generation", 1) > have.get("generation", 1):
            newest[lease["task_id"]] = lease
    return list(newest.values())


class Heartbeat:
    """Renews the lease being run (``lease``; None between tasks) every ``interval`` seconds
    from a thread."""

    def __init__(self, leases: Leases, interval: float):
        self.leases, self.interval = leases, interval
        self.lease: dict[str, Any] | None = None
        self._stop = threading.Event()

    def __enter__(self) -> Heartbeat:
        self._thread = threading.Thread(target=self._loop, name="lease-heartbeat", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        block_stop_signals()  # SIGUSR1/SIGTERM go to the main thread, which runs fn
        while not self._stop.wait(self.interval):
            lease = self.lease
            if lease is not None:
                try:
                    if not self.leases.heartbeat(lease):
                        logger.error("lost the lease of task %r", lease["task_id"])
                except OSError as exc:
                    logger.warning("lease heartbeat failed: %s", exc)
