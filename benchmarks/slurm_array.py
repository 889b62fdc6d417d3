"""A campaign as a Slurm job array (`campaign submit`) against the ideal, on the real Slurm.

400 tasks of 50 ms (sleep) on a 4-element array: wall time from `campaign submit` to the last
element's end, divided by the ideal 400 x 50 ms / 4 = 5 s; and the per-task claim overhead: the
time each element spent between its tasks (claiming by lease, writing fragments, merging),
summed over elements and divided by the number of tasks. Needs a Slurm (scripts/slurm-start.sh).

    python benchmarks/slurm_array.py [--tasks 400] [--seconds 0.05] [--elements 4]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from campaign import read_ledger
from schedulers.slurm import Backoff, JobWatcher

TASK = '''
import time
def run(item):
    begun = time.time()
    time.sleep(item["seconds"])
    return {"begun": begun, "ended": time.time()}
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=400)
    parser.add_argument("--seconds", type=float, default=0.05)
    parser.add_argument("--elements", type=int, default=4)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="array-bench-"))
    try:
        (folder / "task.py").write_text(TASK)
        items = [{"task_id": f"t{i:04d}", "seconds": args.seconds} for i in range(args.tasks)]
        (folder / "items.json").write_bytes(orjson.dumps(items))
        spec = folder / "campaign.toml"
        spec.write_text('target = "task.py:run"\nitems = "items.json"\nledger = "ledger.json"\n')
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "campaign._cli", "submit", str(spec),
                               "--array", str(args.elements)], capture_output=True, text=True,
                              cwd=folder, check=True)
        job = proc.stdout.split()[0]
        JobWatcher(job, backoff=Backoff(0.1, cap=0.5)).wait(timeout=600)
        wall = time.monotonic() - t0
        tasks = read_ledger(folder / "ledger.json")["tasks"]
        assert all(r["status"] == "accepted" for r in tasks.values()), "not all accepted"
        by_worker: dict[str, list[dict]] = {}
        for rec in tasks.values():
            by_worker.setdefault(rec["worker"], []).append(rec["result"])
        between = 0.0
        for results in by_worker.values():
            results.sort(key=lambda r: r["begun"])
            span = results[-1]["ended"] - results[0]["begun"]
            between += span - sum(r["ended"] - r["begun"] for r in results)
        ideal = args.tasks * args.seconds / args.elements
        print(f"array_elements_used: {len(by_worker)}")
        print(f"array_wall_seconds: {wall:.2f}")
        print(f"array_wall_over_ideal: {wall / ideal:.2f}")
        print(f"array_claim_overhead_ms_per_task: {between / args.tasks * 1e3:.2f}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
