"""The embedded dask cluster serves no HTTP page unless asked (``dashboard=True``): dask's
scheduler and workers keep an HTTP server listening even without a dashboard, and its ``/info``
pages show the workers, their logs and the call stacks of running tasks to anyone on the
machine. Real clusters; the pages are asked for over real HTTP, as another local user would."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

PAGES = ("/status", "/info/main/workers.html", "/info/main/logs.html", "/metrics", "/health")


def answers(port: int, page: str) -> int:
    """The HTTP status of ``page`` on 127.0.0.1:``port``."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{page}", timeout=30) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code


def http_ports(dashboard: bool) -> dict[str, dict[str, int]]:
    """Start the embedded cluster as a run does, and ask each of its HTTP servers for the
    pages: server -> page -> HTTP status."""
    from schedulers import DaskScheduler

    sched = DaskScheduler(workers=1, dashboard=dashboard)
    sched.start(lambda item: item, lambda events: None)
    try:
        ports = {"scheduler": sched.client.run_on_scheduler(
            lambda dask_scheduler: dask_scheduler.http_server.port)}
        for address, port in sched.client.run(
                lambda dask_worker: dask_worker.http_server.port).items():
            ports[f"worker {address}"] = port
        return {name: {page: answers(port, page) for page in PAGES}
                for name, port in ports.items()}
    finally:
        sched.stop()


@pytest.mark.slow
def test_no_page_is_served_without_dashboard_true():
    served = http_ports(dashboard=False)
    assert len(served) == 2  # the scheduler and the one worker
    assert all(status == 404 for pages in served.values() for status in pages.values()), served


@pytest.mark.slow
def test_the_dashboard_is_served_when_asked(capfd):
    served = http_ports(dashboard=True)
    assert served["scheduler"]["/status"] == 200  # what the test above would see if served
    assert served["scheduler"]["/info/main/workers.html"] == 200
    assert "plain HTTP: every user of this machine can read it" in capfd.readouterr().err
