"""execution="slurm" (dask-jobqueue) with worker jobs on the three nodes: the workers reach the
dask scheduler at the controller's address on the cluster's subnet, not loopback, and the task a
killed node held runs again on another."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import threading

import pytest
from clusterkit import NODES, START, kill_node, run_script

from campaign import checkpointed_map, read_ledger
from testkit import PATIENCE, wait_until

SUBNET = "10.213.7."


def run_on_nodes(items, folder: Path, max_batch: int = 2):
    """checkpointed_map on three one-core worker jobs: the workers' interface is the node's
    eth0, the scheduler's the controller's bridge (dask-jobqueue would give both the same)."""
    return checkpointed_map(
        where_it_ran, items, ledger_path=folder / "l.json", execution="slurm",
        min_jobs=3, max_jobs=3, cores=1, memory="1GB", interface="eth0",
        scheduler_options={"interface": "ds3-br"}, log_directory=folder / "logs",
        start_timeout=120, job_name=f"multinode-{os.getpid()}", batch_seconds=0.1,
        max_batch=max_batch)


def where_it_ran(item):
    """Note the run (hang if on the ``hang_on`` host), wait until tasks have begun on ``hosts``
    hosts; return where it ran and the addresses its dask worker uses."""
    from distributed import get_worker

    worker = get_worker()
    marks = Path(item["folder"])
    host = socket.gethostname()
    (marks / f"{item['task_id']}.{host}.{os.getpid()}").touch()
    if host == item.get("hang_on"):
        while True:  # until the test kills the node
            time.sleep(3600)
    deadline = time.monotonic() + 300  # only a hung test waits this long
    while len({m.name.split(".")[1] for m in marks.iterdir()}) < item["hosts"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"tasks began on fewer than {item['hosts']} hosts in 300 s")
        time.sleep(0.02)
    return {"host": host, "worker": worker.address, "scheduler": worker.scheduler.address}


@pytest.mark.slow
def test_dask_workers_on_several_nodes_reach_the_scheduler_on_the_subnet(shared, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    items = [{"task_id": f"t{i:03d}", "folder": str(marks), "hosts": 2} for i in range(60)]
    camp = run_on_nodes(items, shared)
    assert camp.complete and len(camp.results) == 60
    results = camp.results
    hosts = {r["host"] for r in results}
    assert hosts <= set(NODES) and len(hosts) >= 2, hosts
    for r in results:
        assert r["scheduler"].startswith(f"tcp://{SUBNET}1:"), r  # the controller's address
        assert r["worker"].startswith(f"tcp://{SUBNET}1"), r  # the node's own address
    tasks = read_ledger(shared / "l.json")["tasks"]
    assert all(rec["status"] == "accepted" for rec in tasks.values())
    assert all(rec["host"] == rec["result"]["host"] for rec in tasks.values())
    print(f"\nhosts of the 60 tasks: { {h: sum(r['host'] == h for r in results) for h in NODES} }"
          f"; scheduler {results[0]['scheduler']}")


@pytest.mark.slow
def test_a_dask_worker_node_that_dies_its_task_runs_again_on_another_node(shared, tmp_path,
                                                                           cluster):
    marks = tmp_path / "marks"
    marks.mkdir()
    items = [{"task_id": f"t{i:03d}", "folder": str(marks), "hosts": 3, "hang_on": "node2"}
             for i in range(30)]
    done: dict = {}

    def drive():
        try:
            # batches of one: a lost batch of one started task is that task's interruption
            done["camp"] = run_on_nodes(items, shared, max_batch=1)
        except BaseException as exc:  # reported by the test below
            done["error"] = exc

    driver = threading.Thread(target=drive)
    driver.start()
    try:
        held = wait_until(lambda: [m.name.split(".")[0] for m in marks.iterdir()
                                   if m.name.split(".")[1] == "node2"],
                          "a task to begin on node2", interval=0.05)
        killed_at = time.time()
        kill_node(cluster, "node2")
    finally:
        driver.join(PATIENCE)
        run_script(START)  # node2 back
    assert "error" not in done, done.get("error")
    camp = done["camp"]
    assert camp.complete and len(camp.results) == 30
    tasks = read_ledger(shared / "l.json")["tasks"]
    assert all(rec["status"] == "accepted" for rec in tasks.values())
    assert {rec["host"] for rec in tasks.values()} <= {"node1", "node3"}
    (tid,) = held  # one thread on node2's worker: one task began there
    rec = tasks[tid]
    assert [h["host"] for h in rec["history"]] == ["node2"], rec["history"]
    assert rec["history"][0]["status"] == "interrupted" and rec["interruptions"] == 1
    print(f"\nnode2 killed holding {tid}: it ran again on {rec['host']} "
          f"{rec['started'] - killed_at:.1f} s later")
