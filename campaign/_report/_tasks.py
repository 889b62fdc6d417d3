"""The tasks section of `campaign report`: a table of the campaign's tasks (their status, run,
attempts, duration, start and error) that a box above it filters and its column heads sort, in
the page itself (a few lines of JavaScript, nothing loaded).

At most `MAX_TASK_ROWS` tasks are listed: where there are more, up to half of them (more where
the others are fewer) are failed, interrupted and running ones, the rest an even sample of the
others; the section says how many of each status it lists. `campaign results LEDGER
--with-records` lists them all.
"""

from __future__ import annotations

import math

import numpy as np

from . import MAX_TASK_ROWS
from ._data import FAILED, INTERRUPTED, RUNNING, STATUSES, Data
from ._html import e, status_label, when
from ._runs import label, run_of

#: The statuses listed before an even sample of the others, in this order.
_FIRST = (FAILED, INTERRUPTED, RUNNING)
_HEAD = ("task", "status", "run", "attempts", "seconds", "started", "error")
_NUMERIC = (3, 4)
#: The filter box and the sortable heads: each row's text is matched (case-insensitively) by the
#: words typed; a click on a head sorts by its column (numbers by value, again to reverse).
_SCRIPT = """<script>
(() => {
  const table = document.getElementById("tasks-table");
  const box = document.getElementById("tasks-filter");
  const shown = document.getElementById("tasks-shown");
  const rows = Array.from(table.tBodies[0].rows);
  box.addEventListener("input", () => {
    const words = box.value.toLowerCase().split(/\\s+/).filter(w => w);
    let n = 0;
    for (const r of rows) {
      const text = r.textContent.toLowerCase(), keep = words.every(w => text.includes(w));
      r.hidden = !keep; n += keep;
    }
    shown.textContent = n.toLocaleString();
  });
  Array.from(table.tHead.rows[0].cells).forEach((th, col) => th.addEventListener("click", () => {
    const up = th.dataset.order !== "up";
    for (const other of table.tHead.rows[0].cells) delete other.dataset.order;
    th.dataset.order = up ? "up" : "down";
    const key = r => { const c = r.cells[col];
      return c.dataset.v !== undefined ? Number(c.dataset.v) : c.textContent; };
    const sorted = rows.slice().sort((a, b) => { const x = key(a), y = key(b);
      const c = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
      return up ? c : -c; });
    table.tBodies[0].append(...sorted);
  }));
})();
</script>"""


def chosen(data: Data, limit: int = MAX_TASK_ROWS) -> np.ndarray:
    """The indices of the tasks the table lists, in ledger order: every task where there are
    ``limit`` or fewer; else up to half of ``limit`` (more where the other tasks are fewer) of
    the failed, interrupted and running ones, in that order of statuses and in ledger order,
    and an even sample of the others for the rest."""
    n = len(data.task_ids)
    if n <= limit:
        return np.arange(n)
    status = np.asarray(data.status)
    first = np.concatenate([np.flatnonzero(status == code) for code in _FIRST])
    rest = np.flatnonzero(~np.isin(status, _FIRST))
    first = first[:min(first.size, max(limit // 2, limit - rest.size))]
    room = min(rest.size, limit - first.size)
    spread = np.linspace(0, rest.size - 1, room).round().astype(np.int64)
    sample = rest[spread] if room else rest[:0]
    return np.sort(np.concatenate([first, sample]))


def _number(value: float, text: str) -> str:
    """A numeric cell (sorted by ``value``; blank where it is not finite)."""
    if not math.isfinite(value):
        return '<td class="n" data-v="-1"></td>'
    return f'<td class="n" data-v="{value!r}">{e(text)}</td>'


def refusals(data: Data) -> dict[str, str]:
    """Task id -> a note for each task the last run refused (its item changed), as far as the
    run lists them."""
    if not data.runs or not isinstance(data.runs[-1].get("refused"), list):
        return {}
    notes = {}
    for entry in data.runs[-1]["refused"]:
        if isinstance(entry, dict) and isinstance(entry.get("task_id"), str):
            changed = entry.get("changed")
            fields = ", ".join(str(c.get("field")) for c in changed if isinstance(c, dict)) \
                if isinstance(changed, list) else ""
            notes[entry["task_id"]] = (f"by run {label(len(data.runs) - 1)}: its item "
                                       f"changed ({fields or '?'}); its record was kept")
    return notes


def _row(data: Data, i: int, run: int, refused: dict[str, str]) -> str:
    code = int(data.status[i])
    kind, line = data.errors.get(i, ("", ""))
    error = f"<b>{e(kind)}</b> {e(line)}" if kind else ""
    note = refused.get(data.task_ids[i])
    if note is not None:
        error = f"{error} <b>refused</b> {e(note)}".lstrip()
    took = float(data.duration[i])
    return ("<tr>" + f"<td>{e(data.task_ids[i])}</td><td>{status_label(code)}</td>"
            f"<td>{e(label(run))}</td>"
            + _number(float(data.attempts_per_task[i]), str(int(data.attempts_per_task[i])))
            + _number(took, f"{took:.4g}")
            + f"<td>{e(when(float(data.started[i])) if math.isfinite(data.started[i]) else '')}"
            f"</td><td>{error}</td></tr>")


def section(data: Data) -> str:
    """The tasks table (HTML): the filter box, how many tasks it lists of how many, the table
    and its script."""
    n = len(data.task_ids)
    if n == 0:
        return "<p>No task in the ledger yet.</p>"
    rows = chosen(data)
    runs = run_of(np.asarray(data.started, dtype=np.float64)[rows], data.runs)
    refused = refusals(data)
    body = "".join(_row(data, int(i), int(r), refused)
                   for i, r in zip(rows.tolist(), runs.tolist()))
    head = "".join(f"<th>{e(h)}</th>" for h in _HEAD)
    if rows.size < n:
        listed = np.bincount(np.asarray(data.status)[rows].astype(np.int64),
                             minlength=len(STATUSES))
        every = np.bincount(np.asarray(data.status).astype(np.int64), minlength=len(STATUSES))
        parts = ", ".join(f"{int(listed[c]):,} of {int(every[c]):,} {s}"
                          for c, s in enumerate(STATUSES) if every[c])
        note = (f'<p class="note">{rows.size:,} of {n:,} tasks are listed (at most '
                f"{MAX_TASK_ROWS:,}): up to half of them failed, interrupted and running ones "
                f"(in that order), the rest an even sample of the others ({parts}). "
                f"<code>campaign results {e(data.path)} --with-records</code> lists them "
                "all.</p>")
    else:
        note = ""
    search = ('<p><input id="tasks-filter" type="search" size="40" placeholder="filter: words '
              'of a task id, status, run or error"> <span id="tasks-shown">'
              f"{rows.size:,}</span> task(s) shown; click a column's head to sort by it.</p>")
    return (search + note + f'<div class="scroll"><table id="tasks-table" class="tasks"><thead>'
            f"<tr>{head}</tr></thead><tbody>{body}</tbody></table></div>{_SCRIPT}")
