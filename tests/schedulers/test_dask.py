"""execution="dask": a real LocalCluster, and real `dask scheduler` + `dask worker` processes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import distributed
import pytest
from daskkit import noted, runs
from testkit import PATIENCE, PYTHON, child_env, require, wait_until

from campaign import checkpointed_map, read_ledger


def where(item):
    time.sleep(item.get("sleep", 0))
    return {"pid": os.getpid(), "x2": item["x"] * 2,
            "cvd": os.environ.get("CUDA_VISIBLE_DEVICES", "")}


def fails_on_odd(item):
    if item["x"] % 2:
        raise ValueError(f"odd {item['x']}")
    return {"x": item["x"]}


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       host="127.0.0.1", dashboard_address="127.0.0.1:0")
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


@pytest.mark.slow
def test_embedded_cluster_runs_everything_and_says_where(ledger, capfd):
    items = [{"task_id": f"t{i}", "x": i} for i in range(200)]
    camp = checkpointed_map(where, items, ledger_path=ledger, execution="dask", workers=2,
                            dashboard=True)
    assert camp.complete and [r["x2"] for r in camp.results] == [2 * i for i in range(200)]
    pids = {r["pid"] for r in camp.results}  # worker processes; which ran what is dask's choice
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    rec, result = camp.records["t5"], camp.result("t5")
    assert result is not None and rec["pid"] == result["pid"] and rec["worker"] is not None
    assert "dask dashboard: http://127.0.0.1:" in capfd.readouterr().err  # asked for


def test_existing_client_failures_and_resume_from_serial(ledger, client):
    items = [{"task_id": f"t{i}", "x": i} for i in range(20)]
    checkpointed_map(fails_on_odd, items[:6], ledger_path=ledger)  # serial first
    camp = checkpointed_map(fails_on_odd, items, ledger_path=ledger, execution="dask",
                            client=client)
    assert len(camp.results) == 10 and len(camp.failures) == 10
    failure = camp.failures[0]
    assert failure.error_type == "ValueError" and "in fails_on_odd" in failure.traceback
    for i in (0, 2, 4):  # accepted by the serial run, kept
        assert camp.records[f"t{i}"]["pid"] == os.getpid()
    assert camp.records["t1"]["attempts"] == 2  # failed serially, failed again on dask
    assert client.status == "running"  # a client we were given stays open


@pytest.mark.slow
def test_device_groups_become_worker_resources(ledger):
    items = [{"task_id": f"t{i}", "x": i, "sleep": 0.05} for i in range(12)]
    camp = checkpointed_map(where, items, ledger_path=ledger, execution="dask",
                            device_groups=[(0,), (1,)])
    assert camp.complete
    for tid in camp.task_ids:
        result = camp.result(tid)
        assert result is not None and result["cvd"] in {"0", "1"}
        assert camp.records[tid]["device_group"] == [int(result["cvd"])]


@pytest.mark.slow
def test_killed_worker_processes_tasks_rerun_nothing_run_twice_after_acceptance(tmp_path):
    # the `dask` command of this interpreter's environment (a venv's, even if not activated)
    dask = shutil.which("dask", path=os.pathsep.join([str(Path(PYTHON).parent),
                                                      os.environ.get("PATH", "")]))
    require(dask is not None, "the `dask` command is not installed")
    assert dask is not None
    ledger, marks = tmp_path / "l.json", tmp_path / "marks"
    marks.mkdir()
    sched_file = tmp_path / "scheduler.json"
    env = child_env()  # the workers import daskkit's task functions (in tests/): same environment
    env["PYTHONPATH"] += os.pathsep + str(Path(__file__).resolve().parents[1])
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--dashboard-address", "127.0.0.1:0",
                               "--scheduler-file", str(sched_file)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        wait_until(sched_file.exists, "the dask scheduler's file", interval=0.1)
        for _ in range(2):
            procs.append(subprocess.Popen(
                [dask, "worker", "--scheduler-file", str(sched_file), "--nthreads", "1",
                 "--no-nanny", "--host", "127.0.0.1", "--death-timeout", "30"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        import json

        address = json.loads(sched_file.read_text())["address"]
        with distributed.Client(address) as c:
            c.wait_for_workers(2, timeout=PATIENCE)
        # every task waits until the victim, running one, has been killed: it had one in flight
        release = tmp_path / "release"
        items = [{"task_id": f"t{i:03d}", "folder": str(marks), "sleep": 0.05, "held": True,
                  "hold": str(release)} for i in range(60)]
        victim = procs[1]
        killer = subprocess.Popen([PYTHON, "-c", (
            "import os, time, pathlib, signal\n"
            f"m = pathlib.Path({str(marks)!r})\n"
            f"pid = {victim.pid}\n"
            "while not any(p.name.split('.')[1] == str(pid) for p in m.iterdir()):\n"
            "    time.sleep(0.01)\n"
            "os.kill(pid, signal.SIGKILL)\n"
            f"pathlib.Path({str(release)!r}).touch()\n")])
        procs.append(killer)  # stopped with the others if the test fails
        camp = checkpointed_map(noted, items, ledger_path=ledger,
                                execution="dask", scheduler_address=address)
        killer.wait(timeout=PATIENCE)
        assert victim.wait(timeout=PATIENCE) == -signal.SIGKILL
        assert camp.complete
        tasks = read_ledger(ledger)["tasks"]
        began = runs(marks)
        for tid, rec in tasks.items():  # no run began after the accepted one had ended
            assert all(at <= rec["ended"] for _, at in began[tid]), tid
            assert rec["pid"] in {p for p, _ in began[tid]}
        rerun = [tid for tid in tasks if len(began[tid]) > 1]
        assert rerun, "the killed worker had tasks in flight that had to run again"
        assert all(tasks[t]["pid"] != victim.pid for t in rerun)
    finally:
        for proc in procs[::-1]:
            proc.send_signal(signal.SIGTERM)
        for proc in procs[::-1]:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_clear_errors_for_bad_dask_options(ledger):
    with pytest.raises(ValueError, match="not both"):
        checkpointed_map(where, [{"task_id": "a", "x": 1}], ledger_path=ledger,
                         execution="dask", client=object(), scheduler_address="tcp://x:1")
    with pytest.raises(ValueError, match="does not take timeout"):
        checkpointed_map(where, [{"task_id": "a", "x": 1}], ledger_path=ledger,
                         execution="dask", timeout=3)


def test_a_lost_batch_whose_worker_thread_moved_on_blames_no_task():
    """A batch that said "t1 starts", then the same worker thread said "t2 starts" in another
    batch, and the worker died: the first batch had ended (its outcome was lost with the
    worker), so t1 goes back to the queue unblamed, and t2, the one running, is lost."""
    from schedulers import DaskScheduler
    from schedulers._events import OutcomeKind, Task
    from schedulers.dask._batch import Batch

    sched = DaskScheduler(workers=1)
    reported: list = []
    sched.report = reported.extend
    sched._stopping = False
    where = ["vm", 4242, "0", None]
    for n, (key, thread) in enumerate([("b1", 7), ("b2", 7), ("b3", 8)]):
        sched._batches[key] = Batch([Task(f"t{n + 1}", {}, 1)], key)
        sched._on_start((0.0, {"key": key, "index": 0, "time": float(n), "where": where,
                               "running": False, "thread": thread, "order": float(n)}))
    lost = distributed.KilledWorker("batch", SimpleNamespace(address="tls://127.0.0.1:1"), 0)
    outcomes = {}
    for key in ("b1", "b2", "b3"):
        again: list = []
        events = sched._lost(sched._batches.pop(key), "error", lost, again)
        outcomes[key] = ([(e.task_id, e.kind) for e in events if hasattr(e, "kind")],
                         [t.task_id for tasks, _ in again for t in tasks])
    assert outcomes["b1"] == ([], ["t1"])  # ended: thread 7 started b2 after it
    assert outcomes["b2"] == ([("t2", OutcomeKind.LOST)], [])  # thread 7's last: it ran
    assert outcomes["b3"] == ([("t3", OutcomeKind.LOST)], [])  # another thread's last


def test_a_lost_batch_blames_the_task_it_said_runs_and_only_it():
    """What `Batch.lost` decides from the messages heard: a task said running is the one lost
    and its batch-mates run again as usual; a task only said started leaves it open which one
    ran, so it and those after it run again one per batch."""
    from schedulers._events import Task
    from schedulers.dask._batch import Batch

    def batch(*messages):
        b = Batch([Task(f"t{i}", {}, 1) for i in range(4)], "k")
        for index, running in messages:
            b.heard({"key": "k", "index": index, "time": float(index), "running": running,
                     "where": ["vm", 1, "0", None], "thread": 1, "order": float(index)})
        return b

    def ids(tasks):
        return [t.task_id for t in tasks]

    lost, rest, alone = batch((0, False), (2, True)).lost()
    assert lost.task_id == "t2" and ids(rest) == ["t0", "t1", "t3"] and alone == []
    lost, rest, alone = batch((0, False), (2, True), (3, False)).lost()
    assert lost is None and ids(rest) == ["t0", "t1", "t2"] and ids(alone) == ["t3"]
    lost, rest, alone = batch().lost()  # nothing heard: it had not started
    assert lost is None and ids(rest) == ["t0", "t1", "t2", "t3"] and alone == []
