"""The monitor thread's scheduling policy: Linux's ``SCHED_BATCH``, so that a worker's message
does not make the driver preempt that worker on its core.

With its usual share of the CPU, a thread under ``SCHED_BATCH`` is not woken ahead of the
thread that woke it (a socket's wake-up puts the reader on the writer's core), so a worker goes
on with its next task while the driver records the last one. With tasks of 10 ms and a worker
on each of two cores, this and holding more than one task were worth about one point of
efficiency.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

logger = logging.getLogger(__name__)


def set_policy(policy: int) -> bool:
    """Put the calling thread under a non-real-time scheduling ``policy`` (Linux only)."""
    try:
        os.sched_setscheduler(threading.get_native_id(), policy, os.sched_param(0))
    except OSError as exc:
        logger.debug("could not change the monitor thread's scheduling policy: %s", exc)
        return False
    return True


def no_wakeup_preemption() -> bool:
    """Put the calling thread under ``SCHED_BATCH`` if it runs under the default policy (Linux);
    True if it did. Elsewhere, or if refused, nothing changes."""
    if not sys.platform.startswith("linux") or not hasattr(os, "SCHED_BATCH"):
        return False
    if os.sched_getscheduler(0) != os.SCHED_OTHER:  # the user chose a policy: keep it
        return False
    return set_policy(os.SCHED_BATCH)
