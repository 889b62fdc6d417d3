"""Two processes updating one ledger lose nothing: every write is a read-merge-write under lock."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from testkit import PYTHON, child_env

from campaign import Ledger, read_ledger
from campaign._items import prepare_items
from campaign._ledger._records import new_record

WRITER = Path(__file__).with_name("concurrent_writer.py")
N = 1000
TURNS = 200  # writes each in turns; the other 300 each at once


@pytest.mark.slow
def test_two_processes_lose_no_update_in_1000_interleaved_writes(tmp_path):
    """Two writers first take turns (each write merges the other's last one), then write at
    once, as fast as they can: no update of either is lost."""
    path = tmp_path / "shared.json"
    ledger = Ledger(path)
    ledger.open(driver=False)
    ledger.put_many({p.task_id: new_record(p.stored, p.fingerprint)
                     for p in prepare_items({"task_id": f"t{i}"} for i in range(N))})
    ledger.close("finished")

    procs = [subprocess.Popen([PYTHON, str(WRITER), str(path), str(parity), str(N)],
                              env=child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) for parity in (0, 1)]
    pipes = [(proc.stdin, proc.stdout) for proc in procs]
    try:
        for _, reader in pipes:
            assert reader is not None and reader.readline().strip() == "ready"
        for _ in range(TURNS):  # w0, w1, w0, ...: each write follows one of the other's
            for inp, reader in pipes:
                assert inp is not None and reader is not None
                inp.write("turn\n")
                inp.flush()
                assert reader.readline().strip() == "wrote"
        for inp, _ in pipes:
            assert inp is not None
            inp.write("free\n")
            inp.flush()
        commits, merges = [], []
        for proc in procs:
            out, _ = proc.communicate(timeout=300)
            assert proc.returncode == 0
            commits.append(int(out.split()[-2]))
            merges.append(int(out.split()[-1]))
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert sum(commits) >= N, commits  # every update was its own write
    # every turn after the first found the other writer's write on disk, and merged it
    assert min(merges) >= TURNS - 1, merges

    tasks = read_ledger(path)["tasks"]
    assert len(tasks) == N
    lost = [tid for tid, rec in tasks.items() if rec["status"] != "accepted"]
    assert not lost, f"{len(lost)} updates lost, e.g. {lost[:5]}"
    assert all(rec["result"] == {"i": int(tid[1:])} for tid, rec in tasks.items())
    assert {rec["worker"] for rec in tasks.values()} == {"w0", "w1"}


def test_merge_never_replaces_an_accepted_record(tmp_path):
    path = tmp_path / "l.json"
    (p,) = prepare_items([{"task_id": "a"}])
    first, second = Ledger(path, min_interval=0.0), Ledger(path, min_interval=0.0)
    first.open(driver=False)
    second.open(driver=False)
    accepted = dict(new_record(p.stored, p.fingerprint), status="accepted", result={"v": 1})
    first.put("a", accepted)
    first.flush()
    second.put("a", dict(new_record(p.stored, p.fingerprint), status="interrupted"))
    second.flush()
    assert read_ledger(path)["tasks"]["a"] == accepted
    assert second.tasks["a"] == accepted  # the other process's acceptance was adopted
    first.close("finished")
    second.close("finished")
