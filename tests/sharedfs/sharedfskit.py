"""What the shared-file-system tests share: the kinds of views scripts/sharedfs.sh mounts and
`Views`, one folder of the shared export as two "nodes" see it (tests/sharedfs/conftest.py
mounts them and gives them to tests as ``views(kind)``)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from testkit import ROOT

SCRIPT = ROOT / "scripts" / "sharedfs.sh"
#: Every kind of view scripts/sharedfs.sh mounts.
KINDS = ("bindfs-nolock", "bindfs-locks", "bindfs-kcache", "sshfs")
#: The kinds whose locks (flock, fcntl) taken through one view do not exclude the other's.
LOCKLESS = ("bindfs-nolock", "sshfs")
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
