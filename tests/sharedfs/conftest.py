"""Two "nodes" that see one folder through views of their own (scripts/sharedfs.sh): the ledger on
a shared file system as a cluster's nodes see it, locks that do not exclude and caches that go
stale included.

``views(kind)`` gives a fresh folder of the shared export, seen through the two views of ``kind``
(`sharedfskit.Views`: ``a``, ``b``, ``kind``). The views are mounted once per session, when a test
first asks for them, and unmounted when the session ends.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator

import pytest
from sharedfskit import KINDS, SCRIPT, SharedFS, Views

from testkit import require


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "the shared-FS views need root (FUSE mounts, an sshd of their own)"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse: this machine has no FUSE"
    for tool, package in (("bindfs", "bindfs"), ("sshfs", "sshfs"), ("fusermount", "fuse3"),
                          ("ssh-keygen", "openssh-client")):
        if shutil.which(tool) is None:
            return f"{tool} not found (apt-get install {package})"
    if shutil.which("sshd") is None and not os.path.exists("/usr/sbin/sshd"):
        return "sshd not found (apt-get install openssh-server)"
    return None


@pytest.fixture(scope="session")
def sharedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedFS]:
    missing = _missing()
    require(missing is None, missing or "")
    base = tmp_path_factory.mktemp("sharedfs")
    export, mounts = base / "export", base / "mnt"
    export.mkdir()
    up = subprocess.run(["bash", str(SCRIPT), "up", str(export), str(mounts)],
                        capture_output=True, text=True, timeout=120)
    if up.returncode != 0:
        pytest.fail(f"{SCRIPT} up failed (exit {up.returncode}):\n{up.stdout}{up.stderr}")
    try:
        yield SharedFS(export, mounts, up.stdout)
    finally:
        down = subprocess.run(["bash", str(SCRIPT), "down", str(mounts)],
                              capture_output=True, text=True, timeout=120)
        if down.returncode != 0:
            pytest.fail(f"{SCRIPT} down failed (exit {down.returncode}):\n{down.stderr}")


@pytest.fixture
def views(sharedfs: SharedFS, request: pytest.FixtureRequest) -> Callable[[str], Views]:
    """``views(kind)``: a fresh folder of the export seen through the two views of ``kind``."""
    def make(kind: str) -> Views:
        if kind not in sharedfs.kinds:
            raise ValueError(f"no view kind {kind!r}; scripts/sharedfs.sh mounts {KINDS}")
        return sharedfs.folder(kind, request.node.name.replace("/", "_"))
    return make
