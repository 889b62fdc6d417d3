"""Every program in examples/ runs; the checkpointing example resumes after a kill."""

from __future__ import annotations

import re
import signal
import subprocess

import pytest

from campaign import read_ledger
from testkit import PYTHON, ROOT, child_env, wait_until

EXAMPLES = ROOT / "examples"


@pytest.mark.slow
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


#: The checkpointing example, its fits after the first one standing for fits that take long:
#: they never end, and the test kills the run while the second one runs.
FIRST_FIT_ONLY = f"""
import sys, time
sys.path.insert(0, {str(EXAMPLES)!r})
import checkpointing

fit = checkpointing.fit_particle

def fit_then_hang(item):
    while item["task_id"] != "A":
        time.sleep(3600)
    return fit(item)

checkpointing.fit_particle = fit_then_hang
checkpointing.main(sys.argv[1])
"""


def accepted_first(ledger) -> bool:
    tasks = read_ledger(ledger)["tasks"] if ledger.exists() else {}
    return tasks.get("A", {}).get("status") == "accepted"


@pytest.mark.slow
def test_checkpointing_example_resumes_after_a_kill(tmp_path):
    ledger = tmp_path / "particles.json"
    proc = subprocess.Popen([PYTHON, "-c", FIRST_FIT_ONLY, str(ledger)], env=child_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # wait until the first particle is recorded, then kill the run
        wait_until(lambda: accepted_first(ledger), "the first fit to be recorded", interval=0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    before = read_ledger(ledger)["tasks"]
    assert before["A"]["status"] == "accepted"
    # B ran (its start maybe not yet written when the run was killed), C did not
    assert {before[t]["status"] for t in "BC"} <= {"running", "pending"}

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
