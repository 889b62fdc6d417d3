"""How far this host's clock is from the file server's, measured on the leases it writes.

A lease says when it expires by its holder's clock, and other workers judge it by theirs
(docs/cluster.md, "The lease clock"). Clocks are not compared directly: each worker compares its
own with the file server's, which stamps every file it writes (``mtime``, set by the server on
NFS, Lustre, GPFS, BeeGFS and sshfs). A lease written between ``before`` and ``after`` by this
host's clock whose ``mtime`` is ``m`` puts this clock ``(before + after) / 2 - m`` ahead of the
server's, give or take half the write's duration (and half a second more where the file system
keeps whole seconds only). Two workers each within ``FRACTION * lease_seconds`` of the server
are within twice that of each other, well inside the ``3/4 * lease_seconds`` a live lease
tolerates; a worker further off warns, once per process.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

logger = logging.getLogger(__name__)

#: The largest skew from the file server's clock a worker accepts without a warning, as a
#: fraction of ``lease_seconds`` (15 s for the default 60 s lease).
FRACTION = 0.25
_warned = False


def measure(before: float, st: os.stat_result) -> dict[str, float]:
    """The skew of this host's clock against the file system's, from a file written at
    ``before`` (this host's clock) and its stat ``st``: ``{"clock", "fs_mtime", "seconds",
    "within"}`` (``seconds`` > 0: this clock is ahead; ``within``: the uncertainty)."""
    after = time.time()
    mtime = st.st_mtime_ns / 1e9
    within = (after - before) / 2
    if st.st_mtime_ns % 1_000_000_000 == 0:  # whole seconds only (sshfs, some NFS servers)
        mtime += 0.5
        within += 0.5
    clock = (before + after) / 2
    return {"clock": clock, "fs_mtime": mtime, "seconds": round(clock - mtime, 3),
            "within": round(within, 3)}


def excess(skew: dict[str, Any] | None, lease_seconds: float) -> float | None:
    """How many seconds ``skew`` (`measure`'s) is surely past ``FRACTION * lease_seconds``, or
    None when it is not (or unknown)."""
    if type(skew) is not dict:
        return None
    try:
        over = abs(skew["seconds"]) - skew["within"] - FRACTION * lease_seconds
    except (KeyError, TypeError):
        return None
    return over if over > 0 else None


def warn_once(skew: dict[str, float], lease_seconds: float, where: str) -> None:
    """Log a warning, the first time in this process, when ``skew`` is past the bound."""
    global _warned
    if _warned or excess(skew, lease_seconds) is None:
        return
    _warned = True
    seconds = skew["seconds"]
    logger.warning(
        "this host's clock is %+.1f s (+- %.1f s) off the file server's (measured on %s: "
        "written at %.3f by this clock, stamped %.3f by the file system); leases of %g s "
        "tolerate %g s (lease_seconds * %g): past that, a live worker's task can be taken "
        "over and run twice. Fix: synchronise the hosts' clocks (NTP), or make lease_seconds "
        "more than %g s", seconds, skew["within"], where, skew["clock"], skew["fs_mtime"],
        lease_seconds, FRACTION * lease_seconds, FRACTION, abs(seconds) / FRACTION)


def skewed(leases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The holders of ``leases`` whose last measured skew (the lease's ``clock_skew``) is past
    the bound of their lease: ``{"worker", "host", "seconds", "within", "lease_seconds"}``, one
    per worker (the largest), for `campaign status`."""
    found: dict[tuple[Any, Any], dict[str, Any]] = {}
    for lease in leases:
        skew: Any = lease.get("clock_skew")
        try:
            lease_seconds = float(lease["expires"]) - float(lease["heartbeat"])
        except (KeyError, TypeError, ValueError):
            continue
        if excess(skew, lease_seconds) is None:
            continue
        owner: Any = lease.get("owner") if type(lease.get("owner")) is dict else {}
        key = (owner.get("host"), owner.get("worker"))
        have = found.get(key)
        if have is None or abs(skew["seconds"]) > abs(have["seconds"]):
            found[key] = {"worker": key[1], "host": key[0], "seconds": skew["seconds"],
                          "within": skew["within"], "lease_seconds": lease_seconds}
    return list(found.values())
