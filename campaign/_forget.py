"""Forgetting tasks (``campaign forget``): one operation on everything that holds a task.

A task is held by its record in the ledger (the file and its journal) and, when array workers
ran it, by files under ``<ledger>.work/`` (`campaign._array._workdir`): its records in every
submission's fragments, ``latest/<key>.json``, ``accepted/<key>``, each submission's
``done/<key>`` and ``lost/<key>``, and its lease. `forget` removes them all under the ledger's
lock, the ``.work/`` files first and the ledger's records last, so that a forget killed at any
point leaves either the ledger's records as they were (the forget did not happen) or nothing
that a merge could bring back. A task that an array worker runs now (its lease is live) is
refused: nothing is changed.

Workers that read the ledger before a forget (an array still running) could still hold the old
record: every forget changes ``<ledger>.work/forgets.json`` before it looks at the leases, and
a worker that finds it changed after claiming a task reads the ledger again under its lock
(`campaign._array._worker`), so it never runs a forgotten item.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ._array._leases import live_leases
from ._array._workdir import forget_traces, forgetting, merge_fragments
from ._errors import DriverBusyError
from ._ledger import _document, _update
from ._ledger._paths import LedgerPaths
from ._shell import command

logger = logging.getLogger(__name__)


def forget(ledger: str | os.PathLike[str],
           choose: Callable[[Mapping[str, Any]], list[str]]) -> tuple[list[str], Path | None]:
    """Remove the tasks ``choose(tasks)`` names (called under the ledger's lock with the
    ledger's records) from the ledger and from ``<ledger>.work/``, keeping the ledger as it was
    in ``<stem>.before-forget-<time><suffix>``.

    Array workers' fragments are merged first, so that the backup holds every record they had.

    Returns the task ids removed and the backup's path.

    Raises:
        DriverBusyError: an array worker runs one of the tasks now (its lease is live);
            nothing was changed.
        LedgerError, LedgerWriteError: the ledger is not valid, or could not be written (it
            was left as it was).
    """
    path = LedgerPaths.of(ledger).file
    merge_fragments(path)
    removed: list[str] = []

    def mutate(doc: dict[str, Any]) -> list[str]:
        tasks = doc["tasks"]
        gone = choose(tasks)
        if not gone:
            return gone
        forgetting(path, busy=True)  # before the leases are looked at (see the module's text)
        _refuse_running(path, gone, ledger)
        forget_traces(path, gone)  # first: the ledger's records go last
        for tid in gone:
            del tasks[tid]
        removed.extend(gone)
        return gone

    with _document.file_lock(path):
        _, backup = _update.update(path, mutate, backup="before-forget", locked=True)
        if removed:
            forgetting(path, busy=False)
    logger.info("forgot %d task(s) in %s; the ledger as it was is kept as %s", len(removed),
                path, backup)
    return removed, backup


def _refuse_running(path: Path, gone: list[str], shown: str | os.PathLike[str]) -> None:
    """Raise `DriverBusyError` if an array worker holds a live lease of a task of ``gone``
    (``shown``: the ledger as the user named it, in the commands the message gives)."""
    wanted = set(gone)
    running = [lease for lease in live_leases(path) if lease.get("task_id") in wanted]
    if not running:
        return
    lease = running[0]
    owner = lease.get("owner") or {}
    tid = lease["task_id"]
    others = f" (and {len(running) - 1} more of those named)" if len(running) > 1 else ""
    job = owner.get("job")
    cancel = f", or cancel its job (`{command('scancel', job)}`)" if job else ""
    expires = time.strftime("%H:%M:%S", time.localtime(lease.get("expires", 0)))
    status = command("campaign", "status", shown)
    again = command("campaign", "forget", shown, tid)
    raise DriverBusyError(
        f"task {tid!r}{others} is running now: array worker {owner.get('worker')} on host "
        f"{owner.get('host')} holds its lease (renewed while it runs, else it expires at "
        f"{expires}); nothing was forgotten. Wait until it ends (`{status}`){cancel}, then "
        f"forget it: `{again}`")
