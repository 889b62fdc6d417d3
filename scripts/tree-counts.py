"""Print the tree counts that issue 33's acceptance names, so a refactor can be measured.

Counted on ``campaign/`` and ``schedulers/``:

- the modules of ``campaign/`` that decode JSON (``json.loads``/``json.load``, ``msgspec.json``
  decoders), besides the items reader, the CLI and the report;
- modules outside ``campaign/_cli`` that import the CLI;
- modules other than ``__init__.py`` whose body is only imports (re-exports);
- modules over 400 lines and functions over 80 lines.

Usage: ``python scripts/tree-counts.py`` from the repository root. It prints, and exits 0.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOTS = ("campaign", "schedulers")
MODULE_LINES, FUNCTION_LINES = 400, 80
EXEMPT_JSON = ("campaign/_items.py", "campaign/_cli/", "campaign/_report/")


def _decodes_json(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("loads", "load", "decode", "Decoder"):
            base = node.value
            name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
            if name in ("json", "orjson"):
                return True
        if isinstance(node, ast.ImportFrom) and node.module in ("json", "orjson", "msgspec.json"):
            if any(a.name in ("loads", "load", "decode", "Decoder") for a in node.names):
                return True
    return False


def _imports_cli(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and (
                node.module.startswith("campaign._cli") or (node.level and "_cli" in node.module)):
            return True
        if isinstance(node, ast.Import) and any(a.name.startswith("campaign._cli")
                                                for a in node.names):
            return True
    return False


def _only_reexports(tree: ast.Module) -> bool:
    body = [n for n in tree.body if not (isinstance(n, ast.Expr)
                                         and isinstance(n.value, ast.Constant))]
    body = [n for n in body if not (isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets))]
    return bool(body) and all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in body)


def main() -> None:
    json_modules, cli_importers, reexporters, long_modules, long_functions = [], [], [], [], []
    for root in ROOTS:
        for path in sorted(Path(root).rglob("*.py")):
            name = path.as_posix()
            text = path.read_text()
            tree = ast.parse(text, name)
            if name.startswith("campaign/") and not name.startswith(EXEMPT_JSON) \
                    and _decodes_json(tree):
                json_modules.append(name)
            if not name.startswith("campaign/_cli/") and _imports_cli(tree):
                cli_importers.append(name)
            if path.name != "__init__.py" and _only_reexports(tree):
                reexporters.append(name)
            if (lines := len(text.splitlines())) > MODULE_LINES:
                long_modules.append(f"{name} ({lines})")
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > FUNCTION_LINES:
                        long_functions.append(f"{name}:{node.lineno} {node.name} ({length})")
    for title, rows in (
            ("campaign/ modules that decode JSON (goal: at most 4)", json_modules),
            ("modules outside campaign/_cli importing it (goal: none)", cli_importers),
            ("modules that only re-export (goal: none)", reexporters),
            (f"modules over {MODULE_LINES} lines (goal: none)", long_modules),
            (f"functions over {FUNCTION_LINES} lines (goal: none)", long_functions)):
        print(f"{title}: {len(rows)}")
        for row in rows:
            print(f"  {row}")


if __name__ == "__main__":
    main()
