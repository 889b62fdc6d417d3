"""Run one doc's python blocks, in order, in this process (tests/test_docs_blocks.py starts it).

    python run_blocks.py BLOCKS.json

BLOCKS.json is a list of blocks, each ``{"doc", "line", "code", "mode", "continues", "given",
"env", "here"}`` (``line``: the line of the block's first code line in the doc). ``mode`` is

- ``"run"``: executed, as a notebook cell is: in a fresh namespace whose ``__name__`` is
  ``"__main__"``, or in the previous block's namespace when ``continues``;
- ``"file"``: written to the working folder under the name ``mode_arg``, then imported (the
  page's later blocks import it, or a job of its own does);
- ``"check"``: compiled, and every name it takes from our packages looked up (a block that
  needs a cluster or a GPU this machine lacks).

``given`` names are taken from tests/docs_data/given.py into the block's namespace first (a
name with a suffix, ``run.json``, is that file of tests/docs_data/, copied into the folder);
``here`` maps keyword names to Python expressions that replace those keywords' values in the
block's calls (a cluster's own partition and sizes, swapped for this machine's); ``env`` is set
in ``os.environ`` before the block runs.

Line numbers in tracebacks are the doc's. After each block one line ``docs-test: <mode>
<doc>:<line>`` goes to stdout; a failure prints its traceback and ends the process with 1.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import json
import os
import shutil
import sys
import traceback
from pathlib import Path

OURS = ("campaign", "schedulers", "solvers")
#: The alias the solver pages use without importing it in every block.
ALIASES = {"ds": "solvers"}


def parse(block: dict) -> ast.Module:
    tree = ast.parse(block["code"], block["doc"])
    ast.increment_lineno(tree, block["line"] - 1)
    return tree


def apply_here(tree: ast.Module, here: dict[str, str], where: str) -> None:
    """Replace the values of the keywords in ``here`` in every call that passes them."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg in here:
                    value = ast.parse(here[kw.arg], mode="eval").body
                    kw.value = ast.copy_location(value, kw.value)
                    ast.fix_missing_locations(kw.value)
                    found.add(kw.arg)
    missing = set(here) - found
    if missing:
        raise SystemExit(f"{where}: the marker's `here` names {sorted(missing)}, which no call "
                         "of the block passes: correct the marker")


def aliases(tree: ast.Module) -> dict[str, str]:
    """Names the block binds to our modules and their members: name -> dotted path."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in OURS:
                    bound[a.asname or a.name.split(".")[0]] = a.name if a.asname else \
                        a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] in OURS:
            for a in node.names:
                bound[a.asname or a.name] = f"{node.module}.{a.name}"
    return bound


def resolve(dotted: str):
    """The object at ``dotted`` (a module path, then attributes), or raise AttributeError."""
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], 1):
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        try:
            obj = importlib.import_module(".".join(parts[:i + 1]))
        except ImportError:
            raise AttributeError(f"{'.'.join(parts[:i])} has no {part!r}") from None
    return obj


def chain(node: ast.AST) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"], or None for anything else."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(names)]
    return None


def check_names(tree: ast.Module, known: dict[str, str], where: str) -> int:
    """Look up every name the block takes from our packages (imports and attribute chains
    on them) and the keywords of calls of our functions; return how many were looked up."""
    known = {**ALIASES, **known, **aliases(tree)}
    where = where.rsplit(":", 1)[0]  # the doc: the lines below are its own
    looked = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for dotted in aliases(ast.Module([node], [])).values():
                try:
                    resolve(dotted)
                except (AttributeError, ImportError) as e:
                    raise AttributeError(f"{where}, line {node.lineno}: {dotted}: {e}") from None
                looked += 1
        elif isinstance(node, ast.Attribute) and not isinstance(getattr(node, "parent", None),
                                                                  ast.Attribute):
            names = chain(node)
            if names and names[0] in known:
                try:
                    resolve(".".join([known[names[0]], *names[1:]]))
                except AttributeError as e:
                    raise AttributeError(f"{where}, line {node.lineno}: "
                                         f"{'.'.join(names)}: {e}") from None
                looked += 1
        if isinstance(node, ast.Call):
            names = chain(node.func)
            if names and names[0] in known:
                looked += check_keywords(node, resolve(".".join([known[names[0]], *names[1:]])),
                                         where)
    return looked


def check_keywords(call: ast.Call, fn, where: str) -> int:
    """The keywords of a call of our ``fn`` are among its parameters (for
    `checkpointed_map` with a literal ``execution``: its own and that scheduler's)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return 0
    where = where.rsplit(":", 1)[0]
    allowed = {n for n, p in params.items() if p.kind is not p.VAR_KEYWORD}
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        execution = next((k.value for k in call.keywords if k.arg == "execution"), None)
        if getattr(fn, "__name__", "") != "checkpointed_map" or execution is None:
            return 0
        from schedulers import SCHEDULERS
        name = ast.literal_eval(execution) if isinstance(execution, ast.Constant) else "serial"
        allowed |= set(inspect.signature(SCHEDULERS[name]).parameters)
    wrong = {k.arg for k in call.keywords if k.arg is not None} - allowed
    if wrong:
        raise TypeError(f"{where}, line {call.lineno}: {getattr(fn, '__name__', fn)} takes no "
                        f"keyword {sorted(wrong)}")
    return 1


def give(names: list[str], namespace: dict) -> None:
    """Names from given.py into ``namespace``; a name with a suffix (``run.json``) is a file of
    this folder, copied into the working folder."""
    here = Path(__file__).resolve().parent
    for name in names:
        if "." in name:
            shutil.copyfile(here / name, name)
        else:
            namespace[name] = getattr(importlib.import_module("given"), name)


def main(path: str) -> None:
    blocks = json.loads(Path(path).read_text())
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.path.insert(0, str(Path.cwd()))  # the files the doc's blocks write, as `python x.py`
    namespace: dict = {}
    known: dict[str, str] = {}
    for block in blocks:
        where = f"{block['doc']}:{block['line']}"
        tree = parse(block)
        for node in ast.walk(tree):  # parents, to find the outermost attribute of a chain
            for child in ast.iter_child_nodes(node):
                child.parent = node  # type: ignore[attr-defined]
        if block["here"]:
            apply_here(tree, block["here"], where)
        code = compile(tree, block["doc"], "exec")
        if block["mode"] == "file":  # saved, then imported as the page's later blocks would
            Path(block["mode_arg"]).write_text(block["code"])
            importlib.invalidate_caches()
            importlib.import_module(Path(block["mode_arg"]).stem)
        elif block["mode"] == "check":
            looked = check_names(tree, known, where)
            print(f"docs-test: check {where} ({looked} names)", flush=True)
            continue
        else:
            if not block["continues"]:
                namespace = {"__name__": "__main__", "__builtins__": builtins}
            give(block["given"], namespace)
            os.environ.update(block["env"])
            check_names(tree, known, where)
            exec(code, namespace)  # noqa: S102 - the doc's own code
        known.update(aliases(tree))
        print(f"docs-test: {block['mode']} {where}", flush=True)


if __name__ == "__main__":
    try:
        main(sys.argv[1])
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        sys.exit(1)
