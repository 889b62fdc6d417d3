"""Fixtures and set-up shared by every test folder. Helpers live in testkit.py."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `import testkit` from any folder
# Emulated CPU devices for the solver tests, read when a JAX backend starts (whichever test
# starts it first); without JAX this does nothing.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
# A suite started as a background job of a shell without job control (`pytest &` in a script, as
# CI may run it) inherits SIGINT ignored, and so would every driver it starts: Python leaves an
# ignored SIGINT ignored, and the tests' Ctrl-C would never arrive. The tests mean a terminal's.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked ``both_cores`` run last, in their order: the rest of the suite then runs
    beside nothing of theirs (and in CI, the JAX matrix beside the suite ends first)."""
    items.sort(key=lambda item: item.get_closest_marker("both_cores") is not None)


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "campaign.json"
