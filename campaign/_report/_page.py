"""The page of `campaign report`: sections of text, tables and bokeh plots in one HTML file.

`render` lays out `_data.Data` in sections (summary, runs, progress, throughput, timeline,
distributions, failures, interruptions and retries, slowest tasks, results, tasks) and returns the
page: bokeh's JavaScript and CSS inline (`bokeh.resources.INLINE`), the plots' data embedded,
both compressed (`_packed`), nothing loaded from the network.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _packed, _plots, _runs, _tasks, _use
from ._data import MAX_POINTS, RUNNING, STATUSES, Data
from ._html import e, seconds, status_label, table, when

#: Rows of the slowest-tasks table.
SLOWEST = 15
#: Result columns plotted against an item field.
SCATTERS = 4
_TEMPLATE = """
{% from macros import embed %}
{% block preamble %}<style>
body { font: 14px/1.45 system-ui, sans-serif; color: #222; background: #fafafa; }
main { max-width: 1400px; margin: 0 auto; padding: 12px 24px 40px; }
h1 { font-size: 22px; margin: 8px 0 2px; } h2 { font-size: 17px; margin: 22px 0 6px; }
section { background: white; border: 1px solid #e3e3e3; border-radius: 6px; padding: 4px 16px 12px;
          margin-top: 14px; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(420px, 1fr)); gap: 10px; }
