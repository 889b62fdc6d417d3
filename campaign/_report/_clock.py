"""The time axis of the report's progress, throughput and timeline plots, with the idle gaps
between runs cut out.

A campaign resumed several times spends most of its wall time between runs; drawn on the clock,
each plot would be mostly the empty gaps. `Clock` maps Unix times onto an axis of running time:
the busy spans (each run's, from its start, and every attempt's) are laid end to end, and a gap
longer than `GAP_CUT` of the busy time (and than `GAP_MIN` seconds) is drawn as a narrow band of
`GAP_SHOWN` of it, marked on the plots. Without such a gap the axis is the clock itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: A gap is cut when it is longer than this share of the busy time ...
GAP_CUT = 0.05
#: ... and than this many seconds.
GAP_MIN = 1.0
#: A cut gap is drawn this wide, as a share of the busy time.
GAP_SHOWN = 0.02


@dataclass(frozen=True)
class Cut:
    """A gap between busy spans that the axis leaves out: where it is drawn (axis seconds) and
    how long it really was."""

    at: float
    seconds: float


@dataclass(frozen=True)
class Clock:
    """Unix times -> the report's time axis (`__call__`). ``cuts`` empty: the axis is the clock
    (a datetime axis, in milliseconds); else it is seconds of running time from the first start,
    the gaps in ``cuts`` left out."""

    starts: np.ndarray  # each busy span's start (Unix seconds), ascending
    offsets: np.ndarray  # where each span starts on the axis
    cuts: tuple[Cut, ...]

    @property
    def cut(self) -> bool:
        return bool(self.cuts)

    def __call__(self, times: np.ndarray) -> np.ndarray:
        times = np.asarray(times, dtype=np.float64)
        if not self.cuts:
            return times * 1000.0  # what a datetime axis takes
        at = np.clip(np.searchsorted(self.starts, times, side="right") - 1, 0, None)
        return self.offsets[at] + (times - self.starts[at])

    def seconds(self, duration: float) -> float:
        """A length of time as the axis measures it (its unit: ms on the clock, else s)."""
        return duration * (1.0 if self.cuts else 1000.0)


def busy_spans(begins: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The union of the intervals ``[begins[i], ends[i]]`` (finite ones), as sorted, disjoint
    ``(k, 2)`` rows."""
    ok = np.isfinite(begins) & np.isfinite(ends)
    b, e = begins[ok], np.maximum(ends[ok], begins[ok])
    if b.size == 0:
        return np.empty((0, 2))
    order = np.argsort(b, kind="stable")
    b, e = b[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(b.size, dtype=bool)
    new[0] = True
    new[1:] = b[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, b.size - 1)
    return np.column_stack([b[first], reach[last]])


def make_clock(begins: np.ndarray, ends: np.ndarray) -> Clock:
    """The axis for busy intervals ``[begins, ends]`` (runs and attempts): the gaps between
    their union's spans that `GAP_CUT` and `GAP_MIN` call idle are cut."""
    spans = busy_spans(np.asarray(begins, dtype=np.float64), np.asarray(ends, dtype=np.float64))
    if len(spans) < 2:
        return Clock(np.zeros(1), np.zeros(1), ())
    busy = float(np.sum(spans[:, 1] - spans[:, 0]))
    gaps = spans[1:, 0] - spans[:-1, 1]
    cut = gaps > max(GAP_MIN, GAP_CUT * busy)
    if not cut.any():
        return Clock(np.zeros(1), np.zeros(1), ())
    shown = max(GAP_SHOWN * busy, 1e-3)
    # the axis keeps every gap not cut, so spans are joined where the gap is kept
    starts, offsets, cuts = [spans[0, 0]], [0.0], []
    position = spans[0, 1] - spans[0, 0]
    for i, gap in enumerate(gaps):
        if cut[i]:
            cuts.append(Cut(position + shown / 2, float(gap)))
            position += shown
            starts.append(spans[i + 1, 0])
            offsets.append(position)
        else:
            position += gap
        position += spans[i + 1, 1] - spans[i + 1, 0]
    return Clock(np.array(starts), np.array(offsets), tuple(cuts))
