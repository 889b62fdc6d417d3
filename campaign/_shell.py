"""Commands printed for a user to paste into a shell: every word quoted (`shlex`), so that a task
id such as ``a b`` or a path with spaces names one argument, never several."""

from __future__ import annotations

import os
import shlex


def command(*words: str | os.PathLike[str]) -> str:
    """The command line of ``words``, each quoted for a POSIX shell where it needs it:
    ``command("campaign", "forget", "L.json", "a b")`` is ``campaign forget L.json 'a b'``."""
    return shlex.join(os.fspath(word) for word in words)
