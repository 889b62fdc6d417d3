"""Benchmark: `campaign report` on a 1,000,000-task ledger (the time it takes, the page's size).

Writes a ledger of ``--tasks`` records straight as JSON (fast; the records have every field
docs/ledger.md lists, plus the per-attempt ``cpu_s``, ``peak_rss_bytes`` and ``gpu_peak_bytes``):
a job array of 16 elements on 4 hosts that is still running, mostly accepted tasks with four
numeric result columns, some failed ones of three error types (with tracebacks and earlier
attempts in their history), interrupted, pending and running ones. Then runs
``campaign report LEDGER -o PAGE`` as a subprocess (``--repeats`` times) and prints::

    report_tasks: 1000000
    report_ledger_mb: ...
    report_seconds: <median wall time of the command>
    report_cpu_seconds: <median CPU time of the command, user + system>
    report_peak_rss_mb: <the largest peak resident memory of the runs>
    report_page_mb: <size of the page>

    python benchmarks/report.py [--tasks 1000000] [--repeats 3] [--keep FOLDER] [--ledger PATH]

``--ledger PATH`` reuses the ledger at PATH between runs (written there first if absent; its
task count is then whatever it holds).

The issue's targets: <= 10 s and <= 5 MB at 1M tasks. On a shared, loaded machine the wall
time says little: the CPU time is what the command costs.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import orjson

_TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/home/user/project/fits/model.py", line 88, in fit\n'
    "    params = solver.solve(problem, tol=item[\"tol\"])\n"
    '  File "/home/user/project/fits/solver.py", line 214, in solve\n'
    "    raise {kind}(\"{message}\")\n"
    "{kind}: {message}\n"
)
_ERRORS = (("ConvergenceError", "no convergence after 500 iterations (residual 3.2e-02)"),
           ("ValueError", "temperature outside the table (T = 1210.0 K)"),
           ("FloatingPointError", "overflow in exp"))
_LOST = ("WorkerLost", "array element 4242_3 died holding the task's lease")
_FP = "sha256:" + "0" * 64
WORKERS = 16
HOSTS = 4


def _attempt(rng: random.Random, t: float, worker: int) -> dict:
    duration = rng.lognormvariate(0.0, 0.6)
    return {"host": f"node{worker % HOSTS + 1:02d}", "pid": 40000 + worker,
            "worker": f"4242_{worker}", "started": t, "ended": t + duration, "duration": duration,
            "cpu_s": duration * rng.uniform(0.6, 0.98),
            "peak_rss_bytes": int(rng.lognormvariate(19.5, 0.4)),
            "gpu_peak_bytes": int(rng.lognormvariate(21.0, 0.3))}


def generate(path: Path, n: int, *, seed: int = 0, now: float | None = None) -> dict[str, int]:
    """Write a running job array's ledger of ``n`` tasks at ``path``; returns the status counts."""
    rng = random.Random(seed)
    now = time.time() if now is None else now
    begun = now - 3600.0
    span = 3540.0  # tasks ended over 59 minutes, up to a minute ago
    counts = dict.fromkeys(("pending", "running", "accepted", "failed", "interrupted"), 0)
    parts = []
    for i in range(n):
        tid = f"sample-{i:07d}"
        item: dict[str, Any] = {"task_id": tid, "temperature": 250.0 + (i % 400) * 0.25,
                                "pressure": 1.0 + (i % 17) * 0.5, "material": f"alloy-{i % 23}",
                                "seed": i}
        roll = rng.random()
        status = ("running" if i >= n - WORKERS else "accepted" if roll < 0.9 else
                  "failed" if roll < 0.95 else "interrupted" if roll < 0.96 else "pending")
        counts[status] += 1
        rec = {"status": status, "attempts": 0, "interruptions": 0, "item": item,
               "fingerprint": _FP, "result": None, "error": None, "host": None, "pid": None,
               "worker": None, "device_group": None, "started": None, "ended": None,
               "duration": None, "history": []}
        if status != "pending":
            t = begun + span * i / n
            tries = rng.randint(1, 3) if status == "failed" else 1 + (rng.random() < 0.02)
            history = []
            for attempt in range(1, tries):
                a = _attempt(rng, t - 60.0 * (tries - attempt), rng.randrange(WORKERS))
                kind, message = _ERRORS[i % 3] if status == "failed" else _LOST
                history.append(dict(a, attempt=attempt, status="failed" if status == "failed"
                                    else "interrupted", error={"type": kind, "message": message}))
            a = _attempt(rng, t, i % WORKERS)
            rec.update(a, attempts=tries, history=history)
            if status == "running":
                rec.update(started=now - rng.uniform(1.0, 60.0), ended=None, duration=None)
            elif status == "accepted":
                x = item["temperature"]
                rec["result"] = {"energy": -1.5 * x + rng.gauss(0.0, 5.0),
                                 "D": 0.01 * x ** 0.5 * rng.lognormvariate(0.0, 0.05),
                                 "residual": rng.random() * 1e-9,
                                 "iterations": rng.randint(10, 500), "converged": True,
                                 "chi2": {"$float": "nan"} if i % 997 == 0 else rng.random()}
            elif status == "failed":
                kind, message = _ERRORS[i % 3]
                rec["error"] = {"type": kind, "message": message,
                                "traceback": _TRACEBACK.format(kind=kind, message=message)}
            else:
                rec["interruptions"] = 1
                rec["error"] = {"type": _LOST[0], "message": _LOST[1], "traceback": ""}
            rec["interruptions"] += sum(h["status"] == "interrupted" for h in history)
        parts.append(orjson.dumps({tid: rec})[1:-1])
    head = {"format": "diffsoup-campaign-ledger", "version": 1, "created": begun - 60.0,
            "updated": now, "runs": [
                {"id": "0a1b2c3d4e5f", "host": "login01", "pid": 31234, "execution": "array",
                 "started": begun - 60.0, "ended": None, "status": "submitted", "refused": [],
                 "total": n, "refused_count": 0}]}
    path.write_bytes(b"".join((orjson.dumps(head)[:-1], b',"tasks":{', b",".join(parts),
                               b"}}\n")))
    return counts


