"""Make docs/report-resumed.png: `campaign report` of a campaign run five times, with idle pauses
between the runs, failures and, in the last run, refused tasks (their items changed), as
Chromium draws it headless.

    python scripts/report-screenshot.py [--output docs/report-resumed.png] [--pause 2]

Needs Chromium (Debian's ``chromium``) and the project installed; writes the ledger and the page
in a temporary folder, removed at the end.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from campaign import checkpointed_map, write_report

ROOT = Path(__file__).resolve().parents[1]


def fit(item):
    """A fit that fails for one item in 13."""
    if item["x"] % 13 == 5:
        raise ValueError(f"task {item['task_id']}: x = {item['x']} is out of range")
    return {"y": item["x"] ** 0.5, "chi2": (item["x"] % 17) / 17.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "report-resumed.png")
    parser.add_argument("--pause", type=float, default=2.0, help="seconds between two runs")
    args = parser.parse_args()
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("no chromium on PATH: apt-get install chromium")
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Path(tmp) / "fits.json"
        for run in range(5):  # each run adds 20 items; the last changes one item in seven
            items = [{"task_id": f"fit-{i:03d}",
                      "x": i + (100 if run == 4 and i % 7 == 0 else 0)}
                     for i in range(40 + 20 * run)]
            checkpointed_map(fit, items, ledger_path=ledger)
            time.sleep(args.pause)
        page = Path(tmp) / "fits.html"
        report = write_report(ledger, page)
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--window-size=1400,2600",
                        "--virtual-time-budget=10000", f"--screenshot={args.output}",
                        page.as_uri()], check=True, capture_output=True, timeout=300)
    print(f"wrote {args.output} ({report.plots} plots, {report.tasks} tasks)")


if __name__ == "__main__":
    main()
