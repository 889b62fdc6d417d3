"""On a real dask cluster of 2 worker processes: the assembly's driver is SIGKILLed mid-way and
run again, which computes only the missing blocks; the solvers reduce on the workers."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import distributed
import numpy as np
import pytest
from lsq_rows import stacked
from testkit import PYTHON, child_env, wait_until

from campaign import read_ledger
from solvers.lsq import METHODS, BlockStore, solve

DRIVER = Path(__file__).with_name("lsq_driver.py")
N = 16


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                                  dashboard_address="127.0.0.1:0") as cluster, \
            distributed.Client(cluster) as c:
        yield c


def evaluations(log: Path) -> list[str]:
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


def accepted(ledger: Path) -> set[str]:
    tasks = read_ledger(ledger)["tasks"] if ledger.exists() else {}
    return {tid for tid, rec in tasks.items() if rec["status"] == "accepted"}


def quiet(client) -> None:
    """Wait until no task of the killed driver is left: the scheduler forgot them all (their
    client is gone) and so did every worker (a task still running when they were released stays
    in its worker's state until it has finished, and written its evaluation)."""
    def gone() -> bool:
        if client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)):
            return False
        return not any(client.run(lambda dask_worker: len(dask_worker.state.tasks)).values())

    wait_until(gone, "the workers to be done with the killed driver's tasks", interval=0.1)


@pytest.mark.slow
def test_killed_driver_resumes_and_computes_only_missing_blocks(tmp_path, client):
    ledger, store, log = tmp_path / "fit.json", tmp_path / "fit.json.blocks", tmp_path / "calls"
    command = [PYTHON, str(DRIVER), str(ledger), str(store), str(log), str(N),
               client.scheduler.address]
    proc = subprocess.Popen(command, env=child_env(), stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(accepted(ledger)) < 4:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert proc.stdout is not None
    proc.stdout.close()
    quiet(client)
    kept = accepted(ledger)
    first = evaluations(log)
    assert 4 <= len(kept) < N, "killed mid-way"
    assert len(first) == len(set(first)) and kept <= set(first)
    # Evaluated but not recorded when the driver died: the tasks it had handed to dask. The dask
    # scheduler keeps at most 2 tasks per worker thread in flight (2 threads, batches of 1 task
    # at 0.25 s each), so at most 4 such blocks run again.
    in_flight = set(first) - kept
    assert len(in_flight) <= 4, in_flight

    again = subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "complete" in again.stdout, again.stderr
    second = evaluations(log)[len(first):]
    everything = {f"s{i:03d}" for i in range(N)}
    assert sorted(second) == sorted(everything - kept)  # each missing block once, nothing else
    assert len(first) + len(second) == N + len(in_flight)
    assert accepted(ledger) == everything

    blocks = BlockStore(store)
    records = read_ledger(ledger)["tasks"]
    results = [records[f"s{i:03d}"]["result"] for i in range(N)]
    assert blocks.verify(results) == []
    A, y, w, _ = stacked(N)
    s = np.sqrt(w)
    want = np.linalg.lstsq(A * s[:, None], y * s, rcond=None)[0]
    system = blocks.system(results)
    for method in METHODS:
        got = solve(system, method, client=client, tol=1e-15).coefficients
        assert np.linalg.norm(got - want) < 1e-10 * np.linalg.norm(want), method
