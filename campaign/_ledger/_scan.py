"""A streaming scan of a ledger file: its records chunk by chunk, checked, in bounded memory.

The `campaign` commands and a driver's load read every record once and keep only what they
need. Parsing the whole file holds every record as Python objects at once (about 3 GB for a
million tasks); this reads it a block at a time: one block's records in memory at once.

How a block is split: the ledger's writer puts ``"tasks"`` last and writes each record as
``"<task id>":{"status":...``. A block is cut before the last ``},"<id>":{"status":"`` in it and
the part before the cut is parsed as one JSON object; the parse succeeds only when the cut falls
between two records (a cut inside a string leaves the string open, one inside a record leaves a
brace open: both are JSON errors), so a wrong cut is detected and the previous candidate tried.
Every chunk is checked exactly as `campaign.read_ledger` checks the whole file
(`campaign._ledger._document.check`: the same `LedgerError`, naming the task and the field). A file
this cannot split (written by hand, pretty-printed, ``"tasks"`` not last) is read whole with
`campaign._ledger._document.read` instead: the same answer, without the memory bound.

How a chunk is checked: `campaign._ledger._schema.valid_columns` checks it at once with C-level
operations over its columns, which are kept for the caller (`blocks`); only a chunk it does not
find valid is checked record by record, which names the task and the field. `campaign status`
and `campaign report` read `Scan.typed_blocks`: each block parsed and checked in one pass into
typed records (`campaign._ledger._typed`, about a third less CPU; the report reads the attempts'
resource fields from them); a chunk the journal or a fragment changes, or that the typed parse
doubts, goes as above.

Array workers' fragments not yet merged are applied to the records as they stream by in
`campaign._ledger._overlay`.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterator, Mapping
from itertools import islice
from pathlib import Path
from typing import Any

from .._errors import LedgerError
from . import _document, _ownership
from ._paths import LedgerPaths
from ._schema import Columns, columns, valid_columns
from ._stale import FreshReader, open_fresh

logger = logging.getLogger(__name__)

#: Bytes read from the file at a time: a small block's records are still in the CPU's caches
#: while they are checked and counted (on a million records, 8 MB blocks took about 60 % more
#: CPU time than 64 KB blocks, 256 KB blocks about 10 % more).
BLOCK = 64 << 10
#: The head (everything before ``"tasks"``) is looked for in at most this many bytes.
HEAD_LIMIT = 64 << 20
_TASKS_KEY = re.compile(rb'"tasks":\{')
#: Where a record may begin: the end of the previous one, the next task id, its first field.
_CUT = re.compile(rb'\},"(?:[^"\\]|\\.)*":\{"status":"')
#: Cuts tried (the last ones of a block, each a parse) before the block is read on.
_TRIES = 8


class Scan:
    """The ledger at ``path`` read as its head (every top-level field but ``tasks``, checked)
    and its records, streamed by `chunks`. Raises `LedgerError` as `campaign.read_ledger`
    does (no ledger, not JSON, not a ledger, a newer version, a bad field).

    With ``as_bytes`` the journal's records are held as their bytes (`journal` is a
    `RecordStore`, each record decoded where it replaces the file's), for a reader of 10⁶
    records that keeps them as bytes (`campaign._ledger._storeload`)."""

    def __init__(self, path: str | os.PathLike[str], *, block: int = BLOCK,
                 as_bytes: bool = False):
        self.path = Path(path)
        self.block = block
        self.as_bytes = as_bytes
        try:
            self._file = open_fresh(self.path, self.block)
        except FileNotFoundError:
            raise LedgerError(f"no ledger at {self.path}: check the path") from None
        except OSError as exc:
            raise LedgerError(f"cannot read ledger {self.path}: {exc}") from None
        self._whole: dict[str, Any] | None = None
        self._rest = b""
        #: the journal's newest record of each task (`campaign._ledger._journal.Journal.records`)
        self.journal: Mapping[str, Any] = {}
        self._seen: set[str] = set()
        #: Whether the file was read whole by `campaign._ledger._document.read` (not in the writer's
        #: layout, or it read cut short or garbled: see `campaign._ledger._stale`).
        self.fell_back = False
        self._reads = 0
        try:
            self.head, journal, _ = _document.with_journal(
                LedgerPaths.of(self.path), self._read_file, as_bytes=as_bytes)
        except FileNotFoundError:
            raise LedgerError(f"no ledger at {self.path}: check the path") from None
        except BaseException:
            self._file.close()
            raise
        self.journal = journal.records
        if journal.runs is not None:
            self.head["runs"] = journal.runs
        if journal.updated is not None:
            self.head["updated"] = journal.updated
        if journal.lines:
            _document.check(dict(self.head, tasks={}), self.path)

    def _read_file(self) -> tuple[dict[str, Any], str | None, _document.Stat | None]:
        """The head, its generation and the attributes of the file read (None where it was
        read whole, journal and all): for `campaign._ledger._document.with_journal`, which calls it
        again when the file was replaced while its journal was read."""
        if self._reads:  # read before: the file was replaced since
            self._file.close()
            self._file = open_fresh(self.path, self.block)
            self._rest = b""
        self._reads += 1
        st = os.fstat(self._file.fileno())
        head = self._read_head()
        return head, head.get("generation"), None if self._whole is not None else st

    def close(self) -> None:
        self._file.close()

    def _read_head(self) -> dict[str, Any]:
        buf = b""
        while len(buf) < HEAD_LIMIT:
            data = self._file.read(self.block)
            buf += data
            for match in _TASKS_KEY.finditer(buf):
                head = _head(buf[:match.start()], self.path)
                if head is not None:
                    self._rest = buf[match.end():]
                    return head
            if not data:
                break
        return self._read_whole()

    def _read_whole(self) -> dict[str, Any]:
        """The fallback: the file parsed whole by the public reader."""
        self.fell_back = True
        self._file.close()
        doc = _document.read(self.path)
        self._whole = doc["tasks"]
        return {k: v for k, v in doc.items() if k != "tasks"}

    def chunks(self) -> Iterator[dict[str, Any]]:
        """The task records, a dict of (task id -> record) per block, in file order, each
        checked. A problem found in a later block raises `LedgerError` there: a caller prints
        nothing it built from earlier blocks before the scan has ended."""
        for tasks, _ in self.blocks():
            yield tasks

    def blocks(self) -> Iterator[tuple[dict[str, Any], Columns]]:
        """`chunks`, each with its records' `Columns`."""
        return self._stream(None)

    def typed_blocks(self, plain: Callable[[dict[str, Any]], bool] | None = None
                     ) -> Iterator[tuple[dict[str, Any], Columns]]:
        """`blocks` parsed and checked in one pass (`campaign._ledger._typed`; `campaign status` and
        `campaign report`): each chunk's records are `campaign._ledger._typed.Record`s, not dicts,
        and its `Columns` hold the values `blocks` gives. A chunk the journal changes, one for
        which ``plain(chunk)`` is true, and one the typed parse refuses or doubts come with
        record dicts, as `blocks` gives them."""
        return self._stream(plain or _never)

    def _stream(self, plain: Callable[[dict[str, Any]], bool] | None
                ) -> Iterator[tuple[dict[str, Any], Columns]]:
        """`blocks` (``plain`` None) or `typed_blocks`."""
        if self._whole is not None:
            yield self._whole, columns(list(self._whole.values()))
            return
        rest, ended, done = self._rest, False, 0
        self._rest = b""
        size = self.block
        try:
            while not ended:
                data = self._file.read(size)
                ended = not data
                rest += data
                if ended:
                    stripped = rest.rstrip()
                    # cut short (a stale cache's size: `campaign._ledger._stale`): read
                    # whole, retried
                    short = (not isinstance(self._file, FreshReader)
                             and self._file.tell() < os.fstat(self._file.fileno()).st_size)
                    if short or not stripped.endswith(b"}}"):
                        yield self._fallback(done)
                        return
                    piece, rest = stripped[:-2], b""  # the closing braces of tasks and file
                    got = self._last(piece, plain)
                else:
                    split = self._split(rest, plain)
                    if split is None:  # one record longer than the block so far: read on,
                        size = max(size, len(rest))  # as much again (linear in the record)
                        continue
                    got, rest = split
                    size = self.block
                if got is None:
                    yield self._fallback(done)
                    return
                done += len(got[0])
                yield got
            extra = {t: r for t, r in self.journal.items() if t not in self._seen}
            if extra:
                yield self._checked(extra, journal=False)
        finally:
            self._file.close()

    def _last(self, piece: bytes, plain: Callable[[dict[str, Any]], bool] | None
              ) -> tuple[dict[str, Any], Columns] | None:
        """The records of the last ``piece`` of the file, checked, or None if it does not
        parse."""
        if not piece.strip():
            return self._checked({})
        data = b"{" + piece + b"}"
        if plain is not None:
            from . import _typed  # here: msgspec is imported only by its readers

            try:
                typed = _typed.decode(data)
            except _typed.Invalid:
                typed = None
            if typed is not None:
                return self._typed_checked(typed, data, plain)
        tasks = _ownership.parse_object(data)
        return None if tasks is None else self._checked(tasks)

    def _checked(self, tasks: dict[str, Any],
                 journal: bool = True) -> tuple[dict[str, Any], Columns]:
        """``tasks`` with the journal's newer records in place, checked, and their columns."""
        if journal and self.journal:
            for tid in self.journal.keys() & tasks.keys():
                tasks[tid] = self.journal[tid]
                self._seen.add(tid)
        return tasks, columns_checked(tasks, self.path)

    def _split(self, buf: bytes, plain: Callable[[dict[str, Any]], bool] | None
               ) -> tuple[tuple[dict[str, Any], Columns] | None, bytes] | None:
        """The whole records at the start of ``buf`` (parsed and checked: typed unless
        ``plain`` is None) and the bytes after them, or None when no cut before the last few
        candidates parses."""
        typed = plain is not None
        window = 1 << 12  # candidates looked for in the last few records first
        tried: set[int] = set()
        while True:
            begin = max(0, len(buf) - window)
            starts = [m.start() + 1 for m in _CUT.finditer(buf, begin)]
            for offset in reversed(starts):
                if len(tried) == _TRIES:
                    return self._split(buf, None) if typed else None
                if offset in tried:
                    continue
                tried.add(offset)
                data = b"".join((b"{", memoryview(buf)[:offset], b"}"))  # one copy
                if plain is not None:
                    from . import _typed

                    try:
                        records = _typed.decode(data)
                    except _typed.Invalid:  # a record refused: the plain parse names it
                        return self._split(buf, None)
                    if records is not None:
                        return self._typed_checked(records, data, plain), buf[offset + 1:]
                    continue
                tasks = _ownership.parse_object(data)
                if tasks is not None:
                    return self._checked(tasks), buf[offset + 1:]  # the comma dropped
            if begin == 0:
                return self._split(buf, None) if typed else None
            window *= 4

    def _typed_checked(self, records: dict[str, Any], data: bytes,
                       plain: Callable[[dict[str, Any]], bool]
                       ) -> tuple[dict[str, Any], Columns] | None:
        """The `Record`s ``records`` parsed from ``data`` and their columns; parsed again as
        dicts (`_checked`) where the journal changes them, ``plain(records)`` asks for dicts,
        or their columns break a rule (the plain check names the task and the field)."""
        from ._typed import typed_columns

        if (self.journal and not self.journal.keys().isdisjoint(records)) or plain(records):
            cols = None
        else:
            cols = typed_columns(list(records.values()))
        if cols is not None:
            return records, cols
        tasks = _ownership.parse_object(data)
        return None if tasks is None else self._checked(tasks)

    def _fallback(self, done: int) -> tuple[dict[str, Any], Columns]:
        """The file read whole, less the ``done`` records already yielded (the first ones)."""
        self.fell_back = True
        logger.debug("ledger %s: not in the writer's layout; read whole", self.path)
        tasks = _document.read(self.path)["tasks"]
        tasks = dict(islice(tasks.items(), done, None)) if done else tasks
        return tasks, columns(list(tasks.values()))

    def records(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every (task id, record), in file order."""
        for chunk in self.chunks():
            yield from chunk.items()


def _never(tasks: dict[str, Any]) -> bool:
    return False


def _head(before: bytes, path: Path) -> dict[str, Any] | None:
    """The document's top-level fields before ``"tasks"``, checked as the reader checks them,
    or None when ``before`` does not end at a top-level key of a ledger's object."""
    data = before + b'"tasks":{}}'
    if _ownership.parse_object(data) is None:
        return None
    doc = _document.parse(data, path)
    return {k: v for k, v in doc.items() if k != "tasks"}


def columns_checked(tasks: dict[str, Any], path: Path) -> Columns:
    """The `Columns` of ``tasks``, checked: at once (`valid_columns`), else record by record,
    which raises `LedgerError` naming the task and the field."""
    recs = list(tasks.values())
    cols = valid_columns(recs)
    if cols is None:
        _document.check({"tasks": tasks, "runs": []}, path)
        cols = columns(recs)
    return cols
