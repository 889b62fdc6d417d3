"""The ledger's journal: each commit's outcomes appended between whole-file writes.

``<ledger>.journal`` beside the file the ledger path resolves to holds one line per commit,
``<crc32> <json>\\n``, where ``<json>`` is ``{"generation", "updated", "tasks"[, "runs"]}`` and
``generation`` names the whole-file write the line applies to (docs/ledger.md, "The journal and
compaction"). Only the driver appends, under ``<ledger>.lock``; every whole-file write (a
compaction) gives the file a new generation and then removes the journal, so a line left
behind by a compaction killed halfway is of an older generation and skipped.
"""

from __future__ import annotations

import logging
import os
import secrets
import zlib
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from . import _ownership
from ._atomic import fsync_dir
from ._paths import LedgerPaths
from ._store import RecordStore

logger = logging.getLogger(__name__)

#: The file is compacted once its journal holds this fraction of the file's size.
COMPACT_FRACTION = 0.5


def new_generation() -> str:
    """A random id for one whole-file write: 16 lowercase hex digits."""
    return secrets.token_hex(8)


def encode(generation: str, updated: float, task_parts: list[bytes],
           runs: list[dict[str, Any]] | None = None) -> bytes:
    """One journal line. ``task_parts`` are ``"<task id>":<record>`` JSON fragments (as
    `campaign._ledger._store.RecordStore.parts` makes them); ``runs``, when given, is the whole new
    runs list."""
    head = {"generation": generation, "updated": updated}
    if runs is not None:
        head["runs"] = runs
    payload = b"".join((orjson.dumps(head)[:-1], b',"tasks":{', b",".join(task_parts), b"}}"))
    return b"%08x " % zlib.crc32(payload) + payload + b"\n"


def append(ledger: Path | LedgerPaths, line: bytes) -> int:
    """Append one line durably (``O_APPEND``, write, ``fsync``; the folder is ``fsync``-ed too
    when the journal is created). Returns the journal's new size in bytes.

    An `OSError` (disk full, I/O error) cuts the journal back to its size before the append,
    if it can, and is raised again: the caller compacts next time."""
    paths = LedgerPaths.of(ledger)
    path = paths.journal
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW,
                 _ownership.new_file_mode(paths.file))  # a private ledger's journal is private
    try:
        st = os.fstat(fd)
        _ownership.check(path, st, paths.file)  # never append to another user's file
        before = st.st_size
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except BaseException:
            try:
                os.ftruncate(fd, before)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)
    if before == 0:  # the journal may be new: make its name durable too
        fsync_dir(path.parent)
    return before + len(line)


@dataclass
class Journal:
    """What `read` found in a ledger's journal: the newest record of each task its lines of the
    file's generation hold, in the order applying the lines one by one adds them (dicts, or
    their JSON bytes in a `RecordStore`); the runs list and ``updated`` of the last line that
    has them (None if none has); how many lines apply; the bytes read (0 if there is none)."""

    records: MutableMapping[str, Any] = field(default_factory=dict)
    runs: list[dict[str, Any]] | None = None
    updated: float | None = None
    lines: int = 0
    size: int = 0

    @property
    def present(self) -> bool:
        return self.size > 0

    def apply(self, doc: dict[str, Any]) -> None:
        """Apply the lines to ``doc`` in place: records replaced (new tasks added last), the
        runs list replaced where a line has one, ``updated`` set."""
        doc["tasks"].update(self.records)
        if self.runs is not None:
            doc["runs"] = self.runs
        if self.updated is not None:
            doc["updated"] = self.updated


def read(ledger: Path | LedgerPaths, generation: str | None, *,
         as_bytes: bool = False) -> Journal:
    """The journal of ``ledger``: the lines of ``generation``, read a line at a time, up to the
    first line that is torn or corrupt (a warning names it; it and the lines after it are
    ignored). With no generation (a version-1 file) no line applies. With ``as_bytes`` the
    records are kept as their bytes only (a journal of 10⁶ records held as dicts would take
    gigabytes)."""
    paths = LedgerPaths.of(ledger)
    path = paths.journal
    put: Callable[[str, Any], None]
    if as_bytes:
        store = RecordStore()
        found, put = Journal(store), store.add
    else:
        plain: dict[str, Any] = {}
        found, put = Journal(plain), plain.__setitem__
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return found
    with open(fd, "rb") as f:
        _ownership.check(path, os.fstat(fd), paths.file)
        if generation is not None:
            for entry in _entries(path, f, generation):
                for task_id, rec in entry["tasks"].items():
                    put(task_id, rec)
                if "runs" in entry:
                    found.runs = entry["runs"]
                found.updated = entry["updated"]
                found.lines += 1
        f.read()  # the lines after a torn one, so that ``size`` is all that was read
        found.size = f.tell()
    return found


def _entries(path: Path, lines: Iterable[bytes], generation: str) -> Iterator[dict[str, Any]]:
    """The entries of ``generation`` among ``lines`` (each with its newline), up to the first
    line that is torn or corrupt (a warning names it)."""
    skipped = 0
    number = 0
    for line in lines:
        number += 1
        if not line.endswith(b"\n"):
            logger.warning("journal %s: line %d is not whole (a write was cut short, e.g. by a "
                           "crash); it is ignored, the %d line(s) before it are kept", path,
                           number, number - 1)
            break
        entry = _decode(line[:-1])
        if entry is None:
            logger.warning("journal %s: line %d is corrupt (its checksum or JSON is wrong); it "
                           "and the lines after it are ignored, the %d line(s) before it are "
                           "kept", path, number, number - 1)
            break
        if entry["generation"] != generation:
            skipped += 1
            continue
        yield entry
    if skipped:
        logger.debug("journal %s: %d line(s) of an older generation skipped", path, skipped)


def _decode(line: bytes) -> dict[str, Any] | None:
    if len(line) < 10 or line[8:9] != b" ":
        return None
    payload = line[9:]
    try:
        if int(line[:8], 16) != zlib.crc32(payload):
            return None
    except ValueError:
        return None
    entry = _ownership.parse_object(payload)
    if (entry is None or type(entry.get("generation")) is not str
            or type(entry.get("tasks")) is not dict
            or type(entry.get("updated")) not in (int, float)
            or type(entry.get("runs", [])) is not list):
        return None
    return entry


def remove(ledger: Path | LedgerPaths) -> None:
    """Remove the journal (after a whole-file write made it redundant)."""
    LedgerPaths.of(ledger).journal.unlink(missing_ok=True)
