"""Logging of the ``campaign`` command: one handler on stderr, its level from ``-v``."""

from __future__ import annotations

import logging


def configure_logging(verbosity: int) -> None:
    """WARNING (0), INFO (1) or DEBUG (2 and more) on stderr, through one handler of ours that
    a second call reuses."""
    level = logging.WARNING if verbosity == 0 else (
        logging.INFO if verbosity == 1 else logging.DEBUG)
    root = logging.getLogger()
    handler = next((h for h in root.handlers if getattr(h, "_campaign_cli", False)), None)
    if handler is None:
        handler = logging.StreamHandler()  # stderr
        handler.setFormatter(logging.Formatter("[campaign] %(levelname)s: %(message)s"))
        handler._campaign_cli = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    handler.setLevel(level)  # also for libraries that set their own loggers' levels
    root.setLevel(level)
