"""Process 0's view of the other processes: one extra bucket of the lowered problem.

The fit (`optsolve`) differentiates residuals; the other processes' experiments enter it as a
model whose "residuals" are their compressed terms ``[c_w; rho_w]`` with Jacobian ``[R_w; 0]``
(see `_share`), fetched from them by a host callback at each evaluation. A custom JVP gives the
Jacobian, and for Newton methods the derivative of the Jacobian is chosen so that the curvature
term ``sum_i r_i hess(r_i)`` equals the workers' ``S``. Cost, gradient and Gauss-Newton
curvature thus equal the sums over the workers' experiments, up to rounding.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Remote", "register", "unregister"]

logger = logging.getLogger(__name__)

#: (theta, second) -> (r', J', S) from the workers; keyed so that models stay hashable.
Fetch = Callable[[np.ndarray, bool], tuple[np.ndarray, np.ndarray, np.ndarray]]
_links: dict[int, Fetch] = {}
_counter = itertools.count()


def register(fetch: Fetch) -> int:
    key = next(_counter)
    _links[key] = fetch
    return key


def unregister(key: int) -> None:
    _links.pop(key, None)


def _fetch(key: int, rows: int, second: bool, theta: jax.Array):
    n = theta.shape[0]
    dtype = theta.dtype

    def host(theta):
        fetch = _links.get(key)
        if fetch is None:
            raise RuntimeError("this problem was lowered by distributed.run(), whose block has "
                               "ended; fit it inside the `with distributed.run(study)` block")
        r, jac, s = fetch(np.asarray(theta), second)
        return r.astype(dtype), jac.astype(dtype), s.astype(dtype)

    shapes = (jax.ShapeDtypeStruct((rows,), dtype), jax.ShapeDtypeStruct((rows, n), dtype),
              jax.ShapeDtypeStruct((n, n), dtype))
    return jax.pure_callback(host, shapes, theta, vmap_method="sequential")


@partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _residuals(key: int, rows: int, theta: jax.Array) -> jax.Array:
    return _fetch(key, rows, False, theta)[0]


@_residuals.defjvp
def _residuals_jvp(key, rows, primals, tangents):
    (theta,), (t,) = primals, tangents
    r, jac = _linear(key, rows, theta)
    return r, jac @ t


@partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _linear(key: int, rows: int, theta: jax.Array) -> tuple[jax.Array, jax.Array]:
    r, jac, _ = _fetch(key, rows, False, theta)
    return r, jac


@_linear.defjvp
def _linear_jvp(key, rows, primals, tangents):
    (theta,), (t,) = primals, tangents
    r, jac, s = _fetch(key, rows, True, theta)
    rr = r @ r
    # d(J^T) r must be S t: a rank-one change of J along r gives exactly that.
    djac = jnp.outer(r, s @ t) / jnp.where(rr > 0, rr, 1.0)
    return (r, jac), (jac @ t, djac)


@dataclass(frozen=True)
class Remote:
    """The model of the other processes' experiments (hashable: part of the compiled fit)."""

    key: int
    names: tuple[str, ...]
    rows: int

    def __call__(self, params: Mapping[str, Any], conditions: Any, times: Any) -> jax.Array:
        theta = jnp.stack([jnp.asarray(params[name]) for name in self.names])
        return _residuals(self.key, self.rows, theta)
