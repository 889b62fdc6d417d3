"""``campaign report``: one self-contained HTML page of plots about a ledger (opens offline)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from .._format import duration
from ._exits import EXIT_OK, BadInput
from ._options import ledger_argument, verbose_option
from ._reading import ledger_message


@click.command("report", short_help="One offline HTML page of plots about a campaign.")
@ledger_argument
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              default=None, help="The page to write (replaced atomically; default: LEDGER with "
              "the suffix .html).")
@verbose_option
def report_command(ledger: Path, output: Path | None) -> int:
    """Write one HTML page about LEDGER: a summary (counts, wall and CPU time, throughput, ETA,
    runs), progress and throughput over time, a timeline of every attempt by worker,
    distributions of duration, CPU and peak memory, failures by error type with a traceback
    each, interruptions and retries, the slowest tasks and the numeric result columns.

    The page carries bokeh's JavaScript inline: it opens offline, from a copy anywhere. Each
    plot draws at most 20,000 points (more are sampled, and its title says so). Safe while a
    run or a job array writes LEDGER; array workers' unmerged fragments are included.
    """
    from .. import LedgerError
    from .._report import write_report

    if output is None:
        output = ledger.with_suffix(".html")
    if output.resolve() == ledger.resolve():
        raise BadInput(f"the page {output} would replace the ledger: pass another --output, "
                       "e.g. -o report.html")
    begun = time.perf_counter()
    try:
        report = write_report(ledger, output)
    except LedgerError as exc:
        raise BadInput(ledger_message(ledger, str(exc))) from None
    except OSError as exc:
        raise BadInput(f"cannot write {output}: {exc.strerror or exc}") from None
    click.echo(f"campaign: wrote {output} ({report.plots} plots, {report.tasks:,} tasks, "
               f"{report.size / 1e6:.1f} MB) in {duration(time.perf_counter() - begun)}", err=True)
    return EXIT_OK
