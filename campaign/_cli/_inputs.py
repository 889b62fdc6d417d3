"""Reading the items of `campaign run` from a JSON, JSON Lines or CSV file.

Every problem raises `BadInput` naming the file and, where it has one, the line and column:
the campaign must not start on half-understood input.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

from ._exits import BadInput

#: File suffixes and the formats they select.
FORMATS = {".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}
_INT = re.compile(r"[+-]?\d+")
_SPACE = re.compile(r"[ \t\n\r]*")
_FLOAT = re.compile(
    r"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|nan|inf|infinity)",
    re.IGNORECASE,
)
#: What a reader returns: (item, where it is in the file, the raw text of its id or None).
Located = list[tuple[Any, str, "str | None"]]


def read_items(path: Path, id_field: str | None = None) -> list[dict[str, Any]]:
    """The items in ``path`` (format from its suffix), each with a ``task_id``.

    With ``id_field``, each item's ``task_id`` is ``str(item[id_field])``.
    """
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        known = ", ".join(FORMATS)
        raise BadInput(
            f"items file {path} has the suffix {path.suffix!r}, so its format is unknown; name "
            f"it with one of {known} (.json: a list of objects; .jsonl: one object per line; "
            ".csv: a header row, then one item per row)"
        )
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise BadInput(f"items file {path} does not exist: check the path") from None
    except IsADirectoryError:
        raise BadInput(f"items file {path} is a folder, not a file") from None
    except UnicodeDecodeError as exc:
        raise BadInput(f"items file {path} is not UTF-8 text ({exc})") from None
    except OSError as exc:
        raise BadInput(f"cannot read items file {path}: {exc.strerror or exc}") from None
    reader = {"json": _json_items, "jsonl": _jsonl_items, "csv": _csv_items}[kind]
    located = reader(text, path, id_field)
    items = [_with_task_id(item, where, path, id_field, raw) for item, where, raw in located]
    _check_unique(items, [where for _, where, _ in located], path, text if kind == "json" else None)
    return items


def _check_unique(items: list[dict[str, Any]], wheres: list[str], path: Path,
                  json_text: str | None) -> None:
    """A task id used twice is bad input naming both places (lines; for a .json file the
    line where each list element begins, and its index)."""
    seen: dict[Any, int] = {}
    clash = None
    repeated = 0
    for i, item in enumerate(items):
        tid = item["task_id"]
        key = (type(tid).__name__, tid) if isinstance(tid, (str, int, float, bool)) else repr(tid)
        if key in seen:
            repeated += 1
            clash = clash or (seen[key], i)
        else:
            seen[key] = i
    if clash is None:
        return
    first, second = clash
    if json_text is not None:
        lines = _json_element_lines(json_text)
        where = [f"line {lines[k]}" for k in clash]
        which = [f" (list element {k})" for k in clash]
    else:
        where, which = [wheres[first], wheres[second]], ["", ""]
    more = f"; {repeated - 1} more items repeat a task_id" if repeated > 1 else ""
    raise BadInput(
        f"items file {path} {where[1]}: task_id {items[second]['task_id']!r}{which[1]} is also "
        f"the task_id of {where[0]}{which[0]}; a task id may not appear more than once in the "
        f"items: give one of them another task_id{more}")


def _json_element_lines(text: str) -> list[int]:
    """The line (from 1) on which each element of the top-level JSON list begins."""
    decoder = json.JSONDecoder()
    pos = _past_space(text, 0) + 1  # past "["
    starts = []
    while True:
        pos = _past_space(text, pos)
        if text[pos] == "]":
            break
        starts.append(pos)
        _, pos = decoder.raw_decode(text, pos)
        pos = _past_space(text, pos)
        if text[pos] == ",":
            pos += 1
    return [text.count("\n", 0, start) + 1 for start in starts]


def _past_space(text: str, pos: int) -> int:
    """The first position from ``pos`` on that is not JSON whitespace."""
    match = _SPACE.match(text, pos)  # it always matches (maybe nothing)
    return pos if match is None else match.end()


def _json_items(text: str, path: Path, id_field: str | None) -> Located:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(
            f"items file {path} is not valid JSON: {exc.msg} at line {exc.lineno}, column "
            f"{exc.colno}"
        ) from None
    if not isinstance(data, list):
        raise BadInput(
            f"items file {path} holds a JSON {_kind(data)}; a .json items file holds a list of "
            'objects, e.g. [{"task_id": "a", "x": 1}, {"task_id": "b", "x": 2}]'
        )
    return [(item, f"list element {i} (counting from 0)", None) for i, item in enumerate(data)]


def _jsonl_items(text: str, path: Path, id_field: str | None) -> Located:
    out: Located = []
    for lineno, line in enumerate(text.split("\n"), start=1):  # not splitlines: JSON strings
        line = line.rstrip("\r")                                  # may hold U+2028 and kin
        if not line.strip():
            continue
        try:
            out.append((json.loads(line), f"line {lineno}", None))
        except json.JSONDecodeError as exc:
            raise BadInput(
                f"items file {path} line {lineno}, column {exc.colno}: not valid JSON "
                f"({exc.msg}); a .jsonl file holds one JSON object per line"
            ) from None
    return out


def _csv_items(text: str, path: Path, id_field: str | None) -> Located:
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader, None)
        if header is None:
            raise BadInput(f"items file {path} is empty; a .csv items file starts with a header "
                           "row naming the fields")
        _check_header(header, path)
        id_column = header.index(id_field) if id_field in header else None
        out: Located = []
        for row in reader:
            lineno = reader.line_num
            if not row or (len(row) == 1 and not row[0].strip()):
                continue  # a blank line
            if len(row) != len(header):
                column = min(len(row), len(header)) + 1
                raise BadInput(
                    f"items file {path} line {lineno}, column {column}: the row has {len(row)} "
                    f"fields but the header has {len(header)}; quote cells that contain commas"
                )
            item = {key: (cell if key == "task_id" else _cell_value(cell))
                    for key, cell in zip(header, row)}
            raw = None if id_column is None else row[id_column].strip()
            out.append((item, f"line {lineno}", raw))
    except csv.Error as exc:
        position: tuple[int, int | None] = csv_error_position(text) or (reader.line_num, None)
        at = f"line {position[0]}" + ("" if position[1] is None else f", column {position[1]}")
        raise BadInput(f"items file {path} {at}: malformed CSV ({exc})") from None
    return out


def csv_error_position(text: str) -> tuple[int, int] | None:
    """Line and column (from 1) of the first quoting error a strict CSV reader stops at: a
    character other than a comma or line end after a closing quote, or a quote never closed."""
    line, column, i, n = 1, 1, 0, len(text)
    at_field_start, opened = True, None
    while i < n:
        ch = text[i]
        if opened is None:
            if ch == '"' and at_field_start:
                opened = (line, column)
            at_field_start = ch in ",\n\r"
        elif ch == '"':
            if i + 1 < n and text[i + 1] == '"':  # an escaped quote
                i, column = i + 2, column + 2
                continue
            if i + 1 < n and text[i + 1] not in ",\r\n":
                return line, column + 1
            opened, at_field_start = None, False
        if ch == "\n":
            line, column = line + 1, 0
        i, column = i + 1, column + 1
    return opened


def _check_header(header: list[str], path: Path) -> None:
    seen: set[str] = set()
    for column, name in enumerate(header, start=1):
        if not name.strip():
            raise BadInput(f"items file {path} line 1, column {column}: the header row has an "
                           "empty field name; every column needs a name")
        if name in seen:
            raise BadInput(f"items file {path} line 1, column {column}: the header names "
                           f"{name!r} twice; field names must differ")
        seen.add(name)


def _cell_value(cell: str) -> Any:
    """A CSV cell as a value: int, else float, else the text; an empty cell is None."""
    text = cell.strip()
    if not text:
        return None
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    return cell


def _with_task_id(item: Any, where: str, path: Path, id_field: str | None,
                  raw: str | None) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise BadInput(
            f"items file {path} {where} is a JSON {_kind(item)}, not an object; each item is an "
            'object such as {"task_id": "a", "x": 1}'
        )
    if id_field is None:
        if "task_id" not in item:
            keys = ", ".join(repr(k) for k in list(item)[:6]) or "none"
            raise BadInput(
                f"items file {path} {where} has no 'task_id' (its fields: {keys}); give every "
                "item a task_id that stays the same across restarts, or name the field that "
                "identifies each item with --id-field NAME"
            )
        return item
    if id_field not in item:
        raise BadInput(f"items file {path} {where} has no field {id_field!r} (--id-field); "
                       f"{_fields_hint(id_field, item)}")
    value = item.get(id_field)
    if value is None or value == "":
        raise BadInput(
            f"items file {path} {where} has no value for the id field {id_field!r} "
            "(--id-field); every item needs one"
        )
    task_id = raw if raw else str(value)  # a CSV id keeps its text: 007 stays '007'
    if "task_id" in item and item["task_id"] != task_id:
        raise BadInput(
            f"items file {path} {where} has both a task_id ({item['task_id']!r}) and the id "
            f"field {id_field!r} ({task_id!r}); drop --id-field or the task_id field"
        )
    return {"task_id": task_id, **item}


def _fields_hint(name: str, item: dict[str, Any]) -> str:
    """``its fields: 'sample', 'x'; did you mean 'sample'?``"""
    import difflib

    fields = [str(k) for k in item]
    shown = ", ".join(map(repr, fields[:20])) + (" ..." if len(fields) > 20 else "")
    close = difflib.get_close_matches(name, fields, n=3)
    mean = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
    return f"its fields: {shown or 'none'}{mean}"


def _kind(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", int: "number",
            float: "number", type(None): "null"}.get(type(value), type(value).__name__)
