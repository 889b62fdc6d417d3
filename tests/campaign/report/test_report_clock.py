"""The report's time axis cuts the idle gaps between runs (`campaign._report._clock`), so that a
campaign resumed after long pauses fills its progress, throughput and timeline plots."""

from __future__ import annotations

import time

import numpy as np
import pytest
from report_data.browser import page_source
from report_data.report_task import run

from campaign import checkpointed_map, write_report
from campaign._report import _clock, _data, _plots


def test_gaps_longer_than_the_bound_are_cut_and_the_rest_kept():
    begins = np.array([0.0, 1.5, 100.0, 500.0, 0.2])
    ends = np.array([1.0, 2.0, 101.0, 502.0, 0.9])  # the last lies inside the first
    assert _clock.busy_spans(begins, ends).tolist() == [[0, 1], [1.5, 2], [100, 101], [500, 502]]
    clock = _clock.make_clock(begins, ends)
    busy = 4.5
    shown = _clock.GAP_SHOWN * busy
    assert [c.seconds for c in clock.cuts] == [98.0, 399.0]  # the 0.5 s gap is kept
    at = clock(np.array([0.0, 1.25, 2.0, 100.0, 101.0, 500.0, 502.0]))
    assert at == pytest.approx([0, 1.25, 2, 2 + shown, 3 + shown, 3 + 2 * shown, 5 + 2 * shown])
    assert [c.at for c in clock.cuts] == pytest.approx([2 + shown / 2, 3 + 1.5 * shown])
    inside = np.sort(np.concatenate([np.random.default_rng(0).uniform(a, b, 50)
                                     for a, b in _clock.busy_spans(begins, ends)]))
    assert np.all(np.diff(clock(inside)) >= 0)  # the axis keeps the order of times


def test_without_a_long_gap_the_axis_is_the_clock():
    clock = _clock.make_clock(np.array([10.0, 10.5]), np.array([10.4, 11.0]))
    assert not clock.cut and clock(np.array([2.0])).tolist() == [2000.0]  # datetime ms


def test_a_campaign_run_three_times_with_pauses_is_drawn_without_them(tmp_path):
    ledger = tmp_path / "resumed.json"
    for n in (3, 6, 9):  # three runs, each adding three tasks, with idle pauses between
        checkpointed_map(run, [{"task_id": f"t{i}", "x": i} for i in range(n)],
                         ledger_path=ledger)
        time.sleep(1.5)
    data = _data.load(ledger, time.time())
    clock = _plots.clock_of(data)
    assert len(clock.cuts) == 2 and all(c.seconds > 1.0 for c in clock.cuts)
    shown = clock(data.ended[np.isfinite(data.ended)])
    first = clock(np.array([min(r["started"] for r in data.runs)]))[0]
    span = shown.max() - first
    wall = float(np.nanmax(data.ended)) - min(r["started"] for r in data.runs)
    assert span < 0.5 * wall  # the pauses (3 s of the wall time) are left out
    for fig in (_plots.progress(data, clock), _plots.throughput(data, clock=clock),
                _plots.timeline(data, clock)[0]):
        assert "2 idle gap(s) between runs cut" in _plots.title_of(fig)
        assert fig.xaxis[0].axis_label == "running time (s)"
    write_report(ledger, tmp_path / "resumed.html")
    assert "idle gap(s) between runs cut" in page_source(tmp_path / "resumed.html")


def test_histograms_say_what_they_left_out_and_count_in_whole_numbers():
    values = np.array([1.0, 2.0, 2.5, np.nan, np.inf, 3.0])
    fig = _plots.histogram(values, "result y", "y")
    assert _plots.title_of(fig) == "result y (4 values; 2 NaN or infinite left out)"
    assert fig.yaxis[0].ticker.min_interval == 1


@pytest.mark.parametrize("high, unit, factor", [
    (5e-5, "µs", 1e6), (0.5, "ms", 1e3), (90.0, "s", 1.0), (3600.0, "min", 1 / 60),
    (86400.0, "h", 1 / 3600),
])
def test_a_histogram_of_seconds_reads_in_a_unit_that_suits_them(high, unit, factor):
    values = np.linspace(high / 10, high, 20)
    fig = _plots.histogram(values, "Duration of ended attempts", "duration", seconds=True)
    assert fig.xaxis[0].axis_label == f"duration ({unit})"
    quads = fig.renderers[0].data_source.data
    assert min(quads["left"]) == pytest.approx(values.min() * factor)
    assert max(quads["right"]) == pytest.approx(values.max() * factor)
    # few enough ticks for a plot of the page's grid: the labels do not run into each other
    assert fig.xaxis[0].ticker.desired_num_ticks == _plots._GRID_TICKS


def test_titles_keep_their_detail_on_a_line_of_its_own_and_legends_stay_off_the_data(tmp_path):
    ledger = tmp_path / "l.json"
    checkpointed_map(run, [{"task_id": f"t{i}", "x": i, **({"fail": "KeyError"} if i == 1
                                                           else {})} for i in range(4)],
                     ledger_path=ledger)
    data = _data.load(ledger, time.time())
    fig = _plots.progress(data)
    texts = [t.text for t in fig.above]
    assert texts == ["Progress: tasks accepted and failed so far"]   # one run: nothing cut
    assert fig.title is None and len(fig.legend) == 1 and fig.legend[0] in fig.below
    assert [i.label["value"] for i in fig.legend[0].items] == ["accepted (3)", "failed (1)"]
    bars = _plots.attempts_bar(data)
    assert bars.legend[0] in bars.below and not [r for r in bars.center
                                                 if type(r).__name__ == "Legend"]
    hist = _plots.histogram(data.duration, "Duration", "duration", seconds=True)
    assert [t.text for t in hist.above] == ["4 values", "Duration"]   # detail nearest the plot
