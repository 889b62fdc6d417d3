"""A campaign driver in a process of its own, for the ledger fault tests.

    python ledger_child.py gate LEDGER N GATE     # task t0 waits until the file GATE exists
    python ledger_child.py slow LEDGER N SECONDS  # every task sleeps SECONDS

``gate``: each task touches ``GATE.started`` and waits for ``GATE``, so the driver stays alive
(holding the ledger) for as long as the test wants. ``slow``: for runs that hit a full disk.
The driver prints one JSON line at the end: the campaign's counts and how often fn was called;
a `LedgerWriteError` is printed as ``{"error": ..., "errno": ..., "calls": ...}`` and exits 3.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from campaign import LedgerWriteError, checkpointed_map

calls: list[str] = []


def main() -> int:
    mode, ledger, n, arg = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if mode == "gate":
        gate = Path(arg)

        def fn(item):
            calls.append(item["task_id"])
            gate.with_name(gate.name + ".started").touch()
            while not gate.exists():
                time.sleep(0.01)
            return {"x": item["x"]}
    else:
        pause = float(arg)

        def fn(item):
            calls.append(item["task_id"])
            time.sleep(pause)
            return {"x": item["x"]}

    items = [{"task_id": f"t{i:03d}", "x": i} for i in range(n)]
    try:
        camp = checkpointed_map(fn, items, ledger_path=ledger, commit_interval=0.0)
    except LedgerWriteError as exc:
        print(json.dumps({"error": str(exc), "errno": exc.errno, "path": exc.path,
                          "calls": calls}), flush=True)
        return 3
    print(json.dumps({"counts": camp.counts, "calls": calls}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
