"""docs/ledger.md's statuses, the enums and the schema checked on load name the same values.

The status of a task record and of a run are each named in three places: the tables of
docs/ledger.md (the specification), `Status` / `RunStatus` (campaign/_ledger/_status.py), and the
schema every read checks (campaign/_ledger/_records.py). These tests read the page and the files a
reader checks, so a status added to one of them and not the others fails here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from campaign import LedgerError, RunStatus, Status, read_ledger
from campaign._ledger._jsonvalue import fingerprint
from campaign._ledger._records import new_record
from campaign._ledger._schema import RECORD_FIELDS, RUN_FIELDS, RUN_STATUSES

DOC = Path(__file__).resolve().parents[2] / "docs" / "ledger.md"
TASK_STATUSES = {s.value for s in Status}
RUN_STATUS_VALUES = {s.value for s in RunStatus}


def _section(text: str, heading: str) -> str:
    """The text of the section under ``heading`` (a ``#`` line), up to the next heading."""
    match = re.search(rf"^#+ {re.escape(heading)}\n(.*?)(?=^#+ |\Z)", text, re.M | re.S)
    assert match, f"docs/ledger.md has no section {heading!r}"
    return match.group(1)


def _row(section: str, key: str) -> str:
    """The meaning cell of the table row whose key cell is `` `key` ``."""
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0] == f"`{key}`":
            return cells[-1]
    raise AssertionError(f"no row `{key}` in the section's table")


def _named(cell: str) -> set[str]:
    """The values a table cell names: its backticked words outside parentheses (the
    parentheses explain a value and may quote others)."""
    depth, outside = 0, []
    for char in cell:
        depth += char == "("
        if depth == 0:
            outside.append(char)
        depth -= char == ")" and depth > 0
    return set(re.findall(r"`([a-z_]+)`", "".join(outside)))


@pytest.fixture(scope="module")
def page() -> str:
    return DOC.read_text(encoding="utf-8")


def test_the_task_record_table_names_exactly_the_task_statuses(page):
    cell = _row(_section(page, "A task record"), "status")
    assert _named(cell) == TASK_STATUSES


def test_the_transition_diagram_names_exactly_the_task_statuses(page):
    section = _section(page, "Statuses and transitions")
    diagram = re.search(r"```\n(.*?)```", section, re.S)
    assert diagram, "the section has no diagram"
    lines = diagram.group(1).splitlines()
    targets = {m.group(1) for m in re.finditer(r"▶ ([a-z]+)", diagram.group(1))}
    first = re.match(r"([a-z]+)", lines[0])
    assert first, f"the diagram's first line names no status: {lines[0]!r}"
    sources = {first.group(1)}
    assert targets <= TASK_STATUSES
    assert targets | sources == TASK_STATUSES


def test_the_run_table_names_exactly_the_run_statuses(page):
    cell = _row(_section(page, "A run"), "status")
    assert _named(cell) == RUN_STATUS_VALUES


def test_the_schema_names_exactly_the_enums():
    assert set(RUN_STATUSES) == RUN_STATUS_VALUES
    assert RECORD_FIELDS["status"][1] == "one of " + ", ".join(s.value for s in Status)
    assert RUN_FIELDS["status"][1] == "one of " + ", ".join(s.value for s in RunStatus)


def _ledger(path: Path, task_status: str, run_status: str) -> Path:
    item = {"task_id": "a"}
    rec = dict(new_record(item, fingerprint(item)), status=task_status,
               result={"x": 1} if task_status == "accepted" else None)
    run = {"id": "r1", "host": "h", "pid": 1, "execution": "serial", "started": 1.0,
           "ended": None, "status": run_status, "refused": []}
    doc: dict[str, Any] = {"format": "diffsoup-campaign-ledger", "version": 2,
                           "generation": "0123456789abcdef", "created": 1.0, "updated": 1.0,
                           "runs": [run], "tasks": {"a": rec}}
    path.write_bytes(orjson.dumps(doc))
    return path


@pytest.mark.parametrize("status", sorted(TASK_STATUSES))
def test_every_task_status_loads(tmp_path, status):
    doc = read_ledger(_ledger(tmp_path / "l.json", status, "finished"))
    assert doc["tasks"]["a"]["status"] == status


@pytest.mark.parametrize("status", sorted(RUN_STATUS_VALUES))
def test_every_run_status_loads(tmp_path, status):
    doc = read_ledger(_ledger(tmp_path / "l.json", "pending", status))
    assert doc["runs"][0]["status"] == status


@pytest.mark.parametrize("where", ["task", "run"])
def test_a_status_outside_the_enums_is_refused_naming_the_allowed_ones(tmp_path, where):
    path = _ledger(tmp_path / "l.json", "done" if where == "task" else "pending",
                   "done" if where == "run" else "finished")
    before = path.read_bytes()
    with pytest.raises(LedgerError) as caught:
        read_ledger(path)
    allowed = Status if where == "task" else RunStatus
    assert "'done'" in str(caught.value)
    assert ", ".join(s.value for s in allowed) in str(caught.value)
    assert path.read_bytes() == before
