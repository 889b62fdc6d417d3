"""What the processes scheduler does when a worker fails: the failure policy.

- A worker that dies (SIGKILL, segfault, ``os._exit``, out of memory) is replaced and its task
  reported lost (`lost`), named with how it died (`death_cause`). For a group of several
  processes the others are killed too and the group starts again on a new coordinator port;
  the task is lost even when another process raised meanwhile (its collectives fail once a
  peer is gone), and that error is quoted.
- A slot whose worker dies `MAX_START_FAILURES` times in a row before it is ready is given up:
  ``fn`` cannot be loaded, and every task fails with the reason.
- A task that runs past ``timeout`` has its worker killed and replaced, and fails with
  ``TaskTimeout`` (`timed_out`).
- When one process of a group raised, the others get `ERROR_GRACE` seconds to finish before
  the group is restarted and the task fails with that error (`late_note`).
"""

from __future__ import annotations

import signal
import time

from .._events import ErrorInfo, Outcome, OutcomeKind, Task
from ._group import WorkerGroup

#: A slot whose worker dies this many times in a row before it is ready is given up.
MAX_START_FAILURES = 3
#: Seconds the other processes of a group get to finish a task after one of them raised,
#: before the group is restarted (they may wait in a collective for the one that raised).
ERROR_GRACE = 5.0


def death_cause(w: WorkerGroup, member: int) -> str:
    """How process ``member`` of ``w`` ended, for messages; one that closed its connection but
    still runs is killed (it is of no use any more)."""
    where = w.describe(member)
    process = w.members[member]
    process.join(2.0)  # its socket closes a moment before it exits
    if process.is_alive():
        process.kill()
        process.join()
        return f"{where} closed its connection to the driver and was killed"
    code = process.exitcode
    how = f"exit code {code}"
    if code is not None and code < 0:
        try:
            how = f"signal {signal.Signals(-code).name}"
        except ValueError:
            how = f"signal {-code}"
    return f"{where} died with {how}"


def start_failures(w: WorkerGroup) -> int:
    """How many times in a row the slot of ``w``, which died, failed before it was ready."""
    return 0 if w.ready else w.start_failures + 1


def cannot_start(cause: str, failures: int) -> ErrorInfo:
    return ErrorInfo("WorkerStartError", f"{cause} before it was ready, {failures} times in a row")


def lost(w: WorkerGroup, task: Task, cause: str, host: str) -> Outcome:
    """The outcome of ``task``, lost with the worker ``w`` (``cause``: `death_cause`)."""
    whole = " (the other processes of the group were killed)" if w.several else ""
    return Outcome(task.task_id, task.attempt, OutcomeKind.LOST, w.placement(host), w.begun,
                   time.time(), error=ErrorInfo("WorkerLost", f"{cause} while running the "
                                                f"task{whole}{w.raised_meanwhile()}"))


def timed_out(w: WorkerGroup, task: Task, timeout: float | None, host: str) -> Outcome:
    pids = ", ".join(str(pid) for _, pid in sorted(w.pids.items()))
    return Outcome(task.task_id, task.attempt, OutcomeKind.ERROR, w.placement(host), w.begun,
                   time.time(), error=ErrorInfo(
                       "TaskTimeout", f"the task ran longer than timeout={timeout} s; its worker "
                                      f"{w.name} (pid {pids}) was killed and replaced"))


def late_note(w: WorkerGroup) -> str:
    """Added to the error of a group whose other processes did not finish in the grace."""
    late = sorted(set(range(len(w.members))) - set(w.done))
    who = f"process {late[0]}" if len(late) == 1 else f"processes {late}"
    return f"; {who} had not finished {ERROR_GRACE:g} s later and the group was restarted"
