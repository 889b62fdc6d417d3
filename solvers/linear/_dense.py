"""The dense backend: LU with partial pivoting (LAPACK ``getrf`` on CPU, cuSOLVER on GPU)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax.typing import ArrayLike

from ._base import LinearSolver
from ._pattern import Pattern

__all__ = ["Dense"]


@dataclass(frozen=True)
class _DenseSymbolic:
    pattern: Pattern

    def __hash__(self) -> int:
        return hash(self.pattern.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _DenseSymbolic) and other.pattern.key == self.pattern.key


@dataclass(frozen=True)
class Dense(LinearSolver):
    """Scatter the entries into an ``n x n`` array and factor it densely.

    Runs on every platform and under every transformation; memory and time grow as ``n^2`` and
    ``n^3``, so it suits systems up to a few thousand unknowns (and serves as the reference the
    sparse backends are tested against). ``refactor`` is a fresh ``factor``.
    """

    name: ClassVar[str] = "dense"

    def analyse(self, pattern: Pattern) -> _DenseSymbolic:
        return _DenseSymbolic(pattern)

    def empty(self, symbolic: _DenseSymbolic, dtype: Any) -> tuple[jax.Array, jax.Array]:
        n = symbolic.pattern.n
        return jnp.eye(n, dtype=dtype), jnp.arange(n, dtype=jnp.int32)

    def _matrix(self, symbolic: _DenseSymbolic, values: ArrayLike) -> jax.Array:
        p = symbolic.pattern
        return jnp.zeros((p.n, p.n), np.result_type(values)).at[p.rows, p.cols].set(values)

    def factor(self, symbolic: _DenseSymbolic, values: ArrayLike) -> tuple[jax.Array, jax.Array]:
        lu, piv = jsl.lu_factor(self._matrix(symbolic, values))
        return lu, piv.astype(jnp.int32)

    def refactor(self, symbolic: _DenseSymbolic, numeric: Any,
                 values: ArrayLike) -> tuple[jax.Array, jax.Array]:
        return self.factor(symbolic, values)

    def solve(self, symbolic: _DenseSymbolic, numeric: Any, b: ArrayLike) -> jax.Array:
        return jsl.lu_solve(numeric, b)
