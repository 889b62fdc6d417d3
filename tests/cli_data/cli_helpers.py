"""Helpers of the `campaign` command's tests: run the real command, write targets and items."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

#: A target module: doubles x; raises when the item says ``fail``; sleeps ``sleep`` seconds;
#: first waits until the file ``hold`` exists, if given (a test stops the run meanwhile).
MODEL = textwrap.dedent('''
    import math
    import os
    import time

    def fit(item):
        while item.get("hold") and not os.path.exists(item["hold"]):
            time.sleep(0.01)
        time.sleep(item.get("sleep") or 0)
        if item.get("fail"):
            raise ValueError(f"task {item['task_id']} diverged")
        x = item["x"]
        return {"y": x * 2, "z": math.nan if x == 1 else x / 2, "ok": True}

    not_a_function = 42
''')


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    e["PYTHONUNBUFFERED"] = "1"
    e.pop("COLUMNS", None)
    return e


def command(*args: Any) -> list[str]:
    """``python -m campaign._cli ARGS`` (the same code as the ``campaign`` console script)."""
    return [sys.executable, "-m", "campaign._cli", *map(str, args)]


def console_script() -> str:
    """The installed ``campaign`` console script (the interpreter's own first)."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    found = shutil.which("campaign", path=path)
    assert found, "the `campaign` console script is not installed (pip install -e .)"
    return found


def campaign(*args: Any, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``campaign ARGS`` in ``cwd`` and return the finished process (text output)."""
    return subprocess.run(command(*args), cwd=cwd, env=env(), capture_output=True, text=True,
                          timeout=timeout)


def start(*args: Any, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(command(*args), cwd=cwd, env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def end(proc: subprocess.Popen[str]) -> None:
    """Kill ``proc`` if it still runs, reap it and close its pipes: a test that failed while
    its driver ran leaves no process for the next test to find."""
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


def write_model(folder: Path) -> Path:
    path = folder / "model.py"
    path.write_text(MODEL)
    return path


def write_json_items(path: Path, n: int, *, hold_from: int | None = None, **extra: Any) -> Path:
    """Items t0 ... t<n-1>; those from ``hold_from`` on wait for the file ``hold`` beside."""
    hold = str(path.with_name("hold"))
    path.write_text(json.dumps([
        {"task_id": f"t{i}", "x": i, **extra,
         **({"hold": hold} if hold_from is not None and i >= hold_from else {})}
        for i in range(n)]))
    return path


def read_doc(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def statuses(path: Path) -> dict[str, str]:
    """Each task's status as a reader sees it (`read_ledger`: the file and its journal)."""
    from campaign import read_ledger

    if not path.exists():
        return {}
    return {tid: rec["status"] for tid, rec in read_ledger(path)["tasks"].items()}


def wait_for(predicate: Any, timeout: float = 120.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def accepted_count(path: Path) -> int:
    return sum(1 for s in statuses(path).values() if s == "accepted")


def spec_file(folder: Path, body: str = "", *, items: str = "items.json",
              ledger: str = "fits.json") -> Path:
    """A ``campaign.toml`` in ``folder`` for ``model.py:fit`` (`write_model`), with ``body``."""
    spec = folder / "campaign.toml"
    spec.write_text(f'target = "model.py:fit"\nitems = "{items}"\nledger = "{ledger}"\n{body}')
    return spec


def tree(folder: Path) -> set[str]:
    """Every path under ``folder``, relative to it."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}
