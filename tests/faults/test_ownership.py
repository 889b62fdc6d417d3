"""Another local user in a shared scratch folder (sticky and world-writable, as /tmp or a
cluster's scratch), and the ledger's own permissions through rewrites.

A real second user is created (`useradd`) and plants files as itself (`runuser`): a journal with
a forged record, a ``.work/`` folder with a fragment, a fragment and a lease in folders the
owner left open. Each is refused with `LedgerError` naming the path, nothing of it is read, and
the owner's file is left byte for byte. Needs root (skipped otherwise, required in CI)."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import orjson
import pytest
from testkit import PYTHON, child_env, require

from campaign import LedgerError, checkpointed_map, read_ledger
from campaign._array._workdir import task_key
from campaign._ledger._journal import encode
from campaign._ledger._paths import LedgerPaths

STRANGER = "diffsoup-stranger"
SHARE = "diffsoup-share"


def fit(item):
    if item["x"] == 2:
        raise ValueError("b diverged")
    return {"y": item["x"] * 10}


@pytest.fixture(scope="module")
def stranger() -> str:
    require(os.geteuid() == 0, "a second local user needs root (useradd)")
    require(shutil.which("useradd") is not None and shutil.which("runuser") is not None,
            "useradd and runuser (util-linux, passwd)")
    try:
        pwd.getpwnam(STRANGER)
    except KeyError:
        subprocess.run(["groupadd", "-f", SHARE], check=True)
        subprocess.run(["useradd", "--no-create-home", "-G", SHARE, STRANGER], check=True)
    return STRANGER


@pytest.fixture
def scratch(stranger):
    """A sticky world-writable folder both users reach, with a finished ledger of the owner
    in it (a and c accepted, b failed), private (``chmod 600``)."""
    folder = Path(tempfile.mkdtemp(prefix="diffsoup-scratch-", dir="/tmp"))
    folder.chmod(0o1777)
    ledger = folder / "runs.json"
    checkpointed_map(fit, [{"task_id": t, "x": i + 1} for i, t in enumerate("abc")],
                     ledger_path=ledger)
    ledger.chmod(0o600)
    yield ledger
    shutil.rmtree(folder)


def as_stranger(*command: str) -> None:
    subprocess.run(["runuser", "-u", STRANGER, "--", *command], check=True,
                   capture_output=True, text=True)


def plant(src_bytes: bytes, dst: Path) -> None:
    """Write ``dst`` as the second user (its own process), from bytes the owner prepared."""
    src = dst.parent / f".plant-{os.getpid()}-{time.time_ns()}"
    src.write_bytes(src_bytes)
    src.chmod(0o644)
    as_stranger("cp", str(src), str(dst))
    src.unlink()
    assert dst.stat().st_uid == pwd.getpwnam(STRANGER).pw_uid


def campaign(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "campaign._cli", *args], env=child_env(),
                          capture_output=True, text=True, timeout=120)


def assert_refused(ledger: Path, planted: Path, before: bytes, *, journal: bool) -> None:
    """Every reader and the next run refuse ``planted``, by name; the ledger is unchanged.
    (`read_ledger` reads the file and its journal only: a ``.work/`` file it never reads.)"""
    if journal:
        with pytest.raises(LedgerError, match=str(planted)) as info:
            read_ledger(ledger)
        assert "owned by diffsoup-stranger" in str(info.value)
    else:
        assert read_ledger(ledger)["tasks"]["b"]["status"] == "failed"
    for command in ("results", "status"):
        proc = campaign(command, str(ledger))
        assert proc.returncode == 2, (command, proc)
        assert str(planted) in proc.stderr and "1000" not in proc.stdout
    with pytest.raises(LedgerError, match=str(planted)):
        checkpointed_map(fit, [{"task_id": t, "x": i + 1} for i, t in enumerate("abc")],
                         ledger_path=ledger)
    assert ledger.read_bytes() == before


def forged_record(ledger: Path) -> tuple[str, bytes]:
    """The ledger's generation and task b's record turned accepted with y = 1000."""
    doc = orjson.loads(ledger.read_bytes())
    rec = dict(doc["tasks"]["b"], status="accepted", result={"y": 1000}, error=None)
    return doc["generation"], b'"b":' + orjson.dumps(rec)


def test_a_planted_journal_is_refused(scratch):
    before = scratch.read_bytes()
    generation, part = forged_record(scratch)
    planted = LedgerPaths.of(scratch).journal
    plant(encode(generation, time.time(), [part]), planted)
    assert_refused(scratch, planted, before, journal=True)


def test_a_planted_work_folder_is_refused(scratch):
    before = scratch.read_bytes()
    _, part = forged_record(scratch)
    root = LedgerPaths.of(scratch).work
    as_stranger("mkdir", "-p", str(root / "s1" / "fragments"))
    fragment = b'{"owner": {}, "records": {' + part + b"}}"
    plant(fragment, root / "s1" / "fragments" / "1-w-1-1-x.json")
    assert_refused(scratch, root, before, journal=False)


def test_a_fragment_and_a_lease_in_folders_left_open_are_refused(scratch):
    before = scratch.read_bytes()
    _, part = forged_record(scratch)
    root = LedgerPaths.of(scratch).work
    fragments = root / "s1" / "fragments"
    fragments.mkdir(parents=True)
    root.chmod(0o755)  # as folders were made before they were private
    (root / 's1').chmod(0o755)
    fragments.chmod(0o1777)  # the owner's mistake: the second user can add files
    planted = fragments / "1-w-1-1-x.json"
    plant(b'{"owner": {}, "records": {' + part + b"}}", planted)
    assert_refused(scratch, planted, before, journal=False)
    planted.unlink()

    leases = root / "leases"
    leases.mkdir()
    leases.chmod(0o1777)
    lease = {"task_id": "b", "owner": {"worker": "evil", "host": "h", "pid": 1},
             "claimed": time.time(), "heartbeat": time.time(), "expires": time.time() + 3600}
    planted = leases / f"{task_key('b')}.json"
    plant(orjson.dumps(lease), planted)
    proc = campaign("forget", str(scratch), "b")  # reads the leases: a live one would refuse
    assert proc.returncode == 2 and str(planted) in proc.stderr, proc
    assert scratch.read_bytes() == before


def test_rewrites_keep_the_mode_group_and_acl(scratch, stranger):
    share = subprocess.run(["getent", "group", SHARE], capture_output=True, text=True,
                           check=True).stdout.split(":")[2]
    os.chown(scratch, -1, int(share))
    scratch.chmod(0o640)
    require(shutil.which("setfacl") is not None, "setfacl (Debian's acl)")
    subprocess.run(["setfacl", "-m", f"u:{STRANGER}:r", str(scratch)], check=True)
    items = [{"task_id": t, "x": i + 1} for i, t in enumerate("abcd")]  # d: new, a write
    checkpointed_map(fit, items, ledger_path=scratch)
    proc = campaign("forget", str(scratch), "b")  # a rewrite, and a backup of the old file
    assert proc.returncode == 0, proc.stderr
    assert "d" in read_ledger(scratch)["tasks"] and "b" not in read_ledger(scratch)["tasks"]
    backup = next(scratch.parent.glob("runs.before-forget-*.json"))
    for path in (scratch, backup):
        st = path.stat()
        assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_gid == int(share), path
        shown = subprocess.run(["getfacl", "-c", str(path)], capture_output=True, text=True,
                               check=True).stdout
        assert f"user:{STRANGER}:r--" in shown, (path, shown)


def test_work_folders_are_private_and_journals_follow_the_ledger(scratch):
    from campaign._array._plan import plan_submission

    items = [{"task_id": t, "x": i + 1} for i, t in enumerate("abcz")]
    plan_submission(items, ledger_path=scratch).record()  # creates runs.json.work/<id>/
    root = LedgerPaths.of(scratch).work
    folders = [root, *[p for p in root.rglob("*") if p.is_dir()]]
    assert folders and all(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in folders), [
        (p, oct(p.stat().st_mode)) for p in folders]
    assert stat.S_IMODE(scratch.stat().st_mode) == 0o600
    journal = LedgerPaths.of(scratch).journal
    journal.unlink(missing_ok=True)

    def slow(item):
        time.sleep(0.05)
        return {"y": item["x"]}

    # a run's journal is created with the ledger's bits (0600 here), whatever the umask
    old = os.umask(0o022)
    try:
        seen = []

        def watch(item):
            if journal.exists():
                seen.append(stat.S_IMODE(journal.stat().st_mode))
            return slow(item)

        shutil.rmtree(root)
        checkpointed_map(watch, [{"task_id": f"n{i}", "x": i} for i in range(40)],
                         ledger_path=scratch)
    finally:
        os.umask(old)
    assert seen and set(seen) == {0o600}, seen
