"""The ledger file as a document: parse and check on read, serialize on write, update under lock.

docs/ledger.md is the specification of the format. Reading never changes a file; a file that is
not a ledger of ours (corrupt, truncated, foreign, newer) raises `LedgerError` and is never
overwritten.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import orjson

from .._errors import LedgerError
from . import _journal
from ._ledger_lock import LedgerLock
from ._paths import LedgerPaths
from ._schema import MISSING, records_problem, run_problem
from ._stale import Attributes, Unsettled, fresh_stat, read_bytes, retried
from ._status import FORMAT_NAME, FORMAT_VERSION
from ._store import RecordStore, whole_file

logger = logging.getLogger(__name__)
#: Seconds to wait for ``<ledger>.lock`` before giving up with an error.
LOCK_TIMEOUT = 120.0


def file_lock(path: str | os.PathLike[str] | LedgerPaths) -> LedgerLock:
    """The inter-process lock every read-merge-write of ``path`` holds (``<ledger>.lock`` beside
    the file the path resolves to): ``flock`` and an ``O_EXCL`` owner file, exclusive where
    ``flock`` is not (`campaign._ledger._ledger_lock`)."""
    return LedgerLock(LedgerPaths.of(path).lock, timeout=LOCK_TIMEOUT, poll_interval=0.002)


def new_document(now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "generation": _journal.new_generation(),
        "created": now,
        "updated": now,
        "runs": [],
        "tasks": {},
    }


def dumps(doc: dict[str, Any]) -> bytes:
    """Serialize a document: standard JSON (UTF-8, no NaN tokens), newline-terminated.

    ``tasks`` may be a `RecordStore`. A task record that cannot be serialized is isolated as
    `campaign._ledger._store` says: the others are written."""
    if type(doc["tasks"]) is dict:
        try:
            return orjson.dumps(doc, option=orjson.OPT_APPEND_NEWLINE)
        except TypeError:
            pass
    return b"".join(document_chunks(doc))


def document_chunks(doc: dict[str, Any]) -> Iterator[bytes]:
    """`dumps` as chunks of bytes, every record encoded first (`RecordStore.snapshot`), so a
    file of 10⁶ records is written without its whole text in memory. The bytes are those of
    ``orjson.dumps(doc)`` whenever ``tasks`` is the document's last key, as it is in ours."""
    records = RecordStore.of(doc["tasks"]).snapshot()
    return whole_file(orjson.dumps({k: v for k, v in doc.items() if k != "tasks"}), records)


