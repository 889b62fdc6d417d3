"""`campaign run` driven as a real subprocess: exit codes, resume, signals, specs, progress."""

from __future__ import annotations

import json
import signal
import subprocess
import textwrap

import pytest
from cli_data.cli_helpers import (
    accepted_count,
    campaign,
    console_script,
    end,
    env,
    read_doc,
    start,
    statuses,
    wait_for,
    write_json_items,
    write_model,
)


def test_console_script_runs_a_campaign_to_the_end(tmp_path):
    write_model(tmp_path)
    write_json_items(tmp_path / "items.json", 4)
    proc = subprocess.run([console_script(), "run", "model.py:fit", "--items", "items.json",
                           "--ledger", "runs.json"], cwd=tmp_path, env=env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and "4/4 accepted" in proc.stderr  # the summary is a message
    assert set(statuses(tmp_path / "runs.json").values()) == {"accepted"}
    # not a terminal: plain progress lines, the last one at the end, then the summary
    assert proc.stderr.strip().splitlines()[-2].startswith("[campaign] 4/4 accepted, 0 failed")
    again = campaign("run", "model.py:fit", "--items", "items.json", "--ledger", "runs.json",
                     cwd=tmp_path)
    assert again.returncode == 0
    assert all(rec["attempts"] == 1 for rec in read_doc(tmp_path / "runs.json")["tasks"].values())


def test_failures_exit_1_then_a_fixed_item_reruns_after_forget(tmp_path):
    write_model(tmp_path)
    (tmp_path / "items.csv").write_text("task_id,x,fail\na,1,\nb,2,1\nc,3,\n")
    proc = campaign("run", "model.py:fit", "--items", "items.csv", "--ledger", "l.json",
                    "--retries", "1", cwd=tmp_path)
    assert proc.returncode == 1
    assert "2/3 accepted, 1 failed" in proc.stderr
    assert "campaign failures l.json" in proc.stderr
    assert read_doc(tmp_path / "l.json")["tasks"]["b"]["attempts"] == 2  # --retries 1
    # the item changes: refused (exit 1), until forgotten
    (tmp_path / "items.csv").write_text("task_id,x,fail\na,1,\nb,2,\nc,30,\n")
    proc = campaign("run", "model.py:fit", "--items", "items.csv", "--ledger", "l.json",
                    cwd=tmp_path)
    assert proc.returncode == 1 and "refused" in proc.stderr
    forget = campaign("forget", "l.json", "c", "--status", "failed", cwd=tmp_path)
    assert forget.returncode == 0 and "forgot 2 tasks" in forget.stderr
    proc = campaign("run", "model.py:fit", "--items", "items.csv", "--ledger", "l.json",
                    cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tasks = read_doc(tmp_path / "l.json")["tasks"]
    assert tasks["c"]["result"]["y"] == 60 and tasks["b"]["attempts"] == 1


def test_sigint_mid_run_records_the_interruption_and_resume_finishes(tmp_path):
    write_model(tmp_path)
    write_json_items(tmp_path / "items.json", 12, hold_from=2)  # t2 waits for the file "hold"
    ledger = tmp_path / "runs.json"
    args = ("run", "model.py:fit", "--items", "items.json", "--ledger", "runs.json",
            "--progress-interval", "0")
    proc = start(*args, cwd=tmp_path)
    try:
        wait_for(lambda: accepted_count(ledger) >= 2, what="two accepted tasks")
        # status works while the run writes the same ledger
        live = campaign("status", "runs.json", "--json", cwd=tmp_path)
        assert live.returncode == 0, live.stderr
        facts = json.loads(live.stdout)
        assert facts["active"] and facts["last_run"]["driver_alive"] is True
        assert facts["counts"]["accepted"] >= 2 and facts["total"] == 12
        # a second driver on the same ledger is refused
        busy = campaign(*args, cwd=tmp_path)
        assert busy.returncode == 2 and "in use by a live campaign driver" in busy.stderr
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        end(proc)
    assert proc.returncode == 130, err
    assert "Resume with: campaign run model.py:fit --items items.json --ledger runs.json" in err
    doc = read_doc(ledger)
    assert doc["runs"][-1]["status"] == "interrupted"
    found = [rec["status"] for rec in doc["tasks"].values()]
    assert found == ["accepted"] * 2 + ["interrupted"] + ["pending"] * 9
    done_before = {t for t, s in statuses(ledger).items() if s == "accepted"}
    (tmp_path / "hold").touch()
    resumed = campaign(*args[:-2], "--progress", "off", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    doc = read_doc(ledger)
    assert all(rec["status"] == "accepted" for rec in doc["tasks"].values())
    assert all(doc["tasks"][t]["attempts"] == 1 for t in done_before)  # not run again


def test_sigterm_mid_run_exits_143_after_writing_the_ledger(tmp_path):
    write_model(tmp_path)
    write_json_items(tmp_path / "items.json", 10, hold_from=1)  # t1 waits for the file "hold"
    ledger = tmp_path / "runs.json"
    proc = start("run", "model.py:fit", "--items", "items.json", "--ledger", "runs.json",
                 "--no-resume", cwd=tmp_path)
    try:
        wait_for(lambda: accepted_count(ledger) >= 1, what="an accepted task")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        end(proc)
    assert proc.returncode == 143, err
    assert "stopped by SIGTERM" in err
    # the resume command drops --no-resume, which would start over
    assert "Resume with: campaign run model.py:fit --items items.json --ledger runs.json\n" in err
    assert list(statuses(ledger).values()) == ["accepted", "interrupted"] + ["pending"] * 8


def test_spec_file_with_relative_paths_and_overrides(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    write_model(project)
    (project / "items.jsonl").write_text('{"task_id": "a", "x": 1}\n\n{"task_id": "b", "x": 2, '
                                         '"fail": true}\n')
    (project / "fit.toml").write_text(textwrap.dedent("""
        target = "model.py:fit"
        items = "items.jsonl"
        ledger = "out/fit.json"
        retries = 2
        resume = false

        [options]
    """))
    # run from another folder: paths are relative to the spec's folder
    proc = campaign("run", "project/fit.toml", "--retries", "0", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    doc = read_doc(project / "out" / "fit.json")
    assert doc["tasks"]["b"]["attempts"] == 1  # --retries 0 overrode retries = 2
    assert "Resume" not in proc.stderr
    # the spec says resume = false: the old ledger is kept beside as a .replaced- file
    campaign("run", "project/fit.toml", cwd=tmp_path)
    assert list((project / "out").glob("fit.replaced-*.json"))


def test_module_target_and_id_field(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "fits.py").write_text("def square(item):\n    return {'y': item['x'] ** 2}\n")
    (tmp_path / "items.csv").write_text("sample,x\n007,3\n008,4\n")
    proc = campaign("run", "mypkg.fits:square", "--items", "items.csv", "--ledger", "l.json",
                    "--id-field", "sample", "--progress", "off", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    tasks = read_doc(tmp_path / "l.json")["tasks"]
    assert list(tasks) == ["007", "008"]
    assert tasks["007"]["item"] == {"task_id": "007", "sample": 7, "x": 3}
    assert tasks["008"]["result"] == {"y": 16}
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [  # --progress off: the summary alone
        f"campaign: 2/2 accepted in {proc.stderr.split(' in ')[1].split(' ')[0]} (0 kept from "
        "the ledger, 2 ran now); ledger l.json"]


def test_empty_items_file_is_a_complete_campaign(tmp_path):
    write_model(tmp_path)
    (tmp_path / "items.json").write_text("[]")
    proc = campaign("run", "model.py:fit", "--items", "items.json", "--ledger", "l.json",
                    cwd=tmp_path)
    assert proc.returncode == 0 and "0/0 accepted" in proc.stderr


def test_progress_bar_shows_counts(tmp_path):
    write_model(tmp_path)
    write_json_items(tmp_path / "items.json", 3)
    proc = campaign("run", "model.py:fit", "--items", "items.json", "--ledger", "l.json",
                    "--progress", "bar", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "3/3" in proc.stderr and "3 ok, 0 failed, 0 running, 0 remaining" in proc.stderr
    # the bar, not plain lines: one line, the final counts, once the bar has closed
    assert proc.stderr.count("[campaign]") == 1
    assert "[campaign] 3/3 accepted, 0 failed, 0 running, 0 remaining" in proc.stderr


def test_a_target_file_named_like_a_stdlib_module_works(tmp_path):
    """random.py:fit is imported under a private name: ``import random`` (by the command, its
    libraries or the task) gives the standard module, in the driver and in the workers, though
    the current folder holds random.py. (The console script, as users run it: ``python -m``
    puts the current folder first on ``sys.path`` by itself.)"""
    (tmp_path / "random.py").write_text(textwrap.dedent("""
        def fit(item):
            import random
            return {"y": item["x"] * 2, "stdlib_random": hasattr(random, "choice")}
    """))
    write_json_items(tmp_path / "items.json", 3)
    for execution, ledger in (("serial", "s.json"), ("processes", "p.json"), ("dask", "d.json")):
        proc = subprocess.run([console_script(), "run", "random.py:fit", "--items", "items.json",
                               "--ledger", ledger, "--execution", execution, "--progress", "off"],
                              cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "3/3 accepted" in proc.stderr
        results = [rec["result"] for rec in read_doc(tmp_path / ledger)["tasks"].values()]
        assert results == [{"y": 2 * i, "stdlib_random": True} for i in range(3)]


@pytest.mark.parametrize("name", ["model", "random"])
def test_a_target_files_neighbour_modules_import_in_the_workers(tmp_path, name):
    """A target file that imports a helper module beside it (``from mymodels import double``)
    runs in the workers too, though the current folder is another one: its folder reaches them
    (first on ``sys.path`` for model.py, last for random.py, which is named like a standard
    module)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "mymodels.py").write_text("def double(x):\n    return 2 * x\n")
    (project / f"{name}.py").write_text(textwrap.dedent("""
        from mymodels import double

        def fit(item):
            import mymodels
            return {"y": double(item["x"]), "again": mymodels.double(item["x"])}
    """))
    write_json_items(tmp_path / "items.json", 3)
    for execution in ("processes", "dask"):
        ledger = f"{execution}.json"
        proc = subprocess.run([console_script(), "run", f"project/{name}.py:fit", "--items",
                               "items.json", "--ledger", ledger, "--execution", execution,
                               "--progress", "off"],
                              cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        results = [rec["result"] for rec in read_doc(tmp_path / ledger)["tasks"].values()]
        assert results == [{"y": 2 * i, "again": 2 * i} for i in range(3)], execution
