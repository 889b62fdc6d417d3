"""docs/cli.md documents exactly the commands `campaign --help` lists, and every option of
each."""

from __future__ import annotations

import re

import click
from cli_data.cli_helpers import ROOT, campaign

from campaign._cli import cli

DOC = (ROOT / "docs" / "cli.md").read_text()


def documented_commands() -> list[str]:
    return re.findall(r"^### campaign (\w+)\s*$", DOC, flags=re.MULTILINE)


def listed_commands(help_text: str) -> list[str]:
    section = help_text.split("Commands:", 1)[1]
    return re.findall(r"^  (\w+)\s", section, flags=re.MULTILINE)


def test_every_documented_command_exists_and_vice_versa(tmp_path):
    proc = campaign("--help", cwd=tmp_path)
    assert proc.returncode == 0
    listed = listed_commands(proc.stdout)
    assert sorted(documented_commands()) == sorted(listed) == sorted(
        ["run", "status", "results", "failures", "forget", "report", "submit", "worker"])
    for name in listed:
        sub = campaign(name, "--help", cwd=tmp_path)
        assert sub.returncode == 0 and f"Usage: campaign {name}" in sub.stdout


def test_every_option_is_documented_in_its_section():
    sections = re.split(r"^### ", DOC, flags=re.MULTILINE)
    by_command = {s.split()[1]: s for s in sections[1:] if s.startswith("campaign ")}
    for name, command in cli.commands.items():
        for param in command.params:
            if not isinstance(param, click.Option) or param.name == "verbose":
                continue
            for flag in param.opts + param.secondary_opts:
                if flag.startswith("--"):
                    assert f"`{flag}" in by_command[name], f"{name} {flag} not in docs/cli.md"


def test_exit_codes_are_documented():
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 130 |", "| 143 |"):
        assert code in DOC
