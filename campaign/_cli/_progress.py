"""Progress of `campaign run` on stderr: a tqdm bar on a terminal, plain periodic lines
elsewhere (CI logs, Slurm output files), or nothing.

The engine calls a display after every start and every outcome; a display also redraws from a
thread of its own, so that what it shows is the latest count even while no event comes (a
task started just after the last line was written, and runs for an hour).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import IO, Any

from .._campaign import Progress
from .._format import duration, rate
from .._signals import block_stop_signals

#: ``--progress`` choices.
MODES = ("auto", "bar", "lines", "off")
#: Seconds between two redraws of the bar by its own thread (when the counts changed).
BAR_REFRESH = 0.5


def _counts(p: Progress | None) -> tuple[int, ...] | None:
    """What a display shows of a `Progress`, apart from the time."""
    if p is None:
        return None
    return (p.total, p.accepted, p.failed, p.refused, p.running, p.remaining)


class _Ticker:
    """Calls ``tick`` every ``interval`` seconds from a daemon thread, until `stop`."""

    def __init__(self, interval: float, tick: Any):
        self._stopped = threading.Event()
        self._interval, self._tick = interval, tick
        self._thread = threading.Thread(target=self._loop, name="campaign-progress",
                                        daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        block_stop_signals()
        while not self._stopped.wait(self._interval):
            self._tick()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not threading.current_thread():
            self._thread.join()


def summary_line(p: Progress, eta: bool = True) -> str:
    """``120/1000 accepted, 3 failed, 1 running, 876 remaining, 12.3 tasks/s, ETA 1m12s``;
    without ``eta`` (the last line of a run that ended or was stopped), no ETA."""
    per_s = p.done_this_run / p.elapsed if p.elapsed > 0 and p.done_this_run else None
    left = p.remaining + p.running
    until = duration(left / per_s) if per_s and left else ("0s" if not left else "?")
    refused = f", {p.refused} refused" if p.refused else ""
    return (f"{p.accepted}/{p.total} accepted, {p.failed} failed{refused}, {p.running} running, "
            f"{p.remaining} remaining, {rate(per_s)}" + (f", ETA {until}" if eta else ""))


class LineProgress:
    """The first line at once, then at most one line per ``interval`` seconds whenever the
    counts changed (also while no event comes: from a thread), and one line at the end."""

    def __init__(self, stream: IO[str] | None = None, interval: float = 10.0):
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.last: Progress | None = None
        self._shown: tuple[int, ...] | None = None
        self._next = 0.0
        self._lock = threading.Lock()
        self._ticker: _Ticker | None = None

    def __call__(self, p: Progress) -> None:
        with self._lock:
            self.last = p
            if time.monotonic() >= self._next:
                self._write(p)
            elif self._ticker is None:
                self._ticker = _Ticker(self.interval, self._tick)

    def _tick(self) -> None:
        with self._lock:
            if (self.last is not None and _counts(self.last) != self._shown
                    and time.monotonic() >= self._next):
                self._write(self.last)

    def logging_context(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def close(self, final: Progress | None = None, note: str = "") -> None:
        if self._ticker is not None:
            self._ticker.stop()
        with self._lock:
            p = final or self.last
            if p is not None:
                self._write(p, note, eta=False)

    def _write(self, p: Progress, note: str = "", eta: bool = True) -> None:
        self._next = time.monotonic() + self.interval
        self._shown = _counts(p)
        self.stream.write(f"[campaign] {note}{summary_line(p, eta)}\n")
        self.stream.flush()


class BarProgress:
    """A tqdm bar: tasks done (accepted, failed or refused) of all, with the counts after it."""

    def __init__(self, stream: IO[str] | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.bar: Any = None
        self.last: Progress | None = None
        self._drawn: tuple[int, ...] | None = None
        self._lock = threading.Lock()
        self._ticker: _Ticker | None = None

    def __call__(self, p: Progress) -> None:
        with self._lock:
            self.last = p
            done = p.accepted + p.failed + p.refused
            if self.bar is None:
                from tqdm import tqdm  # imported only when a bar is shown

                self.bar = tqdm(total=p.total, initial=done, file=self.stream, unit="task",
                                desc="campaign", dynamic_ncols=True, smoothing=0.05)
                self._ticker = _Ticker(BAR_REFRESH, self._tick)
            self.bar.set_postfix_str(
                f"{p.accepted} ok, {p.failed} failed, {p.running} running, "
                f"{p.remaining} remaining", refresh=False)
            before = self.bar.last_print_n, self.bar.last_print_t
            self.bar.update(done - self.bar.n)  # redraws at most every tqdm mininterval
            if (self.bar.last_print_n, self.bar.last_print_t) != before:
                self._drawn = _counts(p)

    def _tick(self) -> None:
        """Redraw when the counts changed since the bar was last drawn (e.g. a task started
        a moment after a redraw, and no event has come since)."""
        with self._lock:
            if self.bar is not None and _counts(self.last) != self._drawn:
                self.bar.refresh()
                self._drawn = _counts(self.last)

    def logging_context(self) -> contextlib.AbstractContextManager[Any]:
        """While active, log records are printed above the bar instead of through it."""
        from tqdm.contrib.logging import logging_redirect_tqdm

        return logging_redirect_tqdm()

    def close(self, final: Progress | None = None, note: str = "") -> None:
        if self._ticker is not None:
            self._ticker.stop()
        with self._lock:
            if self.bar is not None:
                self.bar.close()
                self.bar = None
            p = final or self.last
            if p is not None:  # the counts stay on screen when the bar has gone
                self.stream.write(f"[campaign] {note}{summary_line(p, eta=False)}\n")
                self.stream.flush()


class NoProgress:
    """``--progress off``."""

    last: Progress | None = None

    def __call__(self, p: Progress) -> None:
        self.last = p

    def logging_context(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def close(self, final: Progress | None = None, note: str = "") -> None:
        pass


def make_progress(mode: str, interval: float) -> LineProgress | BarProgress | NoProgress:
    """The display for ``--progress MODE``; ``auto`` is a bar when stderr is a terminal."""
    if mode == "auto":
        mode = "bar" if sys.stderr.isatty() else "lines"
    if mode == "bar":
        return BarProgress()
    if mode == "lines":
        return LineProgress(interval=interval)
    return NoProgress()
