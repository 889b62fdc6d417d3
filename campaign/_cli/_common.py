"""What every command shares: exit codes, the bad-input and ledger-write errors, logging,
reading a ledger, and formatting of times and durations."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

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

F = TypeVar("F", bound=Callable[..., Any])


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


def _configure_logging(ctx: click.Context, param: click.Parameter, value: int) -> int:
    level = logging.WARNING if value == 0 else (logging.INFO if value == 1 else logging.DEBUG)
    root = logging.getLogger()
    handler = next((h for h in root.handlers if getattr(h, "_campaign_cli", False)), None)
    if handler is None:
        handler = logging.StreamHandler()  # stderr
        handler.setFormatter(logging.Formatter("[campaign] %(levelname)s: %(message)s"))
        handler._campaign_cli = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    handler.setLevel(level)  # also for libraries that set their own loggers' levels
    root.setLevel(level)
    return value


def verbose_option(fn: F) -> F:
    """``-v/--verbose`` (repeatable): INFO, then DEBUG logging on stderr. Warnings always show."""
    return click.option(
        "-v", "--verbose", count=True, expose_value=False, is_eager=True,
        callback=_configure_logging, help="Log more on stderr (-v: info, -vv: debug).",
    )(fn)


def ledger_argument(fn: F) -> F:
    """The LEDGER positional argument (a path; existence is checked when it is read)."""
    return click.argument("ledger", type=click.Path(dir_okay=False, path_type=Path))(fn)


def read_ledger(path: Path) -> dict[str, Any]:
    """Read and check a ledger without any lock (files are replaced atomically), or exit 2."""
    from .._document import read
    from .._errors import LedgerError

    try:
        return read(path)
    except LedgerError as exc:
        raise BadInput(str(exc)) from None


def scan_ledger(path: Path, *, with_leases: bool = True) -> tuple[
        dict[str, Any], Iterator[dict[str, Any]], Any]:
    """Stream a ledger without any lock (`campaign._scan.scan_records`): its top-level fields,
    its checked records chunk by chunk (array fragments applied, leased tasks running) and the
    overlay; a problem found at the start or in a later chunk exits 2."""
    from .._errors import LedgerError
    from .._scan import scan_records

    try:
        head, chunks, over = scan_records(path, with_leases=with_leases)
    except LedgerError as exc:
        raise BadInput(str(exc)) from None

    def checked() -> Iterator[dict[str, Any]]:
        try:
            yield from chunks
        except LedgerError as exc:
            raise BadInput(str(exc)) from None

    return head, checked(), over


def with_errors(fn: F) -> F:
    """Turn the library's input errors raised inside a command into `BadInput` (exit 2), and
    a ledger that could not be written into `LedgerWriteFailed` (exit 3)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from .._errors import DriverBusyError, ItemError, LedgerError, LedgerWriteError

        try:
            return fn(*args, **kwargs)
        except LedgerWriteError as exc:
            raise LedgerWriteFailed(str(exc)) from None
        except (ItemError, LedgerError, DriverBusyError) as exc:
            raise BadInput(str(exc)) from None

    return wrapper  # type: ignore[return-value]


def duration(seconds: float | None) -> str:
    """``45s``, ``12m05s``, ``3h02m``, ``2d04h``; ``?`` for None."""
    if seconds is None:
        return "?"
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def timestamp(t: float | None) -> str:
    """A Unix time as local ``YYYY-MM-DD HH:MM:SS``; ``-`` for None."""
    if t is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def rate(per_second: float | None) -> str:
    """``12.3 tasks/s`` or, below one a second, ``4.1 tasks/min``."""
    if not per_second:
        return "? tasks/s"
    if per_second >= 1:
        return f"{per_second:.1f} tasks/s"
    if per_second * 60 >= 1:
        return f"{per_second * 60:.1f} tasks/min"
    return f"{per_second * 3600:.1f} tasks/h"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 task``, ``0 tasks``, ``2 tasks``; ``many``: the plural when it is not word + s."""
    return f"{n} {word if n == 1 else (many or word + 's')}"
