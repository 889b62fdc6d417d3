"""The embedded dask cluster of `DaskScheduler`: private (127.0.0.1, TLS with a certificate made
for the run, no HTTP routes unless asked for a dashboard), and kept at its size while the run
lasts."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from ._main import refuse_unguarded_main

logger = logging.getLogger(__name__)

#: dask settings for many small tasks: measured 4x faster than the default worker-saturation.
FAST_CONFIG = {"distributed.scheduler.worker-saturation": float("inf")}
#: The clusters this scheduler starts also report a batch whose worker died at once (dask's
#: default would run it up to 3 times more itself, unseen, the task that kills its worker too):
#: this scheduler decides what runs again.
OWN_CLUSTER_CONFIG = {**FAST_CONFIG, "distributed.scheduler.allowed-failures": 0}
#: Without ``dashboard=True`` the embedded cluster serves no HTTP page at all: dask's HTTP
#: servers (which listen even without a dashboard) get no routes, so neither the dashboard nor
#: the ``/info`` pages (workers, logs, the call stacks of running tasks) nor ``/metrics`` can
#: be read, by any local user, over plain HTTP.
NO_HTTP_CONFIG: dict[str, list[str]] = {"distributed.scheduler.http.routes": [],
                                         "distributed.worker.http.routes": []}


def embedded_cluster(workers: int, groups: list[Any] | None, security: Any,
                     dashboard: bool) -> Any:
    """A private cluster on 127.0.0.1: ``workers`` CPU workers, or one GPU worker per device
    group; TLS with a certificate made for it unless ``security`` is the user's own."""
    from distributed import LocalCluster, Nanny, SpecCluster
    from distributed import Scheduler as DaskScheduler_
    from distributed.security import Security

    refuse_unguarded_main()
    if security in (None, True):
        security = Security.temporary()
    protocol = "tls://" if security.require_encryption else "tcp://"
    if groups is None:
        return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                            host="127.0.0.1", dashboard_address="127.0.0.1:0",
                            scheduler_kwargs={"dashboard": dashboard},
                            protocol=protocol, security=security)
    specs = {
        f"group-{i}": {"cls": Nanny, "options": {
            "nthreads": 1, "host": "127.0.0.1", "resources": {"GPU": 1},
            "protocol": protocol, "security": security,
            "env": {"CUDA_VISIBLE_DEVICES": ",".join(map(str, g)),
                    "DIFFSOUP_DEVICE_GROUP": ",".join(map(str, g))}}}
        for i, g in enumerate(groups)
    }
    scheduler = {"cls": DaskScheduler_,
                 "options": {"host": "127.0.0.1", "dashboard_address": "127.0.0.1:0",
                             "dashboard": dashboard, "protocol": protocol,
                             "security": security}}
    return SpecCluster(workers=specs, scheduler=scheduler, security=security)


def keep_workers(cluster: Any, stopping: Callable[[], bool], stopped: threading.Event) -> None:
    """Every second while the run lasts: start a worker in place of each that dask gave up.
    dask's `SpecCluster` closes a worker's nanny, and starts none in its place, when no
    worker of that name is there ``distributed.deploy.lost-worker-timeout`` after one was
    lost, as when its nanny is restarting it yet again (a task that keeps killing its
    worker, a worker killed often): without this, the cluster could dwindle to none."""
    asked: dict[Any, float] = {}  # the workers asked for, not there yet: since when

    def check() -> None:  # on the cluster's event loop: its state is not shared there
        now = time.monotonic()
        missing = set(cluster.worker_spec) - set(cluster.workers)
        for name in set(asked) - missing:
            del asked[name]
        new = {n for n in missing if now - asked.get(n, -math.inf) > 30}  # or asked long ago
        if new and not stopping() and cluster.status == Status.running:
            logger.warning("dask closed embedded worker(s) %s, lost too long; starting new "
                           "ones", ", ".join(map(str, sorted(new, key=str))))
            asked.update(dict.fromkeys(new, now))
            cluster.scale(len(cluster.worker_spec))

    from distributed.core import Status

    while not stopped.wait(1.0):
        try:
            cluster.loop.add_callback(check)
        except RuntimeError:  # its loop has closed: the run is ending
            return
