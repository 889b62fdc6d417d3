"""Array workers on two "nodes" of an sshfs mount race for the same tasks' leases. sshfs reports
a lost ``O_CREAT | O_EXCL`` race as ``EPERM`` about 60 % of the time: a worker takes that for
the lost race it is and claims the next task. No worker crashes, every task runs once (the runs
are counted outside the shared folder) and is accepted."""

from __future__ import annotations

import subprocess

from testkit import PYTHON, ROOT, child_env

from campaign import read_ledger
from campaign._array._plan import plan_submission

TASK = ROOT / "tests" / "array_data" / "array_task.py"
N = 60


def test_workers_racing_for_leases_over_sshfs(views, tmp_path):
    a, b, _ = views("sshfs")
    marks = tmp_path / "marks"
    marks.mkdir()
    spec_text = f'target = "{TASK}:run"\nitems = "items.json"\nledger = "ledger.json"\n'
    (a / "spec.toml").write_text(spec_text)
    (a / "items.json").write_text("[]")
    items = [{"task_id": f"t{i:03d}", "x": i, "sleep": 0.0, "marks": str(marks)}
             for i in range(N)]
    sub = plan_submission(items, ledger_path=a / "ledger.json").record()
    procs = []
    for index in range(6):
        view = (a, b)[index % 2]
        # each the only element of an array of its own: all six begin at the first task and
        # race for the same leases
        env = dict(child_env(), SLURM_ARRAY_JOB_ID=str(2900 + index), SLURM_ARRAY_TASK_ID="0",
                   SLURM_ARRAY_TASK_COUNT="1")
        procs.append(subprocess.Popen(
            [PYTHON, "-m", "campaign._cli", "worker", str(view / "spec.toml"), "--submission",
             sub.id, "--lease-seconds", "60", "--merge-every", "0.5"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    errors = [proc.communicate(timeout=240)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 6, "\n".join(errors)
    assert not any("PermissionError" in err for err in errors), "\n".join(errors)
    runs: dict[str, int] = {}
    for mark in marks.glob("*.start"):
        runs[mark.name.split(".")[0]] = runs.get(mark.name.split(".")[0], 0) + 1
    assert runs == {f"t{i:03d}": 1 for i in range(N)}
    tasks = read_ledger(a / "ledger.json")["tasks"]
    assert {rec["status"] for rec in tasks.values()} == {"accepted"} and len(tasks) == N
