"""The messages between the processes driver and its workers: built and read here alone.

From the driver, framed as `multiprocessing.connection.Connection` frames them (a 4-byte
big-endian signed length, or -1 and an 8-byte length, then the bytes):

1. the pickled ``fn`` (cloudpickle's bytes), first;
2. `task` frames, ``("task", task_id, attempt, item)``; the driver may send one while the
   previous task runs: it waits in the socket until then (held ahead);
3. `TAKE_BACK`, a frame of its own and not a pickle (found without unpickling): give back the
   tasks sent before it that have not begun;
4. `STOP`: end.

From a worker, pickled tuples, or a list of them sent together (a task's ``done`` and the
``begin`` of the next one, already waiting: one wake-up of the driver instead of two):

- ``("ready", pid)``; ``("fatal", ErrorInfo)``: ``fn`` could not be loaded;
- ``("begin", task_id, attempt, time)``;
- ``("done", task_id, attempt, kind, value, begun, ended, usage)``: ``kind`` an `OutcomeKind`
  value, ``value`` fn's return value (``result``) or an `ErrorInfo` (``error``), ``usage`` what
  fn used (`schedulers._usage`);
- ``("returned", task_ids)``: the answer to a `TAKE_BACK`, the tasks it gave back.

Plain tuples cross the wire (a named tuple pickles by its class, and costs more); `read` gives
the driver each as a named tuple, `read_task` the worker its task.
"""

from __future__ import annotations

import pickle
from typing import Any, NamedTuple

from .._events import ErrorInfo, OutcomeKind, Task

TASK, READY, FATAL, BEGIN, DONE, RETURNED = "task", "ready", "fatal", "begin", "done", "returned"
TAKE_BACK = b"take-back"
STOP = pickle.dumps(None, protocol=pickle.HIGHEST_PROTOCOL)
_RESULT, _ERROR = OutcomeKind.RESULT.value, OutcomeKind.ERROR.value


class TaskMessage(NamedTuple):
    task_id: str
    attempt: int
    item: Any


class Ready(NamedTuple):
    pid: int


class Fatal(NamedTuple):
    error: ErrorInfo


class Begin(NamedTuple):
    task_id: str
    attempt: int
    time: float


class Done(NamedTuple):
    """A task's end in one process: ``value`` is fn's return value, or its `ErrorInfo`."""

    task_id: str
    attempt: int
    kind: OutcomeKind  # RESULT or ERROR
    value: Any
    begun: float
    ended: float
    usage: dict[str, Any] | None


class Returned(NamedTuple):
    task_ids: list[str]


FromWorker = Ready | Fatal | Begin | Done | Returned


# ---------------------------------------------------------------------- the driver's side
def task(t: Task) -> bytes:
    """The frame that sends ``t``; raises if its item cannot be pickled."""
    return pickle.dumps((TASK, t.task_id, t.attempt, t.item), protocol=pickle.HIGHEST_PROTOCOL)


def read(message: Any) -> list[FromWorker]:
    """What one receive from a worker holds: one message or several sent together, named."""
    if type(message) is list:
        return [_read_one(m) for m in message]
    return [_read_one(message)]


def _read_one(m: tuple[Any, ...]) -> FromWorker:
    tag = m[0]
    if tag == DONE:
        return Done(m[1], m[2], OutcomeKind(m[3]), m[4], m[5], m[6], m[7])
    if tag == BEGIN:
        return Begin(m[1], m[2], m[3])
    if tag == READY:
        return Ready(m[1])
    if tag == RETURNED:
        return Returned(m[1])
    if tag == FATAL:
        return Fatal(m[1])
    raise ValueError(f"unknown message from a worker process: {m!r}")


# ---------------------------------------------------------------------- the worker's side
def read_task(data: bytes) -> TaskMessage | None:
    """A `task` frame's task, or None for `STOP`."""
    m = pickle.loads(data)
    return None if m is None else TaskMessage(m[1], m[2], m[3])


def ready(pid: int) -> tuple[Any, ...]:
    return (READY, pid)


def fatal(error: ErrorInfo) -> tuple[Any, ...]:
    return (FATAL, error)


def begin(t: TaskMessage, time: float) -> tuple[Any, ...]:
    return (BEGIN, t.task_id, t.attempt, time)


def result(t: TaskMessage, value: Any, begun: float, ended: float,
           usage: dict[str, Any] | None) -> tuple[Any, ...]:
    return (DONE, t.task_id, t.attempt, _RESULT, value, begun, ended, usage)


def error(t: TaskMessage, info: ErrorInfo, begun: float, ended: float,
          usage: dict[str, Any] | None) -> tuple[Any, ...]:
    return (DONE, t.task_id, t.attempt, _ERROR, info, begun, ended, usage)


def returned(task_ids: list[str]) -> tuple[Any, ...]:
    return (RETURNED, task_ids)


def as_error(done: tuple[Any, ...], info: ErrorInfo) -> tuple[Any, ...]:
    """``done`` (a `result` message) turned into the task's error ``info``."""
    d = _read_one(done)
    assert isinstance(d, Done)
    return (DONE, d.task_id, d.attempt, _ERROR, info, d.begun, d.ended, d.usage)


def returned_value(done: tuple[Any, ...]) -> Any:
    """The value a `result` or `error` message carries."""
    d = _read_one(done)
    assert isinstance(d, Done)
    return d.value
