"""`campaign report`'s CPU use and peak memory against what each run requested.

The runs are real (`checkpointed_map` with the serial scheduler, which measures each attempt's
CPU time and peak RSS); one of them is told, through `Scheduler.requested`, what a resource
manager gave its workers, as execution="slurm" and `campaign submit` tell theirs (their
recording is checked on a real Slurm in tests/schedulers/slurm and tests/campaign/arrays).
"""

from __future__ import annotations

import html
import re
import time

import numpy as np

from report_data.browser import page_source

from campaign import checkpointed_map, read_ledger, write_report
from campaign._report import _data, _page, _plots
from schedulers import SerialScheduler

REQUEST = {"cpus": 2, "memory_bytes": 4 << 30}


class GivenTwoCores(SerialScheduler):
    """The serial scheduler, as if a resource manager had given it two CPUs and 4 GiB."""

    def requested(self) -> dict[str, int]:
        return dict(REQUEST)


def spin(item):
    """Busy for ``item["s"]`` seconds of wall time (one core), then a result."""
    end = time.perf_counter() + item["s"]
    n = 0
    while time.perf_counter() < end:
        n += 1
    return {"n": n}


def plot_titles(ledger) -> list[str]:
    """The titles of the page's plots, each with its detail line."""
    return [_plots.title_of(f) for f in _page.sections(_data.load(ledger, time.time())).figures]


def page_notes(page: str) -> str:
    return " ".join(html.unescape(m) for m in re.findall(r'<p class="note">(.*?)</p>', page))


def expected(ledger, cpus: float, memory: float | None):
    recs = [r for r in read_ledger(ledger)["tasks"].values() if r.get("cpu_s") is not None]
    cpu = np.array([100 * r["cpu_s"] / ((r["ended"] - r["started"]) * cpus) for r in recs])
    mem = (None if memory is None else
           np.array([100 * r["peak_rss_bytes"] / memory for r in recs]))
    return cpu, mem


def test_each_attempt_is_set_against_what_its_run_requested(tmp_path):
    ledger = tmp_path / "given.json"
    items = [{"task_id": f"t{i}", "s": 0.02 * (i + 1)} for i in range(6)]
    camp = checkpointed_map(spin, items, ledger_path=ledger, execution=GivenTwoCores())
    assert camp.complete
    assert read_ledger(ledger)["runs"][-1]["requested"] == REQUEST
    page = tmp_path / "given.html"
    write_report(ledger, page)
    text = page_source(page)
    assert {"CPU use of attempts (6 values)", "Peak memory of attempts against the request "
            "(6 values)"} <= set(plot_titles(ledger))
    assert "% of the CPUs requested" in text
    notes = page_notes(text)
    cpu, mem = expected(ledger, REQUEST["cpus"], REQUEST["memory_bytes"])
    assert (f"CPU use, against the CPUs their runs requested: median {np.median(cpu):.0f} %, "
            f"{int((cpu < 50).sum())} of 6 attempts under 50 %.") in notes, notes
    assert (f"Peak memory against the memory requested: median {np.median(mem):.0f} %, "
            f"largest {mem.max():.0f} %, {int((mem > 90).sum())} of 6 attempts over 90 %."
            ) in notes, notes


def test_a_local_run_is_set_against_one_core_and_says_no_memory_was_requested(tmp_path):
    ledger = tmp_path / "local.json"
    items = [{"task_id": f"t{i}", "s": 0.02} for i in range(4)]
    checkpointed_map(spin, items, ledger_path=ledger)
    assert "requested" not in read_ledger(ledger)["runs"][-1]
    page = tmp_path / "local.html"
    write_report(ledger, page)
    text = page_source(page)
    assert "CPU use of attempts (4 values)" in plot_titles(ledger) and "% of one core" in text
    assert "against the request" not in text
    notes = page_notes(text)
    cpu, _ = expected(ledger, 1, None)
    assert f"CPU use, against one core (no run requested CPUs): median {np.median(cpu):.0f} %" \
        in notes, notes
    assert "No run requested memory" in notes


def test_runs_with_and_without_a_request_are_each_set_against_their_own(tmp_path):
    ledger = tmp_path / "both.json"
    checkpointed_map(spin, [{"task_id": f"a{i}", "s": 0.02} for i in range(3)],
                     ledger_path=ledger)
    checkpointed_map(spin, [{"task_id": f"a{i}", "s": 0.02} for i in range(3)]
                     + [{"task_id": f"b{i}", "s": 0.02} for i in range(3)],
                     ledger_path=ledger, execution=GivenTwoCores())
    page = tmp_path / "both.html"
    write_report(ledger, page)
    text = page_source(page)
    recs = read_ledger(ledger)["tasks"]
    cpu = np.array([100 * r["cpu_s"] / ((r["ended"] - r["started"])
                                        * (2 if tid.startswith("b") else 1))
                    for tid, r in recs.items()])
    notes = page_notes(text)
    assert ("CPU use, against the CPUs requested, or one core where a run requested none: "
            f"median {np.median(cpu):.0f} %") in notes, notes
    # only the second run's three attempts had a memory request
    assert "Peak memory of attempts against the request (3 values)" in plot_titles(ledger)
