"""The engine's queue of tasks waiting to be handed to the scheduler.

A run of 10⁶ tasks must not hold 10⁶ `Task` objects: the planned tasks are held as their item
indices (8 bytes each) and a `Task` is built, its item read from `PreparedItems`, only when
one is taken from the queue. Tasks to run again go to the back, tasks the scheduler gave back
to the front, as in one `deque`.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Sequence

from schedulers import Task

from ._items import PreparedItems

#: A task of the queue: its item's index and the task.
Entry = tuple[int, Task]


class TaskQueue:
    """First the tasks given back (`appendleft`), then the planned ones (item indices, first
    attempt), then the tasks to run again (`append`)."""

    __slots__ = ("_back", "_front", "_items", "_next", "_planned")

    def __init__(self, items: PreparedItems, planned: Sequence[int]):
        self._items = items
        self._planned = planned if isinstance(planned, array) else array("q", planned)
        self._next = 0
        self._front: deque[Entry] = deque()
        self._back: deque[Entry] = deque()

    def popleft(self) -> Entry:
        """The next task (`IndexError` if there is none)."""
        if self._front:
            return self._front.popleft()
        if self._next < len(self._planned):
            index = self._planned[self._next]
            self._next += 1
            if self._next == len(self._planned):
                self._planned = array("q")  # all handed out: free the indices
                self._next = 0
            return index, Task(self._items.task_ids[index], self._items.item(index), 0)
        return self._back.popleft()

    def appendleft(self, entry: Entry) -> None:
        self._front.appendleft(entry)

    def append(self, entry: Entry) -> None:
        self._back.append(entry)

    def __len__(self) -> int:
        return len(self._front) + len(self._planned) - self._next + len(self._back)

    def __bool__(self) -> bool:
        return bool(self._front or self._next < len(self._planned) or self._back)

    def __repr__(self) -> str:
        return f"<{len(self)} tasks queued>"
