"""Items that gain a column: ``ignore_fields`` (``campaign run --ignore-field``, a spec's
``ignore_fields``) keeps every accepted result and calls nothing when the items differ from their
records only in those fields; a refusal for an added or removed column says how to keep the
results; ``campaign forget --refused`` forgets exactly the tasks the last run refused."""

from __future__ import annotations

import logging

import pytest
from cli_data.cli_helpers import campaign, read_doc, statuses, write_model

from campaign import _plan, checkpointed_map, read_ledger


def counted(calls):
    def fn(item):
        calls.append(item["task_id"])
        return {"y": item["x"] * 2}
    return fn


def items(n, **extra):
    return [{"task_id": f"t{i:02d}", "x": i, **extra} for i in range(n)]


def test_a_new_column_refuses_every_task_unless_it_is_ignored(tmp_path, caplog):
    ledger = tmp_path / "l.json"
    calls: list[str] = []
    checkpointed_map(counted(calls), items(30), ledger_path=ledger)
    assert len(calls) == 30
    before = read_ledger(ledger)["tasks"]

    calls.clear()
    with caplog.at_level(logging.WARNING, logger="campaign"):
        refused = checkpointed_map(counted(calls), items(30, notes=None), ledger_path=ledger)
    assert calls == [] and refused.counts["refused"] == 30
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == _plan.REFUSED_WARNED + 1
    assert "field 'notes' added: None" in warnings[0]
    assert "--ignore-field notes" in warnings[0] and "ignore_fields=('notes',)" in warnings[0]
    assert "and 10 more task(s) were refused" in warnings[-1] and "--refused" in warnings[-1]

    kept = checkpointed_map(counted(calls), items(30, notes=None), ledger_path=ledger,
                            ignore_fields=("notes",))
    assert calls == [] and kept.complete and kept.counts["refused"] == 0
    assert [r["y"] for r in kept.results] == [2 * i for i in range(30)]
    doc = read_ledger(ledger)
    assert doc["tasks"] == before  # the records, with the items they ran with, stay

    more = checkpointed_map(counted(calls), items(31, notes=None), ledger_path=ledger,
                            ignore_fields=("notes",))  # with a new item: a run
    assert calls == ["t30"] and more.complete and more.counts["refused"] == 0
    doc = read_ledger(ledger)
    assert doc["runs"][-1]["ignore_fields"] == ["notes"]  # the run says what it ignored
    assert {t: r for t, r in doc["tasks"].items() if t != "t30"} == before


def test_an_ignored_field_may_also_be_removed_or_changed_but_no_other(tmp_path):
    ledger = tmp_path / "l.json"
    calls: list[str] = []
    checkpointed_map(counted(calls), items(4, notes="first"), ledger_path=ledger)
    calls.clear()
    changed = items(4)  # notes removed ...
    changed[1]["notes"] = "second"  # ... or changed
    changed[2]["x"] = 20  # another field changed: refused all the same
    out = checkpointed_map(counted(calls), changed, ledger_path=ledger, ignore_fields=["notes"])
    assert calls == [] and out.counts["refused"] == 1 and list(out.refused) == ["t02"]


def test_a_failed_task_whose_item_gained_an_ignored_field_runs_again(tmp_path):
    ledger = tmp_path / "l.json"

    def flaky(item):
        if item.get("notes") is None:
            raise ValueError("no notes yet")
        return {"notes": item["notes"]}

    checkpointed_map(flaky, items(2), ledger_path=ledger)
    assert set(statuses(ledger).values()) == {"failed"}
    out = checkpointed_map(flaky, items(2, notes="ok"), ledger_path=ledger,
                           ignore_fields=("notes",))
    assert out.complete and [r["notes"] for r in out.results] == ["ok", "ok"]


@pytest.mark.parametrize("bad", ["notes", ("task_id",), ("",), (3,)])
def test_bad_ignore_fields_are_refused_at_the_call(tmp_path, bad):
    with pytest.raises(ValueError, match="ignore_fields"):
        checkpointed_map(counted([]), items(2), ledger_path=tmp_path / "l.json",
                         ignore_fields=bad)
    assert not (tmp_path / "l.json").exists()


def test_the_command_line_and_the_spec_and_forget_refused(tmp_path):
    write_model(tmp_path)
    (tmp_path / "items.csv").write_text("task_id,x\n" + "".join(f"t{i},{i}\n" for i in range(6)))
    run = ("run", "model.py:fit", "--items", "items.csv", "--ledger", "l.json")
    assert campaign(*run, cwd=tmp_path).returncode == 0
    first = read_doc(tmp_path / "l.json")["tasks"]
    # an empty notes column, and t4's x changed
    (tmp_path / "items.csv").write_text(
        "task_id,x,notes\n" + "".join(f"t{i},{40 if i == 4 else i},\n" for i in range(6)))
    proc = campaign(*run, cwd=tmp_path)
    assert proc.returncode == 1 and "--ignore-field notes" in proc.stderr
    proc = campaign(*run, "--ignore-field", "notes", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr  # t4 alone is refused
    doc = read_doc(tmp_path / "l.json")
    assert doc["runs"][-1]["refused_count"] == 1 and doc["tasks"] == first
    (tmp_path / "run.toml").write_text('target = "model.py:fit"\nitems = "items.csv"\n'
                                       'ledger = "l.json"\nignore_fields = ["notes"]\n')
    forget = campaign("forget", "l.json", "--refused", cwd=tmp_path)
    assert forget.returncode == 0, forget.stderr
    assert "forgot 1 task in l.json" in forget.stderr and "it runs again" in forget.stderr
    assert sorted(read_doc(tmp_path / "l.json")["tasks"]) == [f"t{i}" for i in range(6) if i != 4]
    proc = campaign("run", "run.toml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    tasks = read_doc(tmp_path / "l.json")["tasks"]
    assert tasks["t4"]["result"]["y"] == 80 and tasks["t4"]["attempts"] == 1
    assert all(tasks[t] == first[t] for t in first if t != "t4")  # nothing else ran
    again = campaign("forget", "l.json", "--refused", cwd=tmp_path)
    assert again.returncode == 0 and "no refused task" in again.stderr


def test_forget_refused_finds_every_refused_task_past_the_listed_ones(tmp_path, monkeypatch):
    monkeypatch.setattr(_plan, "REFUSED_LISTED", 2)
    ledger = tmp_path / "l.json"
    checkpointed_map(counted([]), items(5), ledger_path=ledger)
    checkpointed_map(counted([]), items(5, x=7), ledger_path=ledger)  # every x changed
    run = read_ledger(ledger)["runs"][-1]
    assert len(run["refused"]) == 2 and run["refused_count"] == 5
    forget = campaign("forget", "l.json", "--refused", cwd=tmp_path)
    assert forget.returncode == 0 and "forgot 5 tasks" in forget.stderr, forget.stderr
    assert read_ledger(ledger)["tasks"] == {}
