"""What a page leaves to its reader, for tests/test_docs_blocks.py's ``given`` markers: a
user's ``fit`` (importable by name, so that workers on other hosts import it from here: the
default job prologue puts this folder on their PYTHONPATH) and its ``items``."""

from __future__ import annotations


def fit(item):
    """A fit of one item: a flat dict of plain values."""
    return {"D": 0.5 * item["temperature"], "converged": True}


items = [{"task_id": f"T{t}", "temperature": t} for t in (300, 310, 320, 330)]
