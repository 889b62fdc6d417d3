"""`campaign.iter_ledger`: a ledger's records one at a time, in bounded memory.

`campaign.read_ledger` parses the whole file into Python objects at once: 4.7 GB and 19 s for
the 707 MB ledger of a million tasks of `benchmarks/read_ledger.py`. `iter_ledger` gives the
same records in the same order from the streaming scan the driver's load reads
(`campaign._ledger._scan.Scan`, ``as_bytes``): the file a block at a time, each block checked as
`read_ledger` checks the whole file, the journal merged, so one block's records are held at
once, beside the journal's records kept as their JSON bytes (a running ledger's journal may
hold a large share of the tasks).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from types import TracebackType
from typing import Any

from ._scan import Scan


class LedgerRecords:
    """The records of one ledger, read once: iterate it for ``(task id, record)`` pairs.

    ``head`` is the document without its ``tasks`` (``runs``, ``created``, ``updated``, ...),
    the journal's runs merged, as `campaign.read_ledger` returns them. The records are those of
    ``read_ledger(path)["tasks"]``, in its order, as stored (non-finite floats stay tagged,
    docs/ledger.md). A record found invalid raises `LedgerError` when the iteration reaches
    its block. Use it as a context manager, or iterate it to the end, to close the file.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self._scan = Scan(path, as_bytes=True)
        self.path = self._scan.path
        self.head: dict[str, Any] = self._scan.head
        self._used = False

    def __iter__(self) -> Iterator[tuple[str, dict[str, Any]]]:
        if self._used:
            raise RuntimeError(f"the records of ledger {self.path} were read already: they "
                               "stream from the file once; call campaign.iter_ledger again")
        self._used = True
        return self._scan.records()

    def close(self) -> None:
        self._scan.close()

    def __enter__(self) -> LedgerRecords:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def iter_ledger(path: str | os.PathLike[str]) -> LedgerRecords:
    """The ledger at ``path`` as its head and a stream of its records (`LedgerRecords`)::

        with campaign.iter_ledger("campaign.json") as ledger:
            runs = ledger.head["runs"]
            for task_id, record in ledger:
                ...

    Raises `LedgerError` as `campaign.read_ledger` does (no ledger, not JSON, not a ledger, a
    newer version, a bad field). Array workers' fragments not merged yet are not included, as
    in `read_ledger`."""
    return LedgerRecords(path)
