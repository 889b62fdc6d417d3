"""One "node"'s process for the exclusion tests (tests/sharedfs/test_exclusion.py). Each waits
for the file ``GO`` before it touches the ledger, so that the processes of a round start
together; ``fn`` appends its task id to ``CALLS`` (outside the shared folder) each time it runs.

    python exclusion_node.py driver LEDGER CALLS GO N SLEEP
        checkpointed_map over N tasks; prints "finished", or "busy: <message>" (exit 3) when
        refused with DriverBusyError, or "lost: <message>" (exit 4) when its lease was taken
        over while it ran
    python exclusion_node.py claim LEDGER SUBMISSION GO OUT LEASE_SECONDS
        claims every task of the submission once (no task is run); writes the ids it holds to
        OUT as a JSON list
    python exclusion_node.py worker LEDGER SUBMISSION CALLS GO LEASE_SECONDS SLEEP
        an array worker (run_worker) whose fn sleeps SLEEP seconds
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path


def wait_for(go: Path) -> None:
    while not go.exists():
        time.sleep(0.005)


def task_fn(calls: Path, pause: float):
    def fn(item):
        with open(calls, "a") as f:
            f.write(f"{item['task_id']} {socket.gethostname()} {os.getpid()}\n")
        time.sleep(pause)
        return {"y": item["x"] * 2}
    return fn


def driver(ledger: str, calls: str, go: str, n: str, pause: str) -> int:
    from campaign import DriverBusyError, LedgerError, checkpointed_map
    from campaign._errors import LeaseLostError

    print(f"node {socket.gethostname()} pid {os.getpid()}", flush=True)
    wait_for(Path(go))
    items = [{"task_id": f"t{i:03d}", "x": i} for i in range(int(n))]
    try:
        checkpointed_map(task_fn(Path(calls), float(pause)), items, ledger_path=ledger)
    except LeaseLostError as exc:
        print(f"lost: {exc}", flush=True)
        return 4
    except DriverBusyError as exc:
        print(f"busy: {exc}", flush=True)
        return 3
    except LedgerError as exc:  # the run stopped on a write: the cause says why
        cause = exc.__cause__
        if isinstance(cause, LeaseLostError):
            print(f"lost: {cause}", flush=True)
            return 4
        raise
    print("finished", flush=True)
    return 0


def claim(ledger: str, submission: str, go: str, out: str, seconds: str) -> int:
    from campaign._array._leases import Leases
    from campaign._array._workdir import WorkDir, task_list_path
    from campaign._ledger._atomic import HOST

    work = WorkDir(Path(ledger), submission)
    leases = Leases(work, lease_seconds=float(seconds))
    owner = {"worker": f"claimer-{os.getpid()}", "host": HOST, "pid": os.getpid()}
    task_ids = json.loads(task_list_path(Path(ledger), submission).read_bytes())
    wait_for(Path(go))
    held = [tid for tid in task_ids if leases.claim(tid, owner) is not None]
    Path(out).write_text(json.dumps(held))
    return 0


def worker(ledger: str, submission: str, calls: str, go: str, seconds: str, pause: str) -> int:
    from campaign import run_worker

    wait_for(Path(go))
    summary = run_worker(task_fn(Path(calls), float(pause)), ledger, submission,
                         lease_seconds=float(seconds), merge_every=0.2)
    print(f"summary: {summary}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit({"driver": driver, "claim": claim, "worker": worker}[sys.argv[1]](*sys.argv[2:]))
