"""The loop a worker process runs: receive a task, run ``fn(item)``, send back its outcome.

Runs in a fresh interpreter (`_child`) whose ``CUDA_VISIBLE_DEVICES`` the driver set
to the worker's device group, so that whatever ``fn`` imports (JAX) sees only those devices. In
a group of several processes (`_group`) each runs this same loop on its own devices
and receives every task of the group.

Between two tasks the worker does as little as it can: one non-blocking ``recv`` tells whether
the next task is already waiting (and reads it), one ``send`` carries the finished task's
outcome together with the next task's start. After a task of a few milliseconds every
instruction is slow (cold caches), so the steps count: `multiprocessing.connection.Connection`'s
``poll`` and ``recv`` took about 130 µs there, this one ``recv`` about 85 µs (tasks of 10 ms,
two workers on two cores).

A worker dies with its driver, quietly: on Linux the kernel SIGKILLs it when the driver's
spawning thread ends (``PR_SET_PDEATHSIG``); everywhere a thread sees its channel hang up and
kills it. The subprocesses its tasks start (its process group) are killed with it by a guardian
forked at start-up, which waits for the worker's end (Linux: its own parent-death signal;
elsewhere: EOF on a pipe the worker holds) and then kills the group.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import socket
import struct
import sys
import threading
import time
from collections import deque
from typing import Any

from .._events import ErrorInfo
from .._usage import Meter
from . import _messages as msg
from ._messages import TAKE_BACK, TaskMessage

# The messages both ways are built and read in `_messages`; their framing is
# multiprocessing.connection.Connection's (the driver reads them with one).

_SHORT = struct.Struct("!i")
_LONG = struct.Struct("!Q")
_NOTHING = object()  # no message is waiting


class Channel:
    """The worker's end of the socket pair: Connection framing, reading ahead into a buffer."""

    def __init__(self, fd: int):
        self.sock = socket.socket(fileno=fd)
        self.buffer = bytearray()
        self.frames: deque[bytes] = deque()  # whole messages read ahead, not taken yet

    def close(self) -> None:
        self.sock.close()

    def _frame(self) -> bytes | None:
        """The next whole message in the buffer (removed from it), or None."""
        buffer = self.buffer
        if len(buffer) < 4:
            return None
        (size,) = _SHORT.unpack_from(buffer)
        start = 4
        if size == -1:
            if len(buffer) < 12:
                return None
            (size,) = _LONG.unpack_from(buffer, 4)
            start = 12
        end = start + size
        if len(buffer) < end:
            return None
        data = bytes(buffer[start:end])
        del buffer[:end]
        return data

    def recv_bytes(self, block: bool = True) -> bytes | None:
        """The next message's bytes; without ``block``, None when none is waiting.

        Raises EOFError once the driver closed its end.
        """
        if self.frames:
            return self.frames.popleft()
        while (data := self._frame()) is None:
            try:
                chunk = self.sock.recv(1 << 16, 0 if block else socket.MSG_DONTWAIT)
            except BlockingIOError:
                return None
            if not chunk:
                raise EOFError("the driver closed the connection")
            self.buffer += chunk
        return data

    def _read_ahead(self) -> None:
        """Move every whole message the driver sent meanwhile into `frames`, without waiting."""
        try:
            while chunk := self.sock.recv(1 << 16, socket.MSG_DONTWAIT):
                self.buffer += chunk
        except BlockingIOError:
            pass
        else:
            raise EOFError("the driver closed the connection")
        while (data := self._frame()) is not None:
            self.frames.append(data)

    def next_task(self, block: bool = True) -> Any:
        """The driver's next task (None: stop); without ``block``, `_NOTHING` when none is
        waiting. A task is taken only if no take-back arrived after it: the tasks a take-back
        follows are given back, unstarted, in one `msg.returned`."""
        while (data := self.recv_bytes(block)) is not None:
            if data == TAKE_BACK:  # nothing held any more: every task it meant has begun
                self.send(msg.returned([]))
                continue
            self._read_ahead()
            if TAKE_BACK not in self.frames:
                return msg.read_task(data)
            frames = list(self.frames)
            last = len(frames) - 1 - frames[::-1].index(TAKE_BACK)
            self.frames = deque(frames[last + 1:])
            back = [msg.read_task(f) for f in [data, *frames[:last]] if f != TAKE_BACK]
            if any(t is None for t in back):
                return None  # the driver stops
            self.send(msg.returned([t.task_id for t in back if t is not None]))
            for _ in range(frames[:last].count(TAKE_BACK)):  # one answer per take-back
                self.send(msg.returned([]))
        return _NOTHING

    def send(self, message: Any) -> None:
        self.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

    def send_bytes(self, data: bytes) -> None:
        size = len(data)
        header = _SHORT.pack(size) if size <= 0x7FFFFFFF else _SHORT.pack(-1) + _LONG.pack(size)
        if size < 1 << 16:  # one send; a large message is not copied to prepend its header
            self.sock.sendall(header + data)
        else:
            self.sock.sendall(header)
            self.sock.sendall(data)


