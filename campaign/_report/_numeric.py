"""Numeric columns of dicts streamed chunk by chunk (the accepted tasks' results, their items'
top-level fields), and the choice of which the report plots."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np

#: At most this many numeric result columns (and item fields) are plotted.
MAX_COLUMNS = 12
#: Results looked at to find the result keys (spread over the accepted tasks).
KEY_SAMPLE = 2000


def floats(values: Sequence[Any]) -> np.ndarray:
    """A float column; None -> nan. Where something else than numbers and None is among the
    values (a non-finite float's tag, a string, a list), anything but a number -> nan."""
    try:  # the common case, at numpy's speed (bools and numeric strings read as numbers)
        column = np.array(values, dtype=float)
        if column.ndim == 1:
            return column
    except (TypeError, ValueError):
        pass
    return np.array([v if type(v) is float or type(v) is int else None for v in values],
                    dtype=float)


def _fields(rows: list[Any], keys: tuple[str, ...]) -> list[tuple[Any, ...]]:
    """The values of ``keys`` (present in every row) as one tuple per key."""
    if not rows:
        return [()] * len(keys)
    if len(keys) == 1:
        return [tuple(map(itemgetter(keys[0]), rows))]
    return list(zip(*map(itemgetter(*keys), rows)))


def row_values(rows: list[dict[str, Any]], keys: list[str]) -> list[tuple[Any, ...]]:
    """`_fields`, where some rows may lack some keys (None for those)."""
    try:  # every row has every key: one C-level pass
        return _fields(rows, tuple(keys))
    except KeyError:
        return [tuple(row.get(key) for row in rows) for key in keys]


def spread(n: int, most: int = KEY_SAMPLE) -> list[int]:
    """Up to ``most`` row indices spread evenly over ``n`` rows."""
    return np.unique(np.linspace(0, n - 1, min(n, most)).astype(np.int64)).tolist()


class Numeric:
    """Numeric fields of dicts (the accepted tasks' results, or their items' top-level fields),
    gathered chunk by chunk as float columns, with a sample of the rows that stays evenly spread
    as they stream by: every ``stride``-th row, the stride doubled whenever more than twice
    KEY_SAMPLE rows are kept. `sample` then takes KEY_SAMPLE of them, spread evenly, as
    `spread` takes them of all the rows at once."""

    def __init__(self, exclude: tuple[str, ...] = ()):
        self.exclude = exclude
        self.rows = 0
        self.stride = 1
        self.kept: list[tuple[int, dict[str, float]]] = []  # (row, its numeric fields)
        self.parts: dict[str, list[np.ndarray]] = {}  # the keys with a number, in order seen
        self.keys: set[str] = set()  # every key of the rows so far

    def add(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        exclude, parts, first = self.exclude, self.parts, self.rows
        new = set().union(*rows) - self.keys  # a new key with a number in any row is taken
        for key in [k for k in dict.fromkeys(chain.from_iterable(rows)) if k in new] if new else ():
            self.keys.add(key)
            if key not in exclude and any(type(v) is float or type(v) is int
                                          for v in (row.get(key) for row in rows)):
                parts[key] = [np.full(first, np.nan)] if first else []
        for j in range(-first % self.stride, len(rows), self.stride):
            numbers = {key: value for key, value in rows[j].items() if key not in exclude
                       and (type(value) is float or type(value) is int)}
            self.kept.append((first + j, numbers))
            for key in numbers:
                if key not in parts:  # none before was a number: nan in the rows before
                    parts[key] = [np.full(first, np.nan)] if first else []
        while len(self.kept) > 2 * KEY_SAMPLE:
            self.stride *= 2
            self.kept = [(i, n) for i, n in self.kept if i % self.stride == 0]
        if parts:
            keys = list(parts)
            for key, column in zip(keys, row_values(rows, keys)):
                parts[key].append(floats(column))
        self.rows += len(rows)

    def sample(self) -> tuple[dict[str, set[float]], Counter[str]]:
        """The numbers of each key in the sample, and how many sampled rows have the key."""
        seen: dict[str, set[float]] = {}
        sampled: Counter[str] = Counter()
        for j in spread(len(self.kept)):
            for key, value in self.kept[j][1].items():
                seen.setdefault(key, set()).add(value)
                sampled[key] += 1
        return seen, sampled

    def columns(self) -> dict[str, np.ndarray]:
        """The columns of the keys with a number in the sample."""
        seen, _ = self.sample()
        return {k: np.concatenate(v) if v else np.empty(0) for k, v in self.parts.items()
                if k in seen}

def item_axis(items: Numeric) -> dict[str, np.ndarray]:
    """The numeric top-level item field with the most distinct values in a sample of the items
    (a field of distinct integers, likely an index or a seed, only when no other varies), as
    ``{name: column}``; empty when no numeric field varies."""
    seen, sampled = items.sample()
    varied = [k for k, values in seen.items() if len(values) > 1]
    if not varied:
        return {}
    # integers that are all distinct are most likely an index or a seed: others first
    counters = {k for k in varied if len(seen[k]) == sampled[k]
                and all(type(v) is int for v in seen[k])}
    key = max(varied, key=lambda k: (k not in counters, len(seen[k])))
    return {key: np.concatenate(items.parts[key])}


def numeric_columns(found: Numeric) -> tuple[dict[str, np.ndarray], int]:
    """The numeric result columns (at most MAX_COLUMNS, in the order first seen) with more than
    one finite value (or the only row's); returns them and how many were left out."""
    columns = {}
    for key, column in found.columns().items():
        finite = column[np.isfinite(column)]
        if finite.size and (finite.size > 1 or found.rows == 1):
            columns[key] = column
    names = list(columns)
    return {k: columns[k] for k in names[:MAX_COLUMNS]}, max(0, len(names) - MAX_COLUMNS)
