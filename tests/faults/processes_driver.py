"""A campaign on execution="processes" that tests/faults/test_processes_faults.py SIGKILLs.

Usage: python processes_driver.py LEDGER FOLDER N_TASKS SECONDS [die-first]

Each task writes ``<folder>/<task_id>.<pid>.start`` (holding the pid of a ``sleep`` subprocess it
starts), then appends a heartbeat line (a time in ns) to ``<folder>/<task_id>.<pid>.beat`` every
20 ms while it works for SECONDS, then writes ``<task_id>.<pid>.end``. A task's attempts never
overlap if each one's first heartbeat comes after the last heartbeat of every earlier one.
With ``die-first`` the first run of task t0 ends its worker (``os._exit``) after writing its pid
to ``<folder>/died``, so a replacement worker takes its place.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from campaign import checkpointed_map


def work(item: dict) -> dict:
    folder, name = Path(item["folder"]), f"{item['task_id']}.{os.getpid()}"
    if item.get("die_first") and not (folder / "died").exists():
        (folder / "died").write_text(str(os.getpid()))
        os._exit(3)
    child = subprocess.Popen(["sleep", "300"])  # a subprocess of the task: it must not outlive it
    (folder / f"{name}.start").write_text(str(child.pid))
    fd = os.open(folder / f"{name}.beat", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        end = time.monotonic() + item["seconds"]
        while True:
            os.write(fd, f"{time.time_ns()}\n".encode())
            if time.monotonic() >= end:
                break
            time.sleep(0.02)
    finally:
        os.close(fd)
    child.kill()
    child.wait()
    (folder / f"{name}.end").touch()
    return {"pid": os.getpid()}


def main() -> None:
    ledger, folder, n, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    items = [{"task_id": f"t{i}", "folder": folder, "seconds": seconds} for i in range(n)]
    if sys.argv[5:] == ["die-first"]:
        items[0]["die_first"] = True
    print("driver", os.getpid(), flush=True)
    checkpointed_map(work, items, ledger_path=ledger, execution="processes", workers=2)
    print("done", flush=True)


if __name__ == "__main__":
    main()
