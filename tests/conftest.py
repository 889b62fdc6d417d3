"""Shared fixtures. Tests use real processes, real files and real signals."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Set by .ci/run: a test whose real component is missing fails instead of skipping.
REQUIRE_ALL = os.environ.get("DIFFSOUP_REQUIRE_ALL") == "1"


def require(condition: bool, reason: str) -> None:
    """Skip with ``reason`` when a real component is missing (fail in CI)."""
    if not condition:
        if REQUIRE_ALL:
            pytest.fail(f"required component missing in CI: {reason}")
        pytest.skip(reason)


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "campaign.json"


def child_env() -> dict[str, str]:
    """Environment for child Python processes: the project importable, no buffering."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    return env


PYTHON = sys.executable
