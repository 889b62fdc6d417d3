"""Benchmark: reading a 1,000,000-task ledger from Python, whole (`campaign.read_ledger`) and
streamed (`campaign.iter_ledger`), against orjson's own read and parse of the file (the floor).

Writes the ledger of `benchmarks/report.py` (records with every field docs/ledger.md lists, a
job array of 16 elements, mostly accepted tasks, some failed with tracebacks and history), then
runs each reader ``--repeats`` times, each run a process of its own that counts the records'
statuses (its CPU time and peak RSS from `os.wait4`), and prints::

    read_ledger_tasks: 1000000
    read_ledger_file_mb: ...
    read_ledger_<reader>_seconds: <median wall time>   (reader: floor, read_ledger, iter_ledger)
    read_ledger_<reader>_peak_rss_mb: <largest peak RSS>
    read_ledger_<reader>_ratio: <median wall time / the floor's>

    python benchmarks/read_ledger.py [--tasks 1000000] [--repeats 3] [--ledger PATH]

``--ledger PATH`` reuses the ledger at PATH (written there first if absent).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import generate  # noqa: E402

#: What each reader's process runs: read the ledger and count the records' statuses.
READERS = {
    "floor": ("import collections, orjson, sys\n"
              "doc = orjson.loads(open(sys.argv[1], 'rb').read())\n"
              "print(len(collections.Counter(r['status'] for r in doc['tasks'].values())))"),
    "read_ledger": ("import collections, sys, campaign\n"
                    "doc = campaign.read_ledger(sys.argv[1])\n"
                    "print(len(collections.Counter(r['status'] for r in doc['tasks'].values())))"),
    "iter_ledger": ("import collections, sys, campaign\n"
                    "with campaign.iter_ledger(sys.argv[1]) as ledger:\n"
                    "    print(len(collections.Counter(r['status'] for _, r in ledger)))"),
}


def run(code: str, ledger: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, peak RSS in bytes) of one reader's process."""
    begun = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, str(ledger)], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - begun
    if os.waitstatus_to_exitcode(status):
        raise subprocess.CalledProcessError(os.waitstatus_to_exitcode(status), proc.args)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ledger", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="read-ledger-") as tmp:
        ledger = args.ledger or Path(tmp) / "campaign.json"
        if not ledger.exists():  # by another process: a child's peak RSS counts the memory
            # of the image it was forked from, and writing the ledger takes GBs
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                pool.submit(generate, ledger, args.tasks).result()
        with open(ledger, "rb") as f:  # warm the page cache for every reader alike
            while f.read(1 << 24):
                pass
        print(f"read_ledger_tasks: {args.tasks if args.ledger is None else 'as stored'}")
        print(f"read_ledger_file_mb: {ledger.stat().st_size / 1e6:.1f}")
        runs: dict[str, list[tuple[float, float, int]]] = {name: [] for name in READERS}
        for _ in range(args.repeats):  # interleaved, so a busy spell falls on every reader
            for name, code in READERS.items():
                runs[name].append(run(code, ledger))
        floor = statistics.median(w for w, _, _ in runs["floor"])
        for name, got in runs.items():
            wall = statistics.median(w for w, _, _ in got)
            print(f"read_ledger_{name}_seconds: {wall:.2f} (runs: "
                  f"{' '.join(f'{w:.2f}' for w, _, _ in got)}; CPU "
                  f"{statistics.median(c for _, c, _ in got):.2f})")
            print(f"read_ledger_{name}_peak_rss_mb: {max(r for _, _, r in got) / 1e6:.0f}")
            print(f"read_ledger_{name}_ratio: {wall / floor:.2f}")


if __name__ == "__main__":
    main()
