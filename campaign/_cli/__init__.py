"""The ``campaign`` command: run a campaign from the shell and inspect or edit its ledger.

``main`` is the console script (pyproject ``[project.scripts]``). Commands live in their own
modules; this module builds the click group, configures logging and maps errors to exit codes
(see `campaign._cli._exits` and docs/cli.md).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import click

from .._errors import LedgerWriteError
from ._exits import EXIT_FAILED, EXIT_LEDGER_WRITE, EXIT_SIGINT, EXIT_USAGE, LedgerWriteFailed
from ._failures import failures_command
from ._forget import forget_command
from ._options import group_verbose_option
from ._report import report_command
from ._results import results_command
from ._run import run_command
from ._status import status_command
from ._submit import submit_command
from ._worker import worker_command


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="diffsoup-campaign", prog_name="campaign")
@group_verbose_option
def cli() -> None:
    """Run one function over many items, record every finished task in a ledger (one JSON
    file), and resume exactly where a run stopped.

    Exit codes: 0 all accepted (or nothing to report), 1 some tasks failed or were refused,
    2 bad usage or bad input (nothing written), 3 the ledger could not be written (disk full,
    read-only; what was recorded is kept), 130 interrupted by Ctrl-C, 143 stopped by SIGTERM
    (both after the ledger was written). Each command's options and output: campaign COMMAND
    --help.
    """


cli.add_command(run_command)
cli.add_command(status_command)
cli.add_command(results_command)
cli.add_command(failures_command)
cli.add_command(forget_command)
cli.add_command(report_command)
cli.add_command(submit_command)
cli.add_command(worker_command)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``campaign`` command line; returns (console script: exits with) the exit code."""
    try:
        code = cli.main(args=list(argv) if argv is not None else None, prog_name="campaign",
                        standalone_mode=False)
    except click.exceptions.Abort:  # Ctrl-C outside `campaign run`'s own handling
        click.echo("campaign: interrupted", err=True)
        return EXIT_SIGINT
    except click.ClickException as exc:  # bad usage or bad input
        exc.show()
        return exc.exit_code
    except LedgerWriteError as exc:  # e.g. `campaign forget` on a full disk
        LedgerWriteFailed(str(exc)).show()
        return EXIT_LEDGER_WRITE
    except BrokenPipeError:  # e.g. `campaign results L | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED
    if isinstance(code, int):
        return code
    return 0


__all__ = ["EXIT_USAGE", "cli", "main"]
