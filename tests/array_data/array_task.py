"""The task function of the array-worker tests: notes each run, then works for a while.

Item fields: ``marks`` (the folder of the run notes; a start note holds the item's ``x``),
``x``, ``sleep`` (seconds of work), and optionally ``fail`` (raise: the item is wrong),
``together`` (first wait until that many array elements have begun a task, so that a test sees
the elements share the work whatever their start-up times) and ``hang_in`` (the array element
whose runs never end: the test kills or signals it while it holds that task).
"""

import os
import time
from pathlib import Path

_TOGETHER_SECONDS = 300.0  # only a hung test waits this long
_seen_together = set()


def elements_begun(marks):
    """The array elements that have begun a task."""
    return {mark.name.split(".")[1] for mark in marks.glob("*.start")}


def _wait_together(marks, count):
    if count in _seen_together:
        return
    deadline = time.monotonic() + _TOGETHER_SECONDS
    while len(elements_begun(marks)) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only elements {sorted(elements_begun(marks))} began a task in "
                               f"{_TOGETHER_SECONDS:.0f} s; {count} were expected")
        time.sleep(0.01)
    _seen_together.add(count)


def run(item):
    marks = Path(item["marks"])
    begun = time.time()
    worker = os.environ.get("SLURM_ARRAY_TASK_ID", "?")
    start = marks / f"{item['task_id']}.{worker}.{os.getpid()}.{time.time_ns()}.start"
    start.write_text(str(item["x"]))  # the item it was called with
    if worker == item.get("hang_in"):
        while True:  # until killed, or a signal stops the worker
            time.sleep(3600)
    _wait_together(marks, item.get("together", 0))
    if item.get("fail"):
        raise ValueError(f"item x={item['x']} is wrong")
    time.sleep(item["sleep"])
    ended = time.time()
    (marks / f"{item['task_id']}.{worker}.{os.getpid()}.{time.time_ns()}.end").touch()
    return {"x2": item["x"] * 2, "begun": begun, "ended": ended, "worker": worker}
