"""What a user pastes and what a killed command leaves: every printed command names each task id
and path as one shell word, a killed `campaign forget`'s temporary backup is removed by the next
forget, and what a process killed while it took the ledger's lock left by the next run.

The commands printed are run through a real shell (``sh -c``) to see which arguments it gets."""

from __future__ import annotations

import logging
import shlex
import subprocess
import time

from testkit import PYTHON, child_env

from campaign import checkpointed_map, read_ledger
from campaign._ledger._atomic import HOST, TMP_MARK


def square(item):
    return {"y": item["x"] ** 2}


def words_of(command: str) -> list[str]:
    """The arguments a POSIX shell gives the command ``command``."""
    done = subprocess.run(["sh", "-c", f'for w in {command}; do printf "%s\\0" "$w"; done'],
                          capture_output=True, text=True, check=True)
    return done.stdout.split("\0")[:-1]


def test_the_printed_forget_command_names_one_task(tmp_path, caplog):
    ledger = tmp_path / "my runs" / "l.json"  # a path with a space
    ledger.parent.mkdir()
    items = [{"task_id": t, "x": i} for i, t in enumerate(["a", "b", "a b"])]
    checkpointed_map(square, items, ledger_path=ledger)
    items[2]["x"] = 10
    with caplog.at_level(logging.WARNING, logger="campaign"):
        checkpointed_map(square, items, ledger_path=ledger)
    (message,) = [r.getMessage() for r in caplog.records if "changed since" in r.getMessage()]
    command = message.split("Run `", 1)[1].split("`", 1)[0]
    assert words_of(command) == ["campaign", "forget", str(ledger), "a b"]
    assert shlex.split(command) == ["campaign", "forget", str(ledger), "a b"]

    failures = subprocess.run([PYTHON, "-m", "campaign._cli", "failures", str(ledger)],
                              env=child_env(), capture_output=True, text=True, timeout=120)
    line = failures.stdout.split("to run one again with its new item: ", 1)[1].splitlines()[0]
    assert words_of(line) == ["campaign", "forget", str(ledger), "a b"]


def test_a_killed_forgets_temporary_backup_is_removed(tmp_path):
    ledger = tmp_path / "l.json"
    checkpointed_map(square, [{"task_id": t, "x": 1} for t in "abc"], ledger_path=ledger)
    dead = subprocess.Popen([PYTHON, "-c", "pass"])
    dead.wait()  # its pid is gone: what a SIGKILLed forget leaves carries such a pid
    leftover = tmp_path / f".l.before-forget-20261203T101010Z.json{TMP_MARK}{HOST}-{dead.pid}-ab12"
    leftover.write_bytes(b'{"half": ')
    alive = tmp_path / f".l.before-forget-20261203T101011Z.json{TMP_MARK}{HOST}-1-cd34"
    alive.write_bytes(b"{}")  # pid 1 lives: another forget may still write it
    proc = subprocess.run([PYTHON, "-m", "campaign._cli", "forget", str(ledger), "a"],
                          env=child_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert not leftover.exists() and alive.exists()
    assert sorted(read_ledger(ledger)["tasks"]) == ["b", "c"]


STUCK_IN_THE_LOCK = """
import os, sys, time
from pathlib import Path
from campaign._ledger._update import update

def stuck(*args, **kwargs):  # between the owner file's temporary file and its link
    Path(sys.argv[2]).touch()
    time.sleep(3600)

os.link = stuck
update(sys.argv[1], lambda doc: None)
"""


def test_what_a_process_killed_while_taking_the_lock_leaves_is_removed_by_the_next_run(tmp_path):
    ledger = tmp_path / "l.json"
    items = [{"task_id": t, "x": 1} for t in "abc"]
    checkpointed_map(square, items, ledger_path=ledger)
    there = tmp_path / "there"
    child = subprocess.Popen([PYTHON, "-c", STUCK_IN_THE_LOCK, str(ledger), str(there)],
                             env=child_env())
    try:
        deadline = time.monotonic() + 120
        while not there.exists():
            assert child.poll() is None and time.monotonic() < deadline, "it never took the lock"
            time.sleep(0.02)
    finally:
        child.kill()
        child.wait()
    left = sorted(p.name for p in tmp_path.iterdir() if TMP_MARK in p.name)
    assert left and all(name.startswith(f".l.json.lock.owner{TMP_MARK}{HOST}-{child.pid}-")
                        and name.count(TMP_MARK) == 1 for name in left), left
    dead = f"{TMP_MARK}{HOST}-{child.pid}"
    earlier = tmp_path / f"..l.json.lock.owner{dead}-ab12{dead}-cd34"
    earlier.write_bytes(b"{}")  # what an earlier version's killed exclusive create left
    alive = tmp_path / f".l.json.lock.owner{TMP_MARK}{HOST}-1-ef56"
    alive.write_bytes(b"{}")  # pid 1 lives: another process may still be taking the lock
    other = tmp_path / f".l.json2{dead}-0011"
    other.write_bytes(b"{}")  # another ledger's (l.json2)
    items.append({"task_id": "d", "x": 2})  # a run with a task to run: the driver opens
    assert checkpointed_map(square, items, ledger_path=ledger).complete
    assert sorted(p.name for p in tmp_path.iterdir() if TMP_MARK in p.name) \
        == sorted([alive.name, other.name])
