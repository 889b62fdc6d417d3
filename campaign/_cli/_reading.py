"""Reading a ledger for the inspecting commands: without a lock, a bad ledger exits 2."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from ._exits import BadInput

#: Bytes of a file read to tell an items file from a ledger.
_SNIFF = 4096


def items_file_kind(path: Path) -> str | None:
    """What kind of items file ``path`` looks like (``"CSV"``, ``"JSON Lines"``, ``"a JSON
    list"``), or None: a ledger is one JSON object, never a list, CSV or lines of objects."""
    suffix = path.suffix.lower()
    try:
        with open(path, "rb") as f:
            head = f.read(_SNIFF).decode("utf-8-sig", errors="replace")
    except OSError:
        return None
    text = head.lstrip()
    first = text.splitlines()[0] if text else ""
    if text.startswith("["):
        return "a JSON list"
    if suffix in (".jsonl", ".ndjson") or (first.startswith("{") and first.rstrip().endswith(
            "}") and len(text.splitlines()) > 1 and text.splitlines()[1].lstrip().startswith("{")):
        return "JSON Lines"
    if suffix == ".csv" or (first and not first.startswith("{") and "," in first):
        return "CSV"
    return None


def ledger_message(path: Path, message: str) -> str:
    """The library's message on a ledger it could not read, or, when ``path`` looks like an
    items file, one that says so and names the file to give instead."""
    kind = items_file_kind(path)
    if kind is None:
        return message
    ctx = click.get_current_context(silent=True)
    name = ctx.info_name if ctx is not None and ctx.info_name else "status"
    if name in ("run", "submit", "worker"):
        return (f"{path} is not a campaign ledger: it looks like an items file ({kind}); it was "
                "left untouched. Give it as the items (--items, or `items = ...` in the spec "
                "file) and name a new ledger file (--ledger, or `ledger = ...`), e.g. "
                f"campaign run TARGET --items {path} --ledger runs.json")
    return (f"{path} is not a campaign ledger: it looks like an items file ({kind}), which "
            f"`campaign run` reads; it was left untouched. Give `campaign {name} LEDGER` the "
            "ledger file (the file `campaign run` names with --ledger), or run the items "
            f"first: campaign run TARGET --items {path} --ledger runs.json")


def read_ledger(path: Path) -> dict[str, Any]:
    """Read and check a ledger without any lock (files are replaced atomically), or exit 2."""
    from .._errors import LedgerError
    from .._ledger._document import read

    try:
        return read(path)
    except LedgerError as exc:
        raise BadInput(ledger_message(path, str(exc))) from None


def scan_ledger(path: Path, *, with_leases: bool = True) -> tuple[
        dict[str, Any], Iterator[dict[str, Any]], Any]:
    """Stream a ledger without any lock (`campaign._ledger._overlay.scan_records`): its top-level
    fields, its checked records chunk by chunk (array fragments applied, leased tasks running) and
    the overlay; a problem found at the start or in a later chunk exits 2."""
    from .._errors import LedgerError
    from .._ledger._overlay import scan_records

    try:
        head, chunks, over = scan_records(path, with_leases=with_leases)
    except LedgerError as exc:
        raise BadInput(ledger_message(path, str(exc))) from None

    def checked() -> Iterator[dict[str, Any]]:
        try:
            yield from chunks
        except LedgerError as exc:
            raise BadInput(str(exc)) from None

    return head, checked(), over
