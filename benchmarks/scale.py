"""Benchmark: a campaign of 100,000 and 1,000,000 no-op tasks, end to end (issue 18's table).

For each size, in the same run, each step in a fresh subprocess (its own peak memory):

- first run: ``checkpointed_map`` (serial) of N no-op tasks on a new ledger: us per task,
  peak driver RSS (sampled as well: see `drive`), ledger bytes written per task, whole-file
  rewrites (compactions);
- crash: the same campaign on another new ledger, SIGKILLed at a random instant (between 30 %
  and 80 % of the first run's time): of the tasks finished 1 s before the kill (the child
  prints its count every 1,000 tasks), the fraction on disk after it (`read_ledger`, which
  merges the journal), and how long before the kill the latest outcome on disk ended;
- resume after the kill: ``checkpointed_map`` again on that killed ledger (its journal beside
  it, tasks left running): time, tasks run, peak driver RSS;
- no-op resume: ``checkpointed_map`` again on the finished ledger: time, rewrites, bytes;
- ``campaign status`` on the finished ledger: wall and CPU time, peak RSS;
- the floor: orjson's own read and parse of the finished file (the median of three, in this
  process), and each time above as a ratio to it: absolute seconds differ between machines, the
  ratios much less.

Then the array figures: planning a submission of ``--array-tasks`` tasks
(`plan_submission(...).record()`), ``--claimers`` claim loops (`WorkDir.claim` /
`write_fragment` / `release`, as `campaign worker` does for each task) in threads and in
processes over it: claims per second, tasks run more than once (must be 0), and the time of
one `merge_fragments` of all their fragments::

    python benchmarks/scale.py [--sizes 100000,1000000] [--claimers 200] [--array-tasks 100000]
                               [--array-modes threads,processes] [--seed 0] [--keep DIR]

``--status LEDGER`` only times ``campaign status`` on that ledger (``--repeats`` times; e.g. the
``run-1000000.json`` a run with ``--keep DIR`` left), printing the same line for each run.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]

#: The driver run in a child: N no-op tasks; prints progress lines and one JSON line of facts.
_DRIVER = """
import json, os, sys, time
from campaign import checkpointed_map
from campaign._ledger import _driver as _ledger
n, path, every = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
seen = {"compactions": 0}
close = _ledger.Ledger.close
def counted(self, status):
    try:
        return close(self, status)
    finally:
        seen["compactions"] = getattr(self, "compactions", -1)
_ledger.Ledger.close = counted
done = [0]
def noop(item):
    done[0] += 1
    if every and done[0] % every == 0:
        print("done", done[0], time.time(), flush=True)
    return {"i": item["i"]}
items = ({"task_id": f"t{i:07d}", "i": i} for i in range(n))
t0 = time.perf_counter()
camp = checkpointed_map(noop, items, ledger_path=path)
wall = time.perf_counter() - t0
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
print(json.dumps({"wall": wall, "complete": camp.complete, "bytes": camp.ledger_bytes_written,
                  "writes": camp.ledger_writes, "ran": done[0], "hwm": int(hwm) * 1024,
                  **seen}), flush=True)
