"""examples/three_particles.py runs (small sizes) and recovers D and k of every particle."""

from __future__ import annotations

import os
import re
import subprocess

from testkit import PYTHON, ROOT


def test_three_particles_example(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", PARTICLES_CELLS="10",
               PARTICLES_TIMES="12", PARTICLES_DEVICES="6")
    # XLA_FLAGS, as conftest.py set them, are inherited.
    proc = subprocess.run([PYTHON, str(ROOT / "examples" / "three_particles.py"),
                           str(tmp_path / "particles.json")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
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
    stats = re.search(r"(\d+) steps .* (\d+) factorizations \(([\d.]+) per step\)", out)
    assert stats and float(stats.group(3)) < 0.3, out  # the factorization is reused
