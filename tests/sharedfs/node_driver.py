"""A driver on one "node": `checkpointed_map` over ``N`` tasks on the ledger at ``LEDGER``
(a view's path); ``fn`` appends a line to ``MARKS/<task id>`` (outside the shared folder) each
time it runs, so the test counts the real calls.

    python node_driver.py LEDGER MARKS N SLEEP
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from campaign import checkpointed_map

ledger, marks, n, pause = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])


def fn(item):
    with open(marks / item["task_id"], "a") as f:
        f.write("ran\n")
    time.sleep(pause)
    return {"y": item["x"] * 2}


if __name__ == "__main__":
    result = checkpointed_map(fn, [{"task_id": f"t{i:03d}", "x": i} for i in range(n)],
                              ledger_path=ledger)
    print(f"driver: {result!r}")
