"""The README's two quick-start commands are the ones that work: CI runs the test command
verbatim, in a fresh virtual environment as a user does, and the main command's program exists
(tests/test_examples.py runs it)."""

from __future__ import annotations

import re

from testkit import ROOT


def quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", section)


def test_quick_start_has_exactly_two_commands():
    run, test = quick_start_commands()
    assert run.startswith("pip install -e . && python examples/")
    assert (ROOT / run.split("python ", 1)[1].split()[0]).exists()
    assert test.startswith('pip install -e ".[test]" && ')


def test_ci_runs_the_readme_test_command_verbatim_in_a_fresh_venv():
    _, test = quick_start_commands()
    ci = (ROOT / ".ci" / "run").read_text()
    command = ci.index(f"{test} || status=$?")
    made = re.search(r'^python3 -m venv "(\$\w+)/venv"$', ci, re.M)
    assert made, "CI makes its own virtual environment"
    activated = ci.index(f'source "{made.group(1)}/venv/bin/activate"')
    assert made.start() < activated < command