def serve(fd: int, driver: int) -> None:
    """Entry point of a worker process: ``fd`` is its end of the socket pair, ``driver`` the
    pid of the driver that started it."""
    _die_with(driver)
    _guard_group(fd)
    _watch_channel(fd)
    channel = Channel(fd)
    try:
        worker_main(channel)
    except (EOFError, OSError):  # the driver is gone: there is no one to tell
        pass
    finally:
        channel.close()


_PR_SET_PDEATHSIG = 1


def _prctl_pdeathsig(signum: int) -> bool:
    """Ask Linux to send ``signum`` to this process when its parent (thread) ends."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _die_with(driver: int) -> None:
    """SIGKILL this process when the driver ends; exit now if it already has."""
    _prctl_pdeathsig(signal.SIGKILL)
    if os.getppid() != driver:  # it ended before the request took effect
        os._exit(0)


def _guard_group(channel_fd: int) -> None:
    """Fork a guardian that SIGKILLs this worker's process group once the worker is gone."""
    worker = os.getpid()
    if not hasattr(os, "fork") or os.getpgrp() != worker:  # no group of its own to guard
        return
    linux = sys.platform.startswith("linux")
    if linux:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})  # inherited; unblocked below
    read_end, write_end = os.pipe()  # the worker holds write_end: EOF once it is gone
    if os.fork() != 0:
        os.close(read_end)
        _held.append(write_end)
        if linux:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
        return
    try:  # the guardian: no Python beyond this function, then out
        os.close(channel_fd)
        os.close(write_end)
        if linux and _prctl_pdeathsig(signal.SIGHUP):
            if os.getppid() == worker:
                signal.sigwait({signal.SIGHUP})
        else:
            os.read(read_end, 1)
        os.killpg(worker, signal.SIGKILL)
    finally:
        os._exit(0)


_held: list[int] = []  # the guardian's pipe, open for the worker's life


def _watch_channel(fd: int) -> None:
    """A thread that kills this worker (and its group) once the driver's end hangs up."""
    if not hasattr(select, "poll"):
        return

    def watch() -> None:
        poller = select.poll()
        poller.register(fd, 0)  # hang-up and errors only: never the data the loop reads
        poller.poll()
        if os.getpgrp() == os.getpid():
            os.killpg(0, signal.SIGKILL)
        os._exit(0)

    threading.Thread(target=watch, name="driver-watch", daemon=True).start()


def worker_main(channel: Channel) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides; Ctrl-C reaches it
    try:
        import cloudpickle

        fn = cloudpickle.loads(channel.recv_bytes())
    except (EOFError, OSError):  # the driver is gone
        return
    except BaseException as exc:  # noqa: BLE001 -- whatever loading fn raised, the driver
        channel.send(msg.fatal(ErrorInfo.from_exception(exc)))  # says why tasks cannot run
        return
    channel.send(msg.ready(os.getpid()))
    try:
        task = channel.next_task()
        while task is not None:
            begun = time.time()
            channel.send(msg.begin(task, begun))
            task = _run_tasks(channel, fn, task, begun)
    except (EOFError, OSError):  # the driver is gone
        return


def _run_tasks(channel: Channel, fn: Any, task: TaskMessage, begun: float) -> Any:
    """Run tasks while the next one is already waiting; return the next task otherwise."""
    meter = Meter()
    while True:
        try:
            with meter:
                value = fn(task.item)
        except BaseException as exc:  # noqa: BLE001 -- SystemExit, KeyboardInterrupt too: the
            done = msg.error(task, _error(exc), begun, time.time(), meter.usage)  # task's own
        else:
            done = msg.result(task, value, begun, time.time(), meter.usage)
        after = channel.next_task(block=False)
        if after is _NOTHING:
            channel.send_bytes(_pickled(done))
            return channel.next_task()
        if after is None:
            channel.send_bytes(_pickled(done))
            return None
        task, begun = after, time.time()
        channel.send_bytes(_pickled([done, msg.begin(task, begun)]))


def _error(exc: BaseException) -> ErrorInfo:
    """``exc``, raised by fn, as the task's error (without this runner's frame); one that is
    not an ``Exception`` says so (the worker goes on: it ignores SIGINT, so a
    ``KeyboardInterrupt`` here was raised by ``fn`` itself)."""
    info = ErrorInfo.capture(exc)
    if isinstance(exc, Exception):
        return info
    said = f"{info.message}; " if info.message else ""
    return ErrorInfo(info.type, f"{said}fn raised {info.type}, which is not an Exception: the "
                                "task failed and its worker went on", info.traceback)


def _pickled(message: Any) -> bytes:
    """``message`` pickled; a result that cannot be pickled becomes the task's error."""
    try:
        return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 -- whatever pickling the result raised is the task's
        done = message[0] if isinstance(message, list) else message  # error, told to the driver
        info = ErrorInfo.from_exception(exc)
        value = msg.returned_value(done)
        done = msg.as_error(done, ErrorInfo(
            info.type, f"the task returned a {type(value).__name__} that cannot be pickled to "
                       f"send it to the driver: {exc}", info.traceback))
        return pickle.dumps([done, *message[1:]] if isinstance(message, list) else done,
                            protocol=pickle.HIGHEST_PROTOCOL)