"""


def _child(args: list[str], stdout: Any = subprocess.PIPE) -> tuple[subprocess.Popen, float]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH",
                                                                                   "")]))
    return subprocess.Popen(args, stdout=stdout, stderr=subprocess.PIPE, env=env,
                            cwd=ROOT), time.perf_counter()


def _reap(proc: subprocess.Popen, begun: float) -> dict[str, Any]:
    """Wait for ``proc``: its output, wall time, CPU time and peak RSS (``wait4``)."""
    out = proc.stdout.read() if proc.stdout else b""
    err = proc.stderr.read() if proc.stderr else b""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"out": out, "err": err, "rc": proc.returncode, "wall": time.perf_counter() - begun,
            "cpu": usage.ru_utime + usage.ru_stime, "rss": usage.ru_maxrss * 1024}


def drive(n: int, ledger: Path) -> dict[str, Any]:
    """``checkpointed_map`` of ``n`` no-op tasks in a child on ``ledger``: its facts, CPU time,
    and its peak RSS (``rss``): the larger of its VmHWM at its end and its largest VmRSS
    sampled every 20 ms (the serial scheduler resets VmHWM before each task to measure it, so
    VmHWM alone misses what the driver held before its last task, e.g. while it read the
    ledger)."""
    proc, begun = _child([sys.executable, "-c", _DRIVER, str(n), str(ledger), "0"])
    peak, reaped = [0], threading.Event()
    sampler = threading.Thread(target=_sample_rss, args=(proc.pid, peak, reaped), daemon=True)
    sampler.start()
    got = _reap(proc, begun)
    reaped.set()
    sampler.join()
    if got["rc"] != 0:
        raise SystemExit(f"driver failed ({got['rc']}): {got['err'].decode()[-2000:]}")
    facts = orjson.loads(got["out"].splitlines()[-1])
    return dict(facts, rss=max(facts["hwm"], peak[0]), cpu=got["cpu"],
                size=ledger.stat().st_size)


def _sample_rss(pid: int, peak: list[int], reaped: threading.Event) -> None:
    """Keep in ``peak[0]`` the largest VmRSS of process ``pid`` seen, every 20 ms until it
    ends (`_reap` waits for it: polling it here could reap it first)."""
    status = Path(f"/proc/{pid}/status")
    while not reaped.is_set():
        try:
            text = status.read_text()
        except OSError:  # ended meanwhile
            return
        for line in text.splitlines():
            if line.startswith("VmRSS:"):
                peak[0] = max(peak[0], int(line.split()[1]) * 1024)
        time.sleep(0.02)


def crash(n: int, ledger: Path, after: float) -> dict[str, Any]:
    """Kill a driver of ``n`` tasks with SIGKILL ``after`` seconds after its first progress
    line; the outcomes on disk of the tasks finished 1 s before the kill."""
    from campaign import read_ledger

    proc, _ = _child([sys.executable, "-c", _DRIVER, str(n), str(ledger), "1000"])
    out = proc.stdout
    assert out is not None
    progress: list[tuple[int, float]] = []
    lines: list[bytes] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(out.readline, b"")),
                              daemon=True)
    reader.start()
    while not lines and proc.poll() is None:
        time.sleep(0.01)
    time.sleep(after)
    killed_at = time.time()
    ended_first = proc.poll() is not None
    proc.kill()
    proc.wait()
    reader.join()
    for line in lines:
        if line.startswith(b"done "):
            _, count, at = line.split()
            progress.append((int(count), float(at)))
    before = [count for count, at in progress if at <= killed_at - 1.0]
    finished = before[-1] if before else 0
    tasks = read_ledger(ledger)["tasks"]
    on_disk = sum(1 for i in range(finished)
                  if tasks.get(f"t{i:07d}", {}).get("status") == "accepted")
    ends = [rec["ended"] for rec in tasks.values() if rec["status"] == "accepted"]
    first = progress[0][1] if progress else killed_at
    return {"ended_first": ended_first, "killed_after": killed_at - first,
            "finished_1s_before": finished, "on_disk": on_disk,
            "fraction": on_disk / finished if finished else None,
            "accepted_on_disk": len(ends),
            "latest_lag": killed_at - max(ends) if ends else None}


#: ``campaign status LEDGER`` that writes its own peak RSS (VmHWM) on its last stderr line.
_STATUS = """
import atexit, runpy, sys
def hwm():
    line = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
    sys.stderr.write("VmHWM %d\\n" % (int(line.split()[1]) * 1024))
