"""Benchmark: job-array elements over one submission, on the local disk and through a FUSE view.

Each element is its own process, started as Slurm starts one (``SLURM_ARRAY_TASK_ID`` and
``SLURM_ARRAY_TASK_COUNT`` set, nothing else shared), running the public `run_worker` with a
task that takes no time, over one submission of ``--tasks`` tasks planned with
`plan_submission`. ``fuse`` puts the ledger's folder behind a bindfs view with lock forwarding
and no attribute or entry cache (``attr_timeout=0,entry_timeout=0``): every file call is a round
trip through the FUSE daemon, as on a network file system; ``local`` is the disk itself. For
each place and element count it prints:

- wall: from the first element's start to the last one's end; claims/s: tasks / wall;
- ratio: the wall against the fewest elements' at the same place and task count;
- tasks run twice and not run (from the elements' own lists, and the merged ledger must hold
  every task accepted after one attempt: the run fails otherwise);
- ledger bytes written per task: the whole file rewritten at each of the elements' merges
  (`campaign._ledger._update.update`, wrapped to add the file's size after each);
- RSS per element: the median and the largest ``ru_maxrss`` (an element that merged held the
  whole ledger for it; the others hold their shares);
- with ``--count-calls``, file-system calls per task: a second run of the same size under
  ``strace -f -y``, counting the calls that name a path or a descriptor under the ledger's
  folder, less an element's calls over an empty submission (its start-up), per task.

Run as root (bindfs mounts through /dev/fuse; Debian's ``bindfs`` package)::

    python benchmarks/array_scale.py [--elements 8,32,128] [--tasks 10000]
        [--where fuse,local] [--count-calls] [--merge-every 5]

A task run twice or not at all ends the run with exit code 1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from campaign import read_ledger
from campaign._array._plan import plan_submission
from campaign._array._workdir import merge_fragments

REPO = Path(__file__).resolve().parents[1]
#: `run_worker`'s ``merge_every`` in the elements (``--merge-every``; its default).
MERGE_EVERY = 5.0

_ELEMENT = """
import os, resource, sys
from pathlib import Path
import orjson
from campaign import run_worker
from campaign._ledger import _update
ledger, submission, out = sys.argv[1:4]
written = [0]
_real = _update.update
def counted(path, *args, **kwargs):
    try:
        return _real(path, *args, **kwargs)
    finally:
        written[0] += os.path.getsize(path)
_update.update = counted
ran = []
run_worker(lambda item: ran.append(item["task_id"]) or {"ok": True}, ledger, submission,
           merge_every=float(os.environ["MERGE_EVERY"]))
