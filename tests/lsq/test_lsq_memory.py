"""The driver's peak memory while solving a 400 MB matrix stored as blocks stays below half the
matrix, for every solver (measured by benchmarks/lsq.py in fresh driver processes)."""

from __future__ import annotations

import re
import subprocess

import pytest
from testkit import PYTHON, ROOT, child_env


@pytest.mark.slow
def test_driver_peak_memory_is_far_below_the_matrix():
    proc = subprocess.run([PYTHON, str(ROOT / "benchmarks" / "lsq.py"), "--only", "memory",
                           "--memory-gb", "0.4", "--memory-iterations", "3"],
                          env=child_env(), capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"memory_matrix_mb: 400 \(", proc.stdout), proc.stdout
    ratios = dict(re.findall(r"memory_(\w+)_peak_vs_matrix_ratio: (\S+)", proc.stdout))
    assert set(ratios) == {"qr", "normal", "lsqr"}, proc.stdout
    for method, ratio in ratios.items():
        assert 0 < float(ratio) < 0.5, (method, proc.stdout)
