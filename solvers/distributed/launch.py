"""Start K local processes of one program, as `initialize` and `run` expect.

    python -m solvers.distributed.launch -n 4 script.py [args...]
    python -m solvers.distributed.launch -n 2 -m package.module [args...]

Each process gets ``DIFFSOUP_COORDINATOR=127.0.0.1:<free port>`` (the next port is free too, for
`run`), ``DIFFSOUP_NUM_PROCESSES=K``, ``DIFFSOUP_PROCESS_ID=i`` and ``DIFFSOUP_SECRET``, a fresh
random secret of this launch (64 hex digits) that `run`'s processes prove to each other.
SIGINT and SIGTERM are passed on to every process. The launcher exits with the first failing
process's code (128 + signal for one killed by a signal) after ending the others, or 0 when all
succeed.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

from ._auth import SECRET, new_secret
from ._launch_info import COORDINATOR, NUM_PROCESSES, PROCESS_ID

__all__ = ["free_port_pair", "launch", "main"]

logger = logging.getLogger(__name__)

#: Seconds the other processes get to end after SIGTERM before SIGKILL.
GRACE = 5.0


def free_port_pair(host: str = "127.0.0.1") -> int:
    """A port ``p`` with ``p`` and ``p + 1`` both free on ``host`` (the coordinator and `run`)."""
    for _ in range(100):
        with socket.socket() as first:
            first.bind((host, 0))
            port = first.getsockname()[1]
            if port >= 65534:
                continue
            with socket.socket() as second:
                try:
                    second.bind((host, port + 1))
                except OSError:
                    continue
            return port
    raise OSError(f"found no two consecutive free ports on {host}")


def _code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def launch(command: Sequence[str], processes: int, *, env: dict[str, str] | None = None) -> int:
    """Run ``command`` as ``processes`` local processes; the exit code as described above."""
    if processes < 1:
        raise ValueError(f"-n must be at least 1, got {processes}")
    base = dict(os.environ if env is None else env)
    base[COORDINATOR] = f"127.0.0.1:{free_port_pair()}"
    base[NUM_PROCESSES] = str(processes)
    base[SECRET] = new_secret()
    children = []
    for i in range(processes):
        child_env = dict(base)
        child_env[PROCESS_ID] = str(i)
        children.append(subprocess.Popen(list(command), env=child_env))

    def forward(signum, frame):
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            codes = [c.poll() for c in children]
            failed = next((c for c, code in zip(children, codes) if code not in (None, 0)), None)
            if failed is not None or all(code is not None for code in codes):
                break
            time.sleep(0.05)
        if failed is None:
            return 0
        logger.info("process %d exited with %d; ending the others", children.index(failed),
                    failed.returncode)
        others = [c for c in children if c.poll() is None]
        for child in others:
            child.terminate()
        deadline = time.monotonic() + GRACE
        for child in others:
            try:
                child.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        return _code(failed.returncode)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m solvers.distributed.launch",
        description="Start K local processes of a program for solvers.distributed.")
    parser.add_argument("-n", "--processes", type=int, required=True, help="how many processes")
    parser.add_argument("-m", dest="module", help="run a module (as python -m) instead of a file")
    parser.add_argument("program", nargs=argparse.REMAINDER,
                        help="script.py and its arguments (or the module's arguments with -m)")
    args = parser.parse_args(argv)
    if args.module:
        command = [sys.executable, "-m", args.module, *args.program]
    elif args.program:
        command = [sys.executable, *args.program]
    else:
        parser.error("give the program to run: script.py [args...] or -m module [args...]")
    return launch(command, args.processes)


if __name__ == "__main__":
    sys.exit(main())