def parse(data: bytes, path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse and check the bytes of a ledger file (``path`` names it in errors). Raises
    `LedgerError` naming the problem: not JSON, not a ledger, a newer version, or a field that
    does not match docs/ledger.md (`check`). The journal is not read (see `load`)."""
    doc = _parse_unchecked(data, path)
    check(doc, path)
    return doc


#: A record's start: ``"<task id>":{"status":`` (the writer's first field), spaces allowed.
_RECORD_START = re.compile(rb'"((?:[^"\\]|\\.)*)"\s*:\s*\{\s*"status"\s*:')


def too_deep_text(data: bytes, pos: int, path: str | os.PathLike[str]) -> str:
    """The message for a ledger whose JSON nests deeper than orjson parses (1,024 levels; the
    writer refuses items past `campaign._ledger._jsonvalue`'s 200 at the door), naming the task
    whose record holds it where the text before ``pos`` shows it."""
    found = list(_RECORD_START.finditer(data, 0, max(0, pos)))
    where = "a record"
    if found:
        quoted = b'"' + found[-1].group(1) + b'"'
        try:
            where = f"the record of task {orjson.loads(quoted)!r}"
        except orjson.JSONDecodeError:
            pass
    return (f"ledger {path}: {where} nests lists and objects more than 1,024 levels deep (at "
            f"char {pos}), deeper than any reader of this project parses, and more than a run "
            "writes (items nested over 200 levels are refused at the door): the file was "
            "edited by hand or written by another program, and was left untouched. Fix: "
            "flatten that value with another JSON tool, or restore the file from a backup (a "
            "'.replaced-' or '.before-forget-' file beside it)")


def _parse_unchecked(data: bytes, path: str | os.PathLike[str]) -> dict[str, Any]:
    if not data.strip():  # Unsettled: a stale cache may explain it (`campaign._ledger._stale`)
        raise Unsettled(
            f"ledger {path} is empty, so it is not a campaign ledger (a ledger is never written "
            "empty); move it away or pass another ledger_path"
        )
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "depth" in exc.msg or "recursion" in exc.msg:  # whole, but no reader can parse it
            raise LedgerError(too_deep_text(data, exc.pos, path)) from None
        raise Unsettled(
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
    if type(version) is not int or version < 1:
        raise LedgerError(f"ledger {path} has an invalid format version {version!r} (an "
                          f"integer >= 1 is expected). {_UNTOUCHED}")
    if version > FORMAT_VERSION:
        raise LedgerError(
            f"ledger {path} has format version {version}, newer than this diffsoup-campaign "
            f"reads ({FORMAT_VERSION}); upgrade diffsoup-campaign to use it"
        )
    return _migrate(doc, version)


def check(doc: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Check every field of the document, its runs and its task records against the schema
    (docs/ledger.md; `campaign._ledger._schema.RECORD_FIELDS`). Raises `LedgerError` naming the
    field."""
    tasks = doc.get("tasks")
    if type(tasks) is not dict or type(doc.get("runs")) is not list:
        raise LedgerError(f"ledger {path} lacks its 'tasks' object or 'runs' list; it is corrupt "
                          f"or was edited by hand. {_UNTOUCHED}")
    for key in ("created", "updated"):  # checked when present (hand-made files may lack them)
        if key in doc and type(doc[key]) not in (int, float):
            raise LedgerError(f"ledger {path}: {key!r} is {doc.get(key)!r}, expected a number "
                              f"(a Unix time). {_UNTOUCHED}")
    if "generation" in doc and type(doc["generation"]) is not str:
        raise LedgerError(f"ledger {path}: 'generation' is {_short(doc['generation'])}, expected "
                          f"a string. {_UNTOUCHED}")
    for index, run in enumerate(doc["runs"]):
        problem = run_problem(run)
        if problem is not None:
            raise LedgerError(f"ledger {path}: runs[{index}] {_field_says(*problem)}. "
                              f"{_UNTOUCHED}")
    found = records_problem(tasks)
    if found is not None:
        task_id, problem = found
        raise LedgerError(f"ledger {path}: task {task_id!r} {_field_says(*problem)}. "
                          f"{_UNTOUCHED}")


_UNTOUCHED = ("The file is corrupt or was edited by hand, and was left untouched: correct it "
              "(docs/ledger.md lists every field and its type) or restore it from a backup (a "
              "'.replaced-' or '.before-forget-' file beside it)")


def _field_says(field: str, value: Any, expected: str) -> str:
    if field.startswith("<"):
        return f"is {_short(value)}, not {expected}"
    if value is MISSING:
        return f"lacks the field {field!r} ({expected})"
    kind = _json_type(value)
    article = "an" if kind[0] in "aeiou" else "a"
    return f"has the field {field!r} = {_short(value)} ({article} {kind}); expected {expected}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _json_type(value: Any) -> str:
    names = {bool: "bool", int: "integer", float: "number", str: "string", list: "list",
             dict: "object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _migrate(doc: dict[str, Any], version: int) -> dict[str, Any]:
    """Bring an older format version up to the current one. Version 1 lacks ``generation``
    (so no journal applies to it); it is written as version 2 at its next write."""
    if version < FORMAT_VERSION:
        doc["version"] = FORMAT_VERSION
    return doc


def read(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check the ledger at ``path``, its journal merged (no lock needed: the file is
    replaced atomically and the journal only grows between replacements).

    This is ``campaign.read_ledger``. Returns the document (docs/ledger.md) as stored: non-finite
    floats stay tagged. Raises `LedgerError` when there is no ledger or it is not valid."""
    return load(path)[0]


#: The attributes of a file as `os.stat` or `campaign._ledger._stale.fresh_stat` give them.
Stat = os.stat_result | Attributes


class DiskState(NamedTuple):
    """The file's inode, size and modification time, and its journal's size: what tells a
    writer whether another process changed the ledger since it last read or wrote it."""

    inode: int
    size: int
    mtime_ns: int
    journal: int

    @classmethod
    def of(cls, st: Stat, journal: int) -> DiskState:
        return cls(st.st_ino, st.st_size, st.st_mtime_ns, journal)


def same_file(a: Stat, b: Stat) -> bool:
    """Whether two stats are of the same version of a file (inode, size, modification time):
    a reader that finds them differ read a file replaced or grown meanwhile."""
    return (a.st_ino, a.st_size, a.st_mtime_ns) == (b.st_ino, b.st_size, b.st_mtime_ns)


def load(path: str | os.PathLike[str]) -> tuple[dict[str, Any], DiskState]:
    """`read`, also returning the `DiskState` of what was read. The file is read first, then
    its journal; if the file was replaced meanwhile (a compaction), both are read again. A file
    that reads empty, cut short or not JSON is read again for a while before it is refused
    (`campaign._ledger._stale`: a shared file system's cache may be stale)."""
    path = Path(path)
    return retried(path, lambda fresh: _load_once(path, fresh))


def _load_once(path: Path, fresh: bool) -> tuple[dict[str, Any], DiskState]:
    def read_file() -> tuple[dict[str, Any], str | None, Stat]:
        try:  # where caches may be stale, the attributes asked of the file system (`fresh_stat`)
            asked = fresh_stat(path) if fresh else None
            data, opened = read_bytes(path, fresh=fresh)
        except FileNotFoundError:
            raise LedgerError(f"no ledger at {path}: check the path") from None
        except OSError as exc:
            raise LedgerError(f"cannot read ledger {path}: {exc}") from None
        doc = _parse_unchecked(data, path)
        return doc, doc.get("generation"), asked or opened

    doc, journal, st = with_journal(LedgerPaths.of(path), read_file)
    journal.apply(doc)
    try:
        check(doc, path)
    except LedgerError as exc:  # a stale cache's mixture of two versions may parse
        raise Unsettled(str(exc)) from None
    assert st is not None
    return doc, DiskState.of(st, journal.size)


_T = TypeVar("_T")


def with_journal(paths: LedgerPaths, read_file: Callable[[], tuple[_T, str | None, Stat | None]],
                 *, as_bytes: bool = False) -> tuple[_T, _journal.Journal, Stat | None]:
    """What ``read_file`` read of the ledger's file, and the journal of that version: every
    reader of the ledger reads both this way. ``read_file`` returns what it read, the file's
    generation and the attributes of the file it read (None: it read the journal too, nothing
    is read here). The journal is read after the file; when the file was replaced meanwhile (a
    compaction: a new generation, the journal emptied), ``read_file`` is called again and the
    journal read again, at most 20 times (the last read is kept)."""
    for _ in range(20):
        got, generation, st = read_file()
        if st is None:
            return got, _journal.Journal(), None
        journal = _journal.read(paths, generation, as_bytes=as_bytes)
        try:
            now = fresh_stat(paths.file)
        except FileNotFoundError:
            continue
        if same_file(now, st):
            break
    return got, journal, st


def file_state(path: Path | LedgerPaths) -> DiskState | None:
    """What tells whether another process changed the ledger (replaced the file or appended to
    its journal) since we last read or wrote it; None when there is no file. Where a shared
    file system may cache attributes, they are asked of it
    (`campaign._ledger._stale.fresh_stat`)."""
    paths = LedgerPaths.of(path)
    try:
        st = fresh_stat(paths.file)
    except FileNotFoundError:
        return None
    try:
        journal = fresh_stat(paths.journal).st_size
    except FileNotFoundError:
        journal = 0
    return DiskState.of(st, journal)
