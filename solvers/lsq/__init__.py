"""Linear least squares at cluster scale: row blocks assembled anywhere and checkpointed on disk,
then solved without gathering the matrix in one process.

``BlockStore(path).task(rows)`` is the function to map over the items (with
``campaign.checkpointed_map`` on any scheduler): it computes one item's rows ``(A, y, weights)``,
writes them atomically as an ``.npy`` file and returns their checksum and shape as the task's
result. ``BlockStore.system(campaign)`` reads the blocks back lazily, checking each checksum, and
`solve` fits them by normal equations, TSQR or LSQR, block by block or on dask workers;
``solve(A, b)`` fits arrays in memory through the same code. A rank-deficient, unconverged or
poorly conditioned answer is flagged on its `Solution` and logged as a warning.
"""

from ._block import Block as Block
from ._block import BlockRef as BlockRef
from ._errors import BlockError as BlockError
from ._normal import normal_equations as normal_equations
from ._solution import Residuals as Residuals
from ._solution import Solution as Solution
from ._solve import METHODS as METHODS
from ._solve import solve as solve
from ._store import BlockStore as BlockStore
from ._store import BlockTask as BlockTask
from ._system import BlockSystem as BlockSystem
from ._tsqr import tsqr_r as tsqr_r
