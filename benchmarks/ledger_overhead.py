"""Per-task overhead of checkpointed_map (serial) over a plain loop, and ledger bytes per task.

For N = 1,000 / 10,000 / 100,000 no-op tasks, in the same process: the time of a plain Python
loop calling fn on every item (the baseline), the time of checkpointed_map on the same items with
a new ledger, their difference per task (medians of several repeats), and the bytes written to
the ledger per task. Targets (issue): under 200 us per task at 100,000, and the overhead at
100,000 at most 3x the overhead at 1,000.

    python benchmarks/ledger_overhead.py [--sizes 1000,10000,100000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from campaign import checkpointed_map


def noop(item):
    return {"i": item["i"]}


def measure(n: int, repeats: int, folder: Path) -> tuple[float, float, int]:
    items = [{"task_id": f"task-{i:06d}", "i": i} for i in range(n)]
    overheads, sizes, writes = [], [], []
    for r in range(repeats):
        t0 = time.perf_counter()
        for item in items:
            noop(item)
        loop = time.perf_counter() - t0
        path = folder / f"ledger-{n}-{r}.json"
        t0 = time.perf_counter()
        camp = checkpointed_map(noop, items, ledger_path=path)
        mapped = time.perf_counter() - t0
        assert camp.complete
        overheads.append((mapped - loop) / n)
        sizes.append(camp.ledger_bytes_written / n)
        writes.append(camp.ledger_writes)
        path.unlink()
    return statistics.median(overheads), statistics.median(sizes), int(statistics.median(writes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    folder = Path(tempfile.mkdtemp(prefix="ledger-bench-"))
    try:
        per_task = {}
        for n in sizes:
            repeats = args.repeats if n <= 10_000 else max(3, args.repeats // 2)
            overhead, written, writes = measure(n, repeats, folder)
            per_task[n] = overhead
            print(f"overhead_us_per_task_{n}: {overhead * 1e6:.1f}")
            print(f"ledger_bytes_per_task_{n}: {written:.0f}")
            print(f"ledger_writes_{n}: {writes}")
        if len(sizes) > 1:
            print(f"overhead_ratio_{sizes[-1]}_vs_{sizes[0]}: "
                  f"{per_task[sizes[-1]] / per_task[sizes[0]]:.2f}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
