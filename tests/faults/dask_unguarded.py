"""A driver script that runs its campaign outside ``if __name__ == "__main__":``.

    python dask_unguarded.py LEDGER
"""

import sys

from campaign import checkpointed_map


def plus_one(item):
    return {"y": item["x"] + 1}


checkpointed_map(plus_one, [{"task_id": "a", "x": 1}], ledger_path=sys.argv[1],
                 execution="dask", workers=1)
