"""Rows functions of the lsq tests, importable by worker processes (module-level functions)."""

from __future__ import annotations

import os
import time

import numpy as np

COLS = 6
ROWS = 20


def exact(i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Block ``i``: 20 rows (4 energy rows, group 0, weight 30; 16 force rows, group 1)."""
    rng = np.random.default_rng(i)
    A = rng.standard_normal((ROWS, COLS))
    y = rng.standard_normal(ROWS)
    groups = (np.arange(ROWS) >= 4).astype(int)
    return A, y, np.where(groups == 0, 30.0, 1.0), groups


def counted_rows(item: dict) -> tuple:
    """`exact` after appending ``"<task_id> <pid>"`` to ``item["log"]`` (O_APPEND: one whole
    line per call) and burning ``item["cpu"]`` seconds of CPU."""
    fd = os.open(item["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{item['task_id']} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    end = time.process_time() + item.get("cpu", 0.0)
    while time.process_time() < end:
        pass
    return exact(item["i"])


def stacked(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Blocks 0..n-1 as one matrix (the reference for the solvers)."""
    parts = [exact(i) for i in range(n)]
    A, y, w, groups = (np.concatenate([p[k] for p in parts]) for k in range(4))
    return A, y, w, groups