Path(out).write_bytes(orjson.dumps({"ran": ran, "written": written[0],
    "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


@contextlib.contextmanager
def place(where: str) -> Iterator[Path]:
    """A folder for one run: a bindfs view of a new folder (``fuse``) or the folder itself."""
    export = Path(tempfile.mkdtemp(prefix="array-scale-"))
    if where == "local":
        try:
            yield export
        finally:
            shutil.rmtree(export, ignore_errors=True)
        return
    view = Path(tempfile.mkdtemp(prefix="array-scale-view-"))
    subprocess.run(["bindfs", "--multithreaded", "--enable-lock-forwarding", "-o",
                    "attr_timeout=0,entry_timeout=0", str(export), str(view)], check=True)
    try:
        yield view
    finally:
        subprocess.run(["fusermount", "-u", str(view)], check=False)
        view.rmdir()
        shutil.rmtree(export, ignore_errors=True)


def submit(folder: Path, tasks: int, count: int) -> tuple[Path, str]:
    """Plan ``tasks`` tasks for ``count`` elements, as `submit_array` does."""
    ledger = folder / "ledger.json"
    items = [{"task_id": f"a{i:07d}", "i": i} for i in range(tasks)]
    return ledger, plan_submission(items, ledger_path=ledger).record(elements=count).id


def elements(ledger: Path, submission: str, count: int, out: Path,
             strace: Path | None = None) -> float:
    """Start ``count`` elements and wait for them all; returns the wall time."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "SLURM_ARRAY_TASK_COUNT": str(count)}
    for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_MIN",
                 "SLURM_ARRAY_TASK_STEP"):
        env.pop(name, None)
    t0 = time.perf_counter()
    procs = []
    for i in range(count):
        argv = [sys.executable, "-c", _ELEMENT, str(ledger), submission, str(out / f"{i}.json")]
        if strace is not None:
            argv = ["strace", "-f", "-y", "-qq", "-o", str(strace / f"{i}.trace"), *argv]
        procs.append(subprocess.Popen(argv, env={**env, "SLURM_ARRAY_TASK_ID": str(i)}))
    codes = [p.wait() for p in procs]
    wall = time.perf_counter() - t0
    if any(codes):
        raise SystemExit(f"elements exited with codes {Counter(codes)}")
    return wall


def run(where: str, tasks: int, count: int) -> dict[str, Any]:
    with place(where) as folder, tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        ledger, submission = submit(folder, tasks, count)
        wall = elements(ledger, submission, count, out)
        results = [orjson.loads(p.read_bytes()) for p in out.glob("*.json")]
        runs = Counter(tid for r in results for tid in r["ran"])
        merge_fragments(ledger)
        recs = read_ledger(ledger)["tasks"]
        bad = sum(1 for rec in recs.values()
                  if rec["status"] != "accepted" or rec["attempts"] != 1)
        return {"where": where, "tasks": tasks, "elements": count, "wall": wall,
                "twice": sum(1 for n in runs.values() if n > 1),
                "missing": tasks - len(runs), "bad": bad,
                "written": sum(r["written"] for r in results) / tasks,
                "rss": max(r["rss"] for r in results),
                "rss_median": statistics.median(r["rss"] for r in results)}


def calls(where: str, tasks: int, count: int) -> float:
    """File-system calls per task naming the ledger's folder, from ``strace -f -y``."""
    def traced(n: int, k: int) -> int:
        with place(where) as folder, tempfile.TemporaryDirectory() as tmp:
            ledger, submission = submit(folder, n, k)
            (Path(tmp) / "out").mkdir()
            elements(ledger, submission, k, Path(tmp) / "out", strace=Path(tmp))
            root = str(folder)
            return sum(sum(1 for line in path.open(errors="replace") if root in line)
                       for path in Path(tmp).glob("*.trace"))
    return (traced(tasks, count) - count * traced(1, 1)) / tasks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--elements", default="8,32,128")
    parser.add_argument("--tasks", default="10000")
    parser.add_argument("--where", default="fuse,local")
    parser.add_argument("--count-calls", action="store_true")
    parser.add_argument("--merge-every", type=float, default=MERGE_EVERY)
    args = parser.parse_args()
    os.environ["MERGE_EVERY"] = str(args.merge_every)  # the elements' environment
    counts = [int(x) for x in args.elements.split(",")]
    ok = True
    print(f"{'where':6} {'tasks':>7} {'elements':>8} {'wall s':>8} {'ratio':>6} {'claims/s':>9} "
          f"{'twice':>5} {'missing':>7} {'ledger B/task':>13} {'RSS MB median':>13} {'peak':>5}"
          + (f" {'calls/task':>10}" if args.count_calls else ""), flush=True)
    for where in args.where.split(","):
        for tasks in (int(x) for x in args.tasks.split(",")):
            first = None
            for count in counts:
                r = run(where, tasks, count)
                first = first or r["wall"]
                ok &= r["twice"] == 0 and r["missing"] == 0 and r["bad"] == 0
                line = (f"{where:6} {tasks:7d} {count:8d} {r['wall']:8.1f} "
                        f"{r['wall'] / first:6.2f} {tasks / r['wall']:9.0f} {r['twice']:5d} "
                        f"{r['missing']:7d} {r['written']:13.0f} "
                        f"{r['rss_median'] / 1e6:13.0f} {r['rss'] / 1e6:5.0f}")
                if args.count_calls:
                    line += f" {calls(where, tasks, count):10.1f}"
                print(line + ("" if r["bad"] == 0 else f"  ({r['bad']} records not accepted "
                                                       "after one attempt)"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
