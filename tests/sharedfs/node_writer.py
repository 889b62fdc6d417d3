"""Another "node" writing the ledger while a driver runs: every ``EVERY`` seconds, until the file
``STOP`` exists, one read-merge-write through its own view: `campaign forget` of the next task
named in ``FORGET`` (comma-separated), then, when none is left, a merge of the array fragments
(`campaign._array._workdir.merge_fragments`). The file ``STOP.began`` appears after the first write;
each task forgotten is printed (``forgot <task id>``). Every error goes to stderr, one line
each, and the exit code is the number of them (at most 100).

    python node_writer.py LEDGER STOP EVERY FORGET
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from campaign._array._workdir import merge_fragments
from campaign._cli import main
from campaign._errors import LedgerError

ledger, stop, every = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
forget = [tid for tid in sys.argv[4].split(",") if tid]

if __name__ == "__main__":
    errors = writes = 0
    while not stop.exists():
        try:
            if forget:
                tid = forget.pop(0)
                code = main(["forget", str(ledger), tid])
                if code != 0:
                    raise RuntimeError(f"campaign forget exited {code}")
                print(f"forgot {tid}", flush=True)
            else:
                merge_fragments(ledger)
            writes += 1
            began = stop.with_name(stop.name + ".began")
            if not began.exists():
                began.touch()
        except (LedgerError, RuntimeError, OSError) as exc:
            errors += 1
            print(f"writer: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        time.sleep(every)
    print(f"writer: {writes} writes, {errors} errors")
    sys.exit(min(errors, 100))
