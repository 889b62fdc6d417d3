"""execution="processes" with device groups of several processes: real interpreters, real JAX
collectives between them (gloo on CPU, one CPU device per process), real SIGKILLs.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from testkit import PATIENCE, PYTHON

from campaign import checkpointed_map
from schedulers import normalize_groups

GROUPS = [((0,), (1,)), ((2,), (3,))]


@pytest.fixture
def one_cpu_device(monkeypatch):
    """Each worker process: one emulated CPU device, no launcher of the test run leaking in."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    for name in ("DIFFSOUP_COORDINATOR", "DIFFSOUP_NUM_PROCESSES", "DIFFSOUP_PROCESS_ID"):
        monkeypatch.delenv(name, raising=False)


def collective(item):
    """Join the group's processes, note where this process ran, and sum over the group."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding, PartitionSpec

    import solvers as ds
    from solvers import distributed

    begun = time.time()
    launch = distributed.initialize()
    rank, cvd = launch.process_id, os.environ["CUDA_VISIBLE_DEVICES"]
    with open(Path(item["log"]) / f"{item['task_id']}.log", "a") as log:
        log.write(f"{os.getpid()} {rank} {cvd} {os.environ['DIFFSOUP_DEVICE_GROUP']}\n")
    if item.get("hang_rank") == rank:  # the first attempt hangs (until killed from outside)
        try:
            fd = os.open(Path(item["log"]) / f"{item['task_id']}.pid", os.O_CREAT | os.O_EXCL
                         | os.O_WRONLY)
        except FileExistsError:
            pass
        else:
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            while True:  # until killed
                time.sleep(3600)
    if item.get("raise_rank") == rank:
        raise ValueError(f"bad value on rank {rank}")
    mesh = ds.global_mesh(("data",))
    local = np.array([item["x"] * (rank + 1.0)])
    spread = jax.make_array_from_process_local_data(NamedSharding(mesh, PartitionSpec("data")),
                                                    local)
    total = jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, PartitionSpec()))(spread)
    pids = multihost_utils.process_allgather(np.array([os.getpid()]))
    return {"processes": jax.process_count(), "devices": len(mesh.devices.flat),
            "total": float(total), "pids": ",".join(str(int(p)) for p in pids.reshape(-1)),
            "begun": begun, "ended": time.time()}


def _log(tmp_path: Path, task_id: str) -> dict[int, tuple[int, str, str]]:
    """pid -> (rank, CUDA_VISIBLE_DEVICES, DIFFSOUP_DEVICE_GROUP) for every run of a task."""
    lines = (tmp_path / f"{task_id}.log").read_text().split()
    return {int(p): (int(r), c, g) for p, r, c, g in zip(*[iter(lines)] * 4)}


@pytest.mark.slow
def test_tasks_run_on_every_process_of_their_group(ledger, tmp_path, one_cpu_device):
    items = [{"task_id": f"t{i}", "x": float(i + 1), "log": str(tmp_path)} for i in range(6)]
    items.insert(2, {"task_id": "killed", "x": 10.0, "log": str(tmp_path), "hang_rank": 1})
    items.append({"task_id": "raises", "x": 1.0, "log": str(tmp_path), "raise_rank": 1})
    killer = subprocess.Popen([PYTHON, "-c", textwrap.dedent(f"""
        import os, signal, time, pathlib
        p = pathlib.Path({str(tmp_path / 'killed.pid')!r})
        while not p.exists() or not p.read_text(): time.sleep(0.01)
        os.kill(int(p.read_text()), signal.SIGKILL)
    """)])
    camp = checkpointed_map(collective, items, ledger_path=ledger, execution="processes",
                            device_groups=GROUPS)
    killer.wait(timeout=PATIENCE)

    (failure,) = camp.failures  # raised on process 1 only: the task's error, process 1 named
    assert failure.task_id == "raises" and failure.error_type == "ValueError"
    assert "process 1 of 2" in failure.message and "bad value on rank 1" in failure.message
    assert failure.attempts == 1

    spans = []
    for item in items[:-1]:
        tid, rec, res = item["task_id"], camp.records[item["task_id"]], camp.result(item["task_id"])
        assert res["processes"] == 2 and res["devices"] == 2
        assert res["total"] == pytest.approx(3 * item["x"])  # x on rank 0 + 2x on rank 1
        group = tuple(rec["device_group"])
        assert group in {(0, 1), (2, 3)} and rec["worker"] == f"group-{group[0] // 2}"
        pids = [int(p) for p in res["pids"].split(",")]
        assert rec["pid"] == pids[0]  # the Placement names the group and its process 0
        runs = _log(tmp_path, tid)
        for rank, pid in enumerate(pids):  # each process saw its own device, and the group
            assert runs[pid] == (rank, str(group[rank]), f"{group[0]},{group[1]}")
        spans.append((group, res["begun"], res["ended"]))
    for i, (g1, b1, e1) in enumerate(spans):  # no two concurrent tasks share a group
        for g2, b2, e2 in spans[i + 1:]:
            if g1 == g2:
                assert e1 <= b2 or e2 <= b1

    rec = camp.records["killed"]  # interrupted, then accepted on a restarted group
    assert rec["status"] == "accepted" and rec["attempts"] == 2 and rec["interruptions"] == 1
    lost = rec["history"][0]
    assert lost["status"] == "interrupted" and lost["error"]["type"] == "WorkerLost"
    assert "process 1 of 2" in lost["error"]["message"]
    assert "SIGKILL" in lost["error"]["message"]
    killed = int((tmp_path / "killed.pid").read_text())
    assert killed not in {int(p) for p in camp.result("killed")["pids"].split(",")}
    assert lost["pid"] not in {int(p) for p in camp.result("killed")["pids"].split(",")}


def note_rank(item):
    """Note which process of the group runs the task; ``hang_rank``'s never ends. No JAX: the
    timeout counts no start-up, only the task."""
    rank = int(os.environ["DIFFSOUP_PROCESS_ID"])
    with open(Path(item["log"]) / f"{item['task_id']}.log", "a") as log:
        log.write(f"{os.getpid()} {rank} {os.environ['CUDA_VISIBLE_DEVICES']} "
                  f"{os.environ['DIFFSOUP_DEVICE_GROUP']}\n")
    while item.get("hang_rank") == rank:  # until the timeout kills the group
        time.sleep(3600)
    return {"rank": rank}


@pytest.mark.slow
def test_timeout_kills_and_restarts_the_whole_group(ledger, tmp_path):
    items = [{"task_id": "slow", "log": str(tmp_path), "hang_rank": 0},
             {"task_id": "ok", "log": str(tmp_path)}]
    camp = checkpointed_map(note_rank, items, ledger_path=ledger, execution="processes",
                            device_groups=[((0,), (1,))], timeout=3.0)
    (failure,) = camp.failures
    assert failure.task_id == "slow" and failure.error_type == "TaskTimeout"
    assert "timeout=3.0" in failure.message and "group-0" in failure.message
    assert camp.result("ok") == {"rank": 0}  # process 0's result
    slow, ok = _log(tmp_path, "slow"), _log(tmp_path, "ok")
    assert sorted(rank for rank, _, _ in slow.values()) == [0, 1]
    assert sorted(rank for rank, _, _ in ok.values()) == [0, 1]
    assert not set(slow) & set(ok)  # both processes were restarted


@pytest.mark.parametrize("groups, words", [
    ([((0,), ())], ["device group 0", "process 1", "((0,), (1,))"]),
    ([((0,), (0,))], ["device 0", "process 0", "process 1"]),
    ([((0,), (1,)), (1,)], ["device 1", "group 0", "group 1"]),
    ([(0, (1,))], ["device group 0", "(0, (1,))"]),
])
def test_bad_groups_of_several_processes(groups, words):
    with pytest.raises(ValueError) as info:
        normalize_groups(groups, several_processes=True)
    for word in words:
        assert word in str(info.value)


def test_groups_of_several_processes_are_refused_where_not_supported():
    assert normalize_groups([((0,), (1,)), (2, 3)], several_processes=True) == [
        ((0,), (1,)), (2, 3)]
    assert normalize_groups([((0, 1),)]) == [(0, 1)]  # one process: the plain group
    with pytest.raises(ValueError, match=r"Give it as \(0, 1\), or run it with "
                                         "execution='processes'"):
        normalize_groups([((0,), (1,))])


def test_mesh_groups_per_process_gives_groups_of_several_processes():
    import jax
    import numpy as np
    from jax.sharding import Mesh

    import solvers as ds

    assert jax.device_count() >= 4, "tests/conftest.py asks for 8 emulated CPU devices"
    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
    assert ds.mesh_groups(mesh, (2,)) == [(0, 1), (2, 3)]  # unchanged without per_process
    groups = ds.mesh_groups(mesh, (2,), per_process=1)
    assert groups == GROUPS and normalize_groups(groups, several_processes=True) == GROUPS
    assert ds.mesh_groups(mesh, (4,), per_process=2) == [((0, 1), (2, 3))]
    with pytest.raises(ValueError, match=r"per_process=3 must be a positive divisor of the 4 "
                                         r"devices .* \(1, 2, 4\)"):
        ds.mesh_groups(mesh, (4,), per_process=3)
