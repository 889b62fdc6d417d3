"""The HTML pieces the report's sections are written with: escaped text, tables, times and
status labels. Every value that comes from the ledger goes through `e` (or a numeric cell of
`table`, which escapes it) before it reaches the page."""

from __future__ import annotations

import html
from collections.abc import Collection
from typing import Any

from ._data import STATUSES
from ._plots import COLOURS


def e(value: Any) -> str:
    """``value`` as text, escaped for HTML (quotes too, so it may go in an attribute)."""
    return html.escape(str(value))


def table(head: list[str], rows: list[list[Any]], numeric: Collection[int] = (),
          attrs: str = "") -> str:
    """An HTML table; cells are HTML already, except those in ``numeric`` columns (escaped and
    right-aligned). ``attrs``: the table tag's attributes (HTML)."""
    th = "".join(f"<th>{e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(
        f'<td class="n">{e(v)}</td>' if i in numeric else f"<td>{v}</td>"
        for i, v in enumerate(row)) + "</tr>" for row in rows)
    return f"<table{attrs}><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def seconds(s: float | None) -> str:
    from .._format import duration

    return duration(s)


def when(t: float | None) -> str:
    from .._format import timestamp

    return timestamp(t)


def status_label(code: int, text: str | None = None) -> str:
    """The status's colour swatch and its name (or ``text``, HTML)."""
    return (f'<span class="swatch" style="background:{COLOURS[code]}"></span>'
            f"{STATUSES[code] if text is None else text}")
