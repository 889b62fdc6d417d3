"""Benchmark: reading a ledger that holds one big item, at two sizes.

Writes two ledgers with the project's own run (`checkpointed_map`), each with one item of a
string of SIZE MB and of twice that, then times ``campaign status`` on each as a subprocess
five times, and a no-op resume (`checkpointed_map` again) in this process, and prints the
medians and their ratio (twice the item should take about twice the time: linear reading)::

    python benchmarks/big_item.py [--mb 32]

Output ends with ``big_item_status_ratio: X`` (the median time for 2 x SIZE over that for SIZE).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from campaign import checkpointed_map


def _items(mb: int) -> list[dict]:
    return [{"task_id": "small", "x": 1}, {"task_id": "big", "blob": "x" * (mb << 20)}]


def _one(item: dict) -> dict:
    return {"y": 1}


def _median_seconds(run, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        begun = time.perf_counter()
        run()
        times.append(time.perf_counter() - begun)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=32, help="the smaller item's size in MB")
    args = parser.parse_args()
    status: dict[int, float] = {}
    resume: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mb in (args.mb, 2 * args.mb):
            ledger = Path(tmp) / f"l{mb}.json"
            items = _items(mb)
            checkpointed_map(_one, items, ledger_path=ledger)
            cmd = [sys.executable, "-m", "campaign._cli", "status", str(ledger)]
            status[mb] = _median_seconds(
                lambda cmd=cmd: subprocess.run(cmd, capture_output=True, check=True))
            resume[mb] = _median_seconds(
                lambda items=items, ledger=ledger: checkpointed_map(_one, items,
                                                                    ledger_path=ledger))
            print(f"{mb} MB item: campaign status {status[mb]:.2f} s, no-op resume "
                  f"{resume[mb]:.2f} s (medians of 5)")
    small, big = args.mb, 2 * args.mb
    print(f"big_item_resume_ratio: {resume[big] / resume[small]:.2f}")
    print(f"big_item_status_ratio: {status[big] / status[small]:.2f}")


if __name__ == "__main__":
    main()
