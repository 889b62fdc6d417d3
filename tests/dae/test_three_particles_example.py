"""examples/three_particles.py runs (small sizes) and recovers D and k of every particle; run
again, it fits nothing: the per-particle and the joint fits are kept from its ledger."""

from __future__ import annotations

import os
import re
import subprocess

from testkit import PYTHON, ROOT

from campaign import read_ledger


def run_example(tmp_path, ledger):
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", PARTICLES_CELLS="10",
               PARTICLES_TIMES="12", PARTICLES_DEVICES="6")
    # XLA_FLAGS, as conftest.py set them, are inherited.
    proc = subprocess.run([PYTHON, str(ROOT / "examples" / "three_particles.py"), str(ledger)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "3 tasks: accepted=3" in out, out
    lines = [x for x in out.splitlines() if re.match(r"\s+[ABC]: D = ", x)]
    assert len(lines) == 6, out  # per-particle fits, then the joint fit
    for line in lines:
        # "D = 0.5062 ± 0.0145 (truth 0.5, 0.4 SE)": within 3 standard errors of the truth
        for value, se, truth in re.findall(r"= ([\d.]+) ± ([\d.]+) \(truth ([\d.]+)", line):
            assert abs(float(value) - float(truth)) <= 3 * float(se), line
    assert out.count("converged = True") == 4, out  # three particles, and the joint fit
    assert "on 6 devices (experiments per device: [1, 1, 1, 1, 1, 1])" in out, out
    stats = re.search(r"(\d+) steps .* (\d+) factorizations \(([\d.]+) per step\)", out)
    assert stats and float(stats.group(3)) < 0.3, out  # the factorization is reused
    return out


def test_three_particles_example(tmp_path):
    ledger = tmp_path / "particles.json"
    first = run_example(tmp_path, ledger)
    assert "0 kept from the ledger, 3 ran now" in first and "0 kept from the ledger, 1 ran now" \
        in first, first
    before = read_ledger(ledger)["tasks"]
    assert sorted(before) == ["A", "B", "C", "joint"]
    again = run_example(tmp_path, ledger)
    assert "3 kept from the ledger, nothing to run" in again, again
    assert "1 kept from the ledger, nothing to run" in again, again
    assert read_ledger(ledger)["tasks"] == before  # nothing ran again
    fits = [x for x in first.splitlines() if re.match(r"\s+[ABC]: D = ", x)]
    assert fits == [x for x in again.splitlines() if re.match(r"\s+[ABC]: D = ", x)]
