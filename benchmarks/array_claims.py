"""Benchmark: many array workers claiming from one ledger at once, on this machine.

What one element of a job array runs, ``run_worker`` (campaign/_array/_worker.py), in
``--claimers`` processes and then in as many threads of one process, over one submission of
``--tasks`` tasks that take no time (each mode on a ledger of its own). It prints:

- planning a submission of ``--plan-tasks`` tasks without ``sbatch``: what `submit_array` does
  before and after it (``plan_submission``, ``render_array_script``, the record); target 10 s;
- per mode: tasks run twice and not at all (from the task function's calls, and checked against
  the merged ledger: every task accepted after one attempt, recorded by the worker that ran it),
  claims per second (tasks / the time from the first worker's start to the last one's end), the
  workers' own merges of the fragments into the ledger (count, total and longest; the benchmark
  wraps ``merge_fragments`` to time them) and one merge after all have ended;
- the files per directory the run left under ``<ledger>.work/`` and the most fragment files and
  lease files seen at once (sampled every second);
- lease renewals per second: ``Leases.heartbeat`` on ``--claimers`` held leases, round robin
  from 4 threads for ``--renew-seconds``.

Each worker holds the records of its submission (about 1.1 KB of memory per task: a ledger of
100,000 small tasks is 108 MB per worker) and reads the whole ledger when it starts and at each
merge, so 200 workers over 100,000 tasks need about 30 GB and hours of CPU on one machine. The
defaults (200 claimers x 10,000 tasks) are what a 2-core machine with 23 GB does, in about 4 to
5 minutes per mode; the issue's figures are ``--tasks 100000`` where memory allows::

    python benchmarks/array_claims.py [--claimers 200] [--tasks 10000] [--plan-tasks 100000]
        [--modes processes,threads] [--merge-every 5] [--lease-seconds 60] [--keep DIR]

A task run twice or not at all ends the run with exit code 1.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from campaign import read_ledger, run_worker
from campaign._array import _worker as _array_worker
from campaign._array._leases import Leases
from campaign._array._plan import plan_submission
from campaign._array._workdir import WorkDir, fragment_files, merge_fragments
from campaign._ledger._paths import LedgerPaths

#: Durations of the workers' merges in this process (the wrapped ``merge_fragments``).
MERGES: list[float] = []


def _timed_merge(ledger: Path) -> int:
    t0 = time.perf_counter()
    try:
        return merge_fragments(ledger)
    finally:
        MERGES.append(time.perf_counter() - t0)


def claim(ledger: Path, submission: str, name: str, lease_seconds: float,
          merge_every: float) -> list[str]:
    """One worker: `run_worker` with a task that only notes its id. Returns the ids it ran."""
    _array_worker.merge_fragments = _timed_merge  # timing only: the real merge runs
    ran: list[str] = []

    def note(item: dict[str, Any]) -> dict[str, Any]:
        ran.append(item["task_id"])
        return {"ok": True}

    owner = {"worker": name, "job": None, "array_task": None, "host": "bench",
             "pid": os.getpid()}
    run_worker(note, ledger, submission, owner=owner, lease_seconds=lease_seconds,
               merge_every=merge_every)
    return ran


def _claim_process(ledger: str, submission: str, name: str, out: str, lease_seconds: float,
                   merge_every: float) -> None:
    ran = claim(Path(ledger), submission, name, lease_seconds, merge_every)
    Path(out).write_bytes(orjson.dumps({"ran": ran, "merges": MERGES}))


class Sampler:
    """The most fragment files and lease files seen at once, counted every second."""

    def __init__(self, work: WorkDir):
        self.work, self.fragments, self.leases = work, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            self.fragments = max(self.fragments, _count(self.work.fragments))
            self.leases = max(self.leases, _count(self.work.leases))


def _count(folder: Path) -> int:
    try:
        with os.scandir(folder) as entries:
            return sum(1 for _ in entries)
    except FileNotFoundError:
        return 0


def run_mode(folder: Path, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """Plan ``args.tasks`` tasks on a new ledger and let ``args.claimers`` workers run them."""
    ledger = folder / f"claims-{mode}.json"
    items = [{"task_id": f"a{i:07d}", "i": i} for i in range(args.tasks)]
    sub = plan_submission(items, ledger_path=ledger).record(elements=args.claimers)
    del items
    names = [f"{mode[0]}{i}" for i in range(args.claimers)]
    with Sampler(WorkDir(ledger, sub.id)) as sampler:
        t0 = time.perf_counter()
        if mode == "threads":
            ran_by, merges = _in_threads(ledger, sub.id, names, args)
        else:
            ran_by, merges = _in_processes(folder, ledger, sub.id, names, args)
        wall = time.perf_counter() - t0
    left = len(fragment_files(ledger))
    t0 = time.perf_counter()
    merge_fragments(ledger)
    last_merge = time.perf_counter() - t0
    runs = Counter(tid for ran in ran_by.values() for tid in ran)
    return {"mode": mode, "wall": wall, "runs": runs, "merges": merges, "left": left,
            "last_merge": last_merge, "bad_records": _check_ledger(ledger, ran_by),
            "dirs": _files_per_directory(LedgerPaths.of(ledger).work, sub.id),
            "peak_fragments": sampler.fragments, "peak_leases": sampler.leases}


def _in_threads(ledger: Path, submission: str, names: list[str],
                args: argparse.Namespace) -> tuple[dict[str, list[str]], list[float]]:
    ran_by: dict[str, list[str]] = {}
    errors: list[BaseException] = []
    del MERGES[:]

    def one(name: str) -> None:
        try:
            ran_by[name] = claim(ledger, submission, name, args.lease_seconds, args.merge_every)
        except BaseException as exc:  # noqa: BLE001 -- reported below, after every join
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(name,)) for name in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(f"{len(errors)} claimers raised; the first: {errors[0]!r}")
    return ran_by, list(MERGES)


def _in_processes(folder: Path, ledger: Path, submission: str, names: list[str],
                  args: argparse.Namespace) -> tuple[dict[str, list[str]], list[float]]:
    ctx = multiprocessing.get_context("forkserver")  # children fork from a small server
    ctx.set_forkserver_preload(["campaign._array._worker"])
    outs = {name: folder / f"ran-{name}.json" for name in names}
    procs = [ctx.Process(target=_claim_process, args=(str(ledger), submission, name, str(out),
                                                      args.lease_seconds, args.merge_every))
             for name, out in outs.items()]
    try:
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    failed = [p.exitcode for p in procs if p.exitcode != 0]
    if failed:
        raise SystemExit(f"{len(failed)} claimer processes failed (exit codes {failed[:10]})")
    got = {name: orjson.loads(out.read_bytes()) for name, out in outs.items()}
    return ({name: g["ran"] for name, g in got.items()},
            [t for g in got.values() for t in g["merges"]])


def _check_ledger(ledger: Path, ran_by: dict[str, list[str]]) -> int:
    """Records that are not accepted after one attempt by the worker that ran the task."""
    ran_in = {tid: name for name, ran in ran_by.items() for tid in ran}
    tasks = read_ledger(ledger)["tasks"]
    return sum(1 for tid, rec in tasks.items()
               if (rec["status"], rec["attempts"], rec["worker"]) != ("accepted", 1,
                                                                      ran_in.get(tid)))


def _files_per_directory(root: Path, submission: str) -> dict[str, int]:
    """Entries per folder under ``<ledger>.work/`` (the submission's folder as ``<sub>``)."""
    return {(Path(d).relative_to(root).as_posix() + "/").replace(submission, "<sub>"):
            len(files) + len(sub) for d, sub, files in os.walk(root)}


def planning(folder: Path, n: int) -> dict[str, float]:
    """What `submit_array` does for ``n`` new tasks, without sbatch: plan, render, record."""
    from schedulers.slurm import render_array_script

    items = [{"task_id": f"p{i:07d}", "i": i} for i in range(n)]
    t0 = time.perf_counter()
    planned = plan_submission(items, ledger_path=folder / "plan.json")
    t1 = time.perf_counter()
    render_array_script(job_name="campaign", array="0-999%200", log_dir=folder / "logs",
                        command=[sys.executable, "-m", "campaign._cli", "worker", "spec.toml",
                                 "--submission", planned.id], workdir=folder, time="4:00:00")
    t2 = time.perf_counter()
    planned.record("12345")
    t3 = time.perf_counter()
    return {"plan": t1 - t0, "render": t2 - t1, "record": t3 - t2, "total": t3 - t0}


def renewals(folder: Path, holders: int, seconds: float) -> float:
    """Lease renewals per second: `Leases.heartbeat` on ``holders`` held leases."""
    leases = Leases(WorkDir(folder / "renew.json", "renew"), lease_seconds=600.0)
    owner = {"worker": "renewer", "job": None, "array_task": None, "host": "bench",
             "pid": os.getpid()}
    held = [lease for i in range(holders)
            if (lease := leases.claim(f"r{i}", owner)) is not None]
    done = [0] * 4
    lost: list[str] = []
    deadline = time.monotonic() + seconds

    def renew(k: int) -> None:
        mine = held[k::4]
        while mine and time.monotonic() < deadline:
            for lease in mine:
                if not leases.heartbeat(lease):
                    lost.append(lease["task_id"])
                    return
                done[k] += 1

    threads = [threading.Thread(target=renew, args=(k,)) for k in range(4)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    for lease in held:
        leases.release(lease, done=False)
    if lost:
        raise SystemExit(f"lost the leases of {lost} while renewing them")
    return sum(done) / elapsed


def report(r: dict[str, Any], claimers: int) -> bool:
    """Print one mode's figures; True if every task ran exactly once."""
    runs: Counter[str] = r["runs"]
    claims = sum(runs.values())
    twice = sum(1 for n in runs.values() if n > 1)
    missing = r["tasks"] - len(runs)
    merges = r["merges"]
    print(f"[{r['mode']}] {claimers} claimers x {r['tasks']} tasks: {twice} run twice, "
          f"{missing} not run, {r['bad_records']} ledger records not accepted once by their "
          f"runner; {claims / r['wall']:.0f} claims/s ({r['wall']:.1f} s)", flush=True)
    print(f"[{r['mode']}] merges by the workers: {len(merges)}, {sum(merges):.1f} s in all, "
          f"longest {max(merges, default=0.0):.2f} s; a merge after the end "
          f"({r['left']} fragments left): {r['last_merge']:.2f} s", flush=True)
    dirs = ", ".join(f"{d}: {n}" for d, n in sorted(r["dirs"].items()))
    print(f"[{r['mode']}] files per directory: {dirs}; at most {r['peak_fragments']} fragment "
          f"files and {r['peak_leases']} leases at once", flush=True)
    return twice == 0 and missing == 0 and r["bad_records"] == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claimers", type=int, default=200)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--plan-tasks", type=int, default=100_000)
    parser.add_argument("--modes", default="processes,threads")
    parser.add_argument("--merge-every", type=float, default=5.0)
    parser.add_argument("--lease-seconds", type=float, default=60.0)
    parser.add_argument("--renew-seconds", type=float, default=3.0)
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="array-claims-"))
    folder.mkdir(parents=True, exist_ok=True)
    ok = True
    try:
        if args.plan_tasks:
            p = planning(folder, args.plan_tasks)
            print(f"[plan] a submission of {args.plan_tasks} tasks without sbatch: "
                  f"{p['total']:.1f} s (plan_submission {p['plan']:.1f} s, render_array_script "
                  f"{p['render'] * 1e3:.1f} ms, record {p['record']:.1f} s)", flush=True)
        for mode in (m for m in args.modes.split(",") if m):
            r = run_mode(folder, mode, args)
            r["tasks"] = args.tasks
            ok = report(r, args.claimers) and ok
        rate = renewals(folder, args.claimers, args.renew_seconds)
        print(f"[leases] {rate:.0f} lease renewals/s ({args.claimers} leases, 4 threads)")
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
