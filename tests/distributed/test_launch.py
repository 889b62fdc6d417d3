"""python -m solvers.distributed.launch: variables, first failure's exit code, signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from distkit import env
from testkit import ROOT

CHILD = """
import json, os, signal, sys, time
from pathlib import Path
out, rank = Path(sys.argv[1]), int(os.environ["DIFFSOUP_PROCESS_ID"])
names = ("DIFFSOUP_COORDINATOR", "DIFFSOUP_NUM_PROCESSES", "DIFFSOUP_PROCESS_ID")
(out / f"env.{rank}.json").write_text(json.dumps({n: os.environ[n] for n in names}))
signal.signal(signal.SIGTERM, lambda *a: ((out / f"term.{rank}").touch(), sys.exit(7)))
(out / f"pid.{rank}").write_text(str(os.getpid()))
if sys.argv[2] == "fail" and rank == 1:  # once every rank is set up (its handler installed)
    n = int(os.environ["DIFFSOUP_NUM_PROCESSES"])
    while not all((out / f"pid.{r}").exists() for r in range(n)):
        time.sleep(0.01)
    sys.exit(3)
time.sleep(60)
"""


def start(tmp_path, mode: str, n: int = 3) -> subprocess.Popen:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    return subprocess.Popen([sys.executable, "-m", "solvers.distributed.launch", "-n", str(n),
                             str(script), str(tmp_path), mode], cwd=ROOT, env=env())


def wait_for(paths, seconds=60.0):
    deadline = time.monotonic() + seconds
    while not all(p.exists() for p in paths):
        assert time.monotonic() < deadline, [str(p) for p in paths if not p.exists()]
        time.sleep(0.05)


def test_first_failure_ends_the_others_and_gives_its_code(tmp_path):
    launcher = start(tmp_path, "fail")
    assert launcher.wait(timeout=60) == 3
    envs = [json.loads((tmp_path / f"env.{i}.json").read_text()) for i in range(3)]
    assert [e["DIFFSOUP_PROCESS_ID"] for e in envs] == ["0", "1", "2"]
    assert {e["DIFFSOUP_NUM_PROCESSES"] for e in envs} == {"3"}
    assert len({e["DIFFSOUP_COORDINATOR"] for e in envs}) == 1
    assert envs[0]["DIFFSOUP_COORDINATOR"].startswith("127.0.0.1:")
    # the sleeping ones were ended with SIGTERM (their handler ran), none is left
    wait_for([tmp_path / "term.0", tmp_path / "term.2"], 5)
    for rank in (0, 2):
        with pytest.raises(ProcessLookupError):     # ended and reaped by the launcher
            os.kill(int((tmp_path / f"pid.{rank}").read_text()), 0)


def test_sigterm_and_sigint_are_passed_on(tmp_path):
    launcher = start(tmp_path, "sleep", n=2)
    wait_for([tmp_path / "pid.0", tmp_path / "pid.1"])
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(timeout=30) == 7        # the children's own exit code
    assert (tmp_path / "term.0").exists() and (tmp_path / "term.1").exists()
