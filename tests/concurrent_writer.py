"""One of two processes that update one ledger at once (run by tests/test_concurrent.py).

Usage: python concurrent_writer.py LEDGER PARITY N
Marks the tasks t<i> with i % 2 == PARITY accepted, one read-merge-write per task.
"""

from __future__ import annotations

import random
import sys
import time

from campaign import Ledger
from campaign._records import finished, started


def main() -> None:
    path, parity, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ledger = Ledger(path, min_interval=0.0)
    ledger.open(driver=False)
    print("ready", flush=True)
    sys.stdin.readline()  # both start together
    for i in range(parity, n, 2):
        tid = f"t{i}"
        rec = started(ledger.tasks[tid], host="h", pid=parity, worker=f"w{parity}",
                      device_group=None, at=time.time())
        ledger.put(tid, finished(rec, "accepted", at=time.time(), result={"i": i}))
        ledger.flush()
        if random.random() < 0.1:
            time.sleep(0.001)
    ledger.close("finished")
    print(ledger.commits, ledger.merges, flush=True)


if __name__ == "__main__":
    main()
