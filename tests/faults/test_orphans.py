"""A `running` record whose driver lived on another host: a new driver here takes it over as
interrupted (DriverLost) once it holds the ledger's lock, and kills nothing on this host for it
(the orphan sweep of `execution="processes"` looks at this host's processes, never at records)."""

from __future__ import annotations

import json
import logging
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from testkit import PYTHON

from campaign import checkpointed_map, read_ledger
from schedulers._host import HOST

ELSEWHERE = f"{HOST}-elsewhere"


def gated(item: Mapping[str, Any]) -> dict[str, Any]:
    if not Path(item["gate"]).exists():
        raise RuntimeError(f"{item['gate']} does not exist yet")
    return {"y": item["x"] * 2}


def alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


def test_a_running_record_of_another_host_kills_nothing_here(tmp_path, caplog):
    ledger, gate = tmp_path / "l.json", tmp_path / "gate"
    items = [{"task_id": f"t{i}", "x": i, "gate": str(gate)} for i in range(3)]
    gate.touch()
    checkpointed_map(gated, items[:2], ledger_path=ledger)
    gate.unlink()
    checkpointed_map(gated, items, ledger_path=ledger)  # t2 fails: a record of one attempt
    gate.touch()
    # a live process here (in a session of its own, as a worker) whose pid the record names,
    # as if a driver on another host had run t2 in a worker with that pid and died
    bystander = subprocess.Popen([PYTHON, "-c", "import time; time.sleep(600)"],
                                 start_new_session=True)
    try:
        doc = json.loads(ledger.read_text())
        rec = doc["tasks"]["t2"]
        assert rec["status"] == "failed" and rec["attempts"] == 1
        rec.update(status="running", host=ELSEWHERE, pid=bystander.pid, worker="group-0",
                   error=None, ended=None, duration=None)
        doc["runs"][-1].update(status="running", host=ELSEWHERE, pid=bystander.pid,
                               ended=None)
        ledger.write_text(json.dumps(doc))
        with caplog.at_level(logging.INFO):
            camp = checkpointed_map(gated, items, ledger_path=ledger, execution="processes",
                                    workers=1)
        assert alive(bystander), "a process here was killed for a record of another host"
        assert camp.complete and not camp.failures
        tasks = read_ledger(ledger)["tasks"]
        t2 = tasks["t2"]
        assert t2["status"] == "accepted" and t2["attempts"] == 2 and t2["interruptions"] == 1
        assert t2["host"] == HOST and t2["pid"] != bystander.pid
        lost = t2["history"][-1]
        assert lost["status"] == "interrupted" and lost["error"]["type"] == "DriverLost"
        assert lost["host"] == ELSEWHERE and lost["pid"] == bystander.pid
        assert all(tasks[t]["attempts"] == 1 for t in ("t0", "t1"))
        runs = read_ledger(ledger)["runs"]
        assert runs[-2]["host"] == ELSEWHERE and runs[-2]["status"] == "crashed"
        messages = [r.getMessage() for r in caplog.records]
        # neither taken for a live driver here nor killed as an orphan (orphans of other drivers
        # on this machine may be)
        assert not [m for m in messages if re.search(rf"\b{bystander.pid}\b", m)], messages
        assert any("left running by a dead driver are now interrupted" in m for m in messages)
    finally:
        bystander.kill()
        bystander.wait()
