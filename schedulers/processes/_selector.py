"""The processes monitor's selector: every worker process's socket and exit sentinel, and the
wake-up pipe, in one selector for the whole run, changed only when workers are replaced (a new
poll set per wake-up cost more than the tasks' own messages)."""

from __future__ import annotations

import selectors
from collections.abc import Sequence
from typing import Any

from ._group import WorkerGroup

Members = dict[Any, tuple[WorkerGroup, int]]  # a process's socket or sentinel -> group, rank


class WorkerSelector:
    """What the monitor waits on. `follow` (under the scheduler's lock) takes a new list of
    workers; `select` (outside it) registers what changed and waits."""

    def __init__(self, wake: Any) -> None:
        self._selector = selectors.DefaultSelector()
        self._watched: dict[Any, int] = {}  # what the selector watches -> its fd
        self._wake = wake
        self._changed = False
        self.generation = -1
        self.by_conn: Members = {}
        self.by_sentinel: Members = {}

    def follow(self, workers: Sequence[WorkerGroup], generation: int) -> None:
        """Watch the processes of ``workers`` if their ``generation`` is new."""
        if generation == self.generation:
            return
        self.generation, self._changed = generation, True
        self.by_conn = {m.conn: (w, j) for w in workers for j, m in enumerate(w.members)}
        self.by_sentinel = {m.sentinel: (w, j) for w in workers
                            for j, m in enumerate(w.members) if m.sentinel is not None}

    def select(self, timeout: float | None) -> list[Any]:
        """The sockets, sentinels and wake-up pipe that are ready within ``timeout`` seconds."""
        if self._changed:
            self._changed = False
            wanted = {self._wake, *self.by_conn, *self.by_sentinel}
            for gone in set(self._watched) - wanted:  # by the fd it had: it may be closed now
                self._selector.unregister(self._watched.pop(gone))
            for new in wanted - set(self._watched):
                self._watched[new] = _fd(new)
                self._selector.register(self._watched[new], selectors.EVENT_READ, new)
        return [key.data for key, _ in self._selector.select(timeout)]

    def close(self) -> None:
        self._selector.close()


def _fd(thing: Any) -> int:
    return thing if isinstance(thing, int) else thing.fileno()
