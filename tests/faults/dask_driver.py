"""A campaign driver on the embedded dask cluster whose tasks run long and note it.

    python dask_driver.py FOLDER LEDGER

Each task creates ``FOLDER/<task>.<pid>.start``, works for 60 s, then creates
``FOLDER/<task>.<pid>.done``. The fault tests SIGKILL this driver while its tasks run.
"""

import os
import sys
import time
from pathlib import Path

from campaign import checkpointed_map


def long_task(item):
    folder = Path(item["folder"])
    (folder / f"{item['task_id']}.{os.getpid()}.start").touch()
    end = time.monotonic() + item["seconds"]
    while time.monotonic() < end:
        time.sleep(0.05)
    (folder / f"{item['task_id']}.{os.getpid()}.done").touch()
    return {"pid": os.getpid()}


if __name__ == "__main__":
    folder, ledger = sys.argv[1], sys.argv[2]
    items = [{"task_id": f"t{i}", "folder": folder, "seconds": 60} for i in range(4)]
    checkpointed_map(long_task, items, ledger_path=ledger, execution="dask", workers=2)
