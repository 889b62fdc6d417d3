"""Bad input to `campaign run` (and a foreign ledger): one clear paragraph, exit 2, nothing
written. Plus the item readers' conversion rules, tested in-process."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from cli_data.cli_helpers import campaign, write_json_items, write_model

from campaign._cli._exits import BadInput
from campaign._cli._inputs import csv_error_position, read_items


def names(folder: Path) -> set[str]:
    """What is in ``folder``, but Python's cache of the target module it imported (written
    where the interpreter keeps such a cache, as it does by default)."""
    return {p.name for p in folder.iterdir()} - {"__pycache__"}


def run_bad(tmp_path, *args, items="items.json"):
    """Run with a good model and items unless overridden; check exit 2 and nothing written."""
    write_model(tmp_path)
    if not (tmp_path / "items.json").exists():
        write_json_items(tmp_path / "items.json", 3)
    before = names(tmp_path)
    proc = campaign("run", *(args or ("model.py:fit",)), "--items", items, "--ledger",
                    "out.json", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    message = proc.stderr.strip()
    assert message.startswith("campaign: error: ") and "\n" not in message, message
    assert "Traceback" not in message
    assert names(tmp_path) == before  # nothing written
    return message


def test_missing_items_file(tmp_path):
    assert "items file nope.json does not exist" in run_bad(tmp_path, items="nope.json")


def test_unreadable_items_file(tmp_path):
    (tmp_path / "dir.json").mkdir()
    assert "is a folder" in run_bad(tmp_path, items="dir.json")


def test_unknown_items_suffix(tmp_path):
    (tmp_path / "items.txt").write_text("x")
    assert "format is unknown" in run_bad(tmp_path, items="items.txt")


def test_malformed_json_names_line_and_column(tmp_path):
    (tmp_path / "bad.json").write_text('[{"task_id": "a",\n  "x": 1,]')
    message = run_bad(tmp_path, items="bad.json")
    assert "not valid JSON" in message and "line 2, column 10" in message


def test_json_that_is_not_a_list_of_objects(tmp_path):
    (tmp_path / "obj.json").write_text('{"task_id": "a"}')
    assert "holds a JSON object" in run_bad(tmp_path, items="obj.json")
    (tmp_path / "nums.json").write_text("[1, 2]")
    assert "list element 0" in run_bad(tmp_path, items="nums.json")


def test_malformed_jsonl_names_line_and_column(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"task_id": "a", "x": 1}\n\n{"task_id": "b" "x": 2}\n')
    assert "line 3, column 17" in run_bad(tmp_path, items="bad.jsonl")


def test_malformed_csv_names_line_and_column(tmp_path):
    (tmp_path / "cells.csv").write_text("task_id,x\na,1\nb,2,3\n")
    assert "line 3, column 3: the row has 3 fields" in run_bad(tmp_path, items="cells.csv")
    (tmp_path / "quote.csv").write_text('task_id,x\na,"1"2\n')
    assert "line 2, column 6: malformed CSV" in run_bad(tmp_path, items="quote.csv")
    (tmp_path / "open.csv").write_text('task_id,x\na,1\nb,"2\n')
    assert "line 3, column 3: malformed CSV" in run_bad(tmp_path, items="open.csv")


def test_items_without_task_id_suggest_id_field(tmp_path):
    (tmp_path / "noid.csv").write_text("x\n1\n")
    message = run_bad(tmp_path, items="noid.csv")
    assert "line 2 has no 'task_id'" in message and "--id-field" in message


def test_duplicate_task_ids_from_the_engine(tmp_path):
    (tmp_path / "dup.jsonl").write_text('{"task_id": "a", "x": 1}\n{"task_id": "a", "x": 2}\n')
    assert "appear more than once" in run_bad(tmp_path, items="dup.jsonl")


@pytest.mark.parametrize("target, expected", [
    ("nope.py:fit", "the file"),
    ("model.py:missing", "has no attribute 'missing' (its functions: fit)"),
    ("model.py:not_a_function", "is not callable (it is an int)"),
    ("no_such_module_xyz:fit", "ModuleNotFoundError: No module named 'no_such_module_xyz'"),
    ("model.py", "names no function"),
])
def test_bad_targets(tmp_path, target, expected):
    assert expected in run_bad(tmp_path, target)


def test_target_whose_import_raises_shows_the_error(tmp_path):
    (tmp_path / "broken.py").write_text("import math\nraise RuntimeError('no GPU here')\n")
    message = run_bad(tmp_path, "broken.py:fit")
    assert "RuntimeError: no GPU here" in message and "broken.py, line 2" in message
    (tmp_path / "syntax.py").write_text("def fit(item:\n    pass\n")
    assert "SyntaxError" in run_bad(tmp_path, "syntax.py:fit")


def test_spec_with_unknown_key_lists_the_valid_keys(tmp_path):
    (tmp_path / "s.toml").write_text('target = "model.py:fit"\nitems = "items.json"\n'
                                     'ledger = "out.json"\nretry = 2\n')
    write_model(tmp_path)
    proc = campaign("run", "s.toml", cwd=tmp_path)
    assert proc.returncode == 2
    assert "unknown key 'retry'" in proc.stderr
    assert "target, items, ledger, execution, retries, resume" in proc.stderr
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("body, expected", [
    ('target = "model.py:fit"\nitems = "items.json"\nledger = "out.json"\nretries = "2"\n',
     "retries = '2' is a string; it must be an integer"),
    ('target = "model.py:fit"\nitems = "items.json"\n', 'does not name ledger'),
    ('target = "model.py:fit\n', "not valid TOML"),
    ('target = "model.py:fit"\nitems = "items.json"\nledger = "out.json"\n[options]\nn = 2\n',
     "take"),  # the scheduler's own message: serial takes no options
    ('target = "model.py:fit"\nitems = "items.json"\nledger = "out.json"\nexecution = "nonesuch"\n',
     "unknown execution 'nonesuch'"),
])
def test_bad_specs(tmp_path, body, expected):
    write_model(tmp_path)
    write_json_items(tmp_path / "items.json", 2)
    (tmp_path / "s.toml").write_text(body)
    proc = campaign("run", "s.toml", cwd=tmp_path)
    assert proc.returncode == 2 and expected in proc.stderr, proc.stderr
    assert not (tmp_path / "out.json").exists()


def test_ledger_of_another_format_is_refused_and_untouched(tmp_path):
    write_model(tmp_path)
    write_json_items(tmp_path / "items.json", 2)
    (tmp_path / "other.json").write_text('{"format": "something-else"}')
    for args in (("run", "model.py:fit", "--items", "items.json", "--ledger", "other.json"),
                 ("status", "other.json"), ("results", "other.json"),
                 ("failures", "other.json"), ("forget", "other.json", "a")):
        proc = campaign(*args, cwd=tmp_path)
        assert proc.returncode == 2, args
        assert "is not a campaign ledger" in proc.stderr, args
    assert (tmp_path / "other.json").read_text() == '{"format": "something-else"}'
    assert names(tmp_path) == {"items.json", "model.py", "other.json"}


def test_bad_usage_exits_2(tmp_path):
    assert campaign("run", "model.py:fit", cwd=tmp_path).returncode == 2  # no --items/--ledger
    assert campaign("run", cwd=tmp_path).returncode == 2
    assert campaign("frobnicate", cwd=tmp_path).returncode == 2
    assert campaign("results", "x.json", "--format", "xml", cwd=tmp_path).returncode == 2
    assert campaign("status", "missing.json", cwd=tmp_path).returncode == 2


# --------------------------------------------------------------------- readers, in-process
def test_csv_cells_become_numbers_null_or_text(tmp_path):
    path = tmp_path / "items.csv"
    path.write_text('\ufefftask_id,i,f,e,s,empty,q\n'
                    '01,7,-0.5,1e-3,abc,,"x, y"\n'
                    '2, 12 ,nan,-inf,1_000,  ,3.5.1\n')
    items = read_items(path)
    assert items[0] == {"task_id": "01", "i": 7, "f": -0.5, "e": 1e-3, "s": "abc", "empty": None,
                        "q": "x, y"}
    second = items[1]
    assert second["i"] == 12 and math.isnan(second["f"]) and second["e"] == -math.inf
    assert second["s"] == "1_000" and second["empty"] is None and second["q"] == "3.5.1"


def test_jsonl_keeps_unicode_line_separators_inside_strings(tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps({"task_id": "a", "s": "x\u2028y"}, ensure_ascii=False) + "\n")
    assert read_items(path) == [{"task_id": "a", "s": "x\u2028y"}]


def test_id_field_makes_string_task_ids(tmp_path):
    path = tmp_path / "items.json"
    path.write_text(json.dumps([{"n": 1, "x": 2}, {"n": "b", "x": 3}]))
    assert [i["task_id"] for i in read_items(path, id_field="n")] == ["1", "b"]
    with pytest.raises(BadInput, match=r"has no field 'm' .*its fields: 'n', 'x'"):
        read_items(path, id_field="m")
    empty = tmp_path / "empty_id.json"
    empty.write_text(json.dumps([{"n": "", "x": 1}]))
    with pytest.raises(BadInput, match="no value for the id field 'n'"):
        read_items(empty, id_field="n")
    path.write_text(json.dumps([{"task_id": "z", "n": 1}]))
    with pytest.raises(BadInput, match="both a task_id"):
        read_items(path, id_field="n")


def test_csv_error_position():
    assert csv_error_position('a,b\n1,"2"x\n') == (2, 6)
    assert csv_error_position('a,b\n1,"2\n') == (2, 3)
    assert csv_error_position('a,b\n"1\n""2""",3\n') is None  # a quoted cell over two lines


