"""examples/lsq_fit.py runs and resumes; every python block of docs/lsq.md runs as written (those
that need a cluster use real options), and its toml and shell blocks use real keys and flags."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import tomllib

from testkit import PYTHON, ROOT, child_env

from campaign._cli import cli
from campaign._cli._spec import SPEC_KEYS, array_keys
from schedulers import SCHEDULERS
from solvers.lsq import solve

DOC = (ROOT / "docs" / "lsq.md").read_text()
EXAMPLE = ROOT / "examples" / "lsq_fit.py"
BLOCKS = re.findall(r"^```(\w+)\n(.*?)^```", DOC, flags=re.MULTILINE | re.DOTALL)


def test_example_fits_and_a_second_run_computes_nothing(tmp_path):
    ledger = tmp_path / "fit.json"
    stamps = []
    for _ in range(2):
        proc = subprocess.run([PYTHON, str(EXAMPLE), str(ledger)], env=child_env(),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        lines = [x for x in proc.stdout.splitlines() if "max |x - truth|" in x]
        assert [x.split(":")[0].strip() for x in lines] == ["qr", "normal", "lsqr"]
        for line in lines:
            error = re.search(r"truth\| = (\S+),", line)
            rmse = re.search(r"held-out RMSE energy (\S+) ", line)
            assert error is not None and rmse is not None, line
            assert float(error.group(1)) < 1e-2
            assert float(rmse.group(1)) < 1e-3
        stamps.append({p.name: p.stat().st_mtime_ns
                       for p in (tmp_path / "fit.json.blocks").iterdir()})
    assert stamps[0] == stamps[1], "the second run wrote blocks again"
    assert len(stamps[0]) == 60 and all(name.endswith(".npy") for name in stamps[0])


def calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and getattr(n.func, "id", getattr(n.func, "attr", None)) == name]


PYTHON_BLOCKS = [body for lang, body in BLOCKS if lang == "python"]
FILE_BLOCK = re.compile(r"# (\w+\.py)\n")
NEEDS = "# needs a "


def test_python_blocks_use_real_options():
    assert len(PYTHON_BLOCKS) >= 10
    for body in PYTHON_BLOCKS:
        tree = ast.parse(body)
        for call in calls(tree, "checkpointed_map"):
            kw = {k.arg: k.value for k in call.keywords}
            execution = ast.literal_eval(kw.pop("execution"))
            options = set(inspect.signature(SCHEDULERS[execution]).parameters)
            assert set(kw) - {"ledger_path"} <= options, (execution, set(kw) - options)
        for call in calls(tree, "solve"):
            known = set(inspect.signature(solve).parameters)
            assert {k.arg for k in call.keywords} <= known


def test_python_blocks_run_as_written(tmp_path):
    """The page's python blocks, in order, in one fresh folder: a block that starts with
    ``# name.py`` is that file; one that starts with ``# needs a ...`` (a cluster) is skipped;
    every other block runs, in one interpreter, as one script."""
    script, skipped = [], []
    for body in PYTHON_BLOCKS:
        if m := FILE_BLOCK.match(body):
            (tmp_path / m.group(1)).write_text(body)
        elif body.startswith(NEEDS):
            skipped.append(body.splitlines()[0])
        else:
            script.append(body)
    assert len(skipped) <= 3, skipped
    (tmp_path / "page.py").write_text("\n".join(script))
    proc = subprocess.run([PYTHON, "page.py"], cwd=tmp_path, env=child_env(),
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    fits = re.findall(r"^ *(\w+): max \|x - truth\| = (\S+),", proc.stdout, re.MULTILINE)
    assert [m for m, _ in fits] == ["qr", "normal", "lsqr"], proc.stdout
    assert all(float(err) < 1e-2 for _, err in fits), proc.stdout
    assert "rank 6 of 7" in proc.stdout  # the rank-deficient warning, printed by the page


def test_toml_and_shell_blocks_use_real_keys_and_flags():
    tomls = [tomllib.loads(body) for lang, body in BLOCKS if lang == "toml"]
    assert tomls
    for spec in tomls:
        assert set(spec) <= set(SPEC_KEYS)
        assert set(spec.get("array", {})) <= set(array_keys())
    shells = [body for lang, body in BLOCKS if lang == "sh"]
    assert shells
    for line in "\n".join(shells).splitlines():
        words = line.split("#")[0].split()
        assert words[0] == "campaign" and words[1] in cli.commands, line
        flags = {f for p in cli.commands[words[1]].params for f in p.opts}
        assert {w for w in words if w.startswith("--")} <= flags, line