.plot { min-width: 0; }
table { border-collapse: collapse; margin: 6px 0; } td, th { padding: 2px 10px 2px 0;
        text-align: left; vertical-align: top; } th { color: #555; font-weight: 600; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f4f4f4; padding: 6px 8px; overflow-x: auto; font-size: 12px; margin: 4px 0; }
tr.detail td { color: #555; font-size: 12px; padding-bottom: 6px; border-bottom: 1px solid #eee; }
.scroll { max-height: 640px; overflow: auto; } table.tasks th { cursor: pointer; }
table.tasks th[data-order="up"]::after { content: " \\25B2"; }
table.tasks th[data-order="down"]::after { content: " \\25BC"; }
.note { color: #555; } .swatch { display: inline-block; width: 10px; height: 10px;
        border-radius: 2px; margin-right: 4px; }
</style>{% endblock %}
{% block js_resources %}{% endblock %}
{% block inner_body %}{{ self.contents() }}
{{ pack(bokeh_js) }}
{{ pack(plot_script) }}
{{ loader }}
{% endblock %}
{% block contents %}<main>
<h1>{{ heading }}</h1><div class="note">{{ subtitle }}</div>{{ note }}
{% for s in sections %}<section id="{{ s.key }}"><h2>{{ s.title }}</h2>
{{ s.before }}
{% if s.plots %}<div class="{{ 'grid' if s.grid else 'stack' }}">
{% for name in s.plots %}<div class="plot">{{ embed(roots[name]) }}</div>
{% endfor %}</div>{% endif %}
{{ s.after }}</section>
{% endfor %}</main>{% endblock %}
"""


@dataclass
class Section:
    key: str
    title: str
    before: str = ""  # HTML, escaped
    plots: list[str] = field(default_factory=list)  # names of bokeh roots
    after: str = ""
    grid: bool = False


class _Page:
    """Collects the sections and the bokeh figures they embed."""

    def __init__(self) -> None:
        self.sections: list[Section] = []
        self.figures: list[Any] = []

    def add(self, section: Section, figures: Sequence[Any] = ()) -> Section:
        for fig in figures:
            fig.name = f"plot{len(self.figures)}"
            self.figures.append(fig)
            section.plots.append(fig.name)
        self.sections.append(section)
        return section


def _summary(data: Data) -> str:
    from .._format import rate
    from .._shell import command

    f, a = data.facts, data.attempts
    counts = f["counts"]
    rows = [[status_label(i), counts.get(s, 0)] for i, s in enumerate(STATUSES)]
    refused = f.get("refused_last_run") or 0
    ran = np.isfinite(a.started)
    first = float(a.started[ran].min()) if ran.any() else None
    last_end = a.ended[np.isfinite(a.ended)]
    end = data.now if f["active"] else (float(last_end.max()) if last_end.size else None)
    wall = None if first is None or end is None else end - first
    task_time = float(np.nansum(a.ended - a.started)) if ran.any() else 0.0
    cpu = a.resources["cpu_s"]
    cpu_text = (f"{seconds(float(np.nansum(cpu)))} ({int(np.isfinite(cpu).sum()):,} attempts)"
                if np.isfinite(cpu).any() else "not recorded in this ledger")
    if f["active"]:
        eta = (f"{seconds(f['eta_s'])} for {f['remaining']:,} task(s) left"
               if f["eta_s"] is not None else f"unknown ({f['remaining']:,} task(s) left)")
    else:
        eta = f"not running ({f['remaining']:,} task(s) left for the next run)"
    execs = sorted({r.get("execution") or "?" for r in data.runs})
    facts = [
        ["tasks", f"{f['total']:,}"],
        ["attempts", f"{f['attempts']['total']:,} in all; {f['attempts']['retried_tasks']:,} "
                     f"task(s) ran more than once; {f['attempts']['interruptions']:,} "
                     "interruption(s)"],
        ["wall time", f"{seconds(wall)} (first start {when(first)} to "
                      f"{'now' if f['active'] else 'last end'})"],
        ["task time", f"{seconds(task_time)} (the attempts' durations added up)"],
        ["CPU time", cpu_text],
        ["throughput", f"{rate(f['throughput_per_s'])} (last run)"],
        ["ETA", eta],
        ["refused", (f"{refused:,} task(s) in the last run: their item changed since they were "
                     "recorded, so they were not run (`campaign failures` lists them; "
                     f"`{command('campaign', 'forget', data.path)} --refused` runs them again "
                     "with the new items)")
                    if refused else "none in the last run"],
        ["runs", f"{len(data.runs)} recorded; schedulers used: {', '.join(execs) or 'none'}"],
    ]
    fact_rows = [[e(k), e(v)] for k, v in facts]
    return ('<div class="grid"><div>' + table(["status", "tasks"], rows, {1}) + "</div><div>"
            + table(["", ""], fact_rows) + "</div></div>")


def _failures(data: Data) -> str:
    if not data.failures:
        return "<p>No task failed.</p>"
    parts = [table(["error type", "tasks", "example task", "message"], [
        [e(g.type), g.count, e(g.task_id), e(g.message.splitlines()[0] if g.message else "")]
        for g in data.failures], {1})]
    for g in data.failures:
        text = g.traceback or f"{g.type}: {g.message} (no traceback recorded)"
        parts.append(f"<details open><summary>{e(g.type)}: task {e(g.task_id)}</summary>"
                     f"<pre>{e(text)}</pre></details>")
    return "".join(parts)


def _slowest(data: Data) -> str:
    done = np.flatnonzero(np.isfinite(data.duration))
    if done.size == 0:
        return "<p>No task has ended yet.</p>"
    took = data.duration[done]
    if took.size > SLOWEST:  # those at least as slow as the SLOWEST-th slowest (ties kept)
        keep = took >= np.partition(took, took.size - SLOWEST)[took.size - SLOWEST]
        done, took = done[keep], took[keep]
    top = done[np.argsort(-took, kind="stable")[:SLOWEST]]
    return table(["task", "seconds", "status", "attempts", "started"], [
        [e(data.task_ids[i]), f"{data.duration[i]:.4g}", status_label(int(data.status[i])),
         int(data.attempts_per_task[i]), e(when(float(data.started[i])))] for i in top], {1})


def _resources(page: _Page, data: Data) -> None:
    a = data.attempts
    figs, missing = [], []
    ended = a.status != RUNNING
    took = _plots.histogram((a.ended - a.started)[ended], "Duration of ended attempts",
                            "duration", seconds=True)
    figs += [took] if took is not None else []
    for key, title, unit, scale in (("cpu_s", "CPU time of attempts", "CPU time", 1.0),
                                    ("peak_rss_bytes", "Peak memory (RSS) of attempts", "MiB",
                                     2.0 ** -20),
                                    ("gpu_peak_bytes", "GPU peak memory of attempts", "MiB",
                                     2.0 ** -20)):
        fig = _plots.histogram(a.resources[key] * scale, title, unit, colour="#8172b3",
                               seconds=key == "cpu_s")
        if fig is None:
            missing.append(f"{title}: not recorded ({key} is absent from this ledger's records)")
        else:
            figs.append(fig)
    use = _use.of(data)
    cpu_unit = "% of the CPUs requested" if use.cpus_requested else "% of one core"
    for values, title, unit in ((use.cpu_pct, "CPU use of attempts", cpu_unit),
                                (use.memory_pct[~np.isnan(use.memory_pct)],  # those requested
                                 "Peak memory of attempts against the request",
                                 "% of the memory requested")):
        fig = _plots.histogram(values, title, unit, colour="#55a868")
        figs += [fig] if fig is not None else []
    said = _use.note(use, len(a.started))
    after = "".join(f'<p class="note">{e(m)}</p>' for m in [said, *missing] if m)
    page.add(Section("distributions", "Durations, CPU and memory", after=after, grid=True), figs)


def _results(page: _Page, data: Data) -> None:
    if not data.results:
        page.add(Section("results", "Results", before="<p>No numeric result column yet.</p>"))
        return
    figs = [_plots.histogram(v, f"result {k}", k) for k, v in data.results.items()]
    for x_key, x in data.item_fields.items():
        for key in list(data.results)[:SCATTERS]:
            figs.append(_plots.scatter(x, data.results[key], x_key, key))
    note = (f'<p class="note">{data.columns_left_out} more numeric result column(s) are not '
            "plotted (at most 12).</p>" if data.columns_left_out else "")
    page.add(Section("results", f"Results of {data.results[next(iter(data.results))].size:,} "
                     "accepted tasks", after=note, grid=True), [f for f in figs if f is not None])


def sections(data: Data) -> _Page:
    """The page's sections and figures for ``data``."""
    page = _Page()
    page.add(Section("summary", "Summary", before=_summary(data)))
    page.add(Section("runs", f"Runs ({len(data.runs)} recorded)", before=_runs.section(data)))
    clock = _plots.clock_of(data)  # one time axis for the three: idle gaps between runs cut
    for key, title, fig, why in (
            ("progress", "Progress", _plots.progress(data, clock), "No task has ended yet."),
            ("throughput", "Throughput", _plots.throughput(data, clock=clock),
             "Too few tasks have ended to show a rate.")):
        page.add(Section(key, title, before="" if fig is not None else f"<p>{why}</p>"),
                 [fig] if fig is not None else [])
    fig, note = _plots.timeline(data, clock)
    page.add(Section("timeline", "Timeline of attempts by worker",
                     before=f'<p class="note">{e(note)}</p>' if note else (
                         "" if fig is not None else "<p>No attempt has started yet.</p>")),
             [fig] if fig is not None else [])
    _resources(page, data)
    page.add(Section("failures", "Failures by error type", before=_failures(data)))
    causes = data.interruption_causes
    text = (table(["cause", "interrupted attempts"], [[e(k), v] for k, v in causes.most_common()],
                   {1}) if causes else "<p>No attempt was interrupted.</p>")
    bar = _plots.attempts_bar(data)
    page.add(Section("retries", "Interruptions and retries", before=text),
             [bar] if bar is not None else [])
    ended = int(np.isfinite(data.duration).sum())
    heading = (f"The {SLOWEST} slowest tasks" if ended > SLOWEST else
               "The tasks by duration, slowest first" if ended != 1 else "The task that ended")
    page.add(Section("slowest", heading, before=_slowest(data)))
    _results(page, data)
    page.add(Section("tasks", f"Tasks ({len(data.task_ids):,})", before=_tasks.section(data)))
    return page


def render(data: Data) -> tuple[str, int]:
    """The page's HTML and the number of plots in it."""
    from bokeh.document import Document
    from bokeh.embed import file_html
    from bokeh.resources import INLINE

    page = sections(data)
    document = Document()
    with document.models.freeze():  # one traversal of the models, not one per root
        for fig in page.figures:
            document.add_root(fig)
    c = data.facts["counts"]
    left = data.facts["remaining"]
    subtitle = (f"{data.facts['total']:,} tasks: {c['accepted']:,} accepted, {c['failed']:,} "
                f"failed, {c['running']:,} running, {c['pending']:,} pending, "
                f"{c['interrupted']:,} interrupted; {left:,} left "
                f"{'to run' if data.facts['active'] else 'for the next run'}. "
                f"Written {when(data.now)}. Each plot draws at most {MAX_POINTS:,} points: "
                "where there are more, its title says it shows a sample; histograms and counts "
                "use every value.")
    state = "running" if data.facts["active"] else "not running"
    html_text = file_html(document, resources=INLINE, title=f"campaign report: {data.path}",
                          template=_TEMPLATE, template_variables={
                              "heading": e(f"Campaign {data.path} ({state})"),
                              "subtitle": e(subtitle), "sections": page.sections,
                              "pack": _packed.pack, "note": _packed.NOTE,
                              "loader": _packed.LOADER})
    return html_text, len(page.figures)
