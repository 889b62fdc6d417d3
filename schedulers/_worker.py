"""The loop a worker process runs: receive a task, run ``fn(item)``, send back its outcome.

Runs in a child started with the spawn method, after the parent set ``CUDA_VISIBLE_DEVICES`` to
the worker's device group, so that whatever ``fn`` imports (JAX) sees only those devices.
"""

from __future__ import annotations

import os
import pickle
import signal
import time
from typing import Any

from ._events import ErrorInfo

# Messages from a worker: ("ready", pid) | ("fatal", ErrorInfo)
#   | ("done", task_id, attempt, kind, value, started, ended) with kind "result" or "error".


def worker_main(conn: Any, fn_bytes: bytes) -> None:
    """Entry point of a worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides; Ctrl-C reaches it
    try:
        import cloudpickle

        fn = cloudpickle.loads(fn_bytes)
    except BaseException as exc:
        conn.send(("fatal", ErrorInfo.from_exception(exc)))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the driver is gone
            return
        if message is None:
            return
        task_id, attempt, item = message
        begun = time.time()
        try:
            value = fn(item)
            pickle.dumps(value)  # fail here, as the task's error, rather than in send
        except Exception as exc:
            exc = exc.with_traceback(exc.__traceback__.tb_next if exc.__traceback__ else None)
            conn.send(("done", task_id, attempt, "error", ErrorInfo.from_exception(exc), begun,
                       time.time()))
        else:
            conn.send(("done", task_id, attempt, "result", value, begun, time.time()))
