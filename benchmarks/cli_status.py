"""Benchmark: `campaign status` on a 100,000-task ledger.

Generates a realistic ledger with the project's own writer (records built with
`campaign._ledger._records`, serialized with `campaign._ledger._document.dumps`): mostly accepted
tasks, some failed ones with tracebacks and retry history, some pending, interrupted and running.
Then runs ``campaign status LEDGER`` as a subprocess five times and prints each run's wall time, CPU
time (user and system) and peak RSS, the median CPU time, the largest peak RSS and the median wall
time::

    python benchmarks/cli_status.py [--tasks 100000] [--keep PATH] [--ledger PATH]

``--ledger PATH`` times that ledger instead of a generated one (e.g. one ``--keep`` left).
Output ends with ``cli_status_100k_seconds: X``, the median wall time (the name says 100k
whatever --tasks is; the task count is printed first).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from campaign._ledger import _document, _records
from campaign._ledger._jsonvalue import encode_item, fingerprint
from campaign._ledger._status import Status

_TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/home/user/project/fits/model.py", line 88, in fit\n'
    "    params = solver.solve(problem, tol=item[\"tol\"])\n"
    '  File "/home/user/project/fits/solver.py", line 214, in solve\n'
    "    raise ConvergenceError(f\"no convergence after {it} iterations (residual {r:.3e})\")\n"
    "ConvergenceError: no convergence after 500 iterations (residual 3.217e-02)\n"
)


def generate(path: Path, n: int, *, seed: int = 0, now: float | None = None) -> dict[str, int]:
    """Write a ledger of ``n`` tasks at ``path``; returns the count of each status."""
    rng = random.Random(seed)
    now = time.time() if now is None else now
    begun = now - 3600.0
    doc = _document.new_document(now=begun - 7200.0)
    doc["runs"] = [
        {"id": "0a1b2c3d4e5f", "host": "node017", "pid": 41234, "execution": "serial",
         "started": begun - 7200.0, "ended": begun - 600.0, "status": "interrupted",
         "refused": [], "total": n, "refused_count": 0},
        {"id": "5f4e3d2c1b0a", "host": "node017", "pid": 52345, "execution": "serial",
         "started": begun, "ended": None, "status": "running",
         "refused": [], "total": n, "refused_count": 0},
    ]
    counts = {s.value: 0 for s in Status}
    tasks = doc["tasks"]
    first = begun - 7200.0
    slot = (now - 60.0 - first) / max(n, 1)  # tasks end one after another up to a minute ago
    for i in range(n):
        t = first + i * slot
        tid = f"sample-{i:06d}"
        item = encode_item({"task_id": tid, "temperature": 250.0 + (i % 400) * 0.25,
                            "pressure": 1.0 + (i % 17) * 0.5, "material": f"alloy-{i % 23}",
                            "seed": i, "tol": 1e-8}, tid)
        rec = _records.new_record(item, fingerprint(item))
        roll = rng.random()
        if i >= n - 8:
            status = Status.RUNNING
        elif roll < 0.88:
            status = Status.ACCEPTED
        elif roll < 0.93:
            status = Status.FAILED
        elif roll < 0.94:
            status = Status.INTERRUPTED
        else:
            status = Status.PENDING
        if status is not Status.PENDING:
            tries = 1 if status is not Status.FAILED else rng.randint(1, 3)
            for _ in range(tries):
                if status is Status.RUNNING:
                    t = now - rng.uniform(1.0, 120.0)
                rec = _records.started(rec, host="node017", pid=52345, worker=None,
                                       device_group=None, at=t)
                if status is Status.RUNNING:
                    break
                t += slot / (tries + 1)
                if status is Status.ACCEPTED:
                    result = {"energy": -1.5 * i, "residual": rng.random() * 1e-9,
                              "iterations": rng.randint(10, 500), "converged": True,
                              "chi2": {"$float": "nan"} if i % 997 == 0 else rng.random()}
                    rec = _records.finished(rec, Status.ACCEPTED, at=t, result=result)
                elif status is Status.FAILED:
                    error = {"type": "ConvergenceError" if i % 3 else "ValueError",
                             "message": "no convergence after 500 iterations (residual "
                                        "3.217e-02)", "traceback": _TRACEBACK}
                    rec = _records.finished(rec, Status.FAILED, at=t, error=error)
                else:
                    error = {"type": "KeyboardInterrupt", "message": "the run was interrupted",
                             "traceback": ""}
                    rec = _records.finished(rec, Status.INTERRUPTED, at=t, error=error)
        tasks[tid] = rec
        counts[status.value] += 1
    doc["updated"] = now
    path.write_bytes(_document.dumps(doc))
    return counts


#: ``campaign status LEDGER`` that writes its peak RSS (VmHWM, kB) last on stderr at exit:
#: ``ru_maxrss`` would count the memory of this process (that generated the ledger) at the fork.
_STATUS = """
import atexit, runpy, sys
def hwm():
    with open("/proc/self/status") as f:
        print([l for l in f if l.startswith("VmHWM:")][0].split()[1], file=sys.stderr)
atexit.register(hwm)
sys.argv = ["campaign", "status", sys.argv[1]]
runpy.run_module("campaign._cli", run_name="__main__")
"""


def time_status(path: Path, repeats: int = 5) -> list[tuple[float, float, int]]:
    """Wall time, CPU time (user and system, ``wait4``) and peak RSS (bytes) of each of
    ``repeats`` runs of ``campaign status PATH`` as a subprocess."""
    runs = []
    for _ in range(repeats):
        begun = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", _STATUS, str(path)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        err = proc.stderr.read() if proc.stderr else b""
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            raise SystemExit(f"campaign status {path} failed (exit {proc.returncode}): "
                             f"{err.decode()[-2000:]}")
        runs.append((time.perf_counter() - begun, usage.ru_utime + usage.ru_stime,
                     int(err.split()[-1]) * 1024))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--keep", type=Path, help="write the ledger here and keep it")
    parser.add_argument("--ledger", type=Path, help="time this ledger (none is generated)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.ledger or args.keep or Path(tmp) / "bench.json"
        if args.ledger is None:
            begun = time.perf_counter()
            counts = generate(path, args.tasks)
            made = time.perf_counter() - begun
            print(f"ledger: {args.tasks} tasks {counts}, {os.path.getsize(path) / 1e6:.1f} MB, "
                  f"generated in {made:.1f} s")
        runs = time_status(path)
        print("runs (wall s, CPU s, peak RSS MB):",
              ", ".join(f"{w:.3f} {c:.3f} {r / 1e6:.0f}" for w, c, r in runs))
        print(f"cli_status_cpu_seconds: {statistics.median(c for _, c, _ in runs):.3f}")
        print(f"cli_status_peak_rss_mb: {max(r for _, _, r in runs) / 1e6:.0f}")
        print(f"cli_status_100k_seconds: {statistics.median(w for w, _, _ in runs):.3f}")


if __name__ == "__main__":
    main()
