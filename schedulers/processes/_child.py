"""A worker process: a fresh Python interpreter joined to the driver by a socket pair.

Like multiprocessing's spawn method the child is a new interpreter (never a fork), so its
environment — ``CUDA_VISIBLE_DEVICES`` above all — is fixed before it imports anything. Unlike
spawn it does not import the driver's ``__main__`` again (a script importing dask, JAX or the
user's whole program): it imports only `_worker`, and ``fn`` arrives pickled by value
or by reference, so a worker is ready in about a tenth of a second.

Each worker leads a session (and process group) of its own, which its task's subprocesses join:
killing a worker kills the group. It dies with its driver (`_worker`); Linux sends
that signal when the *thread* that started the worker ends, so every worker is started by one
`Spawner` thread that lives until the workers are stopped. A worker left behind by a driver that
died anyway (a kill that has not taken effect yet) is found by `end_orphans`.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

_ENTRY = ("import sys; from schedulers.processes._worker import serve; "
          "serve(int(sys.argv[1]), int(sys.argv[2]))")
#: Seconds `end_orphans` waits for killed orphans to be gone before it goes on regardless.
ORPHAN_WAIT = 30.0

T = TypeVar("T")


def _python_path() -> str:
    """The driver's import path, so that ``fn`` pickled by reference imports in the child.

    The child runs with ``-P``: the current folder is not put first on its ``sys.path`` (where a
    user's ``random.py`` would shadow the standard module); it is on it only where the driver's
    path has it (``''``, as ``python -m`` puts it), at the same place."""
    return os.pathsep.join(dict.fromkeys(os.path.abspath(p) if p else os.getcwd()
                                         for p in sys.path))


class ChildProcess:
    """One worker interpreter: ``conn`` to talk to it, ``sentinel`` readable once it exited."""

    def __init__(self, name: str, env: dict[str, str]):
        ours, theirs = socket.socketpair()
        child_env = dict(os.environ, PYTHONPATH=_python_path(), **env)
        try:
            self._popen = subprocess.Popen(
                [sys.executable, "-P", "-c", _ENTRY, str(theirs.fileno()), str(os.getpid())],
                pass_fds=(theirs.fileno(),), env=child_env, stdin=subprocess.DEVNULL,
                start_new_session=True)
        finally:
            theirs.close()
        self.name = name
        self.pid = self._popen.pid
        self.conn = Connection(ours.detach())
        try:
            self.sentinel: Any = os.pidfd_open(self.pid)
        except (AttributeError, OSError):  # no pidfd (not Linux): the socket's EOF tells
            self.sentinel = None

    @property
    def exitcode(self) -> int | None:
        """The exit status (negative: killed by that signal), or None while it runs."""
        return self._popen.poll()

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    def join(self, timeout: float | None = None) -> None:
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def kill(self) -> None:
        """SIGKILL the worker and its process group (the subprocesses its tasks started)."""
        if self._popen.returncode is None:  # not reaped: its pid (= its group's id) is still its
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                pass
        if self._popen.poll() is None:
            self._popen.kill()

    def close(self) -> None:
        """Release the connection and the sentinel (after the process ended)."""
        self.conn.close()
        if self.sentinel is not None:
            os.close(self.sentinel)
            self.sentinel = None


class Spawner:
    """The one thread that starts a scheduler's worker processes, alive until `close`."""

    def __init__(self) -> None:
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="processes-spawner")

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` called in the spawner thread; its value, or its exception raised."""
        return self._thread.submit(fn, *args).result()

    def close(self) -> None:
        self._thread.shutdown(wait=True)


def _stat(pid: int) -> tuple[str, int, int, int]:
    """State, parent pid, process group and session of ``pid`` (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rpartition(b")")[2].split()
    return fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[3])


def _gone(pid: int) -> bool:
    """True once ``pid`` no longer runs anything (exited, or a zombie)."""
    try:
        return _stat(pid)[0] in ("Z", "X")
    except (OSError, IndexError, ValueError):
        return True


def orphaned_workers() -> list[tuple[int, int]]:
    """(pid, driver pid) of this user's worker processes on this host whose driver is gone.

    A worker leads its own session and names its driver on its command line; one whose parent
    is no longer that driver was left behind. Only processes in this pid namespace count (their
    pids mean what ours do). Linux only (``/proc``); elsewhere an empty list.
    """
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return []
    entry, uid, found = _ENTRY.encode(), os.getuid(), []
    for proc in os.scandir("/proc"):
        if not proc.name.isdigit():
            continue
        pid = int(proc.name)
        try:
            if proc.stat().st_uid != uid:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")[:-1]
            # [python, (-P,) -c, entry, channel fd, driver pid]: with -P or without
            if len(argv) not in (5, 6) or argv[-4:-2] != [b"-c", entry]:
                continue
            driver = int(argv[-1])
            if os.readlink(f"/proc/{pid}/ns/pid") != namespace:
                continue
            state, parent, _, session = _stat(pid)
        except (OSError, IndexError, ValueError):  # it ended meanwhile, or is not ours
            continue
        if session == pid and parent != driver and state not in ("Z", "X"):
            found.append((pid, driver))
    return found


def end_orphans(wait: float = ORPHAN_WAIT) -> list[int]:
    """SIGKILL every orphaned worker (`orphaned_workers`) with its process group, and wait until
    they are gone (at most ``wait`` seconds): a new driver starts no task while one may still
    run it or hold its GPU. Returns their pids.

    This host's processes only, found by what they are, never by the ledger: a ``running``
    record names a host and a pid, and one naming another host says nothing about this one
    (its pid here may be anything), so nothing is killed here for it. Its worker there died
    with its driver; the ledger takes the record over as interrupted (DriverLost) once the
    new driver holds the ledger's lock, as it does a record of this host."""
    orphans = orphaned_workers()
    for pid, driver in orphans:
        logger.warning("worker process %d of driver %d, which is gone, still runs; killing it "
                       "and its subprocesses before starting new workers", pid, driver)
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    pids = [pid for pid, _ in orphans]
    deadline = time.monotonic() + wait
    while (left := [pid for pid in pids if not _gone(pid)]) and time.monotonic() < deadline:
        time.sleep(0.02)
    if left:
        logger.error("orphaned worker processes %s did not end %g s after SIGKILL (stuck in the "
                     "kernel, e.g. on a GPU or a network file system); starting new workers "
                     "anyway", left, wait)
    return pids
