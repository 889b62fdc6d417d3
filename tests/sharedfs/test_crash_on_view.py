"""The crash loop of tests/campaign/test_crash.py (200 SIGKILLs of a serial driver at random
moments, each followed by every check of that module) with the ledger on a caching view of a
shared folder: bindfs with 3 s of attribute and entry caching and no lock forwarding, where a
file replaced by rename may be looked up stale and the locks are the view's own."""

from __future__ import annotations

import sys

import pytest
from testkit import ROOT

sys.path.insert(0, str(ROOT / "tests" / "campaign"))  # the crash loop and its child
import test_crash as crash  # noqa: E402


@pytest.mark.slow
@pytest.mark.both_cores
@pytest.mark.timeout(1800)
def test_sigkill_at_random_moments_loses_nothing_on_a_caching_view(views):
    folder = views("bindfs-nolock").a
    drivers = crash.Drivers()
    try:
        summary = crash.Loop("serial", folder, drivers).run()
    finally:
        drivers.stop()
    print(f"\non bindfs-nolock: {summary}")
