"""The static part of a solve: problem, settings, backend and its symbolic analysis, colouring."""

from __future__ import annotations

import logging
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..linear import CuDSS, LinearSolver, linear_solver
from ._jacobian import user_values
from ._jida import JIDA
from ._problem import DAEProblem

logger = logging.getLogger(__name__)

__all__ = ["Context", "context"]


@dataclass(frozen=True, eq=False)
class Context:
    """Everything about a solve that is fixed at compile time (hashed by identity)."""

    problem: DAEProblem
    solver: JIDA
    backend: LinearSolver
    symbolic: Any
    n_colors: int
    color: np.ndarray          # colour of each column
    entry_color: np.ndarray    # colour of each pattern entry's column
    algebraic: np.ndarray      # bool (n,)

    @property
    def n(self) -> int:
        return self.problem.pattern.n  # the problem's n, which it sets from its pattern

    def residual(self, t: jax.Array, y: jax.Array, yp: jax.Array, args: Any) -> jax.Array:
        out = self.problem.residual(t, y, yp, args)
        out = jnp.asarray(out)
        if out.shape != y.shape:
            raise ValueError(f"the residual of {self.problem!r} returned shape {out.shape} for "
                             f"y of shape {y.shape}; it must return one equation per unknown")
        return out.astype(y.dtype)

    def matrix_values(self, t: jax.Array, y: jax.Array, yp: jax.Array, args: Any,
                      cy: Any, cyp: Any) -> jax.Array:
        """Entries (pattern order) of ``dF/dy diag(cy) + dF/dy' diag(cyp)`` at ``(t, y, y')``:
        from the problem's ``jacobian`` when it has one (`solvers.dae._jacobian`), else
        `ad_values`."""
        if self.problem.jacobian is not None:
            return user_values(self.problem, t, y, yp, args, cy, cyp)
        return self.ad_values(t, y, yp, args, cy, cyp)

    def ad_values(self, t: jax.Array, y: jax.Array, yp: jax.Array, args: Any,
                  cy: Any, cyp: Any) -> jax.Array:
        """`matrix_values` by forward-mode differentiation of the residual.

        One directional derivative per colour (vmapped): the columns of a colour share no row, so
        each row of a compressed product holds one entry.
        """
        t, y, yp, args = jax.lax.stop_gradient((t, y, yp, args))
        seeds = (jnp.asarray(self.color)[None, :]
                 == jnp.arange(self.n_colors, dtype=jnp.int32)[:, None]).astype(y.dtype)

        def column_sums(v):
            return jax.jvp(lambda a, b: self.residual(t, a, b, args), (y, yp),
                           (v * cy, v * cyp))[1]

        compressed = jax.vmap(column_sums)(seeds)
        p = self.problem.pattern
        return compressed[jnp.asarray(self.entry_color), jnp.asarray(p.rows)]


_lock = threading.Lock()
_contexts: weakref.WeakKeyDictionary[DAEProblem, dict[Any, Context]] = weakref.WeakKeyDictionary()


def context(problem: DAEProblem, solver: JIDA) -> Context:
    """The (cached) context of ``problem`` solved by ``solver``: the backend's analysis runs once
    per pattern, the colouring once per problem."""
    backend = linear_solver(solver.linear)
    key = (solver, type(backend).__name__)
    with _lock:
        cached = _contexts.get(problem, {}).get(key)
    if cached is not None:
        return cached
    layout = problem.layout
    mesh = getattr(layout, "mesh", None)
    if mesh is not None and "model" in mesh.axis_names and mesh.shape["model"] > 1 \
            and backend.name != "cudss":
        if jax.default_backend() != "cpu":
            raise ValueError(f"{problem!r} was built on a layout with a 'model' axis of "
                             f"{mesh.shape['model']} devices, which factors one matrix across "
                             f"them: that needs JIDA(linear='cudss'), got "
                             f"linear={solver.linear!r}")
        # CPUs stand in for a model axis (tests, laptops): each process factors the whole matrix.
        logger.info("a 'model' axis of %d CPU devices: %s factors the whole matrix in each "
                    "process (model parallelism needs cuDSS on GPUs)", mesh.shape["model"],
                    backend.name)
    if mesh is not None and isinstance(backend, CuDSS) and isinstance(solver.linear, str):
        backend = type(backend).on_mesh(mesh)  # factors across the mesh's 'model' axis
    symbolic = backend.analyse(problem.pattern)
    n_colors, color = problem.pattern.coloring()
    ctx = Context(problem, solver, backend, symbolic, n_colors, color,
                  color[problem.pattern.cols], np.asarray(problem.algebraic))
    with _lock:
        return _contexts.setdefault(problem, {}).setdefault(key, ctx)
