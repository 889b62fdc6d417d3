"""The mean task duration a scheduler sizes its dispatch by (batches, tasks held ahead)."""

from __future__ import annotations


class RunningMean:
    """The mean of the last ~``window`` values: an exact mean until ``window`` values were seen,
    then an exponential one with weight ``1 / window``, so that it follows a campaign whose
    tasks change speed."""

    __slots__ = ("seen", "value", "window")

    def __init__(self, window: int) -> None:
        if window < 1:
            raise ValueError(f"RunningMean(window=...) must be at least 1, got {window!r}")
        self.value, self.seen, self.window = 0.0, 0, window

    def add(self, x: float) -> float:
        self.seen += 1
        self.value += (x - self.value) / min(self.seen, self.window)
        return self.value

    def __bool__(self) -> bool:
        """True once a value was seen."""
        return self.seen > 0
