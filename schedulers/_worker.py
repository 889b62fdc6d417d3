"""The loop a worker process runs: receive a task, run ``fn(item)``, send back its outcome.

Runs in a fresh interpreter (`schedulers._child`) whose ``CUDA_VISIBLE_DEVICES`` the driver set
to the worker's device group, so that whatever ``fn`` imports (JAX) sees only those devices. In
a group of several processes (`schedulers._group`) each runs this same loop on its own devices
and receives every task of the group.
"""

from __future__ import annotations

import os
import pickle
import signal
import time
from multiprocessing.connection import Connection
from typing import Any

from ._events import ErrorInfo

# From the driver: the pickled fn (bytes, first), then ("task", task_id, attempt, item) | None.
# From a worker: ("ready", pid) | ("fatal", ErrorInfo) | ("begin", task_id, attempt, time)
#   | ("done", task_id, attempt, kind, value, started, ended) with kind "result" or "error",
#   or a list of these: a "done" and the "begin" of the next task, already waiting, in one send
#   (one wake-up of the driver instead of two).
# The driver may send a task while the previous one runs; it waits in the socket until then.


def serve(fd: int) -> None:
    """Entry point of a worker process: ``fd`` is its end of the socket pair."""
    conn = Connection(fd)
    try:
        worker_main(conn)
    finally:
        conn.close()


def worker_main(conn: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides; Ctrl-C reaches it
    try:
        import cloudpickle

        fn = cloudpickle.loads(conn.recv_bytes())
    except (EOFError, OSError):  # the driver is gone
        return
    except BaseException as exc:
        conn.send(("fatal", ErrorInfo.from_exception(exc)))
        return
    conn.send(("ready", os.getpid()))
    try:
        message = conn.recv()
        while message is not None:
            _, task_id, attempt, item = message
            begun = time.time()
            conn.send(("begin", task_id, attempt, begun))
            message = _run_tasks(conn, fn, task_id, attempt, item, begun)
    except (EOFError, OSError):  # the driver is gone
        return


def _run_tasks(conn: Any, fn: Any, task_id: str, attempt: int, item: Any, begun: float) -> Any:
    """Run tasks while the next one is already waiting; return the next message otherwise."""
    while True:
        try:
            value = fn(item)
            pickle.dumps(value)  # fail here, as the task's error, rather than in send
        except Exception as exc:
            exc = exc.with_traceback(exc.__traceback__.tb_next if exc.__traceback__ else None)
            done = ("done", task_id, attempt, "error", ErrorInfo.from_exception(exc), begun,
                    time.time())
        else:
            done = ("done", task_id, attempt, "result", value, begun, time.time())
        if not conn.poll():
            conn.send(done)
            return conn.recv()
        message = conn.recv()
        if message is None:
            conn.send(done)
            return None
        _, task_id, attempt, item = message
        begun = time.time()
        conn.send([done, ("begin", task_id, attempt, begun)])
