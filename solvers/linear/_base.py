"""The interface every linear-solver backend implements, and the operations built on it."""

from __future__ import annotations

import abc
from functools import partial
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap, sequential_vmap
from jax.typing import ArrayLike

from ._pattern import Pattern

__all__ = ["FACTOR", "KEEP", "REFACTOR", "LinearSolver", "Symbolic", "require_x64", "x64_enabled"]

#: ``mode`` values of `LinearSolver.update`.
KEEP, REFACTOR, FACTOR = 0, 1, 2

Symbolic = Any
Numeric = Any


def x64_enabled() -> bool:
    """Whether JAX's float64 is on (``jax_enable_x64``)."""
    # jax.config's options are attributes it sets at run time, unseen by type checkers
    return bool(jax.config.jax_enable_x64)  # type: ignore[attr-defined]


def require_x64(name: str) -> None:
    """Refuse to run backend ``name`` (float64 values, uint64 handles) without JAX's x64."""
    if not x64_enabled():
        raise RuntimeError(f"linear={name!r} factors in float64 and passes its handles as "
                           "uint64, which JAX disables by default; call "
                           "jax.config.update('jax_enable_x64', True) at start-up (or use "
                           "linear='dense')")


class LinearSolver(abc.ABC):
    """A direct solver for sparse ``A x = b`` in explicit phases.

    * ``analyse(pattern)`` — once per sparsity pattern, on the host, outside any trace: orderings
      and symbolic factorization. Returns a hashable symbolic object.
    * ``factor(symbolic, values)`` — numeric factorization with pivoting; returns the numeric
      state (a pytree of arrays).
    * ``refactor(symbolic, numeric, values)`` — new values, same pattern: reuses the pivot order
      of the last ``factor`` where the backend can (KLU), else factors again.
    * ``solve(symbolic, numeric, b)`` — ``x = A^-1 b``.

    ``factor``, ``refactor`` and ``solve`` are traceable (``jit``, ``vmap``, ``while_loop``);
    ``values`` are the matrix entries in `Pattern` order. ``empty`` is the numeric state before
    any factorization and ``release`` frees one (a no-op for backends without external memory).
    """

    name: ClassVar[str]
    #: Whether the numeric state refers to memory outside JAX (factor allocates, refactor updates
    #: in place). `update` then runs batch members one after another under ``vmap``.
    stateful: ClassVar[bool] = False

    @abc.abstractmethod
    def analyse(self, pattern: Pattern) -> Symbolic:
        """The symbolic analysis of ``pattern`` (host side; cached per pattern by backends)."""

    @abc.abstractmethod
    def empty(self, symbolic: Symbolic, dtype: Any) -> Numeric:
        """The numeric state before the first factorization."""

    @abc.abstractmethod
    def factor(self, symbolic: Symbolic, values: ArrayLike) -> Numeric:
        """Factor the matrix with these ``values`` (pivoting)."""

    @abc.abstractmethod
    def refactor(self, symbolic: Symbolic, numeric: Numeric, values: ArrayLike) -> Numeric:
        """Factor new ``values`` of the same pattern, reusing what ``numeric`` allows."""

    @abc.abstractmethod
    def solve(self, symbolic: Symbolic, numeric: Numeric, b: ArrayLike) -> jax.Array:
        """``A^-1 b`` for one right-hand side ``b`` of shape ``(n,)``."""

    def free(self, symbolic: Symbolic, numeric: Numeric) -> None:
        """Free ``numeric`` now (backends with external memory override this)."""
        return None

    def release(self, symbolic: Symbolic, numeric: Numeric, after: Any) -> Any:
        """Free ``numeric`` once ``after`` (a pytree of arrays) is computed; returns ``after``.

        Under differentiation the tangents of ``after`` count too, so no tangent solve can run
        after the memory is gone.
        """
        if not self.stateful:
            return after
        return _release(self, symbolic, numeric, after)

    # -- operations built on the phases ----------------------------------------------------------

    def update(self, symbolic: Symbolic, numeric: Numeric, values: ArrayLike,
               mode: jax.Array | int, after: Any = None) -> Numeric:
        """``KEEP`` the factorization, ``REFACTOR`` it or ``FACTOR`` afresh (releasing the old).

        Traceable with a traced ``mode``; for a stateful backend under ``vmap`` the batch members
        run one after another, so each frees and allocates exactly what it should. A stateful
        backend changes or frees the old state in place: ``numeric`` must not be used afterwards,
        and ``after`` names what was computed with it (the update waits for it).
        """
        if self.stateful and after is not None:
            numeric = _depend(numeric, after)
        def run(numeric, values, mode):
            def fresh():
                return self.release(symbolic, numeric, self.factor(symbolic, values))

            return jax.lax.switch(mode, [lambda: numeric,
                                         lambda: self.refactor(symbolic, numeric, values),
                                         fresh])

        return _update(self, symbolic, run, numeric, jax.lax.stop_gradient(values),
                       jnp.asarray(mode, jnp.int32))

    def linear_solve(self, symbolic: Symbolic, numeric: Numeric, b: ArrayLike) -> jax.Array:
        """`solve`, differentiable in ``b`` (the factor is a constant: ``d x = A^-1 d b``)."""
        return _solve(self, symbolic, numeric, b)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


@partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2))
def _update(backend: LinearSolver, symbolic: Symbolic, run: Any, numeric: Numeric,
            values: jax.Array, mode: jax.Array) -> Numeric:
    """A factorization step; its derivative is zero by definition (the matrix is a constant of
    the Newton iteration). The custom JVP also keeps autodiff out of `sequential_vmap`, whose JVP
    would run the (allocating, freeing) update once per tangent direction under ``jacfwd``."""
    run_ = sequential_vmap(run) if backend.stateful else run
    return run_(numeric, values, mode)


@_update.defjvp
def _update_jvp(backend, symbolic, run, primals, tangents):
    out = _update(backend, symbolic, run, *primals)
    return out, jax.tree.map(_zero_tangent, out)


def _zero_tangent(x: Any) -> Any:
    if jnp.issubdtype(jnp.result_type(x), jnp.inexact):
        return jnp.zeros_like(x)
    return np.zeros(np.shape(x), dtype=jax.dtypes.float0)


@partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _solve(backend: LinearSolver, symbolic: Symbolic, numeric: Numeric, b: jax.Array) -> jax.Array:
    return backend.solve(symbolic, numeric, b)


@_solve.defjvp
def _solve_jvp(backend, symbolic, primals, tangents):
    numeric, b = primals
    _, db = tangents
    return _solve(backend, symbolic, numeric, b), _solve(backend, symbolic, numeric, db)


def _depend(numeric: jax.Array, after: Any) -> jax.Array:
    """``numeric`` (a handle array), made to depend on every array in ``after``.

    XLA orders operations by data dependencies only (on CPU it runs independent ones
    concurrently, and drops optimization barriers), so a call that frees or changes a factorization
    in place must take an operand computed from everything that still reads it. The handle goes
    through a select on a predicate computed from a sum over ``after``: false for every value of
    the sum (NaN included), which the compiler cannot prove, so it cannot drop the dependency.
    (Picking from two equal copies is folded away by XLA from jaxlib 0.12; tests/dae/test_linear.py
    fails if a dependency is lost.) Under ``vmap`` the sum runs over the batch too, so an unbatched
    handle stays unbatched (freed once).
    """
    leaves = tuple(jax.lax.stop_gradient(leaf) for leaf in jax.tree.leaves(after)
                   if jnp.size(leaf) and jnp.result_type(leaf) != jax.dtypes.float0)
    if not leaves:
        return numeric
    return _depend_on(numeric, leaves)


def _pick(numeric: jax.Array, leaves: tuple[jax.Array, ...]) -> jax.Array:
    total = sum(jnp.sum(leaf.astype(jnp.float64)) for leaf in leaves)
    # NaN: `!=` holds and `>=` does not; any other value: `!=` does not. Never both.
    never = (total != total) & (total >= total)
    return jnp.where(never, jnp.zeros_like(numeric), numeric)


@custom_vmap
def _depend_on(numeric: jax.Array, leaves: tuple[jax.Array, ...]) -> jax.Array:
    return _pick(numeric, leaves)


@_depend_on.def_vmap
def _depend_on_vmap(axis_size, in_batched, numeric, leaves):
    numeric_batched, _ = in_batched
    # Reduce over the batch axis here, and recurse so that an enclosing vmap does the same.
    total = sum(jnp.sum(leaf.astype(jnp.float64)) for leaf in leaves)
    return _depend_on(numeric, (total,)), numeric_batched


@partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _release(backend: LinearSolver, symbolic: Symbolic, numeric: Numeric, after: Any) -> Any:
    backend.free(symbolic, _depend(numeric, after))
    return after


@_release.defjvp
def _release_jvp(backend, symbolic, primals, tangents):
    numeric, after = primals
    _, after_dot = tangents
    # One barrier over primal and tangent, so the free waits for both.
    return _release(backend, symbolic, numeric, (after, after_dot))
