"""The crash loop of tests/campaign/test_crash.py (200 SIGKILLs of a serial driver at random
moments, each followed by every check of that module) with the ledger on a caching view of a
shared folder: bindfs with ``kernel_cache`` (a file's pages kept across opens) and 3 s of
attribute and entry caching, where a file replaced by rename may be looked up stale. (Run on
bindfs without lock forwarding too: 200 kills, 120 tasks accepted, none lost.)"""

from __future__ import annotations

import sys

import pytest
from testkit import ROOT

sys.path.insert(0, str(ROOT / "tests" / "campaign"))  # the crash loop and its child
import test_crash as crash


@pytest.mark.slow
@pytest.mark.both_cores
@pytest.mark.timeout(1800)
def test_sigkill_at_random_moments_loses_nothing_on_a_caching_view(views):
    kind = "bindfs-kcache"
    folder = views(kind).a
    drivers = crash.Drivers()
    try:
        summary = crash.Loop("serial", folder, drivers).run()
    finally:
        drivers.stop()
    print(f"\non {kind}: {summary}")
