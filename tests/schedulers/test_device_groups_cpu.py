"""On CPUs, device groups are emulated JAX CPU devices: each worker process of
execution="processes" sees exactly its own devices, whatever device count the driver's
environment forces (the test run's own is ``--xla_force_host_platform_device_count=8``)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from testkit import PATIENCE

from campaign import checkpointed_map
from schedulers._devices import device_environment

GROUPS = [(0,), (1, 2), ((3,), (4, 5))]
EVERY = {"0", "1,2", "3,4,5"}  # DIFFSOUP_DEVICE_GROUP of each group


def report_devices(item):
    """Note what JAX shows this process, then wait until every group has begun a task (so each
    group runs one of the three), and return process 0's note."""
    import jax

    folder = Path(item["folder"])
    group = os.environ["DIFFSOUP_DEVICE_GROUP"]
    note = {"pid": os.getpid(), "group": group, "own": os.environ["CUDA_VISIBLE_DEVICES"],
            "rank": int(os.environ.get("DIFFSOUP_PROCESS_ID", "0")),
            "devices": len(jax.devices()), "platform": jax.default_backend(),
            "xla_flags": os.environ.get("XLA_FLAGS", "")}
    # written aside, then renamed: the other groups' processes read these notes meanwhile, and
    # must never see one half written
    aside = folder / f"{os.getpid()}.part"
    aside.write_text(json.dumps(note))
    aside.replace(folder / f"{os.getpid()}.json")
    deadline = time.monotonic() + PATIENCE
    while {json.loads(p.read_text())["group"] for p in folder.glob("*.json")} != EVERY:
        if time.monotonic() > deadline:
            raise TimeoutError(f"not every group of {sorted(EVERY)} began a task")
        time.sleep(0.05)
    return {"group": group, "devices": note["devices"]}


@pytest.mark.slow
def test_each_worker_process_sees_its_group_s_devices_only(ledger, tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    monkeypatch.setenv("JAX_NUM_CPU_DEVICES", "8")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")  # emulated devices on a GPU machine as well
    for name in ("DIFFSOUP_COORDINATOR", "DIFFSOUP_NUM_PROCESSES", "DIFFSOUP_PROCESS_ID"):
        monkeypatch.delenv(name, raising=False)
    folder = tmp_path / "notes"
    folder.mkdir()
    items = [{"task_id": f"t{i}", "folder": str(folder)} for i in range(3)]

    camp = checkpointed_map(report_devices, items, ledger_path=ledger, execution="processes",
                            device_groups=GROUPS)

    assert not camp.failures, camp.failures
    assert sorted(r["group"] for r in camp.results) == sorted(EVERY)
    notes = [json.loads(p.read_text()) for p in folder.glob("*.json")]
    seen = sorted((n["group"], n["own"]) for n in notes)
    assert seen == [("0", "0"), ("1,2", "1,2"), ("3,4,5", "3"), ("3,4,5", "4,5")], notes
    for n in notes:  # per process: as many CPU devices as the process owns in its group
        assert n["platform"] == "cpu"
        assert n["devices"] == len(n["own"].split(",")), n
        assert n["xla_flags"].count("xla_force_host_platform_device_count") == 1, n
    for r in camp.results:  # a task's result is its group's process 0's
        assert r["devices"] == {"0": 1, "1,2": 2, "3,4,5": 1}[r["group"]]


def test_the_device_count_replaces_the_inherited_one_and_keeps_other_flags():
    env = device_environment((4, 5), {"XLA_FLAGS": "--xla_force_host_platform_device_count=8 "
                                                   "--xla_dump_to=/tmp/x"})
    assert env == {"CUDA_VISIBLE_DEVICES": "4,5", "JAX_NUM_CPU_DEVICES": "2",
                   "XLA_FLAGS": "--xla_dump_to=/tmp/x --xla_force_host_platform_device_count=2"}
    assert device_environment((0,), {})["XLA_FLAGS"] == \
        "--xla_force_host_platform_device_count=1"
