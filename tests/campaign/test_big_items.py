"""A ledger holding one big item is read in time linear in its size: the streaming reader
(`campaign status`, `results`, a driver's load) looks at each byte a bounded number of times,
however long one record is. Measured as the bytes the reader's record splitting is handed
(what its work is proportional to), not as seconds: the property holds on a busy machine too."""

from __future__ import annotations

import pytest

from campaign import checkpointed_map
from campaign._ledger import _scan
from campaign._ledger._storeload import load


def one_big_item(tmp_path, mb: int):
    ledger = tmp_path / f"l{mb}.json"
    items = [{"task_id": "small", "x": 1}, {"task_id": "big", "blob": "x" * (mb << 20)},
             {"task_id": "after", "x": 2}]
    checkpointed_map(lambda item: {"y": 1}, items, ledger_path=ledger)
    return ledger


def bytes_split(monkeypatch, read) -> int:
    """The bytes `Scan._split` is handed while ``read()`` runs."""
    handed = 0
    split = _scan.Scan._split

    def counting(self, buf, plain):
        nonlocal handed
        handed += len(buf)
        return split(self, buf, plain)

    monkeypatch.setattr(_scan.Scan, "_split", counting)
    read()
    monkeypatch.setattr(_scan.Scan, "_split", split)
    return handed


@pytest.mark.slow
def test_twice_the_item_is_twice_the_work(tmp_path, monkeypatch):
    work = {}
    for mb in (16, 32):
        ledger = one_big_item(tmp_path, mb)

        def read(ledger=ledger):
            doc, _ = load(ledger)
            assert sorted(doc["tasks"]) == ["after", "big", "small"]
            seen = {}
            for tasks, _ in _scan.Scan(ledger).blocks():
                seen.update(tasks)
            assert seen["big"]["status"] == "accepted" and len(seen) == 3

        work[mb] = bytes_split(monkeypatch, read)
    assert work[32] <= 2.2 * work[16], work  # was 4x: the buffer re-scanned per 64 KB block
    assert work[32] <= 8 * (32 << 20), work  # a few passes over the file, not hundreds
