"""A worker whose clock runs ahead of the file server's by twice the bound the leases tolerate
(``lease_seconds / 4``: `campaign._skew.FRACTION`) measures the skew on the leases it writes and
warns, once, with the figure; a worker on the server's clock does not warn. The clock is moved
by libfaketime on the worker process alone."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from testkit import PYTHON, ROOT, child_env, require

from campaign import read_ledger
from campaign._submit import prepare_submission

TASK = ROOT / "tests" / "array_data" / "array_task.py"
LEASE = 8.0  # so the bound is 2 s
AHEAD = 4.0  # twice it


def worker(spec, sub, index, *, ahead=None):
    env = dict(child_env(), SLURM_ARRAY_JOB_ID=str(3000 + index), SLURM_ARRAY_TASK_ID="0",
               SLURM_ARRAY_TASK_COUNT="1")
    command = [PYTHON, "-m", "campaign._cli", "worker", str(spec), "--submission", sub,
               "--lease-seconds", str(LEASE), "--merge-every", "0.5"]
    if ahead is not None:
        command = ["faketime", "-f", f"+{ahead:g}s", *command]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.parametrize("kind", ["sshfs", "bindfs-nolock"])
def test_a_worker_whose_clock_runs_ahead_warns_once(views, tmp_path, kind):
    require(shutil.which("faketime") is not None, "faketime not found (apt-get install faketime)")
    a, _, _ = views(kind)
    marks = tmp_path / "marks"
    marks.mkdir()
    (a / "spec.toml").write_text(f'target = "{TASK}:run"\nitems = "items.json"\n'
                                 'ledger = "ledger.json"\n')
    (a / "items.json").write_text("[]")
    items = [{"task_id": f"t{i}", "x": i, "sleep": 0.05, "marks": str(marks)} for i in range(6)]
    sub = prepare_submission(items, ledger_path=a / "ledger.json").id
    ahead = worker(a / "spec.toml", sub, 0, ahead=AHEAD)
    assert ahead.returncode == 0, ahead.stderr
    warnings = re.findall(r"this host's clock is \+(\d+\.\d) s .* off the file server's",
                          ahead.stderr)
    assert len(warnings) == 1, ahead.stderr
    assert AHEAD - 1.5 <= float(warnings[0]) <= AHEAD + 1.5  # the skew, as measured
    assert "lease_seconds" in ahead.stderr
    tasks = read_ledger(a / "ledger.json")["tasks"]
    assert {rec["status"] for rec in tasks.values()} == {"accepted"}

    items = [dict(item, task_id=f"u{i}") for i, item in enumerate(items)]
    sub = prepare_submission(items, ledger_path=a / "ledger.json").id
    on_time = worker(a / "spec.toml", sub, 1)
    assert on_time.returncode == 0, on_time.stderr
    assert "clock is" not in on_time.stderr
