"""Map a function over the blocks of a system and combine the results, in this process (one
block in memory at a time) or on the workers of a dask client (a tree of pairwise combines)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ._block import Block, BlockRef, read_block
from ._system import BlockSystem

T = TypeVar("T")


def map_reduce(system: BlockSystem, fn: Callable[[Block], T], combine: Callable[[T, T], T], *,
               client: Any = None, fold: Callable[[T | None, Block], T] | None = None) -> T:
    """``combine`` of ``fn(block)`` over all blocks.

    Without a client the blocks stream through this process one at a time (``fold(acc, block)``
    replaces ``combine(acc, fn(block))`` when given). With a dask client each worker reads and
    maps its blocks, and the partial results are combined pairwise on the workers; only the final
    value comes back.
    """
    if client is None:
        acc: Any = None
        for block in system:
            if fold is not None:
                acc = fold(acc, block)
            else:
                value = fn(block)
                acc = value if acc is None else combine(acc, value)
        return acc
    futures = client.map(_on_block, system.refs, fn=fn, verify=system.verify != "never",
                         ledger=system.ledger, pure=False)
    return tree_reduce(client, futures, combine).result()


def tree_reduce(client: Any, futures: list[Any], combine: Callable[[T, T], T]) -> Any:
    """The future of the pairwise (tree) combination of ``futures``, computed on the workers."""
    while len(futures) > 1:
        pairs = [client.submit(combine, a, b, pure=False)
                 for a, b in zip(futures[::2], futures[1::2])]
        futures = pairs + futures[len(pairs) * 2:]
    return futures[0]


def load(ref: BlockRef, *, verify: bool, ledger: str | None) -> Block:
    """A block read on a worker (kept there by the futures that hold it)."""
    return read_block(ref, verify=verify, ledger=ledger)


def _on_block(ref: BlockRef, *, fn: Callable[[Block], T], verify: bool, ledger: str | None) -> T:
    return fn(read_block(ref, verify=verify, ledger=ledger))
