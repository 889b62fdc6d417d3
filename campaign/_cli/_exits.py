"""Exit codes of the ``campaign`` command, and the errors that end a command with one."""

from __future__ import annotations

from typing import Any

import click

#: Every task accepted (or, for the inspecting commands, nothing wrong to report).
EXIT_OK = 0
#: Some tasks failed or were refused (their item changed since they were recorded).
EXIT_FAILED = 1
#: Bad usage or bad input (items, target, spec, ledger, task ids); nothing was written.
EXIT_USAGE = 2
#: The ledger could not be written (disk full, read-only, I/O error) even after retrying; the
#: run was stopped and what was recorded before the first failed write is kept.
EXIT_LEDGER_WRITE = 3
#: Interrupted by Ctrl-C (SIGINT) after the ledger was written (128 + 2).
EXIT_SIGINT = 130
#: Stopped by SIGTERM (e.g. ``scancel``, a job's time limit) after the ledger was written.
EXIT_SIGTERM = 143

#: The Python API's words in library messages, and what a user of the command types instead.
_CLI_WORDS = (("pass another ledger_path",
               "name another ledger file (--ledger, or `ledger = ...` in the spec file)"),)


def cli_words(message: str) -> str:
    """A library message as the command line says it (``--ledger``, not ``ledger_path``)."""
    for api, cli in _CLI_WORDS:
        message = message.replace(api, cli)
    return message


class BadInput(click.ClickException):
    """A problem with what the user gave (a file, a target, an id): one paragraph, exit 2."""

    exit_code = EXIT_USAGE

    def show(self, file: Any = None) -> None:
        click.echo(f"campaign: error: {cli_words(self.format_message())}", err=True)


class LedgerWriteFailed(click.ClickException):
    """The ledger could not be written: one paragraph, exit 3."""

    exit_code = EXIT_LEDGER_WRITE

    def show(self, file: Any = None) -> None:
        click.echo(f"campaign: error: {self.format_message()}", err=True)
