"""Task functions of the report tests (importable by worker processes and `campaign worker`).

Item fields: ``x`` (the result is ``y = x**2``, ``z = x / 2``), ``fail`` (raise that error
type), ``flaky`` (a file: the first attempt fails with RuntimeError and creates it, so the retry
succeeds), ``lose`` (a file: the first attempt kills its own worker process and creates it, so
the task is interrupted once and then succeeds), ``hold`` (a file: wait until it exists; a test
that never creates it keeps the task running).
"""

import os
import time
from pathlib import Path


def run(item):
    if item.get("hold"):
        while not os.path.exists(item["hold"]):
            time.sleep(0.01)
    if item.get("lose") and not os.path.exists(item["lose"]):
        Path(item["lose"]).touch()
        os._exit(3)  # the worker process dies: an interruption, not a failure
    if item.get("flaky") and not os.path.exists(item["flaky"]):
        Path(item["flaky"]).touch()
        raise RuntimeError(f"task {item['task_id']}: first attempt fails")
    kind = item.get("fail")
    if kind:
        raise {"ValueError": ValueError, "KeyError": KeyError}[kind](
            f"task {item['task_id']}: x = {item['x']} is out of range")
    return {"y": item["x"] ** 2, "z": item["x"] / 2, "label": f"x{item['x']}", "ok": True}
