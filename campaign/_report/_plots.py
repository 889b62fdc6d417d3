"""The bokeh figures of `campaign report`, each made from numpy columns (`_data.Data`).

Every figure draws at most `MAX_POINTS` points (glyphs): a column with more values is drawn
from an evenly spread (lines) or a seeded random (timeline, scatter) sample of them, and the
figure's title says so. Histograms and bar charts count every value. A figure function returns
None where there is nothing to draw; the page says why instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from bokeh.models import ColumnDataSource, HoverTool
from bokeh.models.annotations import Legend, Span, Title
from bokeh.plotting import figure

from ._clock import Clock, make_clock
from ._data import ACCEPTED, FAILED, INTERRUPTED, MAX_POINTS, RUNNING, STATUSES, Attempts, Data

#: The most lanes (workers) the timeline shows: the busiest ones.
MAX_LANES = 48
#: Colours of the outcomes (pending, running, accepted, failed, interrupted).
COLOURS = ("#9e9e9e", "#1f77b4", "#2ca02c", "#d62728", "#ff7f0e")
_HEIGHT = 280
_TOOLS = "pan,wheel_zoom,box_zoom,reset,save"


#: Ticks on the x axis of a plot in the page's grid (about 420 pixels wide): labels that fit.
_GRID_TICKS = 5


def _figure(title: str, detail: str = "", *, legend: bool = False, **kwargs: Any) -> Any:
    """A figure titled ``title`` with ``detail`` (counts, what was left out, bin widths) on a
    second, lighter line below it, so that a narrow plot cuts neither; with ``legend``, its
    legend (filled by the glyphs' ``legend_label``) goes under the plot, never over the data."""
    kwargs.setdefault("height", _HEIGHT)
    fig = figure(title=None, sizing_mode="stretch_width", tools=_TOOLS, toolbar_location="right",
                 **kwargs)
    if detail:  # the panel nearest the plot: under the title added next
        fig.add_layout(Title(text=detail, text_font_size="11px", text_font_style="normal",
                             text_color="#555555"), "above")
    fig.add_layout(Title(text=title, text_font_size="13px"), "above")
    if legend:
        fig.add_layout(Legend(orientation="horizontal", location="center",
                              border_line_alpha=0), "below")
    fig.toolbar.logo = None
    return fig


def title_of(fig: Any) -> str:
    """The figure's title and its detail, as one line: ``title (detail)``."""
    titles = [str(t.text) for t in fig.above if isinstance(t, Title)][::-1]
    return titles[0] + (f" ({titles[1]})" if len(titles) > 1 else "")


def clock_of(data: Data) -> Clock:
    """The time axis of the progress, throughput and timeline plots: the clock, or running time
    with the idle gaps between runs cut (`campaign._report._clock`). Busy: each run from its
    start to its end (a run without an end: its start), and every attempt."""
    runs = [r for r in data.runs if isinstance(r.get("started"), (int, float))]
    run_begins = np.array([float(r["started"]) for r in runs])
    run_ends = np.array([float(r["ended"]) if isinstance(r.get("ended"), (int, float))
                         else float(r["started"]) for r in runs])
    a = data.attempts
    return make_clock(np.concatenate([run_begins, a.started]),
                      np.concatenate([run_ends, a.ended]))


def _time_figure(title: str, clock: Clock, **kwargs: Any) -> Any:
    """A figure whose x axis is ``clock``'s: the clock (datetime), or running time in seconds
    with each cut gap marked by a dotted line and counted in the title."""
    detail = kwargs.pop("detail", "")
    if not clock.cut:
        return _figure(title, detail, x_axis_type="datetime", **kwargs)
    gaps = clock.cuts
    longest = max(c.seconds for c in gaps)
    cut = f"{len(gaps)} idle gap(s) between runs cut, the longest {longest:.3g} s"
    fig = _figure(title, f"{detail}; {cut}" if detail else cut,
                  x_axis_label="running time (s)", **kwargs)
    for c in gaps:
        fig.add_layout(Span(location=c.at, dimension="height", line_dash="dotted",
                            line_color="#777777"))
    return fig


def sample(n: int, limit: int, *, first: np.ndarray | None = None, seed: int = 0) -> np.ndarray:
    """Sorted indices of at most ``limit`` of ``n`` rows: all rows when they fit, else those
    in ``first`` (a boolean mask; up to half the limit) and a seeded random pick of the rest."""
    if n <= limit:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    keep = np.flatnonzero(first) if first is not None else np.empty(0, dtype=np.int64)
    if keep.size > limit // 2:
        keep = rng.choice(keep, limit // 2, replace=False)
    rest = np.setdiff1d(np.arange(n), keep, assume_unique=True)
    picked = rng.choice(rest, limit - keep.size, replace=False)
    return np.sort(np.concatenate([keep, picked]))


def _of(shown: int, total: int, what: str) -> str:
    return f"{total:,} {what}" if shown == total else f"sample of {shown:,} of {total:,} {what}"


def progress(data: Data, clock: Clock | None = None) -> Any:
    """Cumulative accepted and failed tasks over time (a step line each, from 0 at the first
    start)."""
    clock = clock_of(data) if clock is None else clock
    fig = _time_figure("Progress: tasks accepted and failed so far", clock, y_axis_label="tasks",
                       legend=True)
    begun = np.concatenate([data.attempts.started, [float(r["started"]) for r in data.runs
                                                    if isinstance(r.get("started"),
                                                                  (int, float))]])
    begun = begun[np.isfinite(begun)]
    drawn = False
    for code, label in ((ACCEPTED, "accepted"), (FAILED, "failed")):
        ended = np.sort(data.ended[(data.status == code) & np.isfinite(data.ended)])
        if ended.size == 0:
            continue
        idx = np.unique(np.linspace(0, ended.size - 1, min(ended.size, MAX_POINTS // 4))
                        .astype(np.int64))
        x, y = ended[idx], idx + 1.0
        if begun.size and begun.min() < x[0]:
            x, y = np.concatenate([[begun.min()], x]), np.concatenate([[0.0], y])
        fig.step(clock(x), y, mode="after", line_width=2, color=COLOURS[code],
                 legend_label=f"{label} ({ended.size:,})")
        drawn = True
    if not drawn:
        return None
    if data.facts.get("active"):
        fig.add_layout(Span(location=float(clock(np.array([data.now]))[0]), dimension="height",
                            line_dash="dashed", line_color="#555555"))
    return fig


def throughput(data: Data, bins: int = 120, clock: Clock | None = None) -> Any:
    """Tasks ended (accepted or failed) per second or minute, in time bins of the plot's axis
    (idle gaps between runs cut: `clock_of`)."""
    clock = clock_of(data) if clock is None else clock
    done = (data.status == ACCEPTED) | (data.status == FAILED)
    ended = clock(data.ended[done & np.isfinite(data.ended)])
    if ended.size < 2 or ended.max() <= ended.min():
        return None
    counts, edges = np.histogram(ended, bins=min(bins, max(10, ended.size // 5)))
    width = (edges[1] - edges[0]) / clock.seconds(1.0)
    unit, per = ("second", 1.0) if width < 10 else ("minute", 60.0)
    fig = _time_figure(f"Throughput: tasks ended per {unit}", clock,
                       detail=f"{width:.3g} s bins", y_axis_label=f"tasks / {unit}")
    fig.quad(left=edges[:-1], right=edges[1:], bottom=0, top=counts * per / width,
             color="#4c72b0", line_color=None)
    return fig


def timeline(data: Data, clock: Clock | None = None) -> tuple[Any, str]:
    """Every attempt as a bar from its start to its end, one lane per worker, coloured by
    outcome (Nextflow's timeline). Returns the figure (None if no attempt started) and a note."""
    clock = clock_of(data) if clock is None else clock
    a: Attempts = data.attempts
    ok = np.isfinite(a.started) & np.isfinite(a.ended)
    rows = np.flatnonzero(ok)
    if rows.size == 0:
        return None, ""
    per_lane = np.bincount(a.lane[rows], minlength=len(a.lanes))
    lanes = np.argsort(-per_lane, kind="stable")[:MAX_LANES]
    lanes = lanes[per_lane[lanes] > 0]
    note = ""
    if len(a.lanes) > MAX_LANES:
        note = (f"The timeline shows the {MAX_LANES} busiest of {len(a.lanes):,} workers.")
        rows = rows[np.isin(a.lane[rows], lanes)]
    order = {lane: i for i, lane in enumerate(sorted(lanes, key=lambda j: a.lanes[j]))}
    pick = rows[sample(rows.size, MAX_POINTS, first=a.status[rows] != ACCEPTED)]
    fig = _time_figure(f"Timeline: {_of(pick.size, int(ok.sum()), 'attempts')} by worker", clock,
                       height=max(_HEIGHT, 26 * len(order) + 110), legend=True)
    y = np.array([order[j] for j in a.lane[pick]], dtype=np.float64) if pick.size else np.empty(0)
    for code in (ACCEPTED, FAILED, INTERRUPTED, RUNNING):
        sel = a.status[pick] == code
        if not sel.any():
            continue
        idx = pick[sel]
        source = ColumnDataSource({
            "left": clock(a.started[idx]), "right": clock(a.ended[idx]), "y": y[sel],
            "task": np.array([data.task_ids[t] for t in a.task[idx].tolist()]),
            "attempt": a.number[idx].astype(np.int32),
            "seconds": (a.ended[idx] - a.started[idx]).astype(np.float32)})
        # a darker edge: back-to-back attempts of one outcome stay two bars, and a bar too
        # short for its fill still shows
        fig.hbar(y="y", left="left", right="right", height=0.7, source=source,
                 fill_color=COLOURS[code], line_color=_darker(COLOURS[code]), line_width=1,
                 legend_label=STATUSES[code])
    fig.yaxis.ticker = list(order.values())
    fig.yaxis.major_label_overrides = {i: a.lanes[j] for j, i in order.items()}
    fig.add_tools(HoverTool(tooltips=[("task", "@task"), ("attempt", "@attempt"),
                                      ("seconds", "@seconds{0.000}")]))
    return fig, note


def _darker(colour: str, factor: float = 0.6) -> str:
    """``#rrggbb`` with each channel scaled by ``factor``."""
    channels = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{int(c * factor):02x}" for c in channels)


#: Units of a time axis: the first whose limit exceeds the largest value (in seconds).
_TIME_UNITS = ((1e-3, "us", 1e6), (1.0, "ms", 1e3), (120.0, "s", 1.0), (7200.0, "min", 1 / 60),
               (np.inf, "h", 1 / 3600))


def _time_unit(high: float) -> tuple[str, float]:
    """A unit for seconds whose largest value is ``high``, and the factor to it: ticks read
    ``20 50 100 ms``, not ``2.000e-5 5.000e-5``."""
    return next((unit, factor) for limit, unit, factor in _TIME_UNITS if high < limit)


def histogram(values: np.ndarray, title: str, x_label: str, colour: str = "#4c72b0", *,
              seconds: bool = False) -> Any:
    """Counts of the finite ``values`` in up to 40 bins (log-spaced where they are all
    positive and span more than two decades); None when there are none. ``seconds``: the
    values are seconds, shown in a unit that suits them (µs to hours, named in the axis label
    as ``x_label (unit)``)."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return None
    if seconds:
        unit, factor = _time_unit(float(np.abs(finite).max()))
        finite, x_label = finite * factor, f"{x_label} ({'µs' if unit == 'us' else unit})"
    left_out = int(values.size - finite.size)
    low, high = float(finite.min()), float(finite.max())
    logx = low > 0 and high / low > 100
    bins = int(min(40, max(5, np.sqrt(finite.size))))
    if logx:
        edges = np.geomspace(low, high, bins + 1)
    elif high > low:
        edges = np.linspace(low, high, bins + 1)
    else:
        edges = np.array([low - 0.5, high + 0.5]) if low == 0 else np.array(
            [low - abs(low) * 0.05, high + abs(high) * 0.05])
    counts, edges = np.histogram(finite, bins=edges)
    also = f"; {left_out:,} NaN or infinite left out" if left_out else ""
    fig = _figure(title, f"{finite.size:,} values{also}", x_axis_label=x_label,
                  y_axis_label="count", x_axis_type="log" if logx else "linear", height=250)
    fig.quad(left=edges[:-1], right=edges[1:], bottom=0, top=counts, color=colour,
             line_color="white")
    _whole_counts(fig)
    fig.xaxis[0].ticker.desired_num_ticks = _GRID_TICKS
    return fig


def _whole_counts(fig: Any) -> None:
    """Ticks of a count axis at whole numbers only."""
    fig.yaxis[0].ticker.min_interval = 1


def attempts_bar(data: Data) -> Any:
    """Tasks by how many attempts they took, stacked by their status now."""
    ran = data.attempts_per_task > 0
    if not ran.any():
        return None
    most = int(data.attempts_per_task.max())
    fig = _figure("Retries: tasks by number of attempts", x_axis_label="attempts",
                  y_axis_label="tasks", height=270, legend=True)
    bottom = np.zeros(most + 1)
    for code in (ACCEPTED, FAILED, INTERRUPTED, RUNNING):
        counts = np.bincount(data.attempts_per_task[ran & (data.status == code)],
                             minlength=most + 1).astype(float)
        if counts.any():
            fig.vbar(x=np.arange(1, most + 1), width=0.8, bottom=bottom[1:],
                     top=bottom[1:] + counts[1:], color=COLOURS[code],
                     legend_label=STATUSES[code])
            bottom = bottom + counts  # a new array: the glyph keeps the old one
    fig.xaxis.ticker = list(range(1, most + 1))
    _whole_counts(fig)
    return fig


def scatter(x: np.ndarray, y: np.ndarray, x_label: str, y_label: str) -> Any:
    """``y`` against ``x`` (both finite), sampled down to MAX_POINTS."""
    ok = np.isfinite(x) & np.isfinite(y)
    rows = np.flatnonzero(ok)
    if rows.size == 0:
        return None
    pick = rows[sample(rows.size, MAX_POINTS, seed=1)]
    fig = _figure(f"{y_label} against item field {x_label}", _of(pick.size, rows.size, "results"),
                  x_axis_label=x_label, y_axis_label=y_label, height=250)
    fig.xaxis[0].ticker.desired_num_ticks = _GRID_TICKS
    fig.scatter(x[pick].astype(np.float32), y[pick].astype(np.float32), size=3, alpha=0.5,
                color="#4c72b0")
    return fig