def test_a_new_keyword_of_render_array_script_is_accepted_in_the_spec_array_table(
        tmp_path, monkeypatch):
    """The ``[array]`` keys are read from `render_array_script`'s signature: a keyword added to
    it (here ``qos``) is accepted from the spec and reaches the script, and only then."""
    import inspect

    from click.testing import CliRunner

    import schedulers.slurm
    from campaign._cli import cli
    from campaign._cli._spec import array_keys

    real = schedulers.slurm.render_array_script

    def render(*, qos=None, **options):
        return real(**options).replace("#SBATCH --ntasks=1\n",
                                       f"#SBATCH --ntasks=1\n#SBATCH --qos={qos}\n")

    qos = inspect.Parameter("qos", inspect.Parameter.KEYWORD_ONLY, default=None)
    render.__signature__ = inspect.signature(real).replace(  # type: ignore[attr-defined]
        parameters=[*inspect.signature(real).parameters.values(), qos])
    write_model(tmp_path)
    write_json_items(tmp_path / "items.json", 2)
    (tmp_path / "campaign.toml").write_text('target = "model.py:fit"\nitems = "items.json"\n'
                                            'ledger = "fits.json"\n[array]\nqos = "long"\n')
    monkeypatch.chdir(tmp_path)
    submit = ["submit", "campaign.toml", "--array", "2", "--dry-run"]
    refused = CliRunner().invoke(cli, submit)
    assert refused.exit_code == 2 and "unknown key 'qos'" in refused.output, refused.output
    monkeypatch.setattr(schedulers.slurm, "render_array_script", render)
    assert "qos" in array_keys()
    done = CliRunner().invoke(cli, submit)
    assert done.exit_code == 0, done.output
    assert "#SBATCH --qos=long\n" in done.stdout and not (tmp_path / "fits.json").exists()
