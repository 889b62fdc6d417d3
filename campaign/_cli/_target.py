"""Importing the TARGET of `campaign run`: ``path/to/file.py:function`` or
``package.module:function``."""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._exits import BadInput

_FORMS = "path/to/file.py:function or package.module:function"


def load_target(target: str, base: Path | None = None) -> Callable[..., Any]:
    """The function named by ``target``; raises `BadInput` with the import error if it fails.

    A file is imported by path, with its folder first on ``sys.path`` (so it can import its
    neighbours), as the module named like the file. A file named like another module
    (``random.py``, ``json.py``, an installed package) is registered under a private name of
    its own instead, its folder goes last on ``sys.path`` (so that it shadows that module
    nowhere, worker processes included), and its functions are sent to workers by value. A module is
    imported by name, with ``base`` (the current folder, or the spec file's folder) first on
    ``sys.path``. Relative file paths are relative to ``base``.
    """
    where, sep, name = target.rpartition(":")
    base = Path.cwd() if base is None else base
    if not sep and target:
        raise BadInput(f"TARGET {target!r} names no function; write it as {_FORMS}"
                       + _function_hint(target, base))
    if not sep or not where or not name:
        raise BadInput(f"TARGET {target!r} names no function; write it as {_FORMS}")
    if where.endswith(".py") or "/" in where or "\\" in where:
        module = _import_file(target, base / where)
    else:
        module = _import_module(target, where, base)
    obj: Any = module
    for part in name.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            public = sorted(n for n, v in vars(module).items()
                            if callable(v) and not n.startswith("_"))
            shown = ", ".join(public[:12]) + (" ..." if len(public) > 12 else "")
            close = difflib.get_close_matches(name, public, n=3)
            mean = f"; did you mean {' or '.join(f'{where}:{c}' for c in close)}?" \
                if close else ""
            raise BadInput(
                f"TARGET {target!r}: {where} has no attribute {name!r} (its functions: "
                f"{shown or 'none'}){mean}"
            ) from None
    if not callable(obj):
        raise BadInput(
            f"TARGET {target!r} is not callable (it is {_a(type(obj).__name__)}); name a function "
            "that takes one item (a dict) and returns a flat dict of results"
        )
    return obj


def _function_hint(where: str, base: Path) -> str:
    """``; e.g. fit.py:fit (its functions: fit.py:fit, fit.py:helper)``: the functions the
    module ``where`` defines, those named like the module first; "" if it does not import."""
    import inspect

    try:
        if where.endswith(".py") or "/" in where or "\\" in where:
            module = _import_file(where, base / where)
        else:
            module = _import_module(where, where, base)
    except BadInput:
        return ""
    own = [n for n, v in vars(module).items() if inspect.isfunction(v) and not n.startswith("_")
           and v.__module__ == module.__name__]
    if not own:
        return f" ({where} defines no function)"
    stem = Path(where).stem if where.endswith(".py") else where.rpartition(".")[2]
    close = difflib.get_close_matches(stem, own, n=len(own), cutoff=0.6)
    ranked = close + [n for n in own if n not in close]
    shown = ", ".join(f"{where}:{n}" for n in ranked[:12]) + (" ..." if len(ranked) > 12 else "")
    return f"; e.g. {where}:{ranked[0]} (the functions {where} defines: {shown})"


def _import_file(target: str, path: Path) -> Any:
    path = path.resolve()
    if not path.is_file():
        raise BadInput(f"TARGET {target!r}: the file {path} does not exist; write TARGET as "
                       f"{_FORMS}")
    name, private = _module_name(path)
    folder = str(path.parent)
    if folder not in sys.path:  # after the others when first would shadow the module it is
        sys.path.insert(len(sys.path) if private else 0, folder)  # named like, here and in workers
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise BadInput(f"TARGET {target!r}: cannot import {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # so that its functions pickle and dataclasses work
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise BadInput(f"TARGET {target!r}: importing {path} failed: {_explain(exc)}") from None
    if private:  # workers cannot import it by this name: its functions travel by value
        import cloudpickle

        cloudpickle.register_pickle_by_value(module)
    return module


def _module_name(path: Path) -> tuple[str, bool]:
    """The name to import a target file as, and whether that name is a private one.

    The file's own name (so that worker processes import it again by reference) unless that
    name is taken: not an identifier, already imported (``random``), a standard-library module,
    or found elsewhere on ``sys.path``; then a private name unique to the file's path.
    """
    stem = path.stem
    if stem.isidentifier() and stem not in sys.modules and stem not in sys.stdlib_module_names:
        try:
            found = importlib.util.find_spec(stem)
        except (ImportError, ValueError):
            found = None
        if found is None or (found.origin and Path(found.origin).resolve() == path):
            return stem, False
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    return f"_campaign_target_{digest}", True


def _import_module(target: str, dotted: str, base: Path) -> Any:
    folder = str(base.resolve())
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        return importlib.import_module(dotted)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise BadInput(f"TARGET {target!r}: importing {dotted} failed: {_explain(exc)}; write "
                       f"TARGET as {_FORMS}") from None


def _explain(exc: BaseException) -> str:
    """``Type: message`` plus where it was raised (the deepest frame), for import errors."""
    if isinstance(exc, SyntaxError):
        return f"SyntaxError: {exc.msg} (at {exc.filename}, line {exc.lineno})"
    text = " ".join(traceback.format_exception_only(type(exc), exc)[-1].split())
    frames = traceback.extract_tb(exc.__traceback__)
    user = [f for f in frames if "importlib" not in f.filename and f.filename != __file__]
    if user:
        text += f" (at {user[-1].filename}, line {user[-1].lineno})"
    return text


def _a(noun: str) -> str:
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun
