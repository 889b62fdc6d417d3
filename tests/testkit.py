"""What the tests share: paths, child-process environments, and `require` for real components.

Imported by test modules as ``from testkit import ...`` (tests/conftest.py puts this folder on
``sys.path``), so that the conftest files of sub-folders never shadow it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Set by .ci/run: a test whose real component is missing fails instead of skipping.
REQUIRE_ALL = os.environ.get("DIFFSOUP_REQUIRE_ALL") == "1"
PYTHON = sys.executable


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
