"""The driver script of an embedded dask cluster: refused, with a clear error, when it starts
the cluster outside ``if __name__ == "__main__":`` (dask's spawned workers import it again)."""

from __future__ import annotations

import ast
import inspect
import sys


def refuse_unguarded_main() -> None:
    """Raise `RuntimeError` if the driver script starts this cluster from code that dask's
    worker processes run again: they are spawned, and a spawned process imports the script
    that ``python script.py`` runs (as ``__mp_main__``) before anything else. Without
    ``if __name__ == "__main__":`` around the campaign, each worker would start it again."""
    found = _unguarded_line()
    if found is not None:
        path, line = found
        raise RuntimeError(
            f"{path}, line {line}, starts a campaign on an embedded dask cluster outside "
            "`if __name__ == \"__main__\":`. dask starts its workers as new Python processes "
            "that import this script first, so each of them would run the campaign again. Put "
            "the code that runs the campaign under `if __name__ == \"__main__\":` (or pass "
            "client= or scheduler_address= of a cluster started elsewhere)")


def _unguarded_line() -> tuple[str, int] | None:
    main = sys.modules.get("__main__")
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None and (name == "__main__" or name.endswith(".__main__")):
        return None  # `python -m package`: spawned processes do not run it again
    if name is None and getattr(main, "__file__", None) is None:
        return None  # interactive, `python -c`, a notebook: nothing is imported again
    frame = inspect.currentframe()
    while frame is not None and not (frame.f_code.co_name == "<module>"
                                     and frame.f_globals is getattr(main, "__dict__", None)):
        frame = frame.f_back
    if frame is None:
        return None
    path, line = frame.f_code.co_filename, frame.f_lineno
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None  # no source to read: dask's own error will have to do
    for node in ast.walk(tree):
        if (isinstance(node, ast.If) and node.body
                and any(isinstance(n, ast.Name) and n.id == "__name__"
                        for n in ast.walk(node.test))
                and node.body[0].lineno <= line <= (node.body[-1].end_lineno or line)):
            return None
    return path, line
