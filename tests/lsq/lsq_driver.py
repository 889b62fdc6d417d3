"""A driver of an lsq assembly on an existing dask cluster, SIGKILLed by test_lsq_crash.py.

Usage: python lsq_driver.py LEDGER STORE LOG N SCHEDULER_ADDRESS
"""

from __future__ import annotations

import sys

from lsq_rows import counted_rows

from campaign import checkpointed_map
from solvers.lsq import BlockStore


def main() -> None:
    ledger, store, log, n, address = sys.argv[1:6]
    items = [{"task_id": f"s{i:03d}", "i": i, "log": log, "cpu": 0.25} for i in range(int(n))]
    camp = checkpointed_map(BlockStore(store).task(counted_rows), items, ledger_path=ledger,
                            execution="dask", scheduler_address=address)
    print("complete" if camp.complete else "incomplete", flush=True)


if __name__ == "__main__":
    main()