atexit.register(hwm)
sys.argv = ["campaign", "status", sys.argv[1]]
runpy.run_module("campaign._cli", run_name="__main__")
"""


def status(ledger: Path) -> dict[str, Any]:
    """``campaign status``: wall and CPU time (``wait4``), peak RSS (the child's own VmHWM:
    ``ru_maxrss`` would include the benchmark's own memory at the fork)."""
    proc, begun = _child([sys.executable, "-c", _STATUS, str(ledger)],
                         stdout=subprocess.DEVNULL)
    got = _reap(proc, begun)
    if got["rc"] != 0:
        raise SystemExit(f"campaign status failed: {got['err'].decode()[-2000:]}")
    got["rss"] = int(got["err"].split()[-1])
    return got


# ---------------------------------------------------------------------- array claimers
def claim_loop(ledger: Path, submission: str, ids: list[str], name: str,
               share: tuple[int, int]) -> list[str]:
    """What `campaign worker` does per task, with a task that takes no time: claim a share of
    the task list (`Picker`: its own first, then those nobody holds), in it claim each task's
    lease (`Leases.claim`), write the outcome as a fragment, mark it done and release; then
    mark the share ended. Returns the ids it ran."""
    from campaign._ledger import _records
    from campaign._array._leases import Leases
    from campaign._array._shares import Picker, Shares
    from campaign._array._workdir import WorkDir

    work = WorkDir(ledger, submission)
    leases = Leases(work, lease_seconds=600.0)
    shares = Shares(work, ids, lease_seconds=600.0)
    picker = Picker(shares, {"worker": name}, share, poll=0.5)
    owner = {"worker": name, "job": None, "array_task": None, "host": "bench",
             "pid": os.getpid()}
    ran = []
    while (got := picker.claim(lambda: False)) is not None:
        for tid in shares.ids(got[0]):
            lease = leases.claim(tid, owner)
            if lease is None:
                continue
            now = time.time()
            rec = _records.new_record({"task_id": tid}, "sha256:" + "0" * 64)
            rec = _records.started(rec, host="bench", pid=os.getpid(), worker=name,
                                   device_group=None, at=now)
            rec = _records.finished(rec, "accepted", at=time.time(), result={"ok": True})
            work.write_fragment({tid: rec}, owner)
            leases.release(lease, done=True, accepted=True)
            ran.append(tid)
        shares.leases.release(got[1], done=True)
    return ran


def _claim_process(ledger: str, submission: str, ids: list[str], name: str,
                   share: tuple[int, int], out: str) -> None:
    Path(out).write_bytes(orjson.dumps(claim_loop(Path(ledger), submission, ids, name, share)))


def claimers(folder: Path, n: int, count: int, mode: str) -> dict[str, Any]:
    from campaign._array._plan import plan_submission
    from campaign._array._workdir import fragment_files, merge_fragments, task_list_path

    ledger = folder / f"array-{mode}.json"
    items = [{"task_id": f"a{i:07d}", "i": i} for i in range(n)]
    t0 = time.perf_counter()
    sub = plan_submission(items, ledger_path=ledger).record(elements=count)
    planned = time.perf_counter() - t0
    ids = orjson.loads(task_list_path(ledger, sub.id).read_bytes())  # what workers claim
    t0 = time.perf_counter()
    if mode == "threads":
        results: list[list[str]] = [[] for _ in range(count)]

        def one(i: int) -> None:
            results[i] = claim_loop(ledger, sub.id, ids, f"w{i}", (i, count))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        ctx = multiprocessing.get_context("fork")
        outs = [folder / f"ran-{mode}-{i}.json" for i in range(count)]
        procs = [ctx.Process(target=_claim_process, args=(str(ledger), sub.id, ids, f"p{i}",
                                                          (i, count), str(out)))
                 for i, out in enumerate(outs)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        results = [orjson.loads(out.read_bytes()) for out in outs]
    claimed = time.perf_counter() - t0
    ran = [tid for r in results for tid in r]
    fragments = len(fragment_files(ledger))
    t0 = time.perf_counter()
    merge_fragments(ledger)
    merged = time.perf_counter() - t0
    return {"mode": mode, "tasks": n, "claimers": count, "plan_s": planned,
            "claim_s": claimed, "claims_per_s": len(ran) / claimed if claimed else None,
            "ran": len(ran), "twice": len(ran) - len(set(ran)), "missing": n - len(set(ran)),
            "fragments": fragments, "merge_s": merged}


# ---------------------------------------------------------------------- the report
def _mb(b: float) -> str:
    return f"{b / 1e6:.0f} MB" if b < 1e9 else f"{b / 1e9:.2f} GB"


def floor(ledger: Path) -> float:
    """Seconds orjson takes to read and parse ``ledger`` (the median of three)."""
    times = []
    for _ in range(3):
        begun = time.perf_counter()
        orjson.loads(ledger.read_bytes())
        times.append(time.perf_counter() - begun)
    return sorted(times)[1]


def one_size(n: int, folder: Path, rng: random.Random) -> None:
    ledger = folder / f"run-{n}.json"
    first = drive(n, ledger)
    base = floor(ledger)
    print(f"[{n}] floor: orjson reads and parses the finished {_mb(first['size'])} file in "
          f"{base:.2f} s", flush=True)
    print(f"[{n}] first run: {first['wall']:.1f} s ({first['wall'] / n * 1e6:.1f} us/task, "
          f"CPU {first['cpu']:.1f} s = {first['cpu'] / n * 1e6:.1f} us/task, "
          f"{first['wall'] / base:.1f}x the floor), peak driver RSS {_mb(first['rss'])}, ledger "
          f"{_mb(first['size'])}, written {first['bytes'] / n:.0f} bytes/task in "
          f"{first['writes']} writes ({first['compactions']} whole-file rewrites)", flush=True)
    after = rng.uniform(0.3, 0.8) * first["wall"]
    crashed = crash(n, folder / f"crash-{n}.json", after)
    frac = crashed["fraction"]
    lag = crashed["latest_lag"]
    print(f"[{n}] SIGKILL {crashed['killed_after']:.1f} s into the run: "
          f"{crashed['on_disk']} of the {crashed['finished_1s_before']} tasks finished 1 s "
          f"before it on disk ({'-' if frac is None else f'{frac:.2%}'}); "
          f"{crashed['accepted_on_disk']} accepted on disk, the latest ended "
          f"{'-' if lag is None else f'{lag:.2f} s'} before the kill"
          + (" (the run had ended before the kill)" if crashed["ended_first"] else ""),
          flush=True)
    resumed = drive(n, folder / f"crash-{n}.json")
    print(f"[{n}] resume after the SIGKILL: {resumed['wall']:.1f} s (CPU {resumed['cpu']:.1f} "
          f"s, {resumed['wall'] / base:.2f}x the floor), {resumed['ran']} tasks run, "
          f"{crashed['accepted_on_disk']} kept, peak driver RSS "
          f"{_mb(resumed['rss'])}, {resumed['compactions']} whole-file rewrites",
          flush=True)
    again = drive(n, ledger)
    print(f"[{n}] no-op resume: {again['wall']:.2f} s (CPU {again['cpu']:.1f} s, "
          f"{again['wall'] / base:.2f}x the floor), "
          f"{again['compactions']} whole-file rewrites, {_mb(again['bytes'])} written, "
          f"peak RSS {_mb(again['rss'])}", flush=True)
    print_status(ledger, str(n), base)


def print_status(ledger: Path, label: str, base: float | None = None) -> None:
    got = status(ledger)
    ratio = "" if base is None else f" ({got['wall'] / base:.2f}x the floor)"
    print(f"[{label}] campaign status: {got['wall']:.2f} s wall{ratio}, CPU {got['cpu']:.2f} s, "
          f"peak RSS {_mb(got['rss'])}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--claimers", type=int, default=200)
    parser.add_argument("--array-tasks", type=int, default=100_000)
    parser.add_argument("--array-modes", default="threads,processes")
    parser.add_argument("--seed", type=int, default=None, help="for the kill instant")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it")
    parser.add_argument("--status", type=Path, metavar="LEDGER",
                        help="only time `campaign status` on this ledger")
    parser.add_argument("--repeats", type=int, default=3, help="runs of --status")
    args = parser.parse_args()
    if args.status is not None:
        for _ in range(args.repeats):
            print_status(args.status, f"{args.status.name}")
        return
    rng = random.Random(args.seed)
    folder = args.keep or Path(tempfile.mkdtemp(prefix="scale-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        for n in (int(s) for s in args.sizes.split(",") if s):
            one_size(n, folder, rng)
        for mode in (m for m in args.array_modes.split(",") if m):
            a = claimers(folder, args.array_tasks, args.claimers, mode)
            print(f"[array {mode}] {a['claimers']} claimers x {a['tasks']} tasks: planned in "
                  f"{a['plan_s']:.1f} s; claimed in {a['claim_s']:.1f} s "
                  f"({a['claims_per_s']:.0f} claims/s), {a['twice']} run twice, "
                  f"{a['missing']} not run; merge of {a['fragments']} fragments "
                  f"{a['merge_s']:.1f} s", flush=True)
            if a["twice"] or a["missing"]:
                raise SystemExit("array claimers: a task ran twice or not at all")
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
