"""What a new user of `campaign submit` and `campaign status` stumbled on with job arrays, each
driven through the real command on the real test Slurm (scripts/slurm-start.sh; CI starts it).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import orjson
import pytest
from cli_data.cli_helpers import (
    campaign,
    command,
    env,
    read_doc,
    spec_file,
    tree,
    write_json_items,
    write_model,
)
from testkit import PATIENCE, ROOT, require, wait_until

from campaign._ledger._paths import LedgerPaths
from schedulers import slurm

TASK = ROOT / "tests" / "array_data" / "array_task.py"


# ---------------------------------------------------------------------------- job arrays
def failing_sbatch(folder: Path) -> dict[str, str]:
    """An environment whose `sbatch` (first on PATH) says no and exits 1."""
    bin_dir = folder.parent / f"{folder.name}-bin"
    bin_dir.mkdir()
    fake = bin_dir / "sbatch"
    fake.write_text("#!/bin/sh\necho 'sbatch: error: Batch job submission failed: "
                    "Invalid account or account/partition combination specified' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_a_failed_sbatch_writes_nothing(tmp_path):
    write_model(tmp_path)
    write_json_items(tmp_path / "items.json", 2)
    spec = spec_file(tmp_path)
    before = tree(tmp_path)
    proc = subprocess.run(command("submit", spec.name, "--array", "2"), cwd=tmp_path,
                          env={**env(), **failing_sbatch(tmp_path)}, capture_output=True,
                          text=True, timeout=PATIENCE)
    assert proc.returncode == 2, proc.stderr
    assert "sbatch failed" in proc.stderr and "Invalid account" in proc.stderr
    assert proc.stdout == ""
    assert tree(tmp_path) == before  # no fits.json, fits.json.work/, slurm-logs/, locks


def test_a_failed_sbatch_leaves_an_existing_ledger_as_it_was(tmp_path):
    write_model(tmp_path)
    write_json_items(tmp_path / "items.json", 2)
    spec = spec_file(tmp_path)
    assert campaign("run", spec.name, cwd=tmp_path).returncode == 0
    write_json_items(tmp_path / "items.json", 4)  # two new tasks to submit
    before = tree(tmp_path)
    ledger_bytes = (tmp_path / "fits.json").read_bytes()
    proc = subprocess.run(command("submit", spec.name, "--array", "2"), cwd=tmp_path,
                          env={**env(), **failing_sbatch(tmp_path)}, capture_output=True,
                          text=True, timeout=PATIENCE)
    assert proc.returncode == 2, proc.stderr
    assert (tmp_path / "fits.json").read_bytes() == ledger_bytes
    assert tree(tmp_path) == before


def array_campaign(tmp_path: Path, n: int, **extra) -> tuple[Path, Path]:
    marks = tmp_path / "marks"
    marks.mkdir()
    items = [{"task_id": f"t{i:03d}", "x": i, "sleep": 0.05, "marks": str(marks), **extra}
             for i in range(n)]
    (tmp_path / "items.json").write_bytes(orjson.dumps(items))
    spec = tmp_path / "campaign.toml"
    spec.write_text(f'target = "{TASK}:run"\nitems = "items.json"\nledger = "fits.json"\n'
                    "[array]\nlease_seconds = 60\n")
    return spec, tmp_path / "fits.json"


def need_slurm() -> None:
    require(slurm.slurm_available(), "no Slurm answers (start one with scripts/slurm-start.sh)")


def test_an_invalid_partition_writes_nothing(tmp_path):
    need_slurm()
    spec, ledger = array_campaign(tmp_path, 2)
    before = tree(tmp_path)
    proc = campaign("submit", spec.name, "--array", "2", "--partition", "no_such_partition",
                    cwd=tmp_path)
    assert proc.returncode == 2 and "sbatch failed" in proc.stderr, proc.stderr
    assert tree(tmp_path) == before and not ledger.exists()
    assert not LedgerPaths.of(ledger).work.exists() and not (tmp_path / "slurm-logs").exists()


@pytest.mark.slow
def test_status_of_a_job_array_knows_its_elements_and_measures_from_the_first_start(tmp_path):
    need_slurm()
    spec, ledger = array_campaign(tmp_path, 12, together=2)  # both elements work
    proc = campaign("submit", spec.name, "--array", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip()
    assert job.isdigit(), proc.stdout
    # while it runs (or once it ended: Slurm decides when elements start)
    live = campaign("status", ledger.name, cwd=tmp_path)
    assert live.returncode == 0, live.stderr
    assert "driver is gone" not in live.stdout and "campaign run" not in live.stdout, live.stdout
    assert f"job array {job}" in live.stdout, live.stdout
    watcher = slurm.JobWatcher(job, backoff=slurm.Backoff(0.2, cap=1.0))
    assert set(watcher.wait(timeout=PATIENCE + 60).values()) == {"COMPLETED"}
    facts = json.loads(campaign("status", ledger.name, "--json", cwd=tmp_path).stdout)
    tasks = read_doc(ledger)["tasks"]
    assert all(r["status"] == "accepted" for r in tasks.values())
    first = min(r["started"] for r in tasks.values())
    last = max(r["ended"] for r in tasks.values())
    run = facts["last_run"]
    assert run["throughput_tasks"] == 12
    assert run["throughput_seconds"] == pytest.approx(last - first)
    assert facts["throughput_per_s"] == pytest.approx(12 / (last - first))
    sub = facts["submission"]
    assert sub["job"] == job and sub["to_run"] == 12 and sub["done"] == 12
    elements = sub["elements"]
    assert set(elements) == {f"{job}_0", f"{job}_1"}
    assert all(e["state"] == "COMPLETED" and e["running"] == [] for e in elements.values())
    assert sum(e["ended_tasks"] for e in elements.values()) == 12
    assert all(e["ended_tasks"] >= 1 for e in elements.values())
    text = campaign("status", ledger.name, cwd=tmp_path).stdout
    assert "12 tasks ended in" in text and "driver" not in text, text


@pytest.mark.slow
def test_status_of_a_running_job_array_lists_its_elements_tasks(tmp_path):
    need_slurm()
    spec, ledger = array_campaign(tmp_path, 4, hang_in="0")  # element 0 holds its task
    proc = campaign("submit", spec.name, "--array", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip()
    try:
        def element_0_holds() -> dict | None:
            facts = json.loads(campaign("status", ledger.name, "--json", cwd=tmp_path).stdout)
            elements = (facts.get("submission") or {}).get("elements") or {}
            held = elements.get(f"{job}_0", {})
            return facts if held.get("state") == "RUNNING" and held.get("running") else None

        facts = wait_until(element_0_holds, "element 0 to hold a task", interval=0.5)
        assert facts is not None  # what wait_until returns is true
        assert facts["active"] and facts["last_run"]["driver_alive"] is None
        (held,) = facts["submission"]["elements"][f"{job}_0"]["running"]
        assert held in {f"t{i:03d}" for i in range(4)}
        text = campaign("status", ledger.name, cwd=tmp_path).stdout
        assert "driver is gone" not in text and "`campaign run` resumes" not in text, text
        assert f"{job}_0" in text and "RUNNING" in text and held in text, text
        run = campaign("run", spec.name, cwd=tmp_path)  # what the old advice said to do
        assert run.returncode == 2 and "array worker" in run.stderr
    finally:
        slurm.scancel(job)
    watcher = slurm.JobWatcher(job, backoff=slurm.Backoff(0.2, cap=1.0))
    watcher.wait(timeout=PATIENCE)
