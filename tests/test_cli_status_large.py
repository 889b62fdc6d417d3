"""`campaign status` on a generated 100,000-task ledger answers, with the right counts.

The timing itself is measured by benchmarks/cli_status.py (no timed assertion here).
"""

from __future__ import annotations

import importlib.util
import json
import time

import pytest
from cli_data.cli_helpers import ROOT, campaign


def load_benchmark():
    spec = importlib.util.spec_from_file_location("cli_status_bench",
                                                  ROOT / "benchmarks" / "cli_status.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_status_of_100k_tasks(tmp_path):
    ledger = tmp_path / "big.json"
    counts = load_benchmark().generate(ledger, 100_000, now=time.time())
    proc = campaign("status", ledger.name, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    assert facts["total"] == 100_000 and facts["counts"] == counts
    assert facts["active"] and len(facts["running"]) == counts["running"] == 8
    assert {e["type"] for e in facts["failures_by_type"]} == {"ConvergenceError", "ValueError"}
    assert facts["throughput_per_s"] > 0 and facts["eta_s"] > 0
    text = campaign("status", ledger.name, cwd=tmp_path).stdout
    assert "tasks     100000:" in text and "ETA" in text
