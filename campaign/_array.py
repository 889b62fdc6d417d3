"""The names of ``<ledger>.work/`` by their earlier module: campaign/_workdir.py (layout,
fragments, merge) and campaign/_leases.py (claim, heartbeat, release) own them now."""

from __future__ import annotations

from pathlib import Path

from . import _workdir
from ._leases import Leases
from ._leases import live_leases as live_leases
from ._workdir import absorb_fragments as absorb_fragments
from ._workdir import fragment_files as fragment_files
from ._workdir import load_fragment as _load_fragment
from ._workdir import merge_fragments as merge_fragments
from ._workdir import overlay as overlay
from ._workdir import task_key as task_key
from ._workdir import work_root as work_root

__all__ = ["WorkDir", "_load_fragment", "absorb_fragments", "fragment_files", "live_leases",
           "merge_fragments", "overlay", "task_key", "work_root"]


class WorkDir(_workdir.WorkDir):
    """A submission's folder with the claims on its tasks (`Leases`) as its own methods."""

    def __init__(self, ledger: Path, submission: str, *, lease_seconds: float = 60.0):
        super().__init__(ledger, submission)
        leases = Leases(self, lease_seconds=lease_seconds)
        self.lease_seconds = lease_seconds
        self.claim = leases.claim
        self.heartbeat = leases.heartbeat
        self.release = leases.release
        self.holders = leases.holders
