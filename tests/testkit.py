"""What the tests share: paths, child-process environments, `require` for real components,
`wait_until` for a condition another process brings about, and `in_threads`.

Imported by test modules as ``from testkit import ...`` (tests/conftest.py puts this folder on
``sys.path``), so that the conftest files of sub-folders never shadow it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Set by .ci/run: a test whose real component is missing fails instead of skipping.
REQUIRE_ALL = os.environ.get("DIFFSOUP_REQUIRE_ALL") == "1"
PYTHON = sys.executable
T = TypeVar("T")
#: How long `wait_until` waits by default: long enough for any loaded machine, so that only a
#: hung test reaches it (a test asserts what happened, never how fast).
PATIENCE = 120.0


def require(condition: bool, reason: str) -> None:
    """Skip with ``reason`` when a real component is missing (fail in CI)."""
    if not condition:
        if REQUIRE_ALL:
            pytest.fail(f"required component missing in CI: {reason}")
        pytest.skip(reason)


def child_env() -> dict[str, str]:
    """Environment for child Python processes: the project importable, no buffering."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def wait_until(check: Callable[[], T], what: str, *, timeout: float = PATIENCE,
               interval: float = 0.01) -> T:
    """Call ``check`` until it returns something true, and return that.

    For conditions that another process brings about (a file appears, a ledger records a
    task). The timeout only ends a hung test: it fails with ``what`` in the message.
    """
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"still waiting after {timeout:.0f} s for {what}")
        time.sleep(interval)


def in_threads(target: Callable[[int], object], count: int) -> list[BaseException]:
    """Run ``target(0)`` .. ``target(count - 1)`` each in its own thread, all at once; return
    what they raised (the test asserts it is empty, so a thread's failure is never lost)."""
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            target(index)
        except BaseException as exc:  # noqa: BLE001 -- returned to the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors
