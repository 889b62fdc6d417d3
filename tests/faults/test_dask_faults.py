"""execution="dask" under attack and under faults, with the real things: a second local process
that tries to run code in the embedded cluster, SIGKILLs of its worker processes (all of them,
one running a given task, one killed by its own task) and of the driver itself."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import distributed
import pytest
from daskkit import Beside, noted, pids
from testkit import PATIENCE, PYTHON, child_env, wait_until

from campaign import checkpointed_map, read_ledger
from schedulers import DaskScheduler, Outcome, OutcomeKind, Task

HERE = Path(__file__).resolve().parent


# ---------------------------------------------------------------------- task functions
def poison_or_sleep(item: Mapping[str, Any]) -> dict[str, Any]:
    if item.get("poison"):
        os._exit(3)  # kills its worker, every time
    time.sleep(item["sleep"])
    return {"pid": os.getpid()}


def noted_victim_hangs_first_time(item: Mapping[str, Any]) -> dict[str, Any]:
    """`noted`; the task with ``victim`` set then sleeps (it is killed there) the first time."""
    folder = Path(item["folder"])
    (folder / f"{item['task_id']}.{os.getpid()}.{time.time_ns()}").touch()
    if item.get("victim") and len(list(folder.glob(f"{item['task_id']}.*"))) == 1:
        time.sleep(300)
    return {"pid": os.getpid()}


def hangs_first_time(item: Mapping[str, Any]) -> dict[str, Any]:
    """The task ``victim`` creates ``<folder>/victim.<pid>`` and sleeps (it is killed there) the
    first time; every other run sleeps ``sleep`` seconds."""
    if item["task_id"] == "victim" and not any(Path(item["folder"]).iterdir()):
        (Path(item["folder"]) / f"victim.{os.getpid()}").touch()
        time.sleep(300)
    time.sleep(item["sleep"])
    return {"pid": os.getpid()}


# ---------------------------------------------------------------------- helpers
def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


# ---------------------------------------------------------------------- privacy
def test_other_local_processes_cannot_run_code_in_the_embedded_cluster(tmp_path):
    marker = tmp_path / "ran-here"
    attacker = [PYTHON, str(HERE / "dask_attacker.py")]
    # The attack works against a cluster without TLS (so that its refusal below means it).
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  protocol="tcp://", host="127.0.0.1",
                                  dashboard_address="127.0.0.1:0") as open_cluster:
        with distributed.Client(open_cluster) as c:
            [worker] = c.scheduler_info()["workers"]
            out = subprocess.run([*attacker, open_cluster.scheduler_address, worker,
                                  str(marker)], env=child_env(), capture_output=True,
                                 text=True, timeout=PATIENCE)
    assert out.returncode == 0, out.stderr
    tried = json.loads(out.stdout)
    assert tried["scheduler, plain client"] == tried["worker, plain tcp"] == "ran"
    assert marker.exists()
    marker.unlink()

    outcomes: list[Any] = []
    sched = DaskScheduler(workers=1)
    sched.start(lambda item: {"y": item["x"] + 1}, outcomes.append)
    try:
        address = sched.client.scheduler.address
        [worker] = sched.client.scheduler_info()["workers"]
        assert address.startswith("tls://127.0.0.1:") and worker.startswith("tls://127.0.0.1:")
        out = subprocess.run([*attacker, address, worker, str(marker)], env=child_env(),
                             capture_output=True, text=True, timeout=PATIENCE)
        assert out.returncode == 0, out.stderr
        tried = json.loads(out.stdout)
        assert len(tried) == 5 and all(v.startswith("refused") for v in tried.values()), tried
        assert not marker.exists()
        sched.submit(Task("t", {"x": 1}, 1))  # and the cluster still works for its user
        sched.flush()
        done = wait_until(lambda: [e for e in outcomes if isinstance(e, Outcome)]
                          or [e for batch in outcomes if isinstance(batch, list)
                              for e in batch if isinstance(e, Outcome)], "the task's outcome")
        assert done[0].kind is OutcomeKind.RESULT and done[0].result == {"y": 2}
    finally:
        sched.stop()


# ---------------------------------------------------------------------- lost workers
def kill_both_while_they_run_held_tasks(sched: DaskScheduler, folder: Path, hold: Path,
                                        killed: list[int]) -> None:
    """Once both workers run a held task (from t060 on), SIGKILL both, then let the tasks go."""
    wait_until(lambda: sched.client is not None and len(sched.client.nthreads()) == 2,
               "two workers")
    workers = set(sched.client.run(os.getpid).values())
    wait_until(lambda: workers <= {p for tid, ps in pids(folder).items()
                                   if int(tid[1:]) >= 60 for p in ps},
               "both workers inside a held task")
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    killed.extend(workers)
    hold.touch()


def held_items(folder: Path, hold: Path) -> list[dict[str, Any]]:
    folder.mkdir()
    return [{"task_id": f"t{i:03d}", "folder": str(folder), "sleep": 0.02, "held": i >= 60,
             "hold": str(hold)} for i in range(300)]


def test_killing_every_worker_mid_campaign_fails_no_task(tmp_path):
    folder, hold = tmp_path / "runs", tmp_path / "hold"
    items = held_items(folder, hold)
    sched = DaskScheduler(workers=2)
    killed: list[int] = []
    killer = Beside(partial(kill_both_while_they_run_held_tasks, sched, folder, hold, killed))
    killer.start()
    camp = checkpointed_map(noted, items, ledger_path=tmp_path / "l.json", execution=sched)
    killer.join()
    assert camp.complete and not camp.failures and len(camp.results) == 300
    tasks = read_ledger(tmp_path / "l.json")["tasks"]
    assert all(rec["status"] == "accepted" and rec["interruptions"] <= 1
               for rec in tasks.values())
    seen = pids(folder)
    for pid in killed:  # each worker was killed inside a task, which ran again elsewhere
        assert any(pid in seen[tid] and tasks[tid]["pid"] not in killed for tid in seen)
    assert {rec["pid"] for rec in tasks.values()} - set(killed)  # fn reached the new workers


def test_workers_dask_gives_up_on_are_started_again(tmp_path, caplog):
    """dask's cluster closes the nanny of a worker that is not back by lost-worker-timeout
    after its loss (here 50 ms: a new worker process takes longer than that to start) and
    starts none: the campaign starts new ones, and finishes."""
    import dask

    folder, hold = tmp_path / "runs", tmp_path / "hold"
    items = held_items(folder, hold)
    sched = DaskScheduler(workers=2)
    killer = Beside(partial(kill_both_while_they_run_held_tasks, sched, folder, hold, []))
    killer.start()
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "50ms"}), \
            caplog.at_level(logging.WARNING, "schedulers.dask"):
        camp = checkpointed_map(noted, items, ledger_path=tmp_path / "l.json", execution=sched)
    killer.join()
    assert camp.complete and not camp.failures and len(camp.results) == 300
    assert any(r.getMessage().startswith("dask closed embedded worker(s)")
               for r in caplog.records)


def test_a_task_that_kills_its_worker_fails_alone(tmp_path):
    items = [{"task_id": f"t{i:02d}", "sleep": 0.01, "poison": i == 5} for i in range(40)]
    camp = checkpointed_map(poison_or_sleep, items, ledger_path=tmp_path / "l.json",
                            execution=DaskScheduler(workers=2), max_interruptions=2)
    tasks = read_ledger(tmp_path / "l.json")["tasks"]
    poison = tasks.pop("t05")
    assert poison["status"] == "failed" and poison["interruptions"] == 3
    assert poison["error"]["type"] == "WorkerLost"
    assert [f.task_id for f in camp.failures] == ["t05"]
    for tid, rec in tasks.items():  # its batch-mates ran again and spent nothing
        assert rec["status"] == "accepted" and rec["interruptions"] == 0, (tid, rec)


def test_a_worker_killed_mid_task_leaves_an_interruption_in_the_record(tmp_path):
    folder = tmp_path / "victim"
    folder.mkdir()
    items = [{"task_id": "victim", "folder": str(folder), "sleep": 0.4}]
    items += [{"task_id": f"t{i}", "folder": str(folder), "sleep": 0.4} for i in range(5)]

    def kill_the_victims_worker() -> None:
        [mark] = wait_until(lambda: list(folder.iterdir()), "the victim to start")
        os.kill(int(mark.name.split(".")[1]), signal.SIGKILL)

    killer = Beside(kill_the_victims_worker)
    killer.start()
    camp = checkpointed_map(hangs_first_time, items, ledger_path=tmp_path / "l.json",
                            execution=DaskScheduler(workers=2))
    killer.join()
    assert camp.complete and not camp.failures
    victim = camp.records["victim"]
    assert victim["attempts"] == 2 and victim["interruptions"] == 1
    [lost] = victim["history"]
    assert lost["status"] == "interrupted" and lost["error"]["type"] == "WorkerLost"
    assert all(camp.records[f"t{i}"]["interruptions"] == 0 for i in range(5))


class Heard(logging.Handler):
    """Keeps the records of `schedulers.dask`'s log (DEBUG and up while installed); `running`
    is set once the driver heard that task ``task_id`` runs."""

    def __init__(self, task_id: str):
        super().__init__(logging.DEBUG)
        self.task_id = task_id
        self.records: list[logging.LogRecord] = []
        self.running = threading.Event()
        self.alone = False  # it ran alone in its batch (else: reported running inside one)
        self.logger = logging.getLogger("schedulers.dask")

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        if record.msg.startswith("task %r runs (") and isinstance(record.args, tuple) \
                and record.args[0] == self.task_id:
            self.alone = record.args[1] == "alone in its batch"
            self.running.set()

    def __enter__(self) -> Heard:
        self.level = self.logger.level
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self.level)


def test_a_worker_killed_inside_a_batch_interrupts_its_running_task_only(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    # quick tasks: after the first ones, dask batches hold many of them, the victim among them
    items = [{"task_id": f"t{i:03d}", "folder": str(folder), "victim": i == 80}
             for i in range(160)]
    killed: list[int] = []

    def kill_the_victims_worker() -> None:
        assert heard.running.wait(PATIENCE), "the driver never heard that the victim runs"
        [mark] = list(folder.glob("t080.*"))
        killed.append(int(mark.name.split(".")[1]))
        os.kill(killed[0], signal.SIGKILL)

    with Heard("t080") as heard:
        killer = Beside(kill_the_victims_worker)
        killer.start()
        camp = checkpointed_map(noted_victim_hangs_first_time, items,
                                ledger_path=tmp_path / "l.json",
                                execution=DaskScheduler(workers=2))
        killer.join()
    assert camp.complete and not camp.failures
    tasks = read_ledger(tmp_path / "l.json")["tasks"]
    victim = tasks.pop("t080")
    assert victim["attempts"] == 2 and victim["interruptions"] == 1
    [lost] = victim["history"]
    assert lost["status"] == "interrupted" and lost["error"]["type"] == "WorkerLost"
    assert lost["pid"] == killed[0] and victim["pid"] != killed[0]
    [warning] = [r for r in heard.records if r.levelno == logging.WARNING
                 and r.msg.startswith("task %r was lost")]
    assert isinstance(warning.args, tuple) and warning.args[0] == "t080"
    # it shared its batch (the engine sends a batch of one now and then, when few slots free
    # up at once): the others (finished with their results lost, or not started) ran again
    # with no attempt counted
    assert heard.alone or "batch-mate(s) run again" in warning.getMessage()
    for tid, rec in tasks.items():
        assert rec["attempts"] == 1 and rec["interruptions"] == 0 and not rec["history"], tid


# ---------------------------------------------------------------------- the driver
def test_a_driver_script_without_main_guard_gets_a_clear_error(tmp_path):
    ledger = tmp_path / "l.json"
    out = subprocess.run([PYTHON, str(HERE / "dask_unguarded.py"), str(ledger)],
                         env=child_env(), capture_output=True, text=True, timeout=PATIENCE)
    assert out.returncode != 0
    script = (HERE / "dask_unguarded.py").read_text().splitlines()
    line = next(n for n, text in enumerate(script, 1) if text.startswith("checkpointed_map("))
    assert f"dask_unguarded.py, line {line}, starts a campaign" in out.stderr
    assert 'if __name__ == "__main__":' in out.stderr
    assert "DriverBusyError" not in out.stderr and "Nanny" not in out.stderr
    assert read_ledger(ledger)["tasks"]["a"]["status"] != "accepted"


def test_workers_die_with_a_sigkilled_driver(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    driver = subprocess.Popen([PYTHON, str(HERE / "dask_driver.py"), str(folder),
                               str(tmp_path / "l.json")], env=child_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: len({m.name.split(".")[1] for m in folder.glob("*.start")}) == 2,
                   "both workers running a task")
        family = descendants(driver.pid)
        workers = {int(m.name.split(".")[1]) for m in folder.glob("*.start")}
        assert workers <= family
        driver.send_signal(signal.SIGKILL)
        assert driver.wait(timeout=PATIENCE) == -signal.SIGKILL
        wait_until(lambda: not any(alive(p) for p in family), "the driver's processes to end",
                   interval=0.1)
        assert not list(folder.glob("*.done"))  # no task ran on to its end
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


def test_a_cluster_of_ones_own_keeps_its_security(tmp_path):
    from distributed.security import Security

    security = Security.temporary()
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  protocol="tls://", security=security, host="127.0.0.1",
                                  dashboard_address="127.0.0.1:0") as cluster:
        items = [{"task_id": f"t{i}", "sleep": 0} for i in range(3)]
        camp = checkpointed_map(poison_or_sleep, items, ledger_path=tmp_path / "l.json",
                                execution="dask", scheduler_address=cluster.scheduler_address,
                                security=security)
        assert camp.complete
    with pytest.raises(ValueError, match="keeps the security it was made with"):
        DaskScheduler(client=object(), security=security)


def exits(item: Mapping[str, Any]) -> dict[str, Any]:
    if item["x"] == 1:
        raise SystemExit(f"task {item['x']} exits")
    return {"x": item["x"]}


def test_a_base_exception_in_fn_is_that_tasks_failure_with_its_type(tmp_path):
    items = [{"task_id": f"t{i}", "x": i} for i in range(4)]
    camp = checkpointed_map(exits, items, ledger_path=tmp_path / "l.json",
                            execution=DaskScheduler(workers=1))
    [failure] = camp.failures
    assert failure.task_id == "t1" and failure.error_type == "SystemExit"
    assert "task 1 exits" in failure.message and "in exits" in failure.traceback
    assert [r["x"] for r in camp.results] == [0, 2, 3]
