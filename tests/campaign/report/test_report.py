"""`campaign report`: the page of a real campaign (finished, still running, a job array with
unmerged fragments, 100,000 generated tasks) is one self-contained file, and a real headless
Chromium (Debian's ``chromium``) renders every plot of it without a JavaScript error.

Screenshots are kept in $DIFFSOUP_REPORT_SCREENSHOTS when it is set (else in pytest's tmp).
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import struct
import subprocess
from pathlib import Path

import numpy as np
import orjson
import pytest
from report_data.browser import Browser, chromium, page_source
from report_data.report_task import run
from testkit import PYTHON, ROOT, child_env, require, wait_until

from campaign import LedgerError, checkpointed_map, read_ledger, write_report
from campaign._array._plan import plan_submission
from campaign._ledger._paths import LedgerPaths

DATA = Path(__file__).with_name("report_data")
#: Waits (in the page) until bokeh has built and finished a view of every root, then describes
#: each: its size, its canvas and how many of its glyphs have data. Gives up after 60 s (only a
#: broken page gets there) and says what it found.
RENDERED = """(async () => {
  const deadline = Date.now() + 60000;
  const roots = () => (window.Bokeh && Bokeh.documents.length) ? Bokeh.documents[0].roots() : [];
  const views = () => roots().map(m => Bokeh.index.get_by_id(m.id)).filter(v => v != null);
  while (Date.now() < deadline) {
    const r = roots(), v = views();
    if (r.length > 0 && v.length == r.length && v.every(x => x.has_finished())) break;
    await new Promise(done => setTimeout(done, 20));
  }
  return {roots: roots().length, views: views().map(v => {
    const box = v.el.getBoundingClientRect();
    const canvas = v.canvas_view ? v.canvas_view.el.shadowRoot.querySelector("canvas") : null;
    // the title and its detail line (campaign._report._plots.title_of)
    const ts = v.model.above.filter(a => typeof a.text === "string").map(a => a.text).reverse();
    return {name: v.model.name, title: ts.length ? ts[0] + (ts[1] ? ` (${ts[1]})` : "") : null,
            width: box.width, height: box.height,
            canvas: canvas ? [canvas.width, canvas.height] : null, finished: v.has_finished(),
            glyphs_with_data: v.model.renderers.filter(
              g => g.data_source && g.data_source.get_length() > 0).length};
  })};
})()"""


def screenshots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("DIFFSOUP_REPORT_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def report(ledger: Path, page: Path) -> str:
    """Run ``campaign report LEDGER -o PAGE``; returns its message (on standard error: standard
    output stays empty, docs/cli.md)."""
    proc = subprocess.run([PYTHON, "-m", "campaign._cli", "report", str(ledger), "-o", str(page)],
                          env=child_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    return proc.stderr


def plots_in(stdout: str) -> int:
    found = re.search(r"\((\d+) plots", stdout)
    assert found, stdout
    return int(found.group(1))


def status_json(ledger: Path) -> dict:
    proc = subprocess.run([PYTHON, "-m", "campaign._cli", "status", str(ledger), "--json"],
                          env=child_env(), capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return orjson.loads(proc.stdout)


def assert_offline(html: str) -> None:
    """Nothing in the page is fetched from elsewhere: no script or style by URL, no CDN (the
    browser, which resolves no host name, would also log any fetch as an error)."""
    assert not re.search(r"<script[^>]*\ssrc=", html)
    assert not re.search(r"<link[^>]*\shref=", html)
    assert "cdn.bokeh.org" not in html


def render_in_chromium(page: Path, shot: Path, plots: int) -> list[dict]:
    """Open the page in headless Chromium (no name resolution, so nothing can be fetched),
    check that every plot rendered and nothing was logged as an error, and take a screenshot."""
    require(chromium() is not None, "Debian's chromium is not installed (apt-get install "
            "chromium chromium-driver)")
    with Browser(shot.parent / f".profile-{shot.stem}", shot.with_suffix(".log")) as browser:
        browser.open(page.as_uri())
        found = browser.evaluate(RENDERED)
        browser.screenshot(shot)
        errors = browser.errors()
    assert errors == [], errors
    assert found["roots"] == plots and len(found["views"]) == plots, found
    for view in found["views"]:
        assert view["finished"] and view["width"] > 100 and view["height"] > 100, view
        assert view["canvas"] and min(view["canvas"]) > 0, view
        assert view["glyphs_with_data"] >= 1, view  # no empty plot
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert width == 1400 and height > 1000
    return found["views"]


def titles(views: list[dict]) -> str:
    return "\n".join(v["title"] or "" for v in views)


def test_finished_campaign_with_failures_retries_and_interruptions(tmp_path):
    ledger = tmp_path / "fits.json"
    items = [{"task_id": f"fit-{i:02d}", "x": i,
              **({"fail": "ValueError"} if i % 9 == 4 else {}),
              **({"fail": "KeyError"} if i == 7 else {}),
              **({"flaky": str(tmp_path / "flaky")} if i == 3 else {}),
              **({"lose": str(tmp_path / "lost")} if i == 5 else {})} for i in range(30)]
    first = checkpointed_map(run, items, ledger_path=ledger, execution="processes", workers=2,
                             retries=1)
    assert {f.task_id for f in first.failures} == {"fit-04", "fit-07", "fit-13", "fit-22"}
    checkpointed_map(run, items, ledger_path=ledger)  # a second run: the failed ones again
    page = tmp_path / "fits.html"
    out = report(ledger, page)
    html = page_source(page)
    assert_offline(html)
    assert "(not running)" in html and "schedulers used: processes, serial" in html
    assert "ValueError" in html and "KeyError" in html and "x = 4 is out of range" in html
    assert "WorkerLost" in html  # the interruption's cause
    assert "not recorded" in html  # no per-attempt CPU or memory in this ledger
    views = render_in_chromium(page, screenshots(tmp_path) / "finished.png", plots_in(out))
    names = titles(views)
    for title in ("Progress", "Throughput", "Timeline: ", "Duration of ended attempts", "Retries",
                  "result y", "result z", "y against item field x"):
        assert title in names, names
    timeline = next(v for v in views if v["title"].startswith("Timeline"))
    attempts = sum(r["attempts"] for r in read_ledger(ledger)["tasks"].values())
    assert f"Timeline: {attempts:,} attempts by worker" == timeline["title"]


def test_running_campaign(tmp_path):
    ledger, hold = tmp_path / "live.json", tmp_path / "never"
    driver = subprocess.Popen([PYTHON, str(DATA / "driver.py"), str(ledger), "8", str(hold)],
                              env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def blocked():
            if not ledger.exists():
                return None
            tasks = read_ledger(ledger)["tasks"]
            statuses = [rec["status"] for rec in tasks.values()]
            return statuses == ["accepted"] * 7 + ["running"]
        wait_until(blocked, "the driver to accept 7 tasks and block on the 8th")
        page = tmp_path / "live.html"
        out = report(ledger, page)
        html = page_source(page)
        assert "(running)" in html and "ETA" in html and "not running" not in html
        assert re.search(r"ETA</td><td>[^<]* for 1 task\(s\) left", html), html[-3000:]
        views = render_in_chromium(page, screenshots(tmp_path) / "running.png", plots_in(out))
        assert "Timeline: 8 attempts by worker" in titles(views)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.communicate()


def test_job_array_with_unmerged_fragments(tmp_path):
    ledger, hold = tmp_path / "array.json", tmp_path / "never"
    spec = tmp_path / "spec.toml"
    spec.write_text(f'target = "{DATA / "report_task.py"}:run"\nitems = "items.json"\n'
                    'ledger = "array.json"\n')
    (tmp_path / "items.json").write_text("[]")
    items = [{"task_id": f"a{i}", "x": i, **({"hold": str(hold)} if i == 6 else {}),
              **({"fail": "ValueError"} if i == 2 else {})} for i in range(7)]
    sub = plan_submission(items, ledger_path=ledger).record()
    # element 0 of a one-element array (as Slurm says): it takes the tasks in order, a6 last
    env = dict(child_env(), SLURM_ARRAY_JOB_ID="4242", SLURM_ARRAY_TASK_ID="0",
               SLURM_ARRAY_TASK_COUNT="1")
    worker = subprocess.Popen([PYTHON, "-m", "campaign._cli", "worker", str(spec), "--submission",
                               sub.id, "--merge-every", "3600"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def holding():
            facts = status_json(ledger)
            c = facts["counts"]
            return c["accepted"] == 5 and c["failed"] == 1 and c["running"] == 1 and facts
        facts = wait_until(holding, "the array element to end 6 tasks and hold the 7th")
        on_disk = read_ledger(ledger)["tasks"]  # the ledger file alone: fragments not merged
        assert sum(r["status"] == "accepted" for r in on_disk.values()) < 5
        assert list(LedgerPaths.of(ledger).work.glob("*/fragments/*.json"))
        page = tmp_path / "array.html"
        out = report(ledger, page)
        html = page_source(page)
        counts = re.findall(r"</span>(\w+)</td><td class=\"n\">(\d+)</td>", html)
        assert {k: int(v) for k, v in counts} == facts["counts"]
        assert "4242_0" in html and "schedulers used: array" in html
        views = render_in_chromium(page, screenshots(tmp_path) / "array.png", plots_in(out))
        assert "Timeline: 7 attempts by worker" in titles(views)
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.communicate()


def load_benchmark():
    spec = importlib.util.spec_from_file_location("report_bench", ROOT / "benchmarks" / "report.py")
    assert spec is not None and spec.loader is not None, "benchmarks/report.py is missing"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_100k_tasks_are_sampled_and_the_page_stays_small(tmp_path):
    ledger = tmp_path / "big.json"
    counts = load_benchmark().generate(ledger, 100_000)
    page = tmp_path / "big.html"
    out = report(ledger, page)
    html = page_source(page)
    assert page.stat().st_size <= 5_000_000
    assert "100,000 tasks" in out and "at most 20,000 points" in html
    assert f"{counts['failed']:,}" in html and "ConvergenceError" in html
    body = html.split('<table id="tasks-table"', 1)[1].split("</tbody>", 1)[0]
    listed = re.findall(r"</span>(\w+)</td><td>(?:#\d+|-)</td>", body)  # each row's status
    assert len(listed) == 2_000 and "2,000 of 100,000 tasks are listed" in html
    assert listed.count("failed") == 1_000 < counts["failed"]  # half of the rows at most
    assert listed.count("accepted") > 500  # and an even sample of the others
    assert (f"1,000 of {counts['failed']:,} failed, 0 of {counts['interrupted']:,} interrupted"
            in html)
    views = render_in_chromium(page, screenshots(tmp_path) / "big.png", plots_in(out))
    names = titles(views)
    assert re.search(r"Timeline: sample of 20,000 of [\d,]+ attempts", names), names
    for title in ("CPU time of attempts", "Peak memory (RSS) of attempts",
                  "GPU peak memory of attempts", "result energy",
                  "D against item field temperature"):
        assert title in names, names
    assert "not recorded" not in html


def test_typed_records_give_the_columns_plain_records_give(tmp_path, monkeypatch):
    """The report reads the scan's typed records (`campaign._ledger._typed.Record`) where it gives
    them: every column of the page's data is the one taken from the same records as plain dicts,
    also where records lack the per-attempt resource fields (pending ones; every third one)."""
    from campaign._ledger import _overlay
    from campaign._report import _data

    ledger = tmp_path / "mixed.json"
    load_benchmark().generate(ledger, 3000, now=1.8e9)
    doc = orjson.loads(ledger.read_bytes())
    for rec in list(doc["tasks"].values())[::3]:
        for key in _data.RESOURCES:
            rec.pop(key, None)
    ledger.write_bytes(orjson.dumps(doc))  # "tasks" last, each record's "status" first
    scan, kinds, plain = _overlay.scan_columns, set(), [False]

    def scan_columns(*args, typed=False, **kwargs):  # notes the types of the records read
        head, blocks, over = scan(*args, typed=typed and not plain[0], **kwargs)
        return head, ((kinds.update(type(r).__name__ for r in c.values()) or c, cols)
                      for c, cols in blocks), over

    monkeypatch.setattr(_overlay, "scan_columns", scan_columns)
    typed_data = _data.load(ledger, 1.8e9)
    assert kinds == {"Record"}, kinds
    plain[0] = True
    kinds.clear()
    plain_data = _data.load(ledger, 1.8e9)
    assert kinds == {"dict"}, kinds
    a, b = typed_data.attempts, plain_data.attempts
    assert typed_data.task_ids == plain_data.task_ids and len(a.task) > 3000
    for key in ("status", "attempts_per_task", "started", "ended", "duration"):
        np.testing.assert_array_equal(getattr(typed_data, key), getattr(plain_data, key))
    for key in ("task", "number", "status", "lane", "started", "ended"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
    for key in _data.RESOURCES:
        np.testing.assert_array_equal(a.resources[key], b.resources[key])
        assert 0 < np.isnan(a.resources[key]).sum() < len(a.task)  # some recorded, some not
    assert a.lanes == b.lanes and typed_data.failures == plain_data.failures
    assert typed_data.interruption_causes == plain_data.interruption_causes
    assert list(typed_data.results) == list(plain_data.results) == [
        "energy", "D", "residual", "iterations", "chi2"]
    for key, column in typed_data.results.items():
        np.testing.assert_array_equal(column, plain_data.results[key])
    assert list(typed_data.item_fields) == list(plain_data.item_fields) == ["temperature"]
    np.testing.assert_array_equal(typed_data.item_fields["temperature"],
                                  plain_data.item_fields["temperature"])


def test_errors_name_the_file_and_exit_2(tmp_path):
    proc = subprocess.run([PYTHON, "-m", "campaign._cli", "report", str(tmp_path / "nope.json"),
                           "-o", str(tmp_path / "r.html")], env=child_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "no ledger at" in proc.stderr and "nope.json" in proc.stderr
    assert not (tmp_path / "r.html").exists()
    with pytest.raises(LedgerError, match=r"nope\.json"):
        write_report(tmp_path / "nope.json", tmp_path / "r.html")
    assert not (tmp_path / "r.html").exists()


def test_write_report_from_python(tmp_path):
    ledger = tmp_path / "small.json"
    items = [{"task_id": f"s{i}", "x": i, **({"fail": "KeyError"} if i == 2 else {})}
             for i in range(4)]
    checkpointed_map(run, items, ledger_path=ledger)
    written = write_report(ledger, tmp_path / "small.html")
    assert written.tasks == 4 and written.plots >= 6
    assert written.size == (tmp_path / "small.html").stat().st_size
    html = page_source(tmp_path / "small.html")
    assert_offline(html)
    assert_offline((tmp_path / "small.html").read_text())
    assert "KeyError" in html and "x = 2 is out of range" in html
    # bokeh's library (bokeh.min.js, 1.27 MB) is in the page compressed: 1.3 MB before
    assert "BEGIN bokeh.min.js" in html and written.size < 600_000, written.size


def test_a_browser_without_decompression_says_why_it_draws_no_plots(tmp_path):
    ledger = tmp_path / "small.json"
    checkpointed_map(run, [{"task_id": f"s{i}", "x": i} for i in range(3)], ledger_path=ledger)
    page = write_report(ledger, tmp_path / "small.html").path
    require(chromium() is not None, "Debian's chromium is not installed (apt-get install "
            "chromium chromium-driver)")
    with Browser(tmp_path / ".profile", tmp_path / "chromium.log") as browser:
        browser.open(page.as_uri(), before="delete window.DecompressionStream;")
        found = browser.evaluate("""(() => {
          const note = document.getElementById("plots-note");
          return {bokeh: typeof window.Bokeh, hidden: note.hidden, note: note.textContent,
                  tasks: document.querySelectorAll("#tasks-table tbody tr").length};
        })()""")
    assert found["bokeh"] == "undefined" and not found["hidden"], found
    assert "need a browser with DecompressionStream" in found["note"], found
    assert found["tasks"] == 3, found  # the tables are plain HTML


#: In the page: the runs table's rows (each run's cells) and the tasks table's rows; then what
#: the filter box shows for a few words, and the first task after a click (and a second) on the
#: task column's head.
TABLES = """(() => {
  const cells = r => Array.from(r.cells).map(c => c.textContent);
  const runs = Array.from(document.querySelectorAll("table.runs tbody tr:not(.detail)")).map(cells);
  const table = document.getElementById("tasks-table"), box = document.getElementById("tasks-filter");
  const rows = () => Array.from(table.tBodies[0].rows);
  const shown = words => { box.value = words; box.dispatchEvent(new Event("input"));
    return rows().filter(r => !r.hidden).map(r => r.cells[0].textContent); };
  const filtered = {ValueError: shown("ValueError"), refused: shown("refused"),
                    "failed #5": shown("failed #5"), none: shown("no-such-task")};
  shown("");
  const head = table.tHead.rows[0].cells[0];
  head.click(); const up = rows()[0].cells[0].textContent;
  head.click(); const down = rows()[0].cells[0].textContent;
  return {runs, tasks: rows().map(cells), filtered, up, down,
          counter: document.getElementById("tasks-shown").textContent};
})()"""


def test_a_campaign_run_five_times_has_each_run_with_its_counts_and_a_table_of_its_tasks(
        tmp_path):
    """Five runs: the first fails two tasks; the second changes two accepted items (refused);
    the third adds three tasks; the fourth runs a failing item fixed (its record forgotten);
    the fifth runs what is left.
    The runs table gives each run's accepted, failed, refused and kept tasks and its command
    line; the tasks table lists every task with its run and error, and its filter and sort work
    in Chromium."""
    ledger = tmp_path / "five.json"
    items = [{"task_id": f"t{i:02d}", "x": i, **({"fail": "ValueError"} if i in (3, 8) else {})}
             for i in range(12)]
    checkpointed_map(run, items, ledger_path=ledger, max_failures=None)
    for item in items[:2]:
        item["x"] += 100  # two accepted items changed: refused from now on
    checkpointed_map(run, items, ledger_path=ledger, max_failures=None)
    items += [{"task_id": f"t{i:02d}", "x": i} for i in range(12, 15)]
    checkpointed_map(run, items, ledger_path=ledger, max_failures=None)
    del items[3]["fail"]  # a failed task's item fixed and its record forgotten: accepted
    forget = subprocess.run([PYTHON, "-m", "campaign._cli", "forget", str(ledger), "t03"],
                            env=child_env(), capture_output=True, text=True, timeout=600)
    assert forget.returncode == 0, forget.stderr
    checkpointed_map(run, items, ledger_path=ledger, max_failures=None)
    fifth = checkpointed_map(run, items, ledger_path=ledger, max_failures=None)
    assert fifth.counts["refused"] == 2
    page = tmp_path / "five.html"
    out = report(ledger, page)
    html = page_source(page)
    assert "2 task(s) in the last run: their item changed" in html
    assert html.count("python 3.") >= 5 and "pytest" in html  # each run's versions and command
    render_in_chromium(page, screenshots(tmp_path) / "five-runs.png", plots_in(out))
    with Browser(tmp_path / ".profile-tables", tmp_path / "tables.log") as browser:
        browser.open(page.as_uri())
        found = browser.evaluate(TABLES)
    head = ["tasks", "accepted", "failed", "interrupted", "running", "refused", "kept"]
    per_run = [dict(zip(head, map(int, row[7:]))) for row in found["runs"]]
    assert [r["tasks"] for r in per_run] == [12, 12, 15, 15, 15]
    assert [r["accepted"] for r in per_run] == [10, 0, 3, 1, 0]
    assert [r["failed"] for r in per_run] == [1, 1, 1, 1, 1]  # t03's failures were forgotten
    assert [r["refused"] for r in per_run] == [0, 2, 2, 2, 2]
    assert [r["kept"] for r in per_run] == [0, 8, 8, 11, 12]
    assert [row[0].split()[0] for row in found["runs"]] == ["#1", "#2", "#3", "#4", "#5"]
    tasks = {row[0]: row for row in found["tasks"]}
    assert sorted(tasks) == [f"t{i:02d}" for i in range(15)] and found["counter"] == "15"
    assert tasks["t08"][1:4] == ["failed", "#5", "5"]  # status, run, attempts
    assert "ValueError task t08: x = 8 is out of range" in tasks["t08"][6]
    assert tasks["t03"][1:4] == ["accepted", "#4", "1"] and tasks["t12"][2] == "#3"
    assert tasks["t00"][1:3] == ["accepted", "#1"] and "refused by run #5" in tasks["t00"][6]
    assert found["filtered"] == {"ValueError": ["t08"], "refused": ["t00", "t01"],
                                 "failed #5": ["t08"], "none": []}
    assert (found["up"], found["down"]) == ("t00", "t14")
