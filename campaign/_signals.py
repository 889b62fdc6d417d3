"""Signals that stop a run the way Ctrl-C does: for the driver (SIGTERM) and for array workers
(SIGUSR1 from Slurm's ``--signal`` before the time limit, SIGTERM at it). Handlers are installed
from the main thread only; elsewhere the context managers do nothing."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from ._errors import Interrupted


class Stop:
    """Which signal stopped the block (``signum``), None while none did."""

    signum: int | None = None


@contextlib.contextmanager
def signals_raise(*signums: int, swallow: bool = False) -> Iterator[Stop]:
    """While active, each of ``signums`` raises `Interrupted` ("stopped by SIGTERM"), as Ctrl-C
    raises KeyboardInterrupt, and is noted in the `Stop` yielded. With ``swallow``, an
    `Interrupted` that leaves the block ends it quietly (the caller reads ``stop.signum``)."""
    stop = Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum, frame):
        stop.signum = signum
        raise Interrupted(signum, f"stopped by {signal.Signals(signum).name}")

    previous = {s: signal.signal(s, handler) for s in signums}
    try:
        yield stop
    except Interrupted:
        if not swallow:
            raise
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """While active, Ctrl-C is ignored: a last ledger write must not be cut short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


#: The signals that stop a run; the threads a driver starts block them (`block_stop_signals`).
STOP_SIGNALS = frozenset(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGUSR1")
                         if hasattr(signal, name))


def block_stop_signals() -> None:
    """Called first in a thread the campaign starts: the kernel then delivers Ctrl-C and the
    stop signals to the main thread, where they interrupt what it waits in (``fn``'s own
    ``time.sleep`` included) and raise; a signal taken by another thread would only set
    Python's flag while the main thread slept on."""
    if hasattr(signal, "pthread_sigmask"):  # POSIX
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)

