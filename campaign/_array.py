"""Many workers on one ledger (Slurm job arrays): leases, done marks and fragment files.

Beside the ledger ``L``, the folder ``L.work/`` holds ``leases/`` (shared by all submissions) and
one folder ``<submission>/`` per submission with ``done/`` and ``fragments/``:

- ``leases/<key>.json``: who runs a task now. Created with ``O_CREAT | O_EXCL`` (one winner),
  refreshed by a heartbeat (atomic replace), deleted when the task ends. A lease whose
  ``expires`` has passed belongs to a dead worker and is taken over under ``<ledger>.lock``.
- ``latest/<key>.json`` (shared): the newest record a worker wrote for the task, so that the next
  worker to claim it continues its attempts and history.
- ``<submission>/done/<key>``: the task ended (accepted or failed) in this submission: nobody
  claims it again in it. ``accepted/<key>`` (shared): accepted; no submission claims it again.
- ``fragments/<time>-<owner>-<n>.json``: the records a worker wrote, each file written
  atomically. `merge_fragments` applies them to the ledger under its lock; a fragment is deleted
  only once a later merge finds the ledger already holds its records, so a merge lost to a
  broken lock (NFS) delays a record but never loses it.

``<key>`` is the SHA-1 of the task id (task ids may hold any character).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

from . import _document
from ._atomic import HOST, atomic_write
from ._records import merge
from ._status import ACCEPTED

logger = logging.getLogger(__name__)


def work_root(ledger: Path) -> Path:
    """``<ledger>.work`` beside the file the ledger path resolves to (symlinks followed)."""
    target = Path(os.path.realpath(ledger))
    return target.with_name(target.name + ".work")


def task_key(task_id: str) -> str:
    return hashlib.sha1(task_id.encode()).hexdigest()


class WorkDir:
    """The shared folder of one submission (one `campaign submit`)."""

    def __init__(self, ledger: Path, submission: str, *, lease_seconds: float = 60.0):
        self.ledger = Path(ledger)
        self.submission = submission
        self.root = work_root(self.ledger) / submission
        self.leases = work_root(self.ledger) / "leases"  # shared: one holder across submissions
        self.done = self.root / "done"
        self.latest = work_root(self.ledger) / "latest"
        self.accepted = work_root(self.ledger) / "accepted"
        self.fragments = self.root / "fragments"
        self.lease_seconds = lease_seconds
        for folder in (self.leases, self.done, self.accepted, self.latest, self.fragments):
            folder.mkdir(parents=True, exist_ok=True)
        self._seq = 0
        self._mutex = threading.Lock()

    # ------------------------------------------------------------------ leases
    def claim(self, task_id: str, owner: dict[str, Any]) -> dict[str, Any] | None:
        """Take the lease of a task, or None if another worker holds it or it is done.

        Returns the lease; its ``stolen_from`` names the dead owner whose expired lease was taken.
        """
        key = task_key(task_id)
        if self._done(key):
            return None
        path = self.leases / f"{key}.json"
        lease = self._new_lease(task_id, owner)
        if self._create(path, lease):
            return self._unless_done(key, path, lease)
        old = self._read(path)
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
        with _document.file_lock(self.ledger):  # rare: taking over a dead worker's lease
            again = self._read(path)
            if again != old and not (again is None and old["expires"] == 0.0):
                return None
            path.unlink(missing_ok=True)
            lease["stolen_from"] = old["owner"]
            if not self._create(path, lease):
                return None
        logger.info("task %r: the lease of %s expired; taken over", task_id, old["owner"])
        return self._unless_done(key, path, lease)

    def is_done(self, task_id: str) -> bool:
        return self._done(task_key(task_id))

    def _done(self, key: str) -> bool:
        """Ended in this submission, or accepted in any (another may run beside it)."""
        return (self.done / key).exists() or (self.accepted / key).exists()

    def _unless_done(self, key: str, path: Path, lease: dict[str, Any]) -> dict[str, Any] | None:
        if self._done(key):  # it ended between our look and our claim
            path.unlink(missing_ok=True)
            return None
        return lease

    def _new_lease(self, task_id: str, owner: dict[str, Any]) -> dict[str, Any]:
        now = time.time()
        return {"task_id": task_id, "owner": owner, "claimed": now, "heartbeat": now,
                "expires": now + self.lease_seconds}

    @staticmethod
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

    @staticmethod
    def _read(path: Path) -> dict[str, Any] | None:
        try:
            return orjson.loads(path.read_bytes())
        except (FileNotFoundError, orjson.JSONDecodeError):
            return None  # gone, or being written this instant

    def heartbeat(self, lease: dict[str, Any]) -> bool:
        """Extend a lease we hold. False if it is no longer ours (released or taken over)."""
        path = self.leases / f"{task_key(lease['task_id'])}.json"
        with self._mutex:  # never re-create a lease that `release` just removed
            if lease.get("released"):
                return True
            current = self._read(path)
            if current is None or current["owner"] != lease["owner"]:
                return False
            now = time.time()
            lease.update(heartbeat=now, expires=now + self.lease_seconds)
            atomic_write(path, orjson.dumps(lease), durable=False)
        return True

    def release(self, lease: dict[str, Any], *, done: bool, accepted: bool = False) -> None:
        """The task ended: mark it done (accepted or failed) if so, then drop the lease."""
        key = task_key(lease["task_id"])
        if accepted:
            (self.accepted / key).touch()
        if done:
            (self.done / key).touch()
        path = self.leases / f"{key}.json"
        with self._mutex:
            lease["released"] = True
            current = self._read(path)
            if current is not None and current["owner"] == lease["owner"]:
                path.unlink(missing_ok=True)

    def holders(self) -> list[dict[str, Any]]:
        """The leases held now (for `campaign status`)."""
        found = []
        for path in self.leases.glob("*.json"):
            lease = self._read(path)
            if lease is not None:
                found.append(lease)
        return found

    # ------------------------------------------------------------------ fragments
    def write_fragment(self, records: dict[str, dict[str, Any]], owner: dict[str, Any]) -> Path:
        """Write records as a new fragment file (atomically); returns its path."""
        self._seq += 1
        name = (f"{time.time_ns():020d}-{owner.get('worker') or HOST}-{os.getpid()}-"
                f"{self._seq}-{uuid.uuid4().hex[:6]}.json")
        path = self.fragments / name.replace("/", "_")
        atomic_write(path, orjson.dumps({"owner": owner, "records": records}))
        for task_id, rec in records.items():  # the newest record, for the next claimer
            atomic_write(self.latest / f"{task_key(task_id)}.json", orjson.dumps(rec),
                         durable=False)
        return path

    def newest(self, task_id: str, known: dict[str, Any]) -> dict[str, Any]:
        """The newest record of a task: ``known``, or what a worker wrote for it since."""
        rec = self._read(self.latest / f"{task_key(task_id)}.json")
        if rec is not None and rec["attempts"] >= known["attempts"]:
            return rec
        return known


def fragment_files(ledger: Path) -> list[Path]:
    """Every fragment of every submission of this ledger, oldest first."""
    root = work_root(ledger)
    if not root.exists():
        return []
    return sorted(root.glob("*/fragments/*.json"), key=lambda p: p.name)


def _load_fragment(path: Path) -> dict[str, dict[str, Any]] | None:
    try:
        return orjson.loads(path.read_bytes())["records"]
    except (FileNotFoundError, orjson.JSONDecodeError, KeyError, TypeError):
        return None


def _reflected(tasks: dict[str, dict[str, Any]], task_id: str, rec: dict[str, Any]) -> bool:
    have = tasks.get(task_id)
    if have is None:
        return False
    if have["status"] == ACCEPTED:
        return True
    return (have["attempts"], have["status"], have["ended"]) == (
        rec["attempts"], rec["status"], rec["ended"])


def absorb_fragments(doc: dict[str, Any], ledger: Path) -> list[Path]:
    """Apply every fragment to ``doc`` in place; return the fragments that were already in it
    (safe to delete once ``doc`` is written)."""
    tasks = doc["tasks"]
    settled = []
    for path in fragment_files(ledger):
        records = _load_fragment(path)
        if records is None:
            continue
        if all(_reflected(tasks, tid, rec) for tid, rec in records.items()):
            settled.append(path)
            continue
        for tid, rec in records.items():
            have = tasks.get(tid)
            if have is not None and have["attempts"] > rec["attempts"]:
                continue  # a newer attempt is recorded already
            tasks[tid] = merge(have, rec)
    return settled


def merge_fragments(ledger: Path) -> int:
    """Merge the fragments into the ledger under its lock; returns how many were applied."""
    pending = fragment_files(ledger)
    if not pending:
        return 0
    settled: list[Path] = []

    def mutate(doc: dict[str, Any]) -> None:
        settled.extend(absorb_fragments(doc, ledger))

    _document.update(ledger, mutate)
    for path in settled:
        path.unlink(missing_ok=True)
    return len(pending) - len(settled)


def live_leases(ledger: Path) -> list[dict[str, Any]]:
    """Leases of any submission of this ledger that have not expired."""
    root = work_root(ledger)
    if not root.exists():
        return []
    now = time.time()
    found = []
    for path in (root / "leases").glob("*.json"):
        lease = WorkDir._read(path)
        if lease is not None and lease["expires"] > now:
            found.append(lease)
    return found


def overlay(doc: dict[str, Any], ledger: Path) -> dict[str, Any]:
    """The ledger as it will be once its fragments are merged (read-only; nothing written)."""
    absorb_fragments(doc, ledger)
    return doc
