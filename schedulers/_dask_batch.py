"""What runs on a dask worker: a batch of tasks, each outcome kept apart.

Importable on every worker (the workers need the same environment as the driver; see
docs/cluster.md). Imports nothing heavy.
"""

from __future__ import annotations

import os
import pickle
import time
from typing import Any, Callable

from ._events import ErrorInfo
from ._host import HOST


def run_batch(fn: Callable[[Any], Any], tasks: list[tuple[str, int, Any]]) -> tuple[Any, list]:
    """Run ``fn`` on each ``(task_id, attempt, item)``; return where, and one outcome per task.

    An exception in ``fn`` is that task's outcome, not the batch's: the batch itself fails only
    when its worker is lost.
    """
    try:
        from distributed import get_worker

        worker = get_worker().name
    except (ImportError, ValueError):
        worker = None
    devices = os.environ.get("CUDA_VISIBLE_DEVICES")
    group = tuple(int(d) for d in devices.split(",") if d.strip().isdigit()) if devices else None
    outcomes = []
    for task_id, attempt, item in tasks:
        begun = time.time()
        try:
            value = fn(item)
            pickle.dumps(value)
        except Exception as exc:
            exc = exc.with_traceback(exc.__traceback__.tb_next if exc.__traceback__ else None)
            outcomes.append((task_id, attempt, "error", ErrorInfo.from_exception(exc), begun,
                             time.time()))
        else:
            outcomes.append((task_id, attempt, "result", value, begun, time.time()))
    return (HOST, os.getpid(), None if worker is None else str(worker), group), outcomes
