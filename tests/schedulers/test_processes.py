"""execution="processes": real worker processes, real device-group pinning, real SIGKILLs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from testkit import PATIENCE, PYTHON, child_env, require, wait_until

from campaign import checkpointed_map, read_ledger
from schedulers import (
    Outcome,
    OutcomeKind,
    ProcessesScheduler,
    Started,
    TakenBack,
    Task,
    normalize_groups,
)


def report_devices(item):
    """Note the device group that runs this task; with ``together``, first wait until that
    many groups have begun a task (so that every group takes part however slowly it starts)."""
    begun = time.time()
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if item.get("together"):
        folder = Path(item["folder"])
        (folder / f"{cvd}.{os.getpid()}").touch()
        deadline = time.monotonic() + 300  # only a hung test waits this long
        while len({m.name.split(".")[0] for m in folder.iterdir()}) < item["together"]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only groups {sorted(os.listdir(folder))} began in 300 s")
            time.sleep(0.01)
    time.sleep(item.get("sleep", 0.05))
    return {"cvd": cvd, "pid": os.getpid(), "begun": begun, "ended": time.time()}


def test_each_task_runs_on_its_own_device_group(ledger, tmp_path):
    groups = [(0,), (1, 2), (3,)]
    items = [{"task_id": f"t{i}", "sleep": 0.02 + 0.01 * (i % 3), "together": len(groups),
              "folder": str(tmp_path)} for i in range(30)]
    camp = checkpointed_map(report_devices, items, ledger_path=ledger, execution="processes",
                            device_groups=groups)
    assert camp.complete
    spans = []
    for tid in camp.task_ids:
        rec, res = camp.records[tid], camp.result(tid)
        group = tuple(rec["device_group"])
        assert res["cvd"] == ",".join(map(str, group))  # what the task saw is its group
        assert rec["pid"] == res["pid"] and rec["worker"].startswith("proc-")
        spans.append((group, res["begun"], res["ended"]))
    assert {s[0] for s in spans} == set(groups)
    for i, (g1, b1, e1) in enumerate(spans):  # no two concurrent tasks share a group
        for g2, b2, e2 in spans[i + 1:]:
            if g1 == g2:
                assert e1 <= b2 or e2 <= b1


def note_pid_first_run_hangs(item):
    """Note this run's pid; the task's first run never ends (the test kills its worker)."""
    note = Path(item["pid_file"]).with_suffix(f".{item['task_id']}")
    first = not note.exists()
    note.write_text(str(os.getpid()))
    while first and item.get("hang"):
        time.sleep(3600)
    return {"pid": os.getpid()}


def test_a_worker_killed_mid_task_is_replaced_and_its_task_retried(ledger, tmp_path):
    # one worker: its replacement must run the retried task and the rest
    items = [{"task_id": f"t{i}", "hang": i == 0, "pid_file": str(tmp_path / "pid")}
             for i in range(10)]
    killer = subprocess.Popen([PYTHON, "-c", textwrap.dedent(f"""
        import os, signal, time, pathlib
        p = pathlib.Path({str(tmp_path / 'pid.t0')!r})
        while not p.exists() or not p.read_text(): time.sleep(0.01)
        os.kill(int(p.read_text()), signal.SIGKILL)
    """)])
    camp = checkpointed_map(note_pid_first_run_hangs, items, ledger_path=ledger,
                            execution="processes", device_groups=[(0,)])
    killer.wait(timeout=PATIENCE)
    assert camp.complete
    rec = camp.records["t0"]
    assert rec["attempts"] == 2 and rec["interruptions"] == 1
    lost = rec["history"][0]
    assert lost["status"] == "interrupted" and lost["error"]["type"] == "WorkerLost"
    assert "SIGKILL" in lost["error"]["message"]
    assert camp.result("t0")["pid"] != lost["pid"]  # a new worker ran it
    replacement = {camp.records[tid]["pid"] for tid in camp.task_ids
                   if camp.records[tid]["worker"] == lost["worker"]} - {lost["pid"]}
    assert replacement, "the killed worker's slot was not refilled"


def kill_myself(item):
    how = item["how"]
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "exit":
        os._exit(3)
    if how == "raise":
        raise ArithmeticError("bad arithmetic in the task")
    time.sleep(60)
    return {}


@pytest.mark.parametrize("how, cause", [("sigkill", "signal SIGKILL"), ("exit", "exit code 3")])
def test_a_task_that_always_kills_its_worker_fails_after_max_interruptions(ledger, how, cause):
    camp = checkpointed_map(kill_myself, [{"task_id": "x", "how": how}], ledger_path=ledger,
                            execution="processes", workers=1, max_interruptions=2)
    (failure,) = camp.failures
    rec = camp.records["x"]
    assert failure.status == "failed" and failure.error_type == "WorkerLost"
    assert cause in failure.message and "max_interruptions=2" in failure.message
    assert rec["attempts"] == 3 and rec["interruptions"] == 3


def test_timeout_kills_and_replaces_the_worker(ledger):
    items = [{"task_id": "slow", "how": "sleep"}, {"task_id": "ok", "how": "none"}]
    # "slow" would end after 60 s and be accepted; 3 s leave "ok" ample time on a busy machine
    camp = checkpointed_map(lambda it: kill_myself(it) if it["how"] == "sleep" else {"ok": 1},
                            items, ledger_path=ledger, execution="processes", workers=1,
                            timeout=3.0)
    (failure,) = camp.failures
    assert failure.task_id == "slow" and failure.error_type == "TaskTimeout"
    assert "timeout=3.0" in failure.message
    assert camp.result("ok") == {"ok": 1}


def test_a_raising_task_fails_with_its_traceback(ledger):
    camp = checkpointed_map(kill_myself, [{"task_id": "r", "how": "raise"}], ledger_path=ledger,
                            execution="processes", workers=1, retries=1)
    (failure,) = camp.failures
    assert failure.error_type == "ArithmeticError" and "bad arithmetic" in failure.message
    assert "in kill_myself" in failure.traceback and "_worker.py" not in failure.traceback
    assert failure.attempts == 2


def square(item):
    return {"y": item["x"] ** 2, "pid": os.getpid()}


def test_resume_across_schedulers(ledger):
    items = [{"task_id": f"t{i}", "x": i} for i in range(10)]

    def stop_at_4(item):
        if item["x"] == 4:
            raise KeyboardInterrupt
        return square(item)

    with pytest.raises(KeyboardInterrupt):
        checkpointed_map(stop_at_4, items, ledger_path=ledger)
    before = read_ledger(ledger)["tasks"]
    assert [before[f"t{i}"]["status"] for i in range(5)] == ["accepted"] * 4 + ["interrupted"]
    camp = checkpointed_map(square, items, ledger_path=ledger, execution="processes", workers=2)
    assert camp.complete and [r["y"] for r in camp.results] == [i * i for i in range(10)]
    for i in range(4):  # kept from the serial run, not run again
        rec = camp.records[f"t{i}"]
        assert rec["pid"] == os.getpid() and rec["attempts"] == 1
    assert camp.records["t4"]["pid"] != os.getpid() and camp.records["t4"]["attempts"] == 2


def test_ctrl_c_stops_workers_and_records_interrupted(tmp_path):
    ledger = tmp_path / "l.json"
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(f"""
        import os, time
        from campaign import checkpointed_map
        def fn(item):
            os.write(1, f"pid {{os.getpid()}}\\n".encode())  # one write: lines never mix
            while True:  # until the run is interrupted
                time.sleep(3600)
        if __name__ == "__main__":
            checkpointed_map(fn, [{{"task_id": str(i)}} for i in range(4)],
                             ledger_path={str(ledger)!r}, execution="processes", workers=2)
    """))
    proc = subprocess.Popen([PYTHON, str(script)], env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines = [proc.stdout.readline() for _ in range(2)]
    assert all(line.startswith("pid ") for line in lines), lines
    worker_pids = [int(line.split()[1]) for line in lines]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    proc.stdout.close()
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    statuses = sorted(r["status"] for r in read_ledger(ledger)["tasks"].values())
    assert statuses == ["interrupted", "interrupted", "pending", "pending"]
    def gone(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
        except FileNotFoundError:
            return True

    wait_until(lambda: all(gone(pid) for pid in worker_pids), "the workers to end")


@pytest.mark.parametrize("groups, words", [
    ([], ["empty"]),
    ([(0,), (0, 1)], ["device 0", "group 0", "group 1"]),
    ([(0,), ()], ["device group 1", "non-empty"]),
    ([(0,), ("a",)], ["device group 1", "('a',)"]),
    (5, ["list of tuples"]),
])
def test_bad_device_groups(groups, words):
    with pytest.raises(ValueError) as info:
        normalize_groups(groups)
    for word in words:
        assert word in str(info.value)


def test_options_the_scheduler_does_not_take(ledger):
    with pytest.raises(ValueError, match="does not take client"):
        checkpointed_map(square, [{"task_id": "a", "x": 1}], ledger_path=ledger,
                         execution="processes", client=object())


def echo_size(item):
    if item.get("unpicklable"):
        return {"value": lambda: 0}
    return {"n": len(item["blob"]), "back": item["blob"][: item["back"]]}


def test_large_items_and_results_cross_intact_and_unpicklable_results_fail(ledger):
    """Messages of every size (the worker frames them itself) and a result that cannot travel."""
    sizes = [0, 1, 65_535, 65_536, 300_000]
    items = [{"task_id": f"s{n}", "blob": "x" * n, "back": n} for n in sizes]
    items.append({"task_id": "bad", "blob": "", "back": 0, "unpicklable": True})
    camp = checkpointed_map(echo_size, items, ledger_path=ledger, execution="processes",
                            workers=2)
    for n in sizes:
        assert camp.result(f"s{n}") == {"n": n, "back": "x" * n}
    (failure,) = camp.failures
    assert failure.task_id == "bad" and "cannot be pickled" in failure.message
    assert "lambda" in failure.message


def short_task(item):
    time.sleep(0.005)
    return {"i": item["i"]}


def test_progress_counts_only_started_tasks_as_running(ledger):
    """Tasks queued in the driver or held by a busy worker are not running yet."""
    seen = []
    items = [{"task_id": f"t{i:03d}", "i": i} for i in range(120)]
    camp = checkpointed_map(short_task, items, ledger_path=ledger, execution="processes",
                            workers=2, progress=seen.append)
    assert camp.complete
    assert max(p.running for p in seen) <= 2
    assert all(p.accepted + p.failed + p.running + p.remaining == p.total for p in seen)
    assert seen[-1].accepted == 120 and seen[-1].remaining == 0


def policy_or_die(item):
    if item.get("marker") and not Path(item["marker"]).exists():
        Path(item["marker"]).write_text("died")
        os._exit(3)  # the first attempt takes its worker down: a new one is started
    return {"policy": os.sched_getscheduler(0), "pid": os.getpid()}


def test_the_monitor_does_not_preempt_workers_and_workers_keep_the_default_policy(ledger,
                                                                                 tmp_path):
    require(sys.platform.startswith("linux") and os.sched_getscheduler(0) == os.SCHED_OTHER,
            "Linux scheduling policies, starting from the default one (SCHED_OTHER)")
    policies = set()
    items = [{"task_id": "die", "marker": str(tmp_path / "died")}]
    items += [{"task_id": f"t{i}"} for i in range(20)]
    camp = checkpointed_map(policy_or_die, items, ledger_path=ledger, execution="processes",
                            workers=1, progress=lambda p: policies.add(os.sched_getscheduler(0)))
    assert camp.complete and camp.records["die"]["interruptions"] == 1
    first_worker = camp.records["die"]["history"][0]["pid"]
    assert {camp.result(t)["pid"] for t in camp.task_ids} - {first_worker}  # a new worker ran
    assert {camp.result(t)["policy"] for t in camp.task_ids} == {os.SCHED_OTHER}
    assert os.SCHED_BATCH in policies  # progress is reported from the monitor thread
    assert os.sched_getscheduler(0) == os.SCHED_OTHER


class Custom(BaseException):
    """Not an Exception: raised by a task on purpose."""


def raise_base(item):
    what = item["raise"]
    if what == "exit":
        sys.exit(3)
    if what == "interrupt":
        raise KeyboardInterrupt
    if what == "custom":
        raise Custom("the task's own BaseException")
    return {"pid": os.getpid()}


def test_a_base_exception_in_fn_fails_its_task_with_its_type_and_the_worker_goes_on(ledger):
    items = [{"task_id": w, "raise": w} for w in ("exit", "interrupt", "custom")]
    items += [{"task_id": f"ok{i}", "raise": "none"} for i in range(3)]
    camp = checkpointed_map(raise_base, items, ledger_path=ledger, execution="processes",
                            workers=1)
    failures = {f.task_id: f for f in camp.failures}
    assert sorted(failures) == ["custom", "exit", "interrupt"]
    assert failures["exit"].error_type == "SystemExit" and "3" in failures["exit"].message
    assert failures["interrupt"].error_type == "KeyboardInterrupt"
    assert failures["custom"].error_type.endswith("Custom")
    assert "the task's own BaseException" in failures["custom"].message
    for failure in failures.values():
        assert "not an Exception" in failure.message and "exit code" not in failure.message
        assert "in raise_base" in failure.traceback
        assert camp.records[failure.task_id]["interruptions"] == 0
    pids = {camp.result(f"ok{i}")["pid"] for i in range(3)} | {
        camp.records[t]["pid"] for t in failures}
    assert len(pids) == 1  # one worker ran them all: none of these took it down


def start_child_and_hang(item):
    child = subprocess.Popen(["sleep", "300"])
    written = Path(item["child_file"] + ".tmp")
    written.write_text(str(child.pid))
    os.replace(written, item["child_file"])  # whole, or not there
    time.sleep(300)
    return {}


def test_a_timed_out_task_takes_its_subprocesses_with_it(tmp_path):
    """After the timeout the task's subprocess is gone with its worker. The timeout must come
    after the task started that subprocess: on a machine too busy for that within 1 s the
    test runs again with a longer one (it asserts what happens, not how fast)."""
    require(sys.platform.startswith("linux"), "reads Linux's /proc")
    child_file = tmp_path / "child"
    for timeout in (1.0, 4.0, 16.0, 64.0):
        camp = checkpointed_map(start_child_and_hang, [{"task_id": "hang",
                                                        "child_file": str(child_file)}],
                                ledger_path=tmp_path / f"timeout-{timeout:g}.json",
                                execution="processes", workers=1, timeout=timeout)
        (failure,) = camp.failures
        assert failure.error_type == "TaskTimeout"
        if child_file.exists():
            break
    else:
        pytest.fail("the task never started its subprocess before its timeout, even 64 s")
    pid = int(child_file.read_text())
    stat = Path(f"/proc/{pid}/stat")
    wait_until(lambda: not stat.exists() or stat.read_text().rpartition(")")[2].split()[0] == "Z",
               "the task's subprocess ends with its worker")


def marked_sleep(item):
    """Marks that ``fn`` ran for this task, then sleeps ``item['sleep']`` seconds."""
    Path(item["marks"], item["task_id"]).touch()
    time.sleep(item["sleep"])
    return {"i": item["i"]}


def test_take_back_gives_back_every_task_not_started_and_none_starts_after(tmp_path):
    """What the engine relies on when a ledger write fails: `take_back` gives back the tasks
    queued in the driver and those a busy worker holds ahead, and none of them starts."""
    marks = tmp_path / "marks"
    marks.mkdir()
    events: list = []
    lock = threading.Lock()

    def report(batch):
        with lock:
            events.extend(batch if isinstance(batch, list) else [batch])

    def ids(kind):
        with lock:
            return {e.task_id for e in events if type(e) is kind}

    scheduler = ProcessesScheduler(workers=1)
    # a first task of 1 ms makes the worker hold the most tasks ahead; the others take longer
    tasks = [Task(f"t{i:02d}", {"task_id": f"t{i:02d}", "marks": str(marks), "i": i,
                                "sleep": 0.001 if i == 0 else 0.2}, 0)
             for i in range(scheduler.slots)]
    scheduler.start(marked_sleep, report)
    try:
        scheduler.submit(tasks[0])
        wait_until(lambda: ids(Outcome), "the first task's outcome")
        for task in tasks[1:]:
            scheduler.submit(task)
        # reported once the worker began t01, after the next tasks were sent for it to hold
        wait_until(lambda: "t01" in ids(Started), "the second task starts")
        before = ids(Started)
        scheduler.take_back()
        wait_until(lambda: len(ids(Outcome) | ids(TakenBack)) == len(tasks),
                   "an outcome or a take-back for every task")
    finally:
        scheduler.stop()
    outcomes, back = ids(Outcome), ids(TakenBack)
    assert all(e.kind is OutcomeKind.RESULT for e in events if type(e) is Outcome)
    assert not outcomes & back and len(back) >= len(tasks) - 3, (outcomes, back)
    # the worker may have begun one task before the take-back reached it, no more
    assert len(ids(Started) - before) <= 1
    assert ids(Started) == outcomes == set(os.listdir(marks))  # fn ran for those alone
