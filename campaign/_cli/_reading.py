"""Reading a ledger for the inspecting commands: without a lock, a bad ledger exits 2."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ._exits import BadInput


def read_ledger(path: Path) -> dict[str, Any]:
    """Read and check a ledger without any lock (files are replaced atomically), or exit 2."""
    from .._document import read
    from .._errors import LedgerError

    try:
        return read(path)
    except LedgerError as exc:
        raise BadInput(str(exc)) from None


def scan_ledger(path: Path, *, with_leases: bool = True) -> tuple[
        dict[str, Any], Iterator[dict[str, Any]], Any]:
    """Stream a ledger without any lock (`campaign._scan.scan_records`): its top-level fields,
    its checked records chunk by chunk (array fragments applied, leased tasks running) and the
    overlay; a problem found at the start or in a later chunk exits 2."""
    from .._errors import LedgerError
    from .._scan import scan_records

    try:
        head, chunks, over = scan_records(path, with_leases=with_leases)
    except LedgerError as exc:
        raise BadInput(str(exc)) from None

    def checked() -> Iterator[dict[str, Any]]:
        try:
            yield from chunks
        except LedgerError as exc:
            raise BadInput(str(exc)) from None

    return head, checked(), over
