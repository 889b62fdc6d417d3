"""A campaign run by tests/campaign/test_crash.py, which SIGKILLs it at random moments.

Usage: python crash_child.py LEDGER CALL_LOG N_TASKS EXECUTION

fn appends "<task_id> <driver pid> <pid>" to CALL_LOG before it works (``pid``: the process that
runs it, the driver or one of its workers), so the test can check that no task is ever run again
after it was seen accepted, and find the driver's dask workers to kill.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from campaign import checkpointed_map

#: Options of each execution: two workers, as on the test machines' two cores. Under dask the
#: test also kills workers, as often as it likes: no number of losses may fail a task here
#: (fn never fails), so that any failed record is a fault.
OPTIONS: dict[str, dict[str, Any]] = {"serial": {}, "processes": {"workers": 2},
                                      "dask": {"workers": 2, "max_interruptions": 10**6}}


def expected(i: int) -> dict:
    return {"y": i * i + 0.5, "tag": f"t{i:04d}", "inf": float("inf") if i % 5 == 0 else 1.0}


def main() -> None:
    ledger, log, n, execution = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    driver = os.getpid()

    def fn(item):
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{item['task_id']} {driver} {os.getpid()}\n".encode())
        finally:
            os.close(fd)
        time.sleep(item["delay"])
        return expected(item["x"])

    items = [{"task_id": f"t{i:04d}", "x": i, "delay": (i % 7) * 0.002} for i in range(n)]
    print("ready", flush=True)
    checkpointed_map(fn, items, ledger_path=ledger, commit_interval=0.002, execution=execution,
                     **OPTIONS[execution])
    print("done", flush=True)


if __name__ == "__main__":
    main()
