"""The CPU sparse backend: SuiteSparse KLU through the XLA FFI.

The compiled KLU handlers come from the ``klujax`` wheel (module ``klujax_cpp``: analyse, factor,
refactor, solve, free); they are registered here under our own target names and called with
`jax.ffi.ffi_call`, so importing this module neither imports ``klujax``'s Python layer (which
changes global JAX settings on import) nor depends on JAX internals. Handles are KLU pointers held
in uint64 arrays: the symbolic analysis is made once per pattern on the host and kept for the
process; a numeric factorization is allocated by ``factor`` inside the traced program, updated in
place by ``refactor`` and freed by ``release``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap
from jax.typing import ArrayLike

from ._base import LinearSolver, require_x64
from ._pattern import Pattern

__all__ = ["KLU", "klu_available"]

_PREFIX = "diffsoup_klu_"
_TARGETS = ("analyze", "factor_f64", "refactor_f64", "solve_with_numeric_f64", "free_numeric")
_lock = threading.Lock()
_registered = False
_symbolic_cache: dict[str, _KLUSymbolic] = {}


def _module() -> Any:
    try:
        import klujax_cpp
    except ImportError as exc:
        raise ImportError("linear='klu' needs the compiled KLU handlers of the klujax package: "
                          "pip install klujax (or use linear='dense')") from exc
    return klujax_cpp


def klu_available() -> bool:
    """Whether the KLU handlers can be loaded (the ``klujax`` wheel is installed)."""
    try:
        _module()
    except ImportError:
        return False
    return True


def _register() -> None:
    global _registered
    with _lock:
        if _registered:
            return
        cpp = _module()
        for name in _TARGETS:
            jax.ffi.register_ffi_target(_PREFIX + name, getattr(cpp, name)(), platform="cpu")
        _registered = True


@dataclass(frozen=True, eq=False)
class _KLUSymbolic:
    """A KLU symbolic analysis: the pattern, and the handle (kept alive by ``owner``)."""

    pattern: Pattern
    handle: int
    owner: Any

    def constant(self) -> np.ndarray:
        return np.asarray(self.handle, dtype=np.uint64)


@dataclass(frozen=True)
class KLU(LinearSolver):
    """Sparse LU by KLU (Davis and Palamadai Natarajan): BTF and AMD orderings, partial pivoting.

    ``refactor`` keeps the pivot order of the last ``factor`` (``klu_refactor``): cheap, and
    accurate while the values change smoothly. The DAE stepper asks for a fresh ``factor`` after
    a Newton failure with a current matrix, which is how it recovers when the old pivots go bad.
    CPU only, float64 only (``jax_enable_x64``). A singular matrix stops the program with an
    error from KLU; non-finite entries are replaced by the identity so that a failed trial step
    is rejected by the stepper instead.
    """

    name: ClassVar[str] = "klu"
    stateful: ClassVar[bool] = True

    def analyse(self, pattern: Pattern) -> _KLUSymbolic:
        require_x64("klu")
        if jax.default_backend() != "cpu":
            raise RuntimeError(f"linear='klu' runs on CPU arrays only, but JAX's default backend "
                               f"is {jax.default_backend()!r}; use linear='auto' or 'dense' here "
                               "(or run the solve under jax.default_device(jax.devices('cpu')[0]))")
        _register()
        with _lock:
            cached = _symbolic_cache.get(pattern.key)
        if cached is not None:
            return cached
        cpu = jax.devices("cpu")[0]
        with jax.ensure_compile_time_eval(), jax.default_device(cpu):
            raw = jax.ffi.ffi_call(_PREFIX + "analyze", jax.ShapeDtypeStruct((), jnp.uint64))(
                pattern.rows, pattern.cols, np.int32(pattern.n))
            handle = int(np.asarray(raw))
        if handle == 0:
            raise RuntimeError(f"KLU could not analyse the pattern {pattern!r}")
        symbolic = _KLUSymbolic(pattern, handle, _module().KLUSymbolic(handle))
        with _lock:
            return _symbolic_cache.setdefault(pattern.key, symbolic)

    def empty(self, symbolic: _KLUSymbolic, dtype: Any) -> jax.Array:
        return jnp.zeros((1,), jnp.uint64)

    def _values(self, symbolic: _KLUSymbolic, values: ArrayLike) -> jax.Array:
        values = jnp.asarray(values, jnp.float64)
        eye = jnp.zeros_like(values).at[symbolic.pattern.diagonal_index].set(1.0)
        return jnp.where(jnp.all(jnp.isfinite(values)), values, eye)[None, :]

    def factor(self, symbolic: _KLUSymbolic, values: ArrayLike) -> jax.Array:
        p = symbolic.pattern
        call = jax.ffi.ffi_call(_PREFIX + "factor_f64", jax.ShapeDtypeStruct((1,), jnp.uint64),
                                has_side_effect=True, vmap_method="sequential")
        return call(p.rows, p.cols, self._values(symbolic, values), symbolic.constant())

    def refactor(self, symbolic: _KLUSymbolic, numeric: jax.Array, values: ArrayLike) -> jax.Array:
        p = symbolic.pattern
        call = jax.ffi.ffi_call(_PREFIX + "refactor_f64", jax.ShapeDtypeStruct((1,), jnp.uint64),
                                has_side_effect=True, vmap_method="sequential")
        return call(p.rows, p.cols, self._values(symbolic, values), symbolic.constant(), numeric)

    def solve(self, symbolic: _KLUSymbolic, numeric: jax.Array, b: ArrayLike) -> jax.Array:
        return _solver(symbolic)(numeric, jnp.asarray(b, jnp.float64))

    def free(self, symbolic: _KLUSymbolic, numeric: jax.Array) -> None:
        call = jax.ffi.ffi_call(_PREFIX + "free_numeric", jax.ShapeDtypeStruct((), jnp.int32),
                                has_side_effect=True, vmap_method="sequential")
        call(numeric)


def _solver(symbolic: _KLUSymbolic):
    """``solve(numeric, b)``; under ``vmap`` over ``b`` alone, one call with many right-hand
    sides (KLU solves them together); otherwise one call per batch member."""
    n, sym = symbolic.pattern.n, symbolic.constant()

    def call(numeric, b3):
        # klu_solve works in the factorization's own workspace, so two solves with one factor
        # must not run at once: side-effecting calls are executed one at a time, in order.
        return jax.ffi.ffi_call(_PREFIX + "solve_with_numeric_f64",
                                jax.ShapeDtypeStruct(b3.shape, jnp.float64),
                                has_side_effect=True, vmap_method="sequential")(sym, numeric, b3)

    @custom_vmap
    def solve(numeric, b):
        return call(numeric, b.reshape(1, n, 1)).reshape(n)

    @solve.def_vmap
    def solve_batched(axis_size, in_batched, numeric, b):
        numeric_batched, b_batched = in_batched
        if not numeric_batched:
            b = b if b_batched else jnp.broadcast_to(b, (axis_size, n))
            return call(numeric, b.T.reshape(1, n, axis_size)).reshape(n, axis_size).T, True
        numeric = numeric if numeric_batched else jnp.broadcast_to(numeric, (axis_size, 1))
        b = b if b_batched else jnp.broadcast_to(b, (axis_size, n))
        return jax.lax.map(lambda a: solve(*a), (numeric, b)), True

    return solve