def count(ledger: Path) -> int:
    """The number of tasks of the ledger at ``ledger``."""
    from campaign._ledger._scan import Scan

    return sum(map(len, Scan(ledger).chunks()))


def time_report(ledger: Path, page: Path, repeats: int) -> list[tuple[float, float, int]]:
    """(wall seconds, CPU seconds, peak RSS in bytes) of each run of ``campaign report LEDGER
    -o PAGE``, as a subprocess (its own usage, from `os.wait4`)."""
    runs = []
    for _ in range(repeats):
        begun = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "campaign._cli", "report", str(ledger),
                                 "-o", str(page)], stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - begun
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            raise subprocess.CalledProcessError(proc.returncode, proc.args)
        runs.append((wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None,
                        help="write the ledger and the page in this folder and keep them")
    parser.add_argument("--ledger", type=Path, default=None,
                        help="reuse the ledger at this path (written there first if absent)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        ledger, page = args.ledger or folder / "big.json", folder / "big.html"
        # written (or counted) by another process: a child's peak RSS counts the memory it forked
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            if args.ledger is not None and ledger.exists():
                counts: dict[str, int] = {}  # as written before
                tasks = pool.submit(count, ledger).result()
            else:
                counts = pool.submit(generate, ledger, args.tasks).result()
                tasks = args.tasks
        print(f"report_tasks: {tasks} ({counts or 'reused ledger'})")
        print(f"report_ledger_mb: {os.path.getsize(ledger) / 1e6:.1f}")
        runs = time_report(ledger, page, args.repeats)
        walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
        print(f"report_seconds: {statistics.median(walls):.2f} (runs: "
              f"{', '.join(f'{t:.2f}' for t in walls)})")
        print(f"report_cpu_seconds: {statistics.median(cpus):.2f} (runs: "
              f"{', '.join(f'{t:.2f}' for t in cpus)})")
        print(f"report_peak_rss_mb: {max(r[2] for r in runs) / 1e6:.0f}")
        print(f"report_page_mb: {os.path.getsize(page) / 1e6:.2f}")


if __name__ == "__main__":
    main()
