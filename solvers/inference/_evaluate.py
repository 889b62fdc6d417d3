"""Cost, gradient and curvature of a lowered problem, summed over the ``data`` axis.

Each device evaluates its experiments (vmapped, or one after another for models that count their
steps), scatters each experiment's terms into the full parameter vector and sums them; one
``psum`` over ``data`` then gives every device the same totals, so the step that follows is the
same everywhere and equals the one-device step. Derivatives are forward-mode (`jax.jacfwd`), which
also differentiates through while loops (adaptive ODE solvers).
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from .._compat import shard_map
from ._lower import DATA, Plan
from ._structure import BucketPlan

__all__ = ["Totals", "evaluate"]


class Totals(NamedTuple):
    """Sums over all experiments, at one point ``x`` of the fitted coordinates."""

    cost: jax.Array       # 0.5 * sum of squared weighted residuals
    gradient: jax.Array   # J^T r, shape (n,)
    gauss_newton: jax.Array  # J^T J, shape (n, n)
    hessian: jax.Array    # the exact Hessian of the cost when asked for, else J^T J


def _experiment(bucket: BucketPlan, log: jax.Array, n: int, hessian: bool, x: jax.Array,
                d: dict[str, Any]) -> Totals:
    idx = d["index"]
    log_e = log[idx]

    def residuals(xe):
        theta = jnp.where(log_e, jnp.exp(xe), xe)
        params = {name: theta[i] for i, name in enumerate(bucket.names)}
        pred = bucket.flatten(bucket.model(params, d["conditions"], d["times"]))[d["obs"]]
        w = d["weights"]
        r = jnp.where(w > 0, w * (pred - d["values"]), 0.0)
        return r, r

    def gradient(xe):
        jac, r = jax.jacfwd(residuals, has_aux=True)(xe)
        return jac.T @ r, (jac, r)

    xe = x[idx]
    if hessian:
        hess, (jac, r) = jax.jacfwd(gradient, has_aux=True)(xe)
    else:
        jac, r = jax.jacfwd(residuals, has_aux=True)(xe)
        hess = None
    jtj = jac.T @ jac
    g = jnp.zeros(n, x.dtype).at[idx].add(jac.T @ r)
    gn = jnp.zeros((n, n), x.dtype).at[idx[:, None], idx[None, :]].add(jtj)
    h = gn if hess is None else jnp.zeros((n, n), x.dtype).at[idx[:, None], idx[None, :]].add(
        0.5 * (hess + hess.T))
    return Totals(0.5 * jnp.sum(r * r), g, gn, h)


def evaluate(plan: Plan, data: tuple[dict[str, Any], ...], x: jax.Array, *,
             hessian: bool) -> Totals:
    """The totals at ``x``, replicated on every device of the mesh."""
    n = x.shape[0]
    log = jnp.asarray(plan.log, dtype=bool)

    def local(x, data):
        totals = None
        for bucket, d in zip(plan.buckets, data):
            fn = partial(_experiment, bucket, log, n, hessian, x)
            out = jax.lax.map(fn, d) if bucket.sequential else jax.vmap(fn)(d)
            sums = jax.tree.map(lambda a: jnp.sum(a, axis=0), out)
            totals = sums if totals is None else jax.tree.map(jnp.add, totals, sums)
        return jax.tree.map(lambda a: jax.lax.psum(a, DATA), totals)

    data_specs = jax.tree.map(lambda _: PartitionSpec(DATA), data)
    out_specs = Totals(*(PartitionSpec(),) * 4)
    return shard_map(local, plan.mesh, (PartitionSpec(), data_specs), out_specs)(x, data)
