"""Task leases of array workers: claim a task, renew the claim by a heartbeat, release it.

``<ledger>.work/leases/<key>.json`` (shared by all submissions) says who runs a task now. It is
created with ``O_CREAT | O_EXCL`` (one winner), refreshed by a heartbeat (atomic replace) and
deleted when the task ends. A lease whose ``expires`` has passed belongs to a dead worker and is
taken over under ``<ledger>.lock``. Done marks and the layout are campaign/_workdir.py's.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from . import _document
from ._atomic import atomic_write
from ._signals import block_stop_signals
from ._workdir import WorkDir, read_json, task_key, work_root

logger = logging.getLogger(__name__)


class Leases:
    """The claims of one submission's workers on its tasks (a `WorkDir`)."""

    def __init__(self, work: WorkDir, *, lease_seconds: float = 60.0):
        self.work = work
        self.lease_seconds = lease_seconds
        self._mutex = threading.Lock()

    def _path(self, task_id: str) -> Path:
        return self.work.leases / f"{task_key(task_id)}.json"

    def claim(self, task_id: str, owner: dict[str, Any]) -> dict[str, Any] | None:
        """Take the lease of a task, or None if another worker holds it or it is done.

        Returns the lease; its ``stolen_from`` names the dead owner whose expired lease was taken.
        """
        if self.work.is_done(task_id):
            return None
        path = self._path(task_id)
        lease = self._new_lease(task_id, owner)
        if _create(path, lease):
            return self._unless_done(path, lease)
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
        with _document.file_lock(self.work.ledger):  # rare: taking over a dead worker's lease
            again = read_json(path)
            if again != old and not (again is None and old["expires"] == 0.0):
                return None
            path.unlink(missing_ok=True)
            lease["stolen_from"] = old["owner"]
            if not _create(path, lease):
                return None
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
        path = self._path(lease["task_id"])
        with self._mutex:  # never re-create a lease that `release` just removed
            if lease.get("released"):
                return True
            current = read_json(path)
            if current is None or current["owner"] != lease["owner"]:
                return False
            now = time.time()
            lease.update(heartbeat=now, expires=now + self.lease_seconds)
            atomic_write(path, orjson.dumps(lease), durable=False)
        return True

    def release(self, lease: dict[str, Any], *, done: bool, accepted: bool = False) -> None:
        """The task ended: mark it done (accepted or failed) if so, then drop the lease."""
        if done:
            self.work.mark_done(lease["task_id"], accepted=accepted)
        path = self._path(lease["task_id"])
        with self._mutex:
            lease["released"] = True
            current = read_json(path)
            if current is not None and current["owner"] == lease["owner"]:
                path.unlink(missing_ok=True)

    def holders(self) -> list[dict[str, Any]]:
        """The leases held now (for `campaign status`)."""
        return [lease for path in self.work.leases.glob("*.json")
                if (lease := read_json(path)) is not None]


def _create(path: Path, lease: dict[str, Any]) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, orjson.dumps(lease))
    finally:
        os.close(fd)
    return True


def live_leases(ledger: Path) -> list[dict[str, Any]]:
    """Leases of any submission of this ledger that have not expired."""
    root = work_root(ledger)
    if not root.exists():
        return []
    now = time.time()
    found = []
    for path in (root / "leases").glob("*.json"):
        lease = read_json(path)
        if lease is not None and lease["expires"] > now:
            found.append(lease)
    return found


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
