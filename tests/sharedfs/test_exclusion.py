"""One driver and one lease holder where ``flock`` does not exclude: two "nodes" (processes with
host names of their own, `unshare --uts`) reach one ledger through views of their own whose
locks do not exclude each other's. What keeps them apart is the driver's lease and the task
leases' generations, created with ``O_CREAT | O_EXCL`` (docs/ledger.md, "One driver"). The
calls of ``fn`` are counted in a file outside the shared folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from sharedfskit import CACHING, LOCKLESS
from testkit import PYTHON, child_env, wait_until

from campaign import read_ledger
from campaign._array._leases import Leases
from campaign._array._plan import plan_submission
from campaign._array._workdir import WorkDir, task_key

NODE = Path(__file__).with_name("exclusion_node.py")


def on_node(host: str, *args: object, env: dict[str, str] | None = None) -> subprocess.Popen:
    """``exclusion_node.py ARGS`` as a process of the host ``host`` (a UTS namespace of its own:
    another host name, so nothing of this host's is taken for its)."""
    script = 'hostname "$0" && exec "$@"'
    return subprocess.Popen(["unshare", "--uts", "sh", "-c", script, host, PYTHON, str(NODE),
                             *map(str, args)], env=env or child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


@pytest.mark.parametrize("kind", LOCKLESS)
def test_a_second_driver_on_another_node_is_refused_every_time(views, kind, tmp_path):
    """Ten rounds of two drivers of one ledger started together on two nodes: one runs, the
    other is refused with `DriverBusyError` naming the first's host and pid; every task is run
    once and accepted."""
    for round_ in range(10):
        a, b, _ = views(kind)
        calls, go = tmp_path / f"calls-{round_}", tmp_path / f"go-{round_}"
        procs = {host: on_node(host, "driver", view / "runs.json", calls, go, 20, 0.05)
                 for host, view in (("nodeA", a), ("nodeB", b))}
        pids = {host: proc.pid for host, proc in procs.items()}
        go.touch()
        ended = {host: finish(proc) for host, proc in procs.items()}
        codes = sorted(code for code, _, _ in ended.values())
        assert codes == [0, 3], f"round {round_}: {ended}"
        winner = next(h for h, (code, _, _) in ended.items() if code == 0)
        loser = next(h for h in ended if h != winner)
        message = ended[loser][1]
        assert "in use by a live campaign driver" in message, message
        assert f"pid {pids[winner]} on host {winner}" in message, message
        ran = Counter(line.split()[0] for line in calls.read_text().splitlines())
        assert ran == Counter({f"t{i:03d}": 1 for i in range(20)}), f"round {round_}"
        doc = read_ledger(a / "runs.json")
        assert {rec["status"] for rec in doc["tasks"].values()} == {"accepted"}
        assert len(doc["tasks"]) == 20 and all(r["attempts"] == 1 for r in doc["tasks"].values())
        assert [r["status"] for r in doc["runs"]] == ["finished"]
        assert {r["host"] for r in doc["tasks"].values()} == {winner}


def expire_all(folder: Path, task_ids: list[str]) -> None:
    """Every task's lease expired, as its holder's death leaves it: a dead worker's where there
    is none; the newest generation's, its ``expires`` set in the past, where there is."""
    leases = folder / "runs.json.work" / "leases"
    leases.mkdir(parents=True, exist_ok=True)
    dead = {"worker": "dead", "host": "gone", "pid": 1}
    for tid in task_ids:
        key = task_key(tid)
        newest = max(leases.glob(f"{key}*.json"), default=leases / f"{key}.json",
                     key=lambda p: (len(p.name), p.name))
        lease = json.loads(newest.read_bytes()) if newest.exists() else {
            "task_id": tid, "owner": dead, "claimed": 0.0, "heartbeat": 0.0}
        newest.write_bytes(json.dumps(dict(lease, expires=0.0)).encode())


@pytest.mark.parametrize("kind", LOCKLESS)
def test_concurrent_takeovers_of_expired_leases_give_one_holder(views, sharedfs, kind,
                                                                  tmp_path):
    """200 expired leases taken over at once by two workers on two nodes, twice (the second
    time, the leases the first takeover made, expired): each task is held by one."""
    a, b, _ = views(kind)
    items = [{"task_id": f"t{i:03d}", "x": i} for i in range(200)]
    submission = plan_submission(items, ledger_path=a / "runs.json").record()
    ids = [item["task_id"] for item in items]
    folder = sharedfs.export / a.name  # on the "server": no view's cache in the way
    expire_all(folder, ids)  # by dead workers
    for wave in range(2):
        if wave:  # the leases the first wave made expire as a dead holder's do: unrenewed
            leases = (folder / "runs.json.work" / "leases").glob("*.json")
            expires = max(json.loads(p.read_bytes())["expires"] for p in leases)
            time.sleep(max(0.0, expires + 0.5 - time.time()))
        go = tmp_path / f"go-{wave}"
        outs = {host: tmp_path / f"{host}-{wave}.json" for host in ("nodeA", "nodeB")}
        procs = [on_node(host, "claim", view / "runs.json", submission.id, go, outs[host], 10)
                 for host, view in (("nodeA", a), ("nodeB", b))]
        time.sleep(0.5)  # both wait at the barrier: they claim together
        go.touch()
        for proc in procs:
            code, _, err = finish(proc)
            assert code == 0, err
        held = {host: json.loads(out.read_text()) for host, out in outs.items()}
        twice = set(held["nodeA"]) & set(held["nodeB"])
        assert not twice, f"wave {wave}: {len(twice)} task(s) held twice, e.g. {sorted(twice)[:5]}"
        assert sorted(held["nodeA"] + held["nodeB"]) == ids, f"wave {wave}"


def test_a_worker_whose_lease_was_taken_over_records_a_superseded_attempt(views, sharedfs,
                                                                         tmp_path):
    """A worker stopped (SIGSTOP) while its task runs, past its lease: a worker on another node
    takes the task over and runs it; the first, continued (SIGCONT), finds its lease taken over
    and records its run as a superseded attempt in the task's history, not as the task's."""
    a, b, _ = views("bindfs-nolock")
    submission = plan_submission([{"task_id": "t", "x": 1}], ledger_path=a / "runs.json").record()
    calls, go = tmp_path / "calls", tmp_path / "go"
    go.touch()
    slow = on_node("nodeA", "worker", a / "runs.json", submission.id, calls, go, 2.0, 3.0)
    try:
        wait_until(lambda: calls.exists() and calls.read_text(), "the first worker to run fn")
        os.kill(slow.pid, signal.SIGSTOP)
        lease = sharedfs.export / a.name / "runs.json.work" / "leases" / f"{task_key('t')}.json"
        lease_json = json.loads(lease.read_bytes())  # no heartbeat replaces it now
        time.sleep(max(0.0, lease_json["expires"] + 0.5 - time.time()))  # past its lease
        taker = on_node("nodeB", "worker", b / "runs.json", submission.id, calls, go, 2.0, 0.0)
        code, out, err = finish(taker)
        assert code == 0, err
    finally:
        os.kill(slow.pid, signal.SIGCONT)
    code, _, err = finish(slow)
    assert code == 0, err
    ran = [line.split() for line in calls.read_text().splitlines()]
    assert [(t, host) for t, host, _ in ran] == [("t", "nodeA"), ("t", "nodeB")]
    rec = read_ledger(b / "runs.json")["tasks"]["t"]
    assert rec["status"] == "accepted" and rec["host"] == "nodeB" and rec["attempts"] == 2
    assert rec["pid"] == taker.pid
    first = rec["history"][0]
    assert (first["attempt"], first["host"], first["pid"]) == (1, "nodeA", slow.pid)
    assert first["status"] == "interrupted" and first["error"]["type"] == "WorkerLost"
    assert f"lease taken over by nodeB:{taker.pid}" in first["error"]["message"]
    assert "(accepted)" in first["error"]["message"]


def test_a_driver_stopped_past_its_lease_is_taken_over_and_writes_no_more(views, sharedfs,
                                                                          tmp_path):
    """A driver on node A stopped (SIGSTOP) past its lease: a driver on node B takes the ledger
    over (the task A was running is interrupted, DriverLost, and runs again) and finishes; A,
    continued, finds its lease taken over at its next write and stops without writing."""
    a, b, _ = views("bindfs-nolock")
    calls, go = tmp_path / "calls", tmp_path / "go"
    go.touch()
    env = dict(child_env(), DIFFSOUP_DRIVER_LEASE_SECONDS="2")
    first = on_node("nodeA", "driver", a / "runs.json", calls, go, 6, 1.0, env=env)
    try:
        wait_until(lambda: calls.exists() and len(calls.read_text().splitlines()) >= 2,
                   "the first driver to run two tasks")
        server = sharedfs.export / a.name / "runs.json"
        wait_until(lambda: read_ledger(server)["tasks"]["t001"]["status"] == "running",
                   "the first driver to record its second task running")
        time.sleep(0.3)  # stopped in fn, not while it writes (it would hold the ledger's lock)
        os.kill(first.pid, signal.SIGSTOP)
        time.sleep(3.0)  # past its lease of 2 s
        second = on_node("nodeB", "driver", b / "runs.json", calls, go, 6, 0.0, env=env)
        code, out, err = finish(second)
        assert code == 0, out + err
    finally:
        os.kill(first.pid, signal.SIGCONT)
    code, out, err = finish(first)
    assert code == 4, out + err
    assert f"taken over by the driver pid {second.pid} on host nodeB" in out, out
    doc = read_ledger(b / "runs.json")
    assert {rec["status"] for rec in doc["tasks"].values()} == {"accepted"}
    assert len(doc["tasks"]) == 6
    by_b = [tid for tid, rec in doc["tasks"].items() if rec["host"] == "nodeB"]
    lost = [tid for tid, rec in doc["tasks"].items()
            if any(e["error"] and e["error"]["type"] == "DriverLost" for e in rec["history"])]
    assert lost and set(lost) <= set(by_b)  # the run A had begun shows in the history
    ran = Counter(line.split()[0] for line in calls.read_text().splitlines())
    assert all(ran[tid] == 1 for tid in doc["tasks"] if tid not in lost), (ran, lost, out)
    assert doc["runs"][-1]["status"] == "finished" and doc["runs"][-1]["host"] == "nodeB"


@pytest.mark.parametrize("kind", CACHING)
def test_the_fence_sees_a_takeover_its_attribute_cache_has_not(views, kind):
    """A lease's holder on node A looked its lease up a moment ago (its view caches the file's
    attributes for seconds); node B takes the expired lease over, ends the task and removes
    the lease's files. A's fence (`Leases.taken_over`, asked before its outcome is recorded)
    sees the takeover at once, not once its cache expires."""
    a, b, _ = views(kind)
    submission = plan_submission([{"task_id": "t", "x": 1}], ledger_path=a / "runs.json").record()
    mine = Leases(WorkDir(a / "runs.json", submission.id), lease_seconds=0.5)
    theirs = Leases(WorkDir(b / "runs.json", submission.id), lease_seconds=30.0)
    lease = mine.claim("t", {"worker": "wa", "host": "nodeA", "pid": 1})
    assert lease is not None and mine.taken_over(lease) is None
    wait_until(lambda: time.time() > lease["expires"] + 0.1, "the lease to expire")
    taken = theirs.claim("t", {"worker": "wb", "host": "nodeB", "pid": 2})
    assert taken is not None and taken["stolen_from"]["worker"] == "wa"
    assert os.path.lexists(a / "runs.json.work" / "leases" / f"{task_key('t')}.json")
    theirs.release(taken, done=True, accepted=True)  # removes both generations
    assert mine.taken_over(lease) is not None
