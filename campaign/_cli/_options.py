"""The click decorators every command shares: ``-v``, the LEDGER argument, and the mapping of
the library's errors to exit codes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ._exits import BadInput, LedgerWriteFailed
from ._logging import configure_logging

F = TypeVar("F", bound=Callable[..., Any])


#: Where the group's ``-v`` count is kept for the command's (``ctx.meta`` is shared by both).
_GROUP_VERBOSITY = "campaign.verbosity"


def _group_verbosity(ctx: click.Context, param: click.Parameter, value: int) -> int:
    ctx.meta[_GROUP_VERBOSITY] = value
    configure_logging(value)
    return value


def _verbosity(ctx: click.Context, param: click.Parameter, value: int) -> int:
    configure_logging(ctx.meta.get(_GROUP_VERBOSITY, 0) + value)  # ``campaign -v run -v``: 2
    return value


def verbose_option(fn: F) -> F:
    """``-v/--verbose`` (repeatable): INFO, then DEBUG logging on stderr. Warnings always show."""
    return click.option(
        "-v", "--verbose", count=True, expose_value=False, is_eager=True,
        callback=_verbosity, help="Log more on stderr (-v: info, -vv: debug).",
    )(fn)


def group_verbose_option(fn: F) -> F:
    """The group's ``-v/--verbose`` (``campaign -v status L``): the same as a command's, for
    every command; the two counts add up."""
    return click.option(
        "-v", "--verbose", count=True, expose_value=False, is_eager=True,
        callback=_group_verbosity,
        help="Log more on stderr (-v: info, -vv: debug), for any command.",
    )(fn)


def ledger_argument(fn: F) -> F:
    """The LEDGER positional argument (a path; existence is checked when it is read)."""
    return click.argument("ledger", type=click.Path(dir_okay=False, path_type=Path))(fn)


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
