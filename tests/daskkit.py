"""What the dask tests share: a task function that notes each run, reading those notes, and a
thread beside a campaign.

Imported as ``from daskkit import ...`` (tests/conftest.py puts this folder on ``sys.path``); the
workers of a cluster import it too, so its task functions are found by reference there.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from testkit import PATIENCE


def noted(item: Mapping[str, Any]) -> dict[str, Any]:
    """Note this run (``<task>.<pid>.<ns>`` in ``folder``); a ``held`` task then waits for the
    file ``hold``; then sleep ``sleep`` seconds. Returns the pid that ran it."""
    (Path(item["folder"]) / f"{item['task_id']}.{os.getpid()}.{time.time_ns()}").touch()
    if item.get("held"):
        deadline = time.monotonic() + 300  # only a hung test waits this long
        while not Path(item["hold"]).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{item['hold']} did not appear in 300 s")
            time.sleep(0.01)
    time.sleep(item.get("sleep", 0))
    return {"pid": os.getpid()}


def runs(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Task id -> (pid, time) of each run that began (from `noted`'s files)."""
    seen: dict[str, list[tuple[int, float]]] = {}
    for mark in folder.iterdir():
        tid, pid, ns = mark.name.split(".")
        seen.setdefault(tid, []).append((int(pid), int(ns) / 1e9))
    return seen


def pids(folder: Path) -> dict[str, set[int]]:
    """Task id -> the pids that began running it."""
    return {tid: {pid for pid, _ in began} for tid, began in runs(folder).items()}


class Beside(threading.Thread):
    """Runs ``fn`` beside the campaign; `join` re-raises what it raised."""

    def __init__(self, fn: Callable[[], None]):
        super().__init__(daemon=True)
        self.fn = fn
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.fn()
        except BaseException as exc:  # noqa: BLE001 -- re-raised in the test's thread
            self.error = exc

    def join(self, timeout: float | None = PATIENCE) -> None:
        super().join(timeout)
        assert not self.is_alive(), "the thread beside the campaign did not finish"
        if self.error is not None:
            raise self.error
