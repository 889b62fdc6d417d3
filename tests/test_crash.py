"""SIGKILL a running campaign at random moments, hundreds of times; nothing accepted is lost.

Kills land during fn, during ledger writes (a temporary file is left behind) and between
writes. After every kill the ledger parses, every task ever seen accepted is still accepted with
the same result and is never run again, and resuming finishes every task.
"""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

from campaign import read_ledger
from testkit import PYTHON, child_env

sys.path.insert(0, str(Path(__file__).parent))
from crash_child import expected  # noqa: E402

CHILD = Path(__file__).with_name("crash_child.py")
KILLS = int(os.environ.get("DIFFSOUP_CRASH_KILLS", "200"))
TASKS = 120


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        (math.isnan(x) and math.isnan(y)) if isinstance(x, float) and x != x else x == y
        for x, y in ((a[k], b[k]) for k in a))


def check(ledger: Path, log: Path, accepted: dict[str, dict], child_pid: int,
          accepted_before: set[str]) -> None:
    """The invariants after one kill; updates ``accepted`` with what is accepted now."""
    if not ledger.exists():
        assert not accepted
        return
    tasks = read_ledger(ledger)["tasks"]  # parses, or raises
    for tid, result in accepted.items():
        rec = tasks[tid]
        assert rec["status"] == "accepted", (tid, rec["status"])
        assert rec["result"] == result, tid
    for tid, rec in tasks.items():
        if rec["status"] == "accepted":
            i = int(tid[1:])
            want = expected(i)
            if i % 5 == 0:
                want["inf"] = {"$float": "inf"}
            assert rec["result"] == want, tid
            accepted.setdefault(tid, rec["result"])
    for line in log.read_text().splitlines():
        tid, pid = line.split()
        if int(pid) == child_pid:
            assert tid not in accepted_before, f"{tid} ran again after it was accepted"


def test_sigkill_at_random_moments_loses_nothing(tmp_path):
    rng = random.Random(20261130)
    kills = mid_write = campaigns = 0
    while kills < KILLS:
        campaigns += 1
        folder = tmp_path / f"c{campaigns}"
        folder.mkdir()
        ledger, log = folder / "ledger.json", folder / "calls.log"
        accepted: dict[str, dict] = {}
        finished = False
        while not finished:
            before = set(accepted)
            proc = subprocess.Popen([PYTHON, str(CHILD), str(ledger), str(log), str(TASKS)],
                                    env=child_env(), stdout=subprocess.PIPE, text=True)
            assert proc.stdout.readline().strip() == "ready"
            try:
                proc.wait(timeout=rng.uniform(0.0, 0.25))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                kills += 1
                mid_write += any(folder.glob(".ledger.json.tmp-*"))
            else:
                assert proc.returncode == 0, proc.returncode
                finished = True
            proc.stdout.close()
            check(ledger, log, accepted, proc.pid, before)
            if kills >= KILLS and not finished:  # finish this campaign without killing it
                proc = subprocess.run([PYTHON, str(CHILD), str(ledger), str(log), str(TASKS)],
                                      env=child_env(), capture_output=True, text=True)
                assert proc.returncode == 0, proc.stderr
                check(ledger, log, accepted, -1, set())
                finished = True
        tasks = read_ledger(ledger)["tasks"]
        assert len(tasks) == TASKS and all(r["status"] == "accepted" for r in tasks.values())
        assert len(accepted) == TASKS
        calls = [line.split()[0] for line in log.read_text().splitlines()]
        assert set(calls) == set(tasks)
        assert not list(folder.glob(".ledger.json.tmp-*")), "the next driver cleans up"
    print(f"\n{kills} SIGKILLs over {campaigns} campaigns, {mid_write} during a ledger write")
    assert kills >= KILLS
    assert mid_write > 0, "no kill landed during a ledger write"
