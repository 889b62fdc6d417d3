"""Resource use per attempt in the ledger (cpu_s, peak_rss_bytes, gpu_peak_bytes), measured in
the process that ran fn, under serial, processes, dask and array workers.

What is asserted are properties of the work, not of the machine: CPU seconds a task spun for
(on its own thread's clock), memory it touched, memory freed before the next task in the same
process, and JAX never imported by the measurement.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import distributed
import pytest
from testkit import PYTHON, child_env

from campaign import checkpointed_map, read_ledger

MB = 1 << 20
BIG = 200 * MB


def work(item):
    """``burn`` seconds of this thread's CPU, ``touch`` bytes allocated and written (then
    freed), ``sleep`` seconds asleep; returns what ran it and whether JAX was imported then."""
    began = time.thread_time()
    while time.thread_time() - began < item.get("burn", 0):
        pass
    if item.get("touch"):
        block = bytearray(item["touch"])
        block[::4096] = b"\x01" * len(range(0, item["touch"], 4096))  # every page resident
        del block
    time.sleep(item.get("sleep", 0))
    return {"pid": os.getpid(), "jax": "jax" in sys.modules}


def items_burn_big_small():
    return [{"task_id": "burn", "burn": 0.3},
            {"task_id": "big", "touch": BIG},
            {"task_id": "small"},
            {"task_id": "asleep", "sleep": 0.6}]


def check_usage(records, jax_before: bool = False):
    """The figures a user reads: CPU of the busy task, the big task's peak and the next
    small task's in the same process, no GPU figures on CPU, no JAX imported by measuring.

    ``jax_before``: whether the process that ran the tasks had imported JAX before them (this
    test process, for the paths that run fn here, may have: other tests import it)."""
    burn, big, small, asleep = (records[t] for t in ("burn", "big", "small", "asleep"))
    for rec in records.values():
        assert rec["status"] == "accepted", rec
        assert isinstance(rec["cpu_s"], float) and rec["cpu_s"] >= 0
        assert "gpu_peak_bytes" not in rec
        assert rec["result"]["jax"] is jax_before  # measuring imported no JAX
    assert burn["cpu_s"] >= 0.15  # it spun 0.3 s of its own thread's CPU (bound: half)
    assert asleep["cpu_s"] < 0.3  # 0.6 s asleep is wall time, not CPU time
    if sys.platform.startswith("linux"):
        assert big["peak_rss_bytes"] >= BIG
        # the high-water mark was reset before the next task of the same process
        assert small["result"]["pid"] == big["result"]["pid"]
        assert small["started"] >= big["ended"]
        assert small["peak_rss_bytes"] < big["peak_rss_bytes"] - BIG // 2
        assert all(isinstance(r["peak_rss_bytes"], int) for r in records.values())


def test_serial_records_cpu_and_peak_memory_per_attempt(ledger):
    jax_before = "jax" in sys.modules
    camp = checkpointed_map(work, items_burn_big_small(), ledger_path=ledger)
    assert camp.complete
    check_usage(read_ledger(ledger)["tasks"], jax_before)


def test_processes_record_cpu_and_peak_memory_per_attempt(ledger):
    camp = checkpointed_map(work, items_burn_big_small(), ledger_path=ledger,
                            execution="processes", workers=1)
    assert camp.complete
    check_usage(read_ledger(ledger)["tasks"])


def test_dask_records_cpu_and_peak_memory_per_attempt(ledger):
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                       host="127.0.0.1", dashboard_address="127.0.0.1:0")
    with cluster, distributed.Client(cluster) as client:
        items = items_burn_big_small()
        # the small task runs after the big one: in a second run, on the same worker process
        checkpointed_map(work, items[:2], ledger_path=ledger, execution="dask", client=client)
        camp = checkpointed_map(work, items, ledger_path=ledger, execution="dask",
                                client=client)
    assert camp.complete
    check_usage(read_ledger(ledger)["tasks"])


def test_array_worker_records_cpu_and_peak_memory(tmp_path, monkeypatch):
    from campaign._array._plan import plan_submission
    from campaign._array._worker import run_worker

    # element 0 of a one-element array (as Slurm says): it takes the tasks in order, "small"
    # after "big"; a worker that does not know its place begins at a random task
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "0")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "1")
    monkeypatch.delenv("SLURM_ARRAY_TASK_MIN", raising=False)
    monkeypatch.delenv("SLURM_ARRAY_TASK_STEP", raising=False)
    ledger = tmp_path / "ledger.json"
    sub = plan_submission(items_burn_big_small(), ledger_path=ledger).record()
    jax_before = "jax" in sys.modules
    summary = run_worker(work, ledger, sub.id, merge_every=0.0)
    assert summary.accepted == 4
    check_usage(read_ledger(ledger)["tasks"], jax_before)


def fails_after_burning(item):
    began = time.thread_time()
    while time.thread_time() - began < 0.3:
        pass
    if item["attempt_file"] and not os.path.exists(item["attempt_file"]):
        open(item["attempt_file"], "w").close()
        raise RuntimeError("first attempt fails")
    return {"ok": True}


def test_history_keeps_each_attempts_usage(ledger, tmp_path):
    marker = str(tmp_path / "tried")
    camp = checkpointed_map(fails_after_burning, [{"task_id": "t", "attempt_file": marker}],
                            ledger_path=ledger, retries=1)
    assert camp.complete
    rec = read_ledger(ledger)["tasks"]["t"]
    (first,) = rec["history"]
    assert first["status"] == "failed" and rec["attempts"] == 2
    assert first["cpu_s"] >= 0.15 and rec["cpu_s"] >= 0.15
    assert first["peak_rss_bytes"] > 0 and rec["peak_rss_bytes"] > 0


def uses_jax_on_cpu(item):
    import jax.numpy as jnp

    return {"sum": float(jnp.arange(1000.0).sum()), "jax": True}


def test_jax_on_cpu_records_no_gpu_peak(ledger):
    camp = checkpointed_map(uses_jax_on_cpu, [{"task_id": "a"}, {"task_id": "b"}],
                            ledger_path=ledger, execution="processes", workers=1)
    assert camp.complete
    for rec in read_ledger(ledger)["tasks"].values():
        assert rec["cpu_s"] > 0 and "gpu_peak_bytes" not in rec


def test_measuring_never_imports_jax_nor_starts_its_backends():
    """In a fresh interpreter: a meter never imports JAX, and JAX imported without a backend
    started is left unstarted (asking its devices would start them)."""
    code = (
        "import sys, json\n"
        "from schedulers._usage import Meter, gpu_peak_bytes\n"
        "m = Meter()\n"
        "with m: pass\n"
        "out = {'jax_after_meter': 'jax' in sys.modules, 'usage': m.usage}\n"
        "import jax\n"
        "from jax._src import xla_bridge\n"
        "with m: pass\n"
        "out['started_by_meter'] = xla_bridge.backends_are_initialized()\n"
        "jax.numpy.zeros(3).block_until_ready()\n"
        "out['gpu_on_cpu'] = gpu_peak_bytes()\n"
        "print(json.dumps(out))\n")
    done = subprocess.run([PYTHON, "-c", code], env=child_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["jax_after_meter"] is False and out["started_by_meter"] is False
    assert out["gpu_on_cpu"] is None and "gpu_peak_bytes" not in out["usage"]
    assert set(out["usage"]) <= {"cpu_s", "peak_rss_bytes"} and "cpu_s" in out["usage"]


def uses_gpu(item):
    import jax.numpy as jnp

    block = jnp.ones((BIG // 4,), dtype=jnp.float32)  # 200 MB on the device
    return {"sum": float(block.sum())}


def test_jax_on_a_gpu_records_its_peak_bytes(ledger):
    import jax

    # in a worker process, so that this test process never takes a GPU
    probe = subprocess.run([PYTHON, "-c", "import jax; print(jax.default_backend())"],
                           env=child_env(), capture_output=True, text=True, timeout=300)
    backend = probe.stdout.strip()
    if backend != "gpu":
        if os.environ.get("DIFFSOUP_GPU_CHECK") == "1":
            pytest.fail(f"DIFFSOUP_GPU_CHECK=1 but JAX's default backend is {backend!r}")
        pytest.skip(f"no GPU: JAX's default backend is {backend!r} (jax {jax.__version__})")
    camp = checkpointed_map(uses_gpu, [{"task_id": "g"}], ledger_path=ledger,
                            execution="processes", workers=1)
    assert camp.complete
    assert read_ledger(ledger)["tasks"]["g"]["gpu_peak_bytes"] >= BIG


def fails_on_two(item):
    if item["x"] == 2:
        raise ValueError("two")
    return work(item) | {"status": "mine"}


def test_results_with_records_lists_every_task_with_its_usage(ledger):
    import csv
    import io

    items = [{"task_id": f"t{i}", "x": i, "burn": 0.3 if i == 1 else 0} for i in range(4)]
    checkpointed_map(fails_on_two, items, ledger_path=ledger)

    def results(*args):
        done = subprocess.run([PYTHON, "-m", "campaign._cli", "results", str(ledger), *args],
                              env=child_env(), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout

    rows = list(csv.DictReader(io.StringIO(results("--with-records"))))
    assert list(rows[0])[:11] == ["task_id", "status", "attempts", "started", "ended",
                                  "duration", "host", "worker", "cpu_s", "peak_rss_bytes",
                                  "gpu_peak_bytes"]
    assert [r["status"] for r in rows] == ["accepted", "accepted", "failed", "accepted"]
    assert float(rows[1]["cpu_s"]) >= 0.15 and int(rows[2]["peak_rss_bytes"]) > 0
    assert rows[0]["gpu_peak_bytes"] == "" and rows[0]["result.status"] == "mine"
    assert rows[2]["result.status"] == "" and rows[2]["attempts"] == "1"
    records = json.loads(results("--with-records", "--format", "json"))
    assert [r["task_id"] for r in records] == ["t0", "t1", "t2", "t3"]
    assert records[1]["cpu_s"] >= 0.15 and records[0]["gpu_peak_bytes"] is None
    assert isinstance(records[3]["peak_rss_bytes"], int) and records[2]["status"] == "failed"
    plain = list(csv.DictReader(io.StringIO(results())))  # without: accepted results only
    assert len(plain) == 3 and "cpu_s" not in plain[0] and plain[0]["status"] == "mine"


def test_a_task_of_several_processes_sums_their_cpu_and_keeps_the_largest_peaks():
    from schedulers._usage import combined

    one = {"cpu_s": 0.5, "peak_rss_bytes": 300 * MB, "gpu_peak_bytes": 2 * MB}
    two = {"cpu_s": 0.25, "peak_rss_bytes": 400 * MB, "gpu_peak_bytes": 1 * MB}
    assert combined([one, two]) == {"cpu_s": 0.75, "peak_rss_bytes": 400 * MB,
                                    "gpu_peak_bytes": 2 * MB}
    assert combined([None, one]) == one and combined([None, None]) is None


def test_a_device_group_of_two_processes_records_both_processes_cpu(ledger, monkeypatch):
    for name in ("DIFFSOUP_COORDINATOR", "DIFFSOUP_NUM_PROCESSES", "DIFFSOUP_PROCESS_ID"):
        monkeypatch.delenv(name, raising=False)
    camp = checkpointed_map(work, [{"task_id": "both", "burn": 0.3}], ledger_path=ledger,
                            execution="processes", device_groups=[((0,), (1,))])
    assert camp.complete
    rec = read_ledger(ledger)["tasks"]["both"]
    assert rec["cpu_s"] >= 0.45  # each process spun 0.3 s of its own: the sum is >= 0.6
    assert rec["peak_rss_bytes"] > 0
