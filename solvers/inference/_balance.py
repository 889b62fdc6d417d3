"""Assigning experiments to the devices of the ``data`` axis, and balancing them by work."""

from __future__ import annotations

import heapq
import logging
from collections.abc import Sequence

__all__ = ["contiguous", "longest_first"]

logger = logging.getLogger(__name__)


def contiguous(n: int, devices: int) -> list[list[int]]:
    """The initial assignment: experiments in order, ``ceil(n / devices)`` slots per device.

    Devices at the end hold fewer real experiments (their other slots are zero-weight padding).
    """
    slots = -(-n // devices)
    return [list(range(d * slots, min((d + 1) * slots, n))) for d in range(devices)]


def longest_first(work: Sequence[float], devices: int,
                  start: Sequence[float] | None = None) -> list[list[int]]:
    """Longest-processing-time-first assignment with ``ceil(n / devices)`` slots per device.

    Experiments are taken in decreasing order of work, each given to the least-loaded device with a
    free slot (ties: the lower device index), so the devices' sums of work come out close.
    ``start`` is the load each device already carries (from other groups of experiments).
    """
    n = len(work)
    slots = -(-n // devices)
    order = sorted(range(n), key=lambda i: (-work[i], i))
    heap = [(0.0 if start is None else float(start[d]), d) for d in range(devices)]
    heapq.heapify(heap)
    groups: list[list[int]] = [[] for _ in range(devices)]
    full: list[tuple[float, int]] = []
    for i in order:
        load, d = heapq.heappop(heap)
        groups[d].append(i)
        entry = (load + work[i], d)
        if len(groups[d]) < slots:
            heapq.heappush(heap, entry)
        else:
            full.append(entry)
    return [sorted(g) for g in groups]


def loads(groups: Sequence[Sequence[int]], work: Sequence[float]) -> list[float]:
    """The total work of each device under an assignment."""
    return [float(sum(work[i] for i in g)) for g in groups]
