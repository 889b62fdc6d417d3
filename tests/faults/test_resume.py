"""A resumed run says what it kept; a finished campaign resumed starts nothing and writes nothing.

Real components: a real dask scheduler (asked for, never started), the real `campaign` command.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys

import distributed
import pytest

from campaign import checkpointed_map, read_ledger
from testkit import child_env


def square(item):
    return {"y": item["x"] ** 2}


def items_of(n):
    return [{"task_id": f"t{i}", "x": i} for i in range(n)]


def file_state(path):
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


@pytest.fixture
def clusters(monkeypatch):
    """Every dask cluster created while the test runs (the embedded one is a SpecCluster)."""
    made = []
    real = distributed.SpecCluster.__init__

    def counting(self, *args, **kwargs):
        made.append(type(self).__name__)
        real(self, *args, **kwargs)

    monkeypatch.setattr(distributed.SpecCluster, "__init__", counting)
    return made


def test_a_resume_says_how_many_tasks_were_kept_and_how_many_run_now(ledger, caplog):
    checkpointed_map(square, items_of(2), ledger_path=ledger)
    with caplog.at_level(logging.INFO, logger="campaign"):
        camp = checkpointed_map(square, items_of(5), ledger_path=ledger)
    assert (camp.kept, camp.ran) == (2, 3) and camp.complete
    assert camp.summary == "2 kept from the ledger, 3 ran now"
    assert camp.elapsed >= 0
    assert "5 tasks, 2 kept from the ledger (accepted earlier), 3 to run now" in caplog.text


def test_a_finished_campaign_resumed_starts_no_cluster_and_writes_nothing(ledger, caplog,
                                                                          clusters):
    first = checkpointed_map(square, items_of(4), ledger_path=ledger)
    assert (first.kept, first.ran) == (0, 4)
    before = file_state(ledger)
    calls = []
    with caplog.at_level(logging.INFO, logger="campaign"):
        camp = checkpointed_map(lambda it: calls.append(it) or {"y": -1}, items_of(4),
                                ledger_path=ledger, execution="dask")
    assert calls == [] and clusters == []
    assert file_state(ledger) == before and camp.ledger_writes == 0
    assert camp.complete and camp.results == first.results
    assert (camp.kept, camp.ran) == (4, 0)
    assert camp.summary == "4 kept from the ledger, nothing to run"
    assert "4 tasks, 4 kept from the ledger (accepted earlier), nothing to run" in caplog.text


def test_nothing_left_but_refused_tasks_starts_no_cluster(ledger, clusters):
    checkpointed_map(square, items_of(3), ledger_path=ledger)
    items = items_of(3)
    items[1]["x"] = 10
    camp = checkpointed_map(square, items, ledger_path=ledger, execution="dask")
    assert clusters == [] and (camp.kept, camp.ran) == (2, 0)
    assert camp.refused == ("t1",)
    assert read_ledger(ledger)["runs"][-1]["refused_count"] == 1  # the refusal is recorded


def test_a_failed_task_left_is_not_nothing_to_run(ledger):
    """Only every task accepted is nothing to run: a failed one runs again."""
    checkpointed_map(lambda it: 1 / 0 if it["x"] == 1 else square(it), items_of(3),
                     ledger_path=ledger)
    camp = checkpointed_map(square, items_of(3), ledger_path=ledger)
    assert camp.complete and (camp.kept, camp.ran) == (2, 1)
    assert camp.ledger_writes >= 1


def campaign_run(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "campaign._cli", "run", *args], cwd=tmp_path,
                          env=child_env(), capture_output=True, text=True, timeout=120)


def test_campaign_run_on_a_finished_ledger_prints_nothing_to_run_and_exits_0(tmp_path):
    (tmp_path / "model.py").write_text("def fit(item):\n    return {'y': item['x'] * 2}\n")
    (tmp_path / "items.json").write_text('[{"task_id": "a", "x": 1}, {"task_id": "b", "x": 2}]')
    args = ("model.py:fit", "--items", "items.json", "--ledger", "l.json", "--progress", "off")
    first = campaign_run(tmp_path, *args)
    assert first.returncode == 0, first.stderr
    assert "2/2 accepted" in first.stderr and "(0 kept from the ledger, 2 ran now)" in first.stderr
    before = file_state(tmp_path / "l.json")
    (tmp_path / "spec.toml").write_text(  # a dask cluster, if one started, would say so
        'target = "model.py:fit"\nitems = "items.json"\nledger = "l.json"\n'
        'execution = "dask"\n[options]\ndashboard = true\n')
    again = campaign_run(tmp_path, "spec.toml", "--progress", "off")
    assert again.returncode == 0, again.stderr
    line = again.stderr.strip()  # the summary is a message (docs/cli.md)
    assert "2/2 accepted" in line and "(2 kept from the ledger, nothing to run)" in line
    assert re.search(r" in \d+(\.\d)?s ", line) and "?" not in line, line  # a time, not "?"
    assert "dask dashboard" not in again.stderr  # no cluster was started
    assert file_state(tmp_path / "l.json") == before
