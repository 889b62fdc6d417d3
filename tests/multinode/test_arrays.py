"""`campaign submit` job arrays across the three nodes of scripts/slurm-cluster.sh, and a node
that dies with its jobs.

Every run leaves a note with the host it ran on (node_task.py), so the tests check the ledger's
hosts against where the runs really were, and against the node Slurm placed each element on."""

from __future__ import annotations

import time

import pytest
from clusterkit import (
    NODES,
    START,
    assert_never_twice_at_once,
    element_nodes,
    kill_node,
    make_campaign,
    run_script,
    runs_of,
    submit,
)
from testkit import PATIENCE, wait_until

from campaign import read_ledger
from campaign._array._shares import share_size
from schedulers import slurm


def wait_for_job(job: str) -> dict[str, str]:
    return slurm.JobWatcher(job, backoff=slurm.Backoff(0.2, cap=1.0)).wait(timeout=PATIENCE + 60)


def kill_node2(cluster, job: str) -> tuple[float, list[int], dict[str, str], str]:
    """Kill node2 while ``job`` runs, wait for the job, bring node2 back: (the kill's time, the
    pids killed, each element's end state, the element node2 ran; it ended NODE_FAIL)."""
    try:
        killed_at = time.time()
        killed = kill_node(cluster, "node2")
        states = wait_for_job(job)
    finally:
        run_script(START)  # node2 back (its slurmd restarted, the node resumed)
    placed = element_nodes(job)
    lost_element = next(e for e, node in placed.items() if node == "node2")
    assert states[lost_element] == "NODE_FAIL", states
    return killed_at, killed, states, lost_element


def attempts(rec: dict) -> list[dict]:
    """Every attempt of a task: its history, then the record itself."""
    return [*rec.get("history", []), rec]


@pytest.mark.slow
def test_an_array_runs_on_all_three_nodes_and_the_ledger_names_each_attempts_host(shared,
                                                                                 tmp_path):
    spec, ledger, marks = make_campaign(shared, tmp_path / "marks", 24, 0.2, hosts_together=3)
    job = submit(spec, "--array", "6%3", "--time", "5:00")
    states = wait_for_job(job)
    assert set(states.values()) == {"COMPLETED"}, states
    placed = element_nodes(job)
    tasks = read_ledger(ledger)["tasks"]
    runs = runs_of(marks)
    assert len(tasks) == 24 and all(r["status"] == "accepted" for r in tasks.values())
    for tid, rec in tasks.items():
        (run,) = runs[tid]  # one attempt each: nothing was lost
        assert rec["host"] == run["host"] == rec["result"]["host"], (tid, rec, run)
        assert rec["host"] == placed[rec["worker"]], (tid, rec["worker"], placed)
        assert all(a["host"] in NODES for a in attempts(rec))
    assert {rec["host"] for rec in tasks.values()} == set(NODES)
    print(f"\nhosts of the 24 tasks: "
          f"{ {n: sum(r['host'] == n for r in tasks.values()) for n in NODES} }")


