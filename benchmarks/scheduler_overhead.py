"""Scheduler overhead against raw dask and against the ideal, on the same cluster in the same run.

1. 10,000 no-op tasks on one LocalCluster (2 worker processes x 1 thread, worker-saturation
   inf, the setting measured 4x faster than dask's default for small tasks):
   checkpointed_map(execution="dask", client=...) time / raw `client.map` + `client.gather` time.
   Targets: <= 1.0 (batching), at most 1.25.
2. 2,000 tasks of 10 ms of CPU each: efficiency against the ideal (2,000 x 10 ms / workers) for
   checkpointed_map(execution="processes") and checkpointed_map(execution="dask").
   Targets: processes >= 95 %, dask >= 90 %.

Medians of several repeats; each run writes a real ledger.

    python benchmarks/scheduler_overhead.py [--repeats 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import dask
from distributed import Client, LocalCluster

from campaign import checkpointed_map


def noop(item):
    return {"i": item["i"]}


def spin(item):
    """About ``item['ms']`` milliseconds of CPU (not sleep)."""
    end = time.perf_counter() + item["ms"] / 1000
    n = 0
    while time.perf_counter() < end:
        n += 1
    return {"spins": n}


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--cpu-tasks", type=int, default=2_000)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="sched-bench-"))
    items = [{"task_id": f"t{i:05d}", "i": i} for i in range(args.tasks)]
    cpu_items = [{"task_id": f"c{i:05d}", "ms": 10} for i in range(args.cpu_tasks)]
    ideal = args.cpu_tasks * 0.010 / args.workers
    runs = iter(range(10**6))

    def ledger() -> Path:
        return folder / f"ledger-{next(runs)}.json"

    try:
        with dask.config.set({"distributed.scheduler.worker-saturation": float("inf")}):
            cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                                   host="127.0.0.1", dashboard_address="127.0.0.1:0")
        with Client(cluster) as client:
            client.gather(client.map(noop, items[:200], pure=False))  # warm both paths
            checkpointed_map(noop, items[:200], ledger_path=ledger(), execution="dask",
                             client=client)
            raw, ours = [], []
            for _ in range(args.repeats):
                raw.append(timed(lambda: client.gather(client.map(noop, items, pure=False))))
                ours.append(timed(lambda: checkpointed_map(
                    noop, items, ledger_path=ledger(), execution="dask", client=client)))
            print(f"dask_raw_map_gather_ms_per_task: {statistics.median(raw) / args.tasks * 1e3:.3f}")
            print(f"dask_checkpointed_ms_per_task: {statistics.median(ours) / args.tasks * 1e3:.3f}")
            print(f"dask_overhead_ratio_vs_raw_map: "
                  f"{statistics.median(ours) / statistics.median(raw):.2f}")
            dask_cpu = [timed(lambda: checkpointed_map(
                spin, cpu_items, ledger_path=ledger(), execution="dask", client=client))
                for _ in range(args.repeats)]
            raw_cpu = [timed(lambda: client.gather(client.map(spin, cpu_items, pure=False)))
                       for _ in range(args.repeats)]
        cluster.close()
        processes_cpu = [timed(lambda: checkpointed_map(
            spin, cpu_items, ledger_path=ledger(), execution="processes", workers=args.workers))
            for _ in range(args.repeats)]
        print(f"processes_efficiency_10ms_tasks: {ideal / statistics.median(processes_cpu):.1%}")
        print(f"dask_efficiency_10ms_tasks: {ideal / statistics.median(dask_cpu):.1%}")
        print(f"dask_raw_map_gather_efficiency_10ms_tasks: {ideal / statistics.median(raw_cpu):.1%}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
