"""Which worker of the processes scheduler gets the next task, and how many tasks it queues.

Idle workers get a task first. When tasks are short (under `LOOKAHEAD_BELOW` seconds on
average) each busy one-process worker also holds the next tasks, about `HOLD_AHEAD` seconds of
them, so it starts each without waiting for a round trip to the driver. A held task has not
started: if its worker dies it goes back to the queue unmarked, and `Scheduler.take_back` takes
it back. A group of several processes runs one task at a time and holds none.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence

from .._devices import Group, group_processes
from .._events import Task
from .._mean import RunningMean
from ._group import WorkerGroup

#: Busy workers hold their next task while the mean task takes less than this (seconds).
LOOKAHEAD_BELOW = 1.0
#: Seconds of tasks a busy worker holds (at least one, at most `MAX_HELD`): enough that a driver
#: answering at the next scheduler tick leaves no gap.
HOLD_AHEAD = 0.01
MAX_HELD = 8
#: Tasks per worker the scheduler queues beyond those running and held; the engine tops the
#: queue up when half of it is gone, one thread switch of the driver per that many tasks.
QUEUED_PER_WORKER = 4
#: The mean task duration is that of about this many last tasks.
MEAN_WINDOW = 100


def queued(groups: Sequence[Group | None]) -> int:
    """How many tasks the scheduler queues beyond those its workers run and hold."""
    return QUEUED_PER_WORKER * len(groups)


def slots(groups: Sequence[Group | None]) -> int:
    """How many tasks may be submitted without their outcome: those queued, and per worker the
    one it runs and those it may hold (a group of several processes holds none)."""
    return queued(groups) + sum(1 if g is not None and len(group_processes(g)) > 1
                                else 1 + MAX_HELD for g in groups)


def hold_depth(mean: RunningMean) -> int:
    """How many tasks a busy one-process worker holds: 0 until a task finished, or while tasks
    take `LOOKAHEAD_BELOW` seconds or more on average."""
    if not mean or mean.value >= LOOKAHEAD_BELOW:
        return 0
    return min(MAX_HELD, max(1, math.ceil(HOLD_AHEAD / max(mean.value, 1e-6))))


def assign(pending: deque[Task], workers: Sequence[WorkerGroup], depth: int,
           send: Callable[[WorkerGroup], None]) -> None:
    """Hand out queued tasks with ``send(worker)`` (which takes the first of ``pending``): one
    to every idle worker, then, ``depth`` deep, to busy one-process workers in rounds, so that
    every worker gets its share."""
    for w in workers:
        if not pending:
            return
        if w.idle:
            send(w)
    for _ in range(depth):
        for w in workers:
            if not pending:
                return
            if w.ready and not w.several and w.task is not None and len(w.held) < depth:
                send(w)
