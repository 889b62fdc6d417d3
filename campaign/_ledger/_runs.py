"""The runs of a ledger: a driver's run opened and closed, and the take-over of a dead driver's.

A driver registers its run in the ledger's ``runs`` list when it opens the ledger (`new_run`,
`add_run`) and sets its status when it closes it. The next driver, holding the driver's lease
(`campaign._ledger._owner_lease`), knows that no earlier driver holds it: what they left ``running``
is taken over (`take_over`), unless one of them provably still runs on this host (then it is
refused: a driver stopped past its lease, say by Ctrl-Z, is alive and would be fenced).
"""

from __future__ import annotations

import logging
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from .._errors import DriverBusyError
from .._policy import orphaned
from . import _document, _update
from ._atomic import HOST, atomic_write
from ._exclusive import process_start
from ._paths import LedgerPaths
from ._status import RUNNING, RUNS_LIMIT, RunStatus
from ._store import RecordStore

logger = logging.getLogger(__name__)


def new_run(run_id: str, execution: str, now: float | None = None) -> dict[str, Any]:
    """The entry of a run that begins now in this process (status ``running``), with the
    command line, folder and versions it ran with."""
    return {
        "id": run_id, "host": HOST, "pid": os.getpid(), "execution": execution,
        "started": time.time() if now is None else now, "ended": None,
        "status": RunStatus.RUNNING.value, "refused": [],
        "argv": _argv(), "cwd": _cwd(), "versions": versions(),
    }


#: At most this many arguments of the command line are recorded, each cut to `ARG_CHARS`.
ARGV_LIMIT = 64
ARG_CHARS = 400


def _argv() -> list[str]:
    args = [str(a) for a in sys.argv[:ARGV_LIMIT]]
    cut = [a if len(a) <= ARG_CHARS else a[:ARG_CHARS - 3] + "..." for a in args]
    return cut + ([f"... {len(sys.argv) - ARGV_LIMIT} more"] if len(sys.argv) > ARGV_LIMIT else [])


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError:  # the folder was removed
        return "?"


def versions() -> dict[str, str]:
    """Python's and this project's versions, and those of the numeric libraries this process
    has imported (jax, jaxlib, numpy, scipy, dask, distributed), as they were when it ran."""
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for dist, module in (("diffsoup-campaign", None), ("jax", "jax"), ("jaxlib", "jaxlib"),
                         ("numpy", "numpy"), ("scipy", "scipy"), ("dask", "dask"),
                         ("distributed", "distributed")):
        if module is not None and module not in sys.modules:
            continue
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            continue
    return found


def add_run(doc: dict[str, Any], run: dict[str, Any]) -> None:
    """Append ``run`` to the document's runs, keeping the last `RUNS_LIMIT`."""
    doc["runs"] = (doc["runs"] + [run])[-RUNS_LIMIT:]


def find_run(doc: dict[str, Any], run_id: str) -> dict[str, Any] | None:
    """The entry of the run ``run_id`` in the document's ``runs`` list, or None."""
    return next((r for r in doc["runs"] if r["id"] == run_id), None)


def set_aside(path: Path, doc: dict[str, Any], state: _document.DiskState) -> None:
    """resume=False: keep the old ledger (with its journal merged) beside, with its array
    work folder, under a name that says so."""
    saved = _update.backup_path(path, "replaced")
    if state.journal:  # a journal: the file alone does not hold everything
        atomic_write(saved, _document.document_chunks(doc), like=path)
    else:
        os.replace(path, saved)
    work = LedgerPaths.of(path).work
    if work.exists():  # its array fragments go with it
        os.replace(work, LedgerPaths.of(saved).work)
    logger.info("resume=False: the old ledger was kept as %s", saved)


def running_here(run: dict[str, Any]) -> bool:
    """Whether the driver of a ``running`` run provably still runs: on this host, a process
    with its pid that started before the run did (so not a later process given the same pid)."""
    pid = run.get("pid")
    if run.get("host") != HOST or type(pid) is not int or pid == os.getpid():
        return False
    ticks = process_start(pid)
    if ticks is None:
        return False
    try:
        with open("/proc/stat") as f:
            boot = next(float(line.split()[1]) for line in f if line.startswith("btime "))
    except (OSError, StopIteration, ValueError):
        return True  # it runs; when it started cannot be told
    started = boot + ticks / os.sysconf("SC_CLK_TCK")
    return type(run.get("started")) not in (int, float) or started <= run["started"] + 1.0


def take_over(doc: dict[str, Any], path: Path) -> list[str]:
    """The caller holds the driver's lease, so no earlier driver holds it: their leftovers are
    ours. Their ``running`` runs become ``crashed``, their ``running`` tasks ``interrupted``
    (`_policy.orphaned`). Changes ``doc`` in place (its ``tasks`` become a `RecordStore`); returns
    the tasks whose records changed.

    Raises `DriverBusyError` when a ``running`` run's driver provably still runs on this host
    (`running_here`): it lost its lease (stopped or stalled past it) but would run on."""
    for run in doc["runs"]:
        if run.get("status") == RunStatus.RUNNING and running_here(run):
            raise DriverBusyError(
                f"ledger {path} is in use by a live campaign driver (pid {run['pid']} on host "
                f"{run['host']}) that holds no driver lease (stopped, e.g. by Ctrl-Z, or "
                "stalled past it); let it go on (kill -CONT), or stop it, then run again")
    for run in doc["runs"]:
        if run.get("status") == RunStatus.RUNNING:
            run["status"] = RunStatus.CRASHED.value
    tasks = doc["tasks"] = RecordStore.of(doc["tasks"])  # statuses read from the bytes
    stale = [tid for tid in tasks if tasks.status(tid) == RUNNING]
    for tid in stale:
        tasks[tid] = orphaned(tasks[tid])
    if stale:
        logger.info("%d task(s) left running by a dead driver are now interrupted", len(stale))
    return stale
