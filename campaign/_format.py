"""How the commands and the report write times, durations, rates and counts."""

from __future__ import annotations

import time


def duration(seconds: float | None) -> str:
    """``45s``, ``12m05s``, ``3h02m``, ``2d04h``; ``?`` for None."""
    if seconds is None:
        return "?"
    s = max(0, round(seconds))
    if s < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def timestamp(t: float | None) -> str:
    """A Unix time as local ``YYYY-MM-DD HH:MM:SS``; ``-`` for None."""
    if t is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def rate(per_second: float | None) -> str:
    """``12.3 tasks/s`` or, below one a second, ``4.1 tasks/min``."""
    if not per_second:
        return "? tasks/s"
    if per_second >= 1:
        return f"{per_second:.1f} tasks/s"
    if per_second * 60 >= 1:
        return f"{per_second * 60:.1f} tasks/min"
    return f"{per_second * 3600:.1f} tasks/h"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 task``, ``0 tasks``, ``2 tasks``; ``many``: the plural when it is not word + s."""
    return f"{n} {word if n == 1 else (many or word + 's')}"
