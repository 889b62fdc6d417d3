"""A driver that runs a campaign until it blocks: ``python driver.py LEDGER N HOLD`` runs N
tasks serially; task N-1 waits for the file HOLD (a test that never creates it keeps the run
going, and kills this process at its end)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from report_task import run

from campaign import checkpointed_map

ledger, n, hold = sys.argv[1], int(sys.argv[2]), sys.argv[3]
items = [{"task_id": f"t{i:02d}", "x": i, **({"hold": hold} if i == n - 1 else {})}
         for i in range(n)]
checkpointed_map(run, items, ledger_path=ledger)
