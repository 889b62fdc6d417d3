"""The files that exclude without ``flock`` (campaign/_ledger/_exclusive.py,
campaign/_ledger/_owner_lease.py, campaign/_ledger/_ledger_lock.py), on a local disk: how a lease or
lock held by another host, by a dead process of this host, or by a live one is judged. The two-node
tests are in tests/sharedfs/test_exclusion.py."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import subprocess
import time

import pytest
from filelock import Timeout

from campaign import DriverBusyError, Ledger, checkpointed_map, read_ledger
from campaign._ledger._ledger_lock import LOCK_LEASE, LedgerLock
from campaign._ledger._exclusive import identity
from campaign._ledger._owner_lease import CLEANUP_AGE
from testkit import PYTHON


def dead_pid() -> int:
    proc = subprocess.Popen([PYTHON, "-c", "pass"])
    proc.wait()
    return proc.pid


def lease_of(holder: dict, *, expires: float) -> bytes:
    return json.dumps(dict(holder, token="0123456789abcdef", generation=1, seconds=60.0,
                           acquired=0.0, renewed=0.0, expires=expires,
                           released=False)).encode()


def test_an_expired_lease_of_another_host_is_taken_by_the_next_generation(tmp_path):
    ledger = tmp_path / "runs.json"
    elsewhere = {"host": "node-gone", "pid": 4242, "boot_id": "x", "pidns": 1, "start": 1}
    (tmp_path / "runs.json.driver.1").write_bytes(lease_of(elsewhere, expires=time.time() + 60))
    with pytest.raises(DriverBusyError, match="pid 4242 on host node-gone.*expires in"):
        checkpointed_map(lambda item: {"y": 1}, [{"task_id": "a"}], ledger_path=ledger)
    (tmp_path / "runs.json.driver.1").write_bytes(lease_of(elsewhere, expires=time.time() - 1))
    assert checkpointed_map(lambda item: {"y": 1}, [{"task_id": "a"}],
                            ledger_path=ledger).complete
    taken = json.loads((tmp_path / "runs.json.driver.2").read_bytes())
    assert taken["pid"] == os.getpid() and taken["released"]
    assert (tmp_path / "runs.json.driver.1").exists()  # removed only once CLEANUP_AGE old
    old = time.time() - CLEANUP_AGE - 10
    os.utime(tmp_path / "runs.json.driver.1", (old, old))
    checkpointed_map(lambda item: {"y": 1}, [{"task_id": "b"}], ledger_path=ledger)
    assert sorted(p.name for p in tmp_path.glob("runs.json.driver.*")) == [
        "runs.json.driver.2", "runs.json.driver.3"]


def test_a_dead_drivers_lease_on_this_host_is_taken_at_once(tmp_path):
    ledger = tmp_path / "runs.json"
    gone = dict(identity(), pid=dead_pid())
    (tmp_path / "runs.json.driver.1").write_bytes(lease_of(gone, expires=time.time() + 600))
    assert checkpointed_map(lambda item: {"y": 1}, [{"task_id": "a"}],
                            ledger_path=ledger).complete


@pytest.mark.filterwarnings("ignore:flock not supported")  # filelock falls back to its own
def test_without_flock_the_lease_alone_refuses_a_second_driver(tmp_path, monkeypatch):
    """A file system without ``flock`` (Lustre ``noflock``: ENOSYS): runs go on, and a second
    driver is refused by the lease."""
    def no_flock(fd, op):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    ledger = tmp_path / "runs.json"

    def fn(item):
        with pytest.raises(DriverBusyError, match=f"pid {os.getpid()} on host"):
            Ledger(ledger).open()
        return {"y": 1}

    assert checkpointed_map(fn, [{"task_id": "a"}], ledger_path=ledger).complete
    assert read_ledger(ledger)["tasks"]["a"]["status"] == "accepted"


def test_the_ledger_lock_is_broken_only_when_its_holder_is_gone_or_silent(tmp_path):
    lock_file = tmp_path / "runs.json.lock"
    owner = tmp_path / "runs.json.lock.owner"
    with LedgerLock(lock_file, timeout=5):
        assert json.loads(owner.read_bytes())["token"]
    assert not owner.exists()  # removed with the release
    owner.write_bytes(json.dumps(dict(identity(), pid=dead_pid(), token="deadbeef")).encode())
    with LedgerLock(lock_file, timeout=5):  # a dead holder of this host: broken at once
        assert json.loads(owner.read_bytes())["pid"] == os.getpid()
    assert (tmp_path / "runs.json.lock.owner.break-deadbeef").exists()
    far = {"host": "node-gone", "pid": 4242, "token": "cafe"}
    owner.write_bytes(json.dumps(far).encode())
    with pytest.raises(Timeout):  # another host's, touched just now: waited for
        LedgerLock(lock_file, timeout=0.3).acquire()
    silent = time.time() - LOCK_LEASE - 5
    os.utime(owner, (silent, silent))
    with LedgerLock(lock_file, timeout=5):  # untouched for LOCK_LEASE: broken
        assert json.loads(owner.read_bytes())["pid"] == os.getpid()
    assert not owner.exists()


def test_a_lock_whose_breaker_died_is_broken_by_the_next(tmp_path):
    """A holder died, then a process that began to break its lock died between its marker
    and taking the lock over (as SIGKILLs on a slow shared file system land): the next one
    passes that marker and takes the lock at once, instead of waiting out its timeout."""
    lock_file = tmp_path / "runs.json.lock"
    owner = tmp_path / "runs.json.lock.owner"
    holder = dict(identity(), pid=dead_pid(), token="a1b2c3d4e5f60718", acquired=time.time())
    owner.write_bytes(json.dumps(holder).encode())
    breaker = dict(identity(), pid=dead_pid(), token="0f1e2d3c4b5a6978", acquired=time.time())
    marker = tmp_path / "runs.json.lock.owner.break-a1b2c3d4e5f60718"
    marker.write_bytes(json.dumps(breaker).encode())
    with LedgerLock(lock_file, timeout=10):  # before: Timeout, the marker never passed
        assert json.loads(owner.read_bytes())["pid"] == os.getpid()
    assert (tmp_path / "runs.json.lock.owner.break-a1b2c3d4e5f60718.2").exists()


def test_a_lock_a_live_process_breaks_is_left_to_it(tmp_path):
    lock_file = tmp_path / "runs.json.lock"
    owner = tmp_path / "runs.json.lock.owner"
    holder = dict(identity(), pid=dead_pid(), token="a1b2c3d4e5f60718", acquired=time.time())
    owner.write_bytes(json.dumps(holder).encode())
    breaker = dict(identity(), token="0f1e2d3c4b5a6978", acquired=time.time())  # this process
    (tmp_path / "runs.json.lock.owner.break-a1b2c3d4e5f60718").write_bytes(
        json.dumps(breaker).encode())
    with pytest.raises(Timeout):
        LedgerLock(lock_file, timeout=0.5).acquire()
    assert json.loads(owner.read_bytes())["pid"] == holder["pid"]
