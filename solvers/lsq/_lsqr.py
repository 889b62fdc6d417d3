"""LSQR (``scipy.sparse.linalg.lsqr``) on a `LinearOperator` over the row blocks: each product
with ``sqrt(W) A`` or its transpose is one pass over the blocks, in this process or on the dask
workers that hold them. For very many columns, where a cols x cols matrix does not fit."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import scipy.sparse.linalg

from ._block import Block
from ._reduce import load, tree_reduce
from ._system import BlockSystem

#: scipy's ``istop`` codes, in words.
STOP_REASONS = {
    0: "x = 0 is the exact solution",
    1: "A x = b solved to the tolerances",
    2: "least-squares solution found to the tolerances",
    3: "the condition estimate exceeded conlim",
    4: "A x = b solved to machine precision",
    5: "least-squares solution found to machine precision",
    6: "the condition estimate reached machine precision",
    7: "the iteration limit was reached",
}


def solve_lsqr(system: BlockSystem, penalty_rows: np.ndarray | None, damp: float,
               group_weights: np.ndarray | None, *, client: Any = None, tol: float = 1e-12,
               max_iterations: int | None = None) -> tuple[np.ndarray, int, float, str]:
    """(x, iterations, cond estimate, stop reason) minimizing
    ``sum w (A x - y)^2 + ||L x||^2 + damp^2 ||x||^2`` (``L = penalty_rows``)."""
    ops = _Dask(system, client, group_weights) if client is not None else _Local(system,
                                                                                 group_weights)
    try:
        rows, cols = system.shape
        extra = 0 if penalty_rows is None else penalty_rows.shape[0]

        def matvec(x: np.ndarray) -> np.ndarray:
            x = np.ravel(x)
            out = ops.matvec(x)
            return out if penalty_rows is None else np.concatenate([out, penalty_rows @ x])

        def rmatvec(u: np.ndarray) -> np.ndarray:
            u = np.ravel(u)
            out = ops.rmatvec(u[:rows])
            return out if penalty_rows is None else out + penalty_rows.T @ u[rows:]

        op = scipy.sparse.linalg.LinearOperator((rows + extra, cols), matvec=matvec,
                                                rmatvec=rmatvec, dtype=np.float64)
        b = ops.rhs()
        if extra:
            b = np.concatenate([b, np.zeros(extra)])
        out = scipy.sparse.linalg.lsqr(op, b, damp=damp, atol=tol, btol=tol, conlim=1e16,
                                       iter_lim=max_iterations or max(100, 4 * cols))
        x, istop, itn, acond = out[0], out[1], out[2], out[6]
        return x, int(itn), float(acond), STOP_REASONS.get(int(istop), f"istop={istop}")
    finally:
        ops.close()


class _Local:
    """Products block by block in this process: one block in memory at a time."""

    def __init__(self, system: BlockSystem, group_weights: np.ndarray | None):
        self.system, self.gw = system, group_weights
        self.offsets = np.cumsum([0] + [r.rows for r in system.refs])

    def rhs(self) -> np.ndarray:
        return np.concatenate([_rhs(b, self.gw) for b in self.system])

    def matvec(self, x: np.ndarray) -> np.ndarray:
        out = np.empty(self.offsets[-1])
        for ref, lo, hi in zip(self.system.refs, self.offsets[:-1], self.offsets[1:]):
            out[lo:hi] = _matvec(self.system.read(ref), x, self.gw)
        return out

    def rmatvec(self, u: np.ndarray) -> np.ndarray:
        acc = np.zeros(self.system.shape[1])
        for ref, lo, hi in zip(self.system.refs, self.offsets[:-1], self.offsets[1:]):
            acc += _rmatvec(self.system.read(ref), u[lo:hi], self.gw)
        return acc

    def close(self) -> None:
        pass


class _Dask:
    """Products on the workers of a dask client, which read each block once and keep it."""

    def __init__(self, system: BlockSystem, client: Any, group_weights: np.ndarray | None):
        self.client, self.gw = client, group_weights
        self.offsets = np.cumsum([0] + [r.rows for r in system.refs])
        self.blocks = client.map(load, system.refs, verify=system.verify != "never",
                                 ledger=system.ledger, pure=False)

    def rhs(self) -> np.ndarray:
        parts = self.client.map(_rhs, self.blocks, group_weights=self.gw, pure=False)
        return np.concatenate(self.client.gather(parts))

    def matvec(self, x: np.ndarray) -> np.ndarray:
        [xf] = self.client.scatter([x], broadcast=True, hash=False)
        parts = self.client.map(_matvec, self.blocks, x=xf, group_weights=self.gw, pure=False)
        return np.concatenate(self.client.gather(parts))

    def rmatvec(self, u: np.ndarray) -> np.ndarray:
        pieces = [u[lo:hi] for lo, hi in zip(self.offsets[:-1], self.offsets[1:])]
        parts = self.client.map(_rmatvec, self.blocks, pieces, group_weights=self.gw,
                                pure=False)
        return tree_reduce(self.client, parts, operator.add).result()

    def close(self) -> None:
        self.client.cancel(self.blocks)
        self.blocks = []


def _rhs(block: Block, group_weights: np.ndarray | None) -> np.ndarray:
    return np.sqrt(block.weights(group_weights)) * block.y


def _matvec(block: Block, x: np.ndarray, group_weights: np.ndarray | None) -> np.ndarray:
    return np.sqrt(block.weights(group_weights)) * (block.A @ x)


def _rmatvec(block: Block, u: np.ndarray, group_weights: np.ndarray | None) -> np.ndarray:
    return block.A.T @ (np.sqrt(block.weights(group_weights)) * u)
