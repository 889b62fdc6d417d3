"""The task function of the array-worker tests: notes each run, then works for a while."""

import os
import time
from pathlib import Path


def run(item):
    marks = Path(item["marks"])
    begun = time.time()
    worker = os.environ.get("SLURM_ARRAY_TASK_ID", "?")
    (marks / f"{item['task_id']}.{worker}.{os.getpid()}.{time.time_ns()}.start").touch()
    time.sleep(item["sleep"])
    ended = time.time()
    (marks / f"{item['task_id']}.{worker}.{os.getpid()}.{time.time_ns()}.end").touch()
    return {"x2": item["x"] * 2, "begun": begun, "ended": ended, "worker": worker}
