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
from bokeh.models.annotations import Span
from bokeh.plotting import figure

from ._data import ACCEPTED, FAILED, INTERRUPTED, MAX_POINTS, RUNNING, STATUSES, Attempts, Data

#: The most lanes (workers) the timeline shows: the busiest ones.
MAX_LANES = 48
#: Colours of the outcomes (pending, running, accepted, failed, interrupted).
COLOURS = ("#9e9e9e", "#1f77b4", "#2ca02c", "#d62728", "#ff7f0e")
_HEIGHT = 280
_TOOLS = "pan,wheel_zoom,box_zoom,reset,save"


def _figure(title: str, **kwargs: Any) -> Any:
    kwargs.setdefault("height", _HEIGHT)
    fig = figure(title=title, sizing_mode="stretch_width", tools=_TOOLS, toolbar_location="right",
                 **kwargs)
    fig.title.text_font_size = "13px"  # type: ignore[union-attr]  # a Title: figure(title=str)
    fig.toolbar.logo = None
    return fig


def _ms(seconds: np.ndarray) -> np.ndarray:
    """Unix seconds as the milliseconds a datetime axis takes."""
    return seconds * 1000.0


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


def progress(data: Data) -> Any:
    """Cumulative accepted and failed tasks over time (a step line each)."""
    fig = _figure("Progress: tasks accepted and failed so far", x_axis_type="datetime",
                  y_axis_label="tasks")
    drawn = False
    for code, label in ((ACCEPTED, "accepted"), (FAILED, "failed")):
        ended = np.sort(data.ended[(data.status == code) & np.isfinite(data.ended)])
        if ended.size == 0:
            continue
        idx = np.unique(np.linspace(0, ended.size - 1, min(ended.size, MAX_POINTS // 4))
                        .astype(np.int64))
        fig.step(_ms(ended[idx]), idx + 1.0, mode="after", line_width=2, color=COLOURS[code],
                 legend_label=f"{label} ({ended.size:,})")
        drawn = True
    if not drawn:
        return None
    if data.facts.get("active"):
        fig.add_layout(Span(location=data.now * 1000.0, dimension="height", line_dash="dashed",
                            line_color="#555555"))
    fig.legend.location = "top_left"
    return fig


def throughput(data: Data, bins: int = 120) -> Any:
    """Tasks ended (accepted or failed) per second or minute, in time bins."""
    done = (data.status == ACCEPTED) | (data.status == FAILED)
    ended = data.ended[done & np.isfinite(data.ended)]
    if ended.size < 2 or ended.max() <= ended.min():
        return None
    counts, edges = np.histogram(ended, bins=min(bins, max(10, ended.size // 5)))
    width = edges[1] - edges[0]
    unit, per = ("second", 1.0) if width < 10 else ("minute", 60.0)
    fig = _figure(f"Throughput: tasks ended per {unit} ({width:.3g} s bins)",
                  x_axis_type="datetime", y_axis_label=f"tasks / {unit}")
    fig.quad(left=_ms(edges[:-1]), right=_ms(edges[1:]), bottom=0, top=counts * per / width,
             color="#4c72b0", line_color=None)
    return fig


def timeline(data: Data) -> tuple[Any, str]:
    """Every attempt as a bar from its start to its end, one lane per worker, coloured by
    outcome (Nextflow's timeline). Returns the figure (None if no attempt started) and a note."""
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
    fig = _figure(f"Timeline: {_of(pick.size, int(ok.sum()), 'attempts')} by worker",
                  x_axis_type="datetime", height=max(_HEIGHT, 26 * len(order) + 90))
    y = np.array([order[j] for j in a.lane[pick]], dtype=np.float64) if pick.size else np.empty(0)
    for code in (ACCEPTED, FAILED, INTERRUPTED, RUNNING):
        sel = a.status[pick] == code
        if not sel.any():
            continue
        idx = pick[sel]
        source = ColumnDataSource({
            "left": _ms(a.started[idx]), "right": _ms(a.ended[idx]), "y": y[sel],
            "task": np.array([data.task_ids[t] for t in a.task[idx].tolist()]),
            "attempt": a.number[idx].astype(np.int32),
            "seconds": (a.ended[idx] - a.started[idx]).astype(np.float32)})
        fig.hbar(y="y", left="left", right="right", height=0.7, source=source,
                 color=COLOURS[code], legend_label=STATUSES[code])
    fig.yaxis.ticker = list(order.values())
    fig.yaxis.major_label_overrides = {i: a.lanes[j] for j, i in order.items()}
    fig.add_tools(HoverTool(tooltips=[("task", "@task"), ("attempt", "@attempt"),
                                      ("seconds", "@seconds{0.000}")]))
    fig.legend.location = "top_left"
    fig.legend.orientation = "horizontal"
    return fig, note


def histogram(values: np.ndarray, title: str, x_label: str, colour: str = "#4c72b0") -> Any:
    """Counts of the finite ``values`` in up to 40 bins (log-spaced where they are all
    positive and span more than two decades); None when there are none."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return None
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
    fig = _figure(f"{title} ({finite.size:,} values)", x_axis_label=x_label,
                  y_axis_label="count", x_axis_type="log" if logx else "linear", height=240)
    fig.quad(left=edges[:-1], right=edges[1:], bottom=0, top=counts, color=colour,
             line_color="white")
    return fig


def attempts_bar(data: Data) -> Any:
    """Tasks by how many attempts they took, stacked by their status now."""
    ran = data.attempts_per_task > 0
    if not ran.any():
        return None
    most = int(data.attempts_per_task.max())
    fig = _figure("Retries: tasks by number of attempts", x_axis_label="attempts",
                  y_axis_label="tasks", height=240)
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
    fig.legend.location = "top_right"
    return fig


def scatter(x: np.ndarray, y: np.ndarray, x_label: str, y_label: str) -> Any:
    """``y`` against ``x`` (both finite), sampled down to MAX_POINTS."""
    ok = np.isfinite(x) & np.isfinite(y)
    rows = np.flatnonzero(ok)
    if rows.size == 0:
        return None
    pick = rows[sample(rows.size, MAX_POINTS, seed=1)]
    fig = _figure(f"{y_label} against item field {x_label} "
                  f"({_of(pick.size, rows.size, 'results')})", x_axis_label=x_label,
                  y_axis_label=y_label, height=240)
    fig.scatter(x[pick].astype(np.float32), y[pick].astype(np.float32), size=3, alpha=0.5,
                color="#4c72b0")
    return fig
