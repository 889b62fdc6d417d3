"""A worker process: a fresh Python interpreter joined to the driver by a socket pair.

Like multiprocessing's spawn method the child is a new interpreter (never a fork), so its
environment — ``CUDA_VISIBLE_DEVICES`` above all — is fixed before it imports anything. Unlike
spawn it does not import the driver's ``__main__`` again (a script importing dask, JAX or the
user's whole program): it imports only `schedulers._worker`, and ``fn`` arrives pickled by value
or by reference, so a worker is ready in about a tenth of a second.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from multiprocessing.connection import Connection
from typing import Any

_ENTRY = "import sys; from schedulers._worker import serve; serve(int(sys.argv[1]))"


def _python_path() -> str:
    """The driver's import path, so that ``fn`` pickled by reference imports in the child."""
    return os.pathsep.join(dict.fromkeys(os.path.abspath(p) if p else os.getcwd()
                                         for p in sys.path))


class ChildProcess:
    """One worker interpreter: ``conn`` to talk to it, ``sentinel`` readable once it exited."""

    def __init__(self, name: str, env: dict[str, str]):
        ours, theirs = socket.socketpair()
        child_env = dict(os.environ, PYTHONPATH=_python_path(), **env)
        try:
            self._popen = subprocess.Popen(
                [sys.executable, "-c", _ENTRY, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), env=child_env, stdin=subprocess.DEVNULL)
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
        if self._popen.poll() is None:
            self._popen.kill()

    def close(self) -> None:
        """Release the connection and the sentinel (after the process ended)."""
        self.conn.close()
        if self.sentinel is not None:
            os.close(self.sentinel)
            self.sentinel = None
