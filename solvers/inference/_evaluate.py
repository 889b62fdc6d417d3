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

__all__ = ["Totals", "evaluate", "finite_slots", "jacobian_factor"]


class Totals(NamedTuple):
    """Sums over all experiments, at one point ``x`` of the fitted coordinates."""

    cost: jax.Array       # 0.5 * sum of squared weighted residuals
    gradient: jax.Array   # J^T r, shape (n,)
    gauss_newton: jax.Array  # J^T J, shape (n, n)
    hessian: jax.Array    # the exact Hessian of the cost when asked for, else J^T J


def _residual_fn(bucket: BucketPlan, log: jax.Array, d: dict[str, Any]):
    """One experiment's weighted residuals as a function of its own fitted coordinates."""
    log_e = log[d["index"]]

    def residuals(xe):
        # exp of 0 where linear: no inf in the discarded branch (nor in its derivatives)
        theta = jnp.where(log_e, jnp.exp(jnp.where(log_e, xe, 0.0)), xe)
        params = {name: theta[i] for i, name in enumerate(bucket.names)}
        pred = bucket.flatten(bucket.model(params, d["conditions"], d["times"]))[d["obs"]]
        w = d["weights"]
        r = jnp.where(w > 0, w * (pred - d["values"]), 0.0)
        return r, r

    return residuals


def _experiment(bucket: BucketPlan, log: jax.Array, n: int, hessian: bool, x: jax.Array,
                d: dict[str, Any]) -> Totals:
    idx = d["index"]
    residuals = _residual_fn(bucket, log, d)

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


def _jacobian(bucket: BucketPlan, log: jax.Array, n: int, x: jax.Array,
              d: dict[str, Any]) -> jax.Array:
    """One experiment's Jacobian of the weighted residuals, ``(rows, n)`` (all parameters)."""
    idx = d["index"]
    jac, _ = jax.jacfwd(_residual_fn(bucket, log, d), has_aux=True)(x[idx])
    return jnp.zeros((jac.shape[0], n), x.dtype).at[:, idx].add(jac)


def _r_of(a: jax.Array) -> jax.Array:
    """The ``(n, n)`` triangular factor of a QR of ``a`` (``a`` has at least ``n`` rows)."""
    return jnp.linalg.qr(a, mode="r")


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
    # shard_map's out_specs: a Totals of PartitionSpecs, the pytree of the output's layout
    out_specs = Totals(*(PartitionSpec(),) * 4)  # type: ignore[arg-type]
    return shard_map(local, plan.mesh, (PartitionSpec(), data_specs), out_specs)(x, data)


def finite_slots(plan: Plan, data: tuple[dict[str, Any], ...], x: jax.Array, *,
                 hessian: bool) -> tuple[jax.Array, ...]:
    """For each bucket, whether each slot's cost and derivatives at ``x`` are finite.

    One boolean per slot of the bucket's stacked experiments (device order, padding included),
    gathered along ``data`` so that every device holds all of them: the experiments behind a
    non-finite total can be named.
    """
    n = x.shape[0]
    log = jnp.asarray(plan.log, dtype=bool)

    def ok(t: Totals) -> jax.Array:
        return (jnp.isfinite(t.cost) & jnp.all(jnp.isfinite(t.gradient))
                & jnp.all(jnp.isfinite(t.gauss_newton)) & jnp.all(jnp.isfinite(t.hessian)))

    def local(x, data):
        out = []
        for bucket, d in zip(plan.buckets, data):
            fn = partial(_experiment, bucket, log, n, hessian, x)
            one = lambda de, fn=fn: ok(fn(de))  # noqa: E731
            flags = jax.lax.map(one, d) if bucket.sequential else jax.vmap(one)(d)
            out.append(jax.lax.all_gather(flags, DATA, tiled=True))
        return tuple(out)

    data_specs = jax.tree.map(lambda _: PartitionSpec(DATA), data)
    out_specs = tuple(PartitionSpec() for _ in plan.buckets)
    return shard_map(local, plan.mesh, (PartitionSpec(), data_specs), out_specs)(x, data)


def jacobian_factor(plan: Plan, data: tuple[dict[str, Any], ...], x: jax.Array) -> jax.Array:
    """``R`` with ``R^T R = J^T J`` for the Jacobian ``J`` of all weighted residuals at ``x``.

    ``J`` itself is never formed across devices (nor ``J^T J``, whose condition number is the
    square of ``J``'s): each device reduces its experiments' Jacobian rows to an ``(n, n)``
    triangular factor by Householder QR (experiments of a step-counting model one at a time),
    the factors are gathered along ``data`` and one more QR of the stack gives ``R`` (TSQR).
    ``R`` has ``J``'s singular values to rounding, replicated on every device.
    """
    n = x.shape[0]
    log = jnp.asarray(plan.log, dtype=bool)

    def local(x, data):
        r = jnp.zeros((n, n), x.dtype)
        for bucket, d in zip(plan.buckets, data):
            fn = partial(_jacobian, bucket, log, n, x)
            if bucket.sequential:
                def fold(r, de, fn=fn):
                    return _r_of(jnp.concatenate([r, fn(de)])), None

                r, _ = jax.lax.scan(fold, r, d)
            else:
                r = _r_of(jnp.concatenate([r, jax.vmap(fn)(d).reshape(-1, n)]))
        return _r_of(jax.lax.all_gather(r, DATA).reshape(-1, n))

    data_specs = jax.tree.map(lambda _: PartitionSpec(DATA), data)
    return shard_map(local, plan.mesh, (PartitionSpec(), data_specs), PartitionSpec())(x, data)
