"""One of two processes that update one ledger (run by tests/campaign/test_concurrent.py).

Usage: python concurrent_writer.py LEDGER PARITY N
Marks the tasks t<i> with i % 2 == PARITY accepted, one read-merge-write per task, in order.
Driven through stdin, one command a line: ``turn`` writes the next task and answers ``wrote``
(the test alternates the two writers, so that each write follows one of the other's);
``free`` writes all the remaining tasks at once, as fast as it can beside the other writer.
At the end it prints its number of commits and of merges of the other's writes.
"""

from __future__ import annotations

import sys
import time

from campaign import Ledger
from campaign._ledger._records import finished, started


def main() -> None:
    path, parity, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ledger = Ledger(path, min_interval=0.0)
    ledger.open(driver=False)
    todo = iter(range(parity, n, 2))

    def write(i: int) -> None:
        tid = f"t{i}"
        rec = started(ledger.tasks[tid], host="h", pid=parity, worker=f"w{parity}",
                      device_group=None, at=time.time())
        ledger.put(tid, finished(rec, "accepted", at=time.time(), result={"i": i}))
        ledger.flush()

    print("ready", flush=True)
    for command in sys.stdin:
        if command.strip() == "turn":
            write(next(todo))
            print("wrote", flush=True)
        elif command.strip() == "free":
            for i in todo:
                write(i)
            break
    ledger.close("finished")
    print(ledger.commits, ledger.merges, flush=True)


if __name__ == "__main__":
    main()
