"""LSQR (``scipy.sparse.linalg.lsqr``) on a `LinearOperator` over the row blocks, its columns
scaled to unit norm: each product with ``sqrt(W) A`` or its transpose is one pass over the
blocks, in this process or on the dask workers that hold them. For very many columns, where a
cols x cols matrix does not fit."""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse.linalg

from ._block import Block
from ._factor import column_scale
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


#: The stop codes whose test holds: the (scaled) problem is solved to the tolerances.
CONVERGED = frozenset({0, 1, 2, 4, 5})


@dataclass(frozen=True)
class LsqrResult:
    """What `solve_lsqr` found: ``cond`` is LSQR's estimate for the column-scaled operator;
    ``converged`` says whether LSQR's stopping test held (on the scaled problem)."""

    x: np.ndarray
    iterations: int
    cond: float
    stop_reason: str
    converged: bool


def solve_lsqr(system: BlockSystem, penalty_rows: np.ndarray | None,
               group_weights: np.ndarray | None, *, client: Any = None, tol: float = 1e-12,
               max_iterations: int | None = None, conlim: float = 1e12) -> LsqrResult:
    """Minimize ``sum w (A x - y)^2 + ||L x||^2`` by LSQR on the column-scaled operator
    ``sqrt(W) A D^-1`` (``D``: the column norms, one pass over the blocks), preconditioned so
    that the stopping test and the condition estimate are those of the equilibrated problem.

    ``penalty_rows`` is ``L``: a (k, cols) matrix, or a vector of length cols for a diagonal
    ``L`` (a plain ridge: no cols x cols matrix). LSQR stops (not converged) when its condition
    estimate passes ``conlim``.
    """
    ops = _Dask(system, client, group_weights) if client is not None else _Local(system,
                                                                                 group_weights)
    try:
        rows, cols = system.shape
        diagonal = penalty_rows is not None and penalty_rows.ndim == 1
        extra = 0 if penalty_rows is None else cols if diagonal else penalty_rows.shape[0]
        sumsq = ops.column_sumsq()
        if penalty_rows is not None:
            sumsq = sumsq + (penalty_rows ** 2 if diagonal else np.sum(penalty_rows ** 2, 0))
        scale = column_scale(np.sqrt(sumsq))

        def matvec(z: np.ndarray) -> np.ndarray:
            x = np.ravel(z) / scale
            out = ops.matvec(x)
            if penalty_rows is None:
                return out
            return np.concatenate([out, penalty_rows * x if diagonal else penalty_rows @ x])

        def rmatvec(u: np.ndarray) -> np.ndarray:
            u = np.ravel(u)
            out = ops.rmatvec(u[:rows])
            if penalty_rows is not None:
                out = out + (penalty_rows * u[rows:] if diagonal else penalty_rows.T @ u[rows:])
            return out / scale

        op = scipy.sparse.linalg.LinearOperator((rows + extra, cols), matvec=matvec,
                                                rmatvec=rmatvec, dtype=np.float64)
        b = ops.rhs()
        if extra:
            b = np.concatenate([b, np.zeros(extra)])
        out = scipy.sparse.linalg.lsqr(op, b, atol=tol, btol=tol, conlim=conlim,
                                       iter_lim=max_iterations or max(100, 4 * cols))
        z, istop, itn, acond = out[0], int(out[1]), out[2], out[6]
        return LsqrResult(z / scale, int(itn), float(acond),
                          STOP_REASONS.get(istop, f"istop={istop}"), istop in CONVERGED)
    finally:
        ops.close()


class _Local:
    """Products block by block in this process: one block in memory at a time."""

    def __init__(self, system: BlockSystem, group_weights: np.ndarray | None):
        self.system, self.gw = system, group_weights
        self.offsets = np.cumsum([0] + [r.rows for r in system.refs])

    def rhs(self) -> np.ndarray:
        return np.concatenate([_rhs(b, self.gw) for b in self.system])

    def column_sumsq(self) -> np.ndarray:
        return functools.reduce(operator.add, (_column_sumsq(b, self.gw) for b in self.system))

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

    def column_sumsq(self) -> np.ndarray:
        parts = self.client.map(_column_sumsq, self.blocks, group_weights=self.gw, pure=False)
        return tree_reduce(self.client, parts, operator.add).result()

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


def _column_sumsq(block: Block, group_weights: np.ndarray | None) -> np.ndarray:
    return block.weights(group_weights) @ (block.A * block.A)
