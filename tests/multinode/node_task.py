"""The task function of the several-node tests: notes each run with the node it ran on.

Each run leaves ``<task>.<host>.<array element>.<pid>.<ns>.start`` (and ``.end`` once done) in
the item's ``marks`` folder; ``<host>`` is the node's host name (its UTS namespace's).

Item fields: ``marks``, ``x``, ``sleep`` (seconds of work), and optionally ``hosts_together``
(first wait until tasks have begun on that many hosts, so that every node gets work whatever
the elements' start-up times) and ``hang_on`` (the host whose runs never end: the test kills
that node while it holds the task; with ``hang_every`` m, only the runs of tasks whose ``x``
is 1 modulo m: in a share of m consecutive tasks, the second).
"""

import os
import socket
import time
from pathlib import Path

_WAIT_SECONDS = 300.0  # only a hung test waits this long


def hosts_begun(marks):
    return {mark.name.split(".")[1] for mark in marks.glob("*.start")}


def run(item):
    marks = Path(item["marks"])
    host = socket.gethostname()
    element = os.environ.get("SLURM_ARRAY_TASK_ID", "?")
    stem = f"{item['task_id']}.{host}.{element}.{os.getpid()}"
    (marks / f"{stem}.{time.time_ns()}.start").touch()
    every = item.get("hang_every", 1)
    if host == item.get("hang_on") and (every == 1 or item["x"] % every == 1):
        while True:  # until the node is killed
            time.sleep(3600)
    deadline = time.monotonic() + _WAIT_SECONDS
    while len(hosts_begun(marks)) < item.get("hosts_together", 0):
        if time.monotonic() > deadline:
            raise TimeoutError(f"tasks began on {sorted(hosts_begun(marks))} only in "
                               f"{_WAIT_SECONDS:.0f} s; {item['hosts_together']} hosts expected")
        time.sleep(0.02)
    time.sleep(item["sleep"])
    (marks / f"{stem}.{time.time_ns()}.end").touch()
    return {"x2": item["x"] * 2, "host": host}
