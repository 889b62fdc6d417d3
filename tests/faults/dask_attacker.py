"""Another local process trying to run code in a dask cluster it was not given.

    python dask_attacker.py SCHEDULER_ADDRESS WORKER_ADDRESS MARKER

For each way in (a plain `Client`, plain TCP to a TLS port, TLS with a certificate of its own)
it connects to the scheduler and asks it to run a function that creates MARKER, then asks the
worker the same through the worker's own ``run`` handler. Prints one JSON object: attempt name
-> ``"ran"`` or ``"refused: <error>"``. Exits 0 either way: the test judges.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from distributed import Client
from distributed.core import rpc
from distributed.protocol.pickle import dumps
from distributed.security import Security

TIMEOUT = 10


def touch(path: str) -> str:
    Path(path).touch()
    return "touched"


def as_tcp(address: str) -> str:
    return "tcp://" + address.split("://", 1)[1]


def through_scheduler(address: str, security: Security | None, marker: str) -> None:
    with Client(address, security=security, timeout=TIMEOUT) as client:
        client.run_on_scheduler(touch, marker)


def through_worker(address: str, security: Security | None, marker: str) -> None:
    async def go() -> None:
        args = {} if security is None else security.get_connection_args("client")
        async with rpc(address, connection_args=args, timeout=TIMEOUT) as worker:
            await worker.run(function=dumps(touch), args=dumps((marker,)))

    asyncio.run(go())


def main() -> None:
    scheduler, worker, marker = sys.argv[1:4]
    own = Security.temporary()
    attempts = {
        "scheduler, plain client": (through_scheduler, scheduler, None),
        "scheduler, plain tcp": (through_scheduler, as_tcp(scheduler), None),
        "scheduler, own certificate": (through_scheduler, scheduler, own),
        "worker, plain tcp": (through_worker, as_tcp(worker), None),
        "worker, own certificate": (through_worker, worker, own),
    }
    outcomes = {}
    for name, (how, address, security) in attempts.items():
        try:
            how(address, security, marker)
        except BaseException as exc:  # anything that stops the attempt is a refusal
            outcomes[name] = f"refused: {type(exc).__name__}: {exc}"
        else:
            outcomes[name] = "ran"
    print(json.dumps(outcomes))


if __name__ == "__main__":
    main()
