"""Progress of `campaign run` on stderr: a tqdm bar on a terminal, plain periodic lines
elsewhere (CI logs, Slurm output files), or nothing."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import IO, Any

from .._campaign import Progress
from ._common import duration, rate

#: ``--progress`` choices.
MODES = ("auto", "bar", "lines", "off")


def summary_line(p: Progress) -> str:
    """``120/1000 accepted, 3 failed, 1 running, 876 remaining, 12.3 tasks/s, ETA 1m12s``."""
    per_s = p.done_this_run / p.elapsed if p.elapsed > 0 and p.done_this_run else None
    left = p.remaining + p.running
    eta = duration(left / per_s) if per_s and left else ("0s" if not left else "?")
    refused = f", {p.refused} refused" if p.refused else ""
    return (f"{p.accepted}/{p.total} accepted, {p.failed} failed{refused}, {p.running} running, "
            f"{p.remaining} remaining, {rate(per_s)}, ETA {eta}")


class LineProgress:
    """One plain line per ``interval`` seconds (the first at once) and one at the end."""

    def __init__(self, stream: IO[str] | None = None, interval: float = 10.0):
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.last: Progress | None = None
        self._next = 0.0
        self._lock = threading.Lock()

    def __call__(self, p: Progress) -> None:
        with self._lock:
            self.last = p
            now = time.monotonic()
            if now >= self._next:
                self._next = now + self.interval
                self._write(p)

    def logging_context(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def close(self, final: Progress | None = None, note: str = "") -> None:
        with self._lock:
            p = final or self.last
            if p is not None:
                self._write(p, note)

    def _write(self, p: Progress, note: str = "") -> None:
        self.stream.write(f"[campaign] {note}{summary_line(p)}\n")
        self.stream.flush()


class BarProgress:
    """A tqdm bar: tasks done (accepted, failed or refused) of all, with the counts after it."""

    def __init__(self, stream: IO[str] | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.bar: Any = None
        self.last: Progress | None = None
        self._lock = threading.Lock()

    def __call__(self, p: Progress) -> None:
        with self._lock:
            self.last = p
            done = p.accepted + p.failed + p.refused
            if self.bar is None:
                from tqdm import tqdm  # imported only when a bar is shown

                self.bar = tqdm(total=p.total, initial=done, file=self.stream, unit="task",
                                desc="campaign", dynamic_ncols=True, smoothing=0.05)
            self.bar.set_postfix_str(
                f"{p.accepted} ok, {p.failed} failed, {p.running} running, "
                f"{p.remaining} remaining", refresh=False)
            self.bar.update(done - self.bar.n)

    def logging_context(self) -> contextlib.AbstractContextManager[Any]:
        """While active, log records are printed above the bar instead of through it."""
        from tqdm.contrib.logging import logging_redirect_tqdm

        return logging_redirect_tqdm()

    def close(self, final: Progress | None = None, note: str = "") -> None:
        with self._lock:
            if self.bar is not None:
                self.bar.close()
                self.bar = None


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
