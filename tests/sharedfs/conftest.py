"""Two "nodes" that see one folder through views of their own (scripts/sharedfs.sh): the ledger on
a shared file system as a cluster's nodes see it, locks that do not exclude and caches that go
stale included.

``views(kind)`` gives a fresh folder of the shared export, seen through the two views of ``kind``
(`Views`: ``a``, ``b``, ``kind``). The views are mounted once per session, when a test first asks
for them, and unmounted when the session ends.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from testkit import ROOT, require

SCRIPT = ROOT / "scripts" / "sharedfs.sh"
#: Every kind of view scripts/sharedfs.sh mounts.
KINDS = ("bindfs-nolock", "bindfs-locks", "bindfs-kcache", "sshfs")
#: The kinds whose locks (flock, fcntl) taken through one view do not exclude the other's.
LOCKLESS = ("bindfs-nolock", "bindfs-kcache", "sshfs")
#: The kinds that cache attributes (and with kernel_cache, pages): what reads stale.
CACHING = ("bindfs-nolock", "bindfs-kcache", "sshfs")


class Views(NamedTuple):
    """One folder of the shared export as node A and node B see it."""

    a: Path
    b: Path
    kind: str


class SharedFS:
    """The mounted views of one export folder (scripts/sharedfs.sh up)."""

    def __init__(self, export: Path, mounts: Path, lines: str) -> None:
        self.export = export
        self.mounts = mounts
        self.kinds: dict[str, tuple[Path, Path]] = {}
        for line in lines.splitlines():
            kind, a, b = line.split()
            self.kinds[kind] = (Path(a), Path(b))
        self._count = 0

    def folder(self, kind: str, name: str) -> Views:
        """A new folder in the export (made on the "server", so neither view has cached its
        absence), as seen through the two views of ``kind``."""
        self._count += 1
        sub = f"{self._count:03d}-{name}"[:80]
        (self.export / sub).mkdir()
        a, b = self.kinds[kind]
        return Views(a / sub, b / sub, kind)


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