@pytest.mark.slow
def test_a_node_that_dies_loses_no_task_and_its_attempt_is_recorded_interrupted(
        shared, tmp_path, cluster):
    spec, ledger, marks = make_campaign(shared, tmp_path / "marks", 12, 0.3, lease=3,
                                        hosts_together=3, hang_on="node2")
    job = submit(spec, "--array", "6%3", "--time", "5:00")

    def held_on_node2():
        return [tid for tid, r in runs_of(marks).items() if r[0]["host"] == "node2"]

    (held,) = wait_until(held_on_node2, "node2 to begin a task", interval=0.05)
    killed_at, killed, states, lost_element = kill_node2(cluster, job)
    assert all(s == "COMPLETED" for e, s in states.items() if e != lost_element), states

    tasks = read_ledger(ledger)["tasks"]
    runs = runs_of(marks)
    assert len(tasks) == 12 and all(r["status"] == "accepted" for r in tasks.values())
    assert_never_twice_at_once(runs)
    assert not [r for rs in runs.values() for r in rs
                if r["host"] == "node2" and r["start"] > killed_at], "node2 ran after its death"
    rec = tasks[held]
    last = rec["history"][-1]
    assert (last["status"], last["host"], last["worker"]) == ("interrupted", "node2", lost_element)
    assert last["error"]["type"] == "WorkerLost" and rec["interruptions"] == 1
    assert rec["host"] in {"node1", "node3"} and rec["worker"] != lost_element
    assert [r["host"] for r in runs[held]] == ["node2", rec["host"]]
    others = {tid: r for tid, r in tasks.items() if tid != held}
    assert all(not r["interruptions"] and len(runs[tid]) == 1 for tid, r in others.items())
    assert {r["host"] for r in others.values()} <= {"node1", "node3"}

    takeover = runs[held][1]["start"] - killed_at
    print(f"\nnode2 killed (pids {killed}) holding {held}; taken over on {rec['host']} after "
          f"{takeover:.1f} s (lease 3 s); element {lost_element} ended {states[lost_element]}")
    for tid in sorted(tasks):
        print(f"  {tid}: " + ", ".join(f"{a['host']} {a['status']}" for a in attempts(tasks[tid])))


@pytest.mark.slow
def test_a_dead_nodes_share_of_several_tasks_finishes_elsewhere_each_task_once(
        shared, tmp_path, cluster):
    """Three elements over 72 tasks: shares of three consecutive tasks. node2 dies running the
    second task of a share it holds, the first accepted: another element takes the share over
    once its lease expires and runs the rest of it; the first task is not run again, the held
    one runs again once, after the kill, recorded interrupted (WorkerLost) then accepted."""
    assert share_size(72, 3) == 3
    spec, ledger, marks = make_campaign(shared, tmp_path / "marks", 72, 0.1, lease=3,
                                        hosts_together=3, hang_on="node2", hang_every=3)
    job = submit(spec, "--array", "3", "--time", "5:00")

    def hung_on_node2():  # (a run of the first task it began waits for hosts_together)
        return [tid for tid, rs in runs_of(marks).items()
                if rs[-1]["host"] == "node2" and rs[-1]["end"] is None and int(tid[1:]) % 3 == 1]

    (held,) = wait_until(hung_on_node2, "node2 to hang in a share", interval=0.05)
    x = int(held[1:])
    before, after = f"t{x - 1:03d}", f"t{x + 1:03d}"  # the share's first and third tasks
    killed_at, _, _, lost_element = kill_node2(cluster, job)

    tasks = read_ledger(ledger)["tasks"]
    runs = runs_of(marks)
    assert len(tasks) == 72 and all(r["status"] == "accepted" for r in tasks.values())
    assert_never_twice_at_once(runs)
    assert not [r for rs in runs.values() for r in rs
                if r["host"] == "node2" and r["start"] > killed_at], "node2 ran after its death"
    assert [r["host"] for r in runs[before]] == ["node2"]  # accepted before the kill: kept
    assert tasks[before]["host"] == "node2" and tasks[before]["attempts"] == 1
    rec = tasks[held]
    assert runs[held][0]["host"] == "node2" and len(runs[held]) == 2
    assert runs[held][1]["start"] > killed_at + 3 * 0.75  # not before the lease expired
    last = rec["history"][-1]
    assert (last["status"], last["host"], last["worker"]) == ("interrupted", "node2", lost_element)
    assert last["error"]["type"] == "WorkerLost" and rec["interruptions"] == 1
    assert rec["host"] in {"node1", "node3"} and rec["worker"] != lost_element
    assert len(runs[after]) == 1 and tasks[after]["worker"] == rec["worker"]  # the taker's
    others = {tid: r for tid, r in tasks.items() if tid != held}
    assert all(not r["interruptions"] and len(runs[tid]) == 1 for tid, r in others.items())
    print(f"\nnode2 killed holding {held} (its share {before}..{after}); the share finished on "
          f"{rec['host']} ({rec['worker']}) {runs[held][1]['start'] - killed_at:.1f} s after")
