"""The test bed itself (scripts/sharedfs.sh): each kind's two views show one folder, and locks
exclude across them only where the kind says so. The other tests here rely on both."""

from __future__ import annotations

import fcntl

import pytest
from sharedfskit import KINDS, LOCKLESS


@pytest.mark.parametrize("kind", KINDS)
def test_two_views_of_one_folder(views, kind):
    a, b, _ = views(kind)
    (a / "from-a").write_bytes(b"written through A")
    assert (b / "from-a").read_bytes() == b"written through A"
    with open(a / "lock", "w") as fa, open(b / "lock", "w") as fb:
        fcntl.flock(fa, fcntl.LOCK_EX)
        try:
            fcntl.flock(fb, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            excluded = True
        else:
            excluded = False
    assert excluded == (kind not in LOCKLESS)
