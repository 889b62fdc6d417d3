"""Reads through a view whose cache is stale are retried, never called corruption: a driver runs
on node A while node B forgets tasks and merges fragments every 0.3 s through its own view.
Every task ran once and is accepted, and neither node reported a corrupt ledger.

A genuinely corrupt ledger on such a view is still refused, after the retry window, and left
as it was."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from testkit import PYTHON, child_env, wait_until

from campaign import checkpointed_map, read_ledger
from campaign._errors import LedgerError

HERE = Path(__file__).resolve().parent
N = 150


def ran(marks: Path) -> dict[str, int]:
    return {p.name: len(p.read_text().splitlines()) for p in marks.iterdir()}


@pytest.mark.parametrize("kind", ["bindfs-locks", "bindfs-kcache"])
def test_driver_beside_another_nodes_writes(views, tmp_path, kind):
    a, b, _ = views(kind)
    marks = tmp_path / "marks"
    marks.mkdir()
    old = [f"old{i:02d}" for i in range(20)]
    checkpointed_map(lambda item: {"y": 0}, [{"task_id": tid} for tid in old],
                     ledger_path=a / "ledger.json")
    stop = tmp_path / "stop"
    writer = subprocess.Popen(
        [PYTHON, str(HERE / "node_writer.py"), str(b / "ledger.json"), str(stop), "0.3",
         ",".join(old[:12])], env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        wait_until(lambda: (tmp_path / "stop.began").exists() or writer.poll() is not None,
                   "node B's first write")
        driver = subprocess.run(
            [PYTHON, str(HERE / "node_driver.py"), str(a / "ledger.json"), str(marks), str(N),
             "0.02"], env=child_env(), capture_output=True, text=True, timeout=240)
    finally:
        stop.touch()
        out, err = writer.communicate(timeout=120)
    assert driver.returncode == 0, driver.stderr
    assert "corrupt" not in driver.stderr and "not valid JSON" not in driver.stderr
    assert writer.returncode == 0, f"node B's writes failed:\n{err}"
    assert "writes" in out
    tasks = read_ledger(a / "ledger.json")["tasks"]
    mine = {tid: rec for tid, rec in tasks.items() if tid.startswith("t")}
    assert len(mine) == N
    assert {rec["status"] for rec in mine.values()} == {"accepted"}
    assert ran(marks) == {f"t{i:03d}": 1 for i in range(N)}
    forgotten = [line.split()[1] for line in out.splitlines() if line.startswith("forgot ")]
    assert forgotten  # node B wrote while the driver ran
    assert [tid for tid in tasks if tid.startswith("old")] == [t for t in old if t not in forgotten]


@pytest.mark.parametrize("kind", ["bindfs-kcache", "sshfs"])
def test_a_corrupt_ledger_is_still_refused_and_left_as_it_was(views, monkeypatch, kind):
    a, b, _ = views(kind)
    checkpointed_map(lambda item: {"y": 1}, [{"task_id": "t0"}], ledger_path=a / "ledger.json")
    whole = (a / "ledger.json").read_bytes()
    (a / "ledger.json").write_bytes(whole[: len(whole) // 2])  # cut short for good
    monkeypatch.setenv("DIFFSOUP_STALE_READ_SECONDS", "1")
    with pytest.raises(LedgerError, match="not valid JSON") as refused:
        read_ledger(b / "ledger.json")
    assert "cache" in str(refused.value) and "DIFFSOUP_STALE_READ_SECONDS" in str(refused.value)
    forget = subprocess.run([PYTHON, "-m", "campaign._cli", "forget", str(b / "ledger.json"),
                             "t0"], env=child_env(), capture_output=True, text=True, timeout=120)
    assert forget.returncode == 2, forget.stderr
    assert "not valid JSON" in forget.stderr
    assert (a / "ledger.json").read_bytes() == whole[: len(whole) // 2]
