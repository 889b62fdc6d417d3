"""Polling with exponential back-off, so that watching jobs never hammers slurmctld."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TypeVar

from ._commands import ENDED_STATES, job_states

T = TypeVar("T")


class Backoff:
    """The delays between polls: ``first``, then times ``factor`` each time, at most ``cap``.

    Iterate it for the delays (endless): 0.5, 1, 2, 4, 8, 16, 30, 30, ... by default.
    """

    def __init__(self, first: float = 0.5, *, factor: float = 2.0, cap: float = 30.0):
        if not first > 0 or not factor >= 1 or not cap >= first:
            raise ValueError(f"Backoff needs first > 0, factor >= 1 and cap >= first; got "
                             f"first={first!r}, factor={factor!r}, cap={cap!r}")
        self.first, self.factor, self.cap = first, factor, cap

    def __iter__(self) -> Iterator[float]:
        delay = self.first
        while True:
            yield delay
            delay = min(delay * self.factor, self.cap)


def poll_until(check: Callable[[], T | None], *, timeout: float | None = None,
               backoff: Backoff | None = None,
               sleep: Callable[[float], None] = time.sleep,
               clock: Callable[[], float] = time.monotonic) -> T:
    """Call ``check()`` until it returns something true; return that.

    Between two calls it sleeps the next delay of ``backoff`` (default `Backoff()`: 0.5 s,
    doubling, at most 30 s), never past the deadline.

    Args:
        check: a function of no argument; a true result ends the polling.
        timeout: seconds to poll before giving up (None: forever).
        backoff: the delays between calls.
        sleep, clock: the waiting and the time used (for tests).

    Raises:
        TimeoutError: ``check`` returned nothing true within ``timeout`` (its last result is
            in the message).
    """
    deadline = None if timeout is None else clock() + timeout
    for delay in backoff or Backoff():
        result = check()
        if result:
            return result
        if deadline is not None:
            left = deadline - clock()
            if left <= 0:
                raise TimeoutError(f"still waiting after {timeout:g} s; last answer: {result!r}")
            delay = min(delay, left)
        sleep(delay)
    raise AssertionError("unreachable: Backoff is endless")


def all_ended(states: Mapping[str, str]) -> bool:
    """True when there are states and every one is an ended state (`ENDED_STATES`)."""
    return bool(states) and all(s in ENDED_STATES for s in states.values())


class JobWatcher:
    """Watches the states of one job or array (or several), one ``squeue`` call per poll.

    >>> watcher = JobWatcher(job_id)
    >>> final = watcher.wait(timeout=600)       # every element ended: {"123_0": "COMPLETED", ...}
    >>> watcher.polls                           # how many squeue calls that took

    Args:
        job_id: what `job_states` takes: a job, an array, an element, or several.
        backoff: the delays between polls (default `Backoff()`: 0.5 s doubling to 30 s).
    """

    def __init__(self, job_id: str | int | Iterable[str | int], *,
                 backoff: Backoff | None = None):
        self.job_id = job_id if isinstance(job_id, (str, int)) else list(job_id)
        self.backoff = backoff or Backoff()
        self.polls = 0
        self.states: dict[str, str] = {}

    def poll(self) -> dict[str, str]:
        """The states now (one squeue call); also kept in ``self.states``."""
        self.polls += 1
        self.states = job_states(self.job_id)
        return self.states

    def wait(self, until: Callable[[dict[str, str]], bool] = all_ended, *,
             timeout: float | None = None,
             sleep: Callable[[float], None] = time.sleep) -> dict[str, str]:
        """Poll with back-off until ``until(states)`` is true (default: every element ended).

        Returns the states that satisfied ``until``. Raises `TimeoutError` after ``timeout``
        seconds, and `SlurmCommandError` if squeue fails.
        """
        def check() -> dict[str, str] | None:
            states = self.poll()
            return states if until(states) else None

        try:
            return poll_until(check, timeout=timeout, backoff=self.backoff, sleep=sleep)
        except TimeoutError:
            raise TimeoutError(f"job {self.job_id} not done after {timeout:g} s "
                               f"({self.polls} polls); its states: {self.states}") from None
