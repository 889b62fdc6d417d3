"""Every program in examples/ runs; the checkpointing example resumes after a kill."""

from __future__ import annotations

import re
import signal
import subprocess
import time

from campaign import read_ledger
from testkit import PYTHON, ROOT, child_env

EXAMPLES = ROOT / "examples"


def test_checkpointing_example_runs(tmp_path):
    proc = subprocess.run([PYTHON, str(EXAMPLES / "checkpointing.py"), str(tmp_path / "p.json")],
                          env=child_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "3 tasks: accepted=3" in proc.stdout
    assert "0 kept from the ledger, 3 ran now" in proc.stdout
    for name, d, k in (("A", 0.5, 0.2), ("B", 1.0, 0.1), ("C", 0.3, 0.6)):
        line = next(x for x in proc.stdout.splitlines() if x.strip().startswith(f"{name}:"))
        fitted = dict(re.findall(r"(\w+) = (\S+?)[ ,]", line + " "))
        assert abs(float(fitted["D"]) - d) < 0.01 and abs(float(fitted["k"]) - k) < 0.01
        assert fitted["converged"] == "True"


def test_checkpointing_example_resumes_after_a_kill(tmp_path):
    ledger = tmp_path / "particles.json"
    env = dict(child_env(), PARTICLES_EXTRA_SECONDS="1.0")
    proc = subprocess.Popen([PYTHON, str(EXAMPLES / "checkpointing.py"), str(ledger)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:  # wait until the first particle is recorded, then kill the run
            assert time.monotonic() < deadline
            tasks = read_ledger(ledger)["tasks"] if ledger.exists() else {}
            if tasks.get("A", {}).get("status") == "accepted":
                break
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    before = read_ledger(ledger)["tasks"]
    assert before["C"]["status"] != "accepted"

    proc = subprocess.run([PYTHON, str(EXAMPLES / "checkpointing.py"), str(ledger)],
                          env=child_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    after = read_ledger(ledger)["tasks"]
    assert after["A"] == before["A"]  # kept, not run again
    assert all(rec["status"] == "accepted" for rec in after.values())
    assert "accepted earlier" in proc.stderr
    kept = sum(rec["status"] == "accepted" for rec in before.values())
    assert f"{kept} kept from the ledger, {3 - kept} ran now" in proc.stdout  # it says so

    again = subprocess.run([PYTHON, str(EXAMPLES / "checkpointing.py"), str(ledger)],
                           env=child_env(), capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "3 kept from the ledger, nothing to run" in again.stdout
    assert read_ledger(ledger)["tasks"] == after  # nothing ran, nothing was written
