"""What `pdesolve` integrates: a residual ``F(t, y, y', args) = 0`` with a sparsity pattern."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..linear import Pattern

__all__ = ["DAEProblem"]


def _as_pattern(pattern: Any, n: int | None) -> Pattern:
    if isinstance(pattern, Pattern):
        return pattern
    if isinstance(pattern, tuple) and len(pattern) == 2:
        if n is None:
            raise ValueError("DAEProblem(pattern=(rows, cols)) needs n=; or pass "
                             "Pattern.from_coo(rows, cols, n)")
        return Pattern.from_coo(pattern[0], pattern[1], n)
    if hasattr(pattern, "tocoo"):
        return Pattern.from_scipy(pattern)
    array = np.asarray(pattern)
    if array.ndim == 2:
        return Pattern.from_dense(array)
    raise TypeError(f"pattern must be a Pattern, (rows, cols), a scipy.sparse matrix or a dense "
                    f"boolean mask, got {type(pattern).__name__}")


@dataclass(frozen=True, eq=False)
class DAEProblem:
    """An index-1 DAE ``F(t, y, y', args) = 0`` in ``n`` unknowns.

    Attributes:
        residual: ``residual(t, y, yp, args) -> F`` with ``y``, ``yp`` and ``F`` of shape
            ``(n,)``; traceable by JAX.
        pattern: where the iteration matrix ``dF/dy + c dF/dy'`` may be non-zero: a `Pattern`,
            ``(rows, cols)`` with ``n=``, a scipy.sparse matrix or a dense boolean mask. Entries
            outside it are dropped, so it must cover both ``dF/dy`` and ``dF/dy'``.
        algebraic: which unknowns are algebraic (``y'`` does not appear in ``F`` for them): a
            boolean mask or indices. They are computed from the others by the consistent
            initialization and may be left out of the error test (``JIDA(suppress_algebraic=)``).
        args: default ``args`` (a pytree of arrays, e.g. a dict of parameters); `pdesolve`'s
            ``args=`` overrides it.
        layout: a `solvers.Layout` when the problem was built for a mesh (`spec.build(layout=)`);
            ``None`` for one device.
        name: a label for logs.
        jacobian: ``None`` (default: the iteration matrix comes from the residual by coloured
            forward-mode differentiation over the pattern), or ``J(t, y, yp, c, args)`` returning
            the iteration matrix ``dF/dy + c dF/dy'`` (IDA's ``IDASetJacFn``), traceable by JAX,
            as either the values of the pattern's entries in the pattern's order, shape
            ``(nnz,)``: by column, then row, with the diagonal added (their ``(rows, cols)`` are
            `solvers.dae.jacobian_entries(problem)`, i.e. ``problem.pattern.rows``, ``.cols``);
            or a dense ``(n, n)`` array, whose entries outside the pattern are dropped. Another
            shape is refused by `pdesolve` before anything compiles. ``J`` is called with values
            held out of differentiation (derivatives of a solve come from the residual).
        check_jacobian: with a ``jacobian``, compare it once (the first `pdesolve` with concrete
            inputs) with the differentiated matrix at the initial state ``(t0, y0, yp0)``
            (``yp0`` zeros when not given) at ``c = 0`` and ``c = 1``, and raise a ValueError
            naming the worst entry (row, col, J's value, AD's value) when one differs by more
            than ``rtol max(|AD|, 1e-8 max |AD|)``: ``rtol`` 1e-6 for ``True``, or the number
            given. A debugging aid: it costs one compile and one evaluation of each.

    Equal problems are the same object: build a problem once and reuse it, so compiled solves
    are reused (`pdesolve` compiles once per problem, solver and output shape).
    """

    residual: Callable[..., Any]
    pattern: Any
    algebraic: Any = None
    args: Any = None
    n: int | None = None
    layout: Any = None
    name: str = ""
    jacobian: Callable[..., Any] | None = None
    check_jacobian: bool | float = False

    def __post_init__(self) -> None:
        if not callable(self.residual):
            raise TypeError(f"DAEProblem residual must be callable residual(t, y, yp, args), got "
                            f"{type(self.residual).__name__}")
        if self.jacobian is not None and not callable(self.jacobian):
            raise TypeError(f"DAEProblem jacobian must be None or callable J(t, y, yp, c, args) "
                            f"returning dF/dy + c dF/dyp, got {type(self.jacobian).__name__}")
        check = self.check_jacobian
        if not (isinstance(check, bool) or (isinstance(check, (int, float)) and check > 0)):
            raise ValueError(f"DAEProblem check_jacobian takes True, False or a relative "
                             f"tolerance > 0, got {check!r}")
        if check and self.jacobian is None:
            raise ValueError("DAEProblem(check_jacobian=...) checks a user jacobian: pass "
                             "jacobian=J(t, y, yp, c, args) too (without one the matrix is "
                             "differentiated and needs no check)")
        pattern = _as_pattern(self.pattern, self.n)
        if self.n is not None and int(self.n) != pattern.n:
            raise ValueError(f"DAEProblem n={self.n!r} but the pattern is {pattern.n} x "
                             f"{pattern.n}")
        object.__setattr__(self, "pattern", pattern)
        object.__setattr__(self, "n", pattern.n)
        mask = np.zeros(pattern.n, dtype=bool)
        if self.algebraic is not None:
            given = np.asarray(self.algebraic)
            if given.dtype == bool:
                if given.shape != (pattern.n,):
                    raise ValueError(f"DAEProblem algebraic mask has shape {given.shape}; give "
                                     f"({pattern.n},) booleans or a list of indices")
                mask = given.copy()
            else:
                idx = given.astype(np.int64).ravel()
                if idx.size and (idx.min() < 0 or idx.max() >= pattern.n):
                    raise ValueError(f"DAEProblem algebraic index {int(idx.max())} is outside "
                                     f"0..{pattern.n - 1}")
                mask[idx] = True
        mask.flags.writeable = False
        object.__setattr__(self, "algebraic", mask)

    @property
    def has_algebraic(self) -> bool:
        return bool(self.algebraic.any())

    def __repr__(self) -> str:
        label = f"{self.name!r}, " if self.name else ""
        user = ", jacobian=user" if self.jacobian is not None else ""
        return (f"DAEProblem({label}n={self.n}, nnz={self.pattern.nnz}, "
                f"algebraic={int(self.algebraic.sum())}{user})")
