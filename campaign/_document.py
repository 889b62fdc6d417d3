"""The ledger file as a document: parse and check on read, serialize on write, update under lock.

docs/ledger.md is the specification of the format. Reading never changes a file; a file that is
not a ledger of ours (corrupt, truncated, foreign, newer) raises `LedgerError` and is never
overwritten.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

import orjson
from filelock import FileLock

from ._atomic import atomic_write
from ._errors import LedgerError
from ._status import FORMAT_NAME, FORMAT_VERSION, Status

_STATUSES = frozenset(s.value for s in Status)
#: Seconds to wait for ``<ledger>.lock`` before giving up with an error.
LOCK_TIMEOUT = 120.0


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def file_lock(path: Path) -> FileLock:
    """The inter-process lock every read-merge-write of ``path`` holds (``<ledger>.lock``)."""
    return FileLock(lock_path(path), timeout=LOCK_TIMEOUT, thread_local=False, poll_interval=0.002)


def new_document(now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "created": now,
        "updated": now,
        "runs": [],
        "tasks": {},
    }


def dumps(doc: dict[str, Any]) -> bytes:
    """Serialize a document: standard JSON (UTF-8, no NaN tokens), newline-terminated."""
    return orjson.dumps(doc, option=orjson.OPT_APPEND_NEWLINE)


class Serializer:
    """`dumps` for a document written again and again: each task record's JSON is kept and
    reused while the record is the same object (records are replaced, never changed in place:
    `campaign._records`), so a commit serializes only the records that changed. The bytes are
    those of `dumps` whenever ``tasks`` is the document's last key, as it is in ours."""

    def __init__(self) -> None:
        self._records: dict[str, tuple[dict[str, Any], bytes]] = {}

    def dumps(self, doc: dict[str, Any]) -> bytes:
        tasks = doc["tasks"]
        cache = self._records
        parts = []
        for task_id, rec in tasks.items():
            kept = cache.get(task_id)
            if kept is None or kept[0] is not rec:
                kept = cache[task_id] = (rec, orjson.dumps({task_id: rec})[1:-1])
            parts.append(kept[1])
        if len(cache) > len(tasks):  # tasks were removed (campaign forget)
            for task_id in [t for t in cache if t not in tasks]:
                del cache[task_id]
        head = orjson.dumps({key: value for key, value in doc.items() if key != "tasks"})
        return b"".join((head[:-1], b',"tasks":{' if len(head) > 2 else b'{"tasks":{',
                         b",".join(parts), b"}}\n"))


def parse(data: bytes, path: Path) -> dict[str, Any]:
    """Parse and check the bytes of a ledger file. Raises `LedgerError` naming the problem."""
    if not data.strip():
        raise LedgerError(
            f"ledger {path} is empty, so it is not a campaign ledger (a ledger is never written "
            "empty); move it away or pass another ledger_path"
        )
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise LedgerError(
            f"ledger {path} is not valid JSON ({exc}); it may be truncated or corrupt. It was "
            "left untouched: restore it from a backup (a '.replaced-' or '.before-forget-' file "
            "beside it) or move it away to start over"
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise LedgerError(
            f"{path} is not a campaign ledger (format {found!r}, expected {FORMAT_NAME!r}); it "
            "was left untouched: pass another ledger_path"
        )
    version = doc.get("version")
    if not isinstance(version, int) or version < 1:
        raise LedgerError(f"ledger {path} has an invalid format version {version!r}")
    if version > FORMAT_VERSION:
        raise LedgerError(
            f"ledger {path} has format version {version}, newer than this diffsoup-campaign "
            f"reads ({FORMAT_VERSION}); upgrade diffsoup-campaign to use it"
        )
    doc = _migrate(doc, version)
    tasks = doc.get("tasks")
    if not isinstance(tasks, dict) or not isinstance(doc.get("runs"), list):
        raise LedgerError(f"ledger {path} lacks its 'tasks' object or 'runs' list; it is corrupt")
    for task_id, rec in tasks.items():
        if not isinstance(rec, dict) or rec.get("status") not in _STATUSES:
            shown = rec.get("status") if isinstance(rec, dict) else rec
            raise LedgerError(
                f"ledger {path}: task {task_id!r} has an invalid record (status {shown!r}); the "
                "file is corrupt or was edited by hand"
            )
    return doc


def _migrate(doc: dict[str, Any], version: int) -> dict[str, Any]:
    """Bring an older format version up to the current one (version 1 is the first)."""
    return doc


def read(path: Path) -> dict[str, Any]:
    """Read and check the ledger at ``path`` (no lock needed: files are replaced atomically)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise LedgerError(f"no ledger at {path}: check the path") from None
    except OSError as exc:
        raise LedgerError(f"cannot read ledger {path}: {exc}") from None
    return parse(data, path)


def backup_path(path: Path, why: str) -> Path:
    """``<stem>.<why>-<UTC time><suffix>`` beside ``path``, e.g. ``run.replaced-20261130T131400Z.json``."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    candidate = path.with_name(f"{path.stem}.{why}-{stamp}{path.suffix}")
    n = 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.stem}.{why}-{stamp}-{n}{path.suffix}")
    return candidate


def update(
    path: Path,
    mutate: Callable[[dict[str, Any]], Any],
    *,
    backup: str | None = None,
) -> tuple[Any, Path | None]:
    """Read-merge-write ``path`` under its lock: ``mutate(doc)`` changes the document in place.

    With ``backup``, the file as it was is kept beside under a name containing ``backup``
    (written only once ``mutate`` has returned). Returns what ``mutate`` returned and the
    backup's path (None without ``backup``).
    """
    with file_lock(path):
        try:
            original = path.read_bytes()
        except FileNotFoundError:
            raise LedgerError(f"no ledger at {path}: check the path") from None
        doc = parse(original, path)
        answer = mutate(doc)
        saved = None
        if backup is not None:
            saved = backup_path(path, backup)
            atomic_write(saved, original)
        doc["updated"] = time.time()
        atomic_write(path, dumps(doc))
    return answer, saved


def file_state(path: Path) -> tuple[int, int, int] | None:
    """What tells whether another process replaced the file since we last wrote it."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)
