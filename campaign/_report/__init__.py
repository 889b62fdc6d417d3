"""`campaign report`: one self-contained HTML page of plots about a ledger, that opens offline.

``write_report(ledger, output)`` reads the ledger once (`_data`), lays out its sections and
bokeh figures (`_page`, `_plots`) and writes the page atomically. Importing this package imports
neither numpy nor bokeh; calling it does.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

#: The most points (glyphs) one plot draws; more are sampled down to this.
MAX_POINTS = 20_000
#: The most rows of the page's table of tasks; the rest are counted, not listed
#: (`campaign results LEDGER --with-records` lists them all).
MAX_TASK_ROWS = 2_000


@dataclass(frozen=True)
class Report:
    """What `write_report` wrote: the page's path, its size in bytes, its number of plots, and
    how many tasks the ledger holds."""

    path: Path
    size: int
    plots: int
    tasks: int


def write_report(ledger: str | os.PathLike[str], output: str | os.PathLike[str], *,
                 now: float | None = None) -> Report:
    """Write the report page of the ledger at ``ledger`` to ``output`` (replaced atomically):
    what `campaign report` writes (docs/cli.md).

    ``now``: the time the page is written for (default: the current time); it ends the bars
    of running attempts and dates the ETA. Raises `campaign.LedgerError` when the ledger cannot
    be read, and `OSError` when the page cannot be written."""
    from .._ledger._atomic import atomic_write
    from ._data import load
    from ._page import render

    now = time.time() if now is None else now
    data = load(Path(ledger), now)
    text, plots = render(data)
    payload = text.encode("utf-8")
    atomic_write(Path(output), payload)
    return Report(path=Path(output), size=len(payload), plots=plots, tasks=len(data.task_ids))


__all__ = ["MAX_POINTS", "MAX_TASK_ROWS", "Report", "write_report"]
