"""Distributed least squares (solvers.lsq) against numpy.linalg.lstsq, in one run.

    python benchmarks/lsq.py [--rows 100000] [--cols 1000] [--memory-gb 2] [--repeats 3]
                             [--memory-cols 500] [--memory-iterations 15]
                             [--only nist,assembly,solve,memory]

Prints ``name: value`` lines:
- nist: digits (LRE, the log relative error against NIST's certified coefficients) of each
  method and of ``numpy.linalg.lstsq`` on the eleven NIST StRD linear datasets
  (tests/reference/data/nist-linear/), as a table; ``!`` marks a solution that carries a
  warning (rank deficiency, no convergence, few trusted digits), ``refused`` a LinAlgError.
- assembly: a CPU-bound rows function assembled by checkpointed_map on a dask LocalCluster of 1
  and of 2 workers (clusters started beforehand; medians of ``--repeats``); the speedup.
- solve: each solver (normal, qr, lsqr; blocks streamed from disk through this process) on a
  ``--rows`` x ``--cols`` system against ``numpy.linalg.lstsq`` on the same matrix in memory;
  qr also without its default step of iterative refinement.
- memory: a ``--memory-gb`` GB matrix written as blocks by one process; then, for each solver,
  a fresh driver process solves it and reports its peak RSS (VmHWM), absolute and above
  what it had before the solve (an upper bound), against the size of the matrix.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # 1 BLAS thread per worker: a fair 1-vs-2 test
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "tests" / "reference"))

from solvers.lsq import METHODS, BlockStore, solve  # noqa: E402


def random_rows(item: dict) -> tuple:
    """Rows of a random block (seeded by the item), fast."""
    rng = np.random.default_rng(item["seed"])
    A = rng.standard_normal((item["rows"], item["cols"]))
    return A, A @ np.ones(item["cols"]) + 0.01 * rng.standard_normal(item["rows"]), 1.0


def features(item: dict) -> tuple:
    """A CPU-bound rows function: pairwise-distance features of random 'structures'."""
    rng = np.random.default_rng(item["seed"])
    rows = []
    for _ in range(160):
        pos = rng.uniform(0.0, 4.0, (64, 3))
        d = np.sqrt(((pos[:, None, :] - pos[None, :, :]) ** 2).sum(-1))
        d = d[np.triu_indices(64, 1)]
        rows.append([np.exp(-k * d).sum() for k in np.linspace(0.2, 3.0, 24)])
    A = np.array(rows)
    return A, A @ np.linspace(1.0, 2.0, 24), 1.0


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        begun = time.perf_counter()
        fn()
        times.append(time.perf_counter() - begun)
    return statistics.median(times)


def nist_cell(dataset, method: str, **options) -> str:
    """The digits of one method on one dataset, marked when the solution warns."""
    import nist_linear

    try:
        sol = solve(dataset.A, dataset.y, method=method, **options)
    except np.linalg.LinAlgError:
        return "refused"
    digits = nist_linear.lre(sol.coefficients, dataset.coefficients)
    return f"{digits:.1f}{' !' if sol.warnings else ''}"


def bench_nist() -> None:
    import logging

    import nist_linear

    logging.getLogger("solvers.lsq").setLevel(logging.ERROR)  # the table marks warnings
    columns = {"qr": {}, "qr refine=0": {"refine": 0}, "normal": {}, "lsqr": {}}
    print("nist_digits (LRE vs certified coefficients; ! = the solution warns):")
    print("| dataset | " + " | ".join(columns) + " | numpy.linalg.lstsq |")
    print("|---" * (len(columns) + 2) + "|")
    for name in nist_linear.NAMES:
        d = nist_linear.load(name)
        cells = [nist_cell(d, m.split()[0], **opts) for m, opts in columns.items()]
        base = nist_linear.lre(np.linalg.lstsq(d.A, d.y, rcond=None)[0], d.coefficients)
        print(f"| {name} | " + " | ".join(cells) + f" | {base:.1f} |")


def bench_assembly(folder: Path, repeats: int) -> None:
    from distributed import Client, LocalCluster

    from campaign import checkpointed_map

    items = [{"task_id": f"s{i}", "seed": i} for i in range(32)]
    times = {}
    for workers in (1, 2):
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                          host="127.0.0.1", dashboard_address="127.0.0.1:0") as cluster, \
                Client(cluster) as client:
            client.run(__import__, "solvers.lsq")  # imports on the workers are not timed
            runs = iter(range(repeats))

            def assemble():
                run = next(runs)
                store = BlockStore(folder / f"asm-{workers}-{run}")
                checkpointed_map(store.task(features), items,
                                 ledger_path=folder / f"asm-{workers}-{run}.json",
                                 execution="dask", client=client)

            times[workers] = timed(assemble, repeats)
    print(f"assembly_1_worker_s: {times[1]:.2f}")
    print(f"assembly_2_workers_s: {times[2]:.2f}")
    print(f"assembly_speedup_2_vs_1_workers: {times[1] / times[2]:.2f}")


def write_blocks(folder: Path, rows: int, cols: int, block_rows: int) -> list[dict]:
    store = BlockStore(folder)
    task = store.task(random_rows)
    results, done, i = [], 0, 0
    while done < rows:
        r = min(block_rows, rows - done)
        results.append(task({"task_id": f"b{i:05d}", "seed": i, "rows": r, "cols": cols}))
        done, i = done + r, i + 1
    return results


def bench_solve(folder: Path, rows: int, cols: int, repeats: int) -> None:
    results = write_blocks(folder / "solve", rows, cols, 5000)
    system = BlockStore(folder / "solve").system(results)
    A = np.concatenate([b.A for b in system])
    y = np.concatenate([b.y for b in system])
    want = np.linalg.lstsq(A, y, rcond=None)[0]
    base = timed(lambda: np.linalg.lstsq(A, y, rcond=None), repeats)
    del A
    print(f"solve_system: {rows} x {cols} in {len(system)} blocks")
    print(f"solve_numpy_lstsq_s: {base:.2f}")
    for method in METHODS:
        sol = solve(system, method)
        err = np.linalg.norm(sol.coefficients - want) / np.linalg.norm(want)
        t = timed(lambda: solve(system, method, diagnostics=False), repeats)
        print(f"solve_{method}_s: {t:.2f}")
        print(f"solve_{method}_vs_lstsq_time_ratio: {t / base:.3f}")
        print(f"solve_{method}_rel_diff_to_lstsq: {err:.1e}")
    t = timed(lambda: solve(system, "qr", diagnostics=False, refine=0), repeats)
    print(f"solve_qr_without_refinement_s: {t:.2f}")


def bench_memory(folder: Path, gb: float, cols: int, iterations: int) -> None:
    rows = int(gb * 1e9 / (8 * cols))
    store = folder / "memory"
    begun = time.perf_counter()
    writer = subprocess.run([sys.executable, __file__, "--child-write", str(store), str(rows),
                             str(cols)], capture_output=True, text=True, check=True)
    print(f"memory_matrix_mb: {rows * cols * 8 / 1e6:.0f} ({rows} x {cols}, "
          f"{json.loads(writer.stdout)['blocks']} blocks, written in "
          f"{time.perf_counter() - begun:.0f} s)")
    for method in METHODS:
        out = subprocess.run([sys.executable, __file__, "--child-solve", str(store), method,
                              str(iterations)],
                             capture_output=True, text=True, check=True)
        facts = json.loads(out.stdout)
        print(f"memory_{method}_driver_peak_rss_mb: {facts['peak'] / 1e6:.0f} (at most "
              f"{facts['peak_increase'] / 1e6:.0f} above the driver before the solve; "
              f"{facts['seconds']:.0f} s)")
        print(f"memory_{method}_driver_peak_rss_vs_matrix_ratio: "
              f"{facts['peak'] / facts['matrix']:.3f}")
        ratio = facts["peak_increase"] / facts["matrix"]
        print(f"memory_{method}_peak_vs_matrix_ratio: {ratio:.3f}")


def child_write(store: Path, rows: int, cols: int) -> None:
    results = write_blocks(store, rows, cols, max(cols, 2_500_000 // cols))  # 20 MB blocks
    (store / "results.json").write_text(json.dumps(results))
    print(json.dumps({"blocks": len(results)}))


def peak_rss() -> int:
    """Peak resident memory of this process in bytes: VmHWM, the high-water mark of this address
    space. (ru_maxrss is not: Linux carries it across fork and exec, so a child started by a big
    parent reports the parent's size.)"""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status (this measurement needs Linux)")


def current_rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child_solve(store: Path, method: str, iterations: int) -> None:
    results = json.loads((store / "results.json").read_text())
    system = BlockStore(store).system(results)
    before = current_rss()
    begun = time.perf_counter()
    solve(system, method, max_iterations=iterations, diagnostics=False)
    # The high-water mark cannot be reset: the increase is an upper bound (it may predate the solve).
    print(json.dumps({"peak": peak_rss(), "peak_increase": peak_rss() - before,
                      "matrix": system.nbytes, "seconds": time.perf_counter() - begun}))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child-write":
        return child_write(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    if len(sys.argv) > 1 and sys.argv[1] == "--child-solve":
        return child_solve(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--cols", type=int, default=1000)
    p.add_argument("--memory-gb", type=float, default=2.0)
    p.add_argument("--memory-cols", type=int, default=500)
    p.add_argument("--memory-iterations", type=int, default=15,
                   help="LSQR iterations in the memory part (each reads the matrix twice)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", default="nist,assembly,solve,memory")
    args = p.parse_args()
    parts = set(args.only.split(","))
    with tempfile.TemporaryDirectory(prefix="lsq-bench-") as tmp:
        folder = Path(tmp)
        if "nist" in parts:
            bench_nist()
        if "assembly" in parts:
            bench_assembly(folder, args.repeats)
        if "solve" in parts:
            bench_solve(folder, args.rows, args.cols, args.repeats)
        if "memory" in parts:
            bench_memory(folder, args.memory_gb, args.memory_cols, args.memory_iterations)


if __name__ == "__main__":
    main()
