"""A process's share of a study: which experiments it owns, its data, and what it serves.

Every process validates the whole study (models are only traced, no data is read) and keeps the
experiments it owns; only those have their `Measurement` values loaded. A worker answers process
0 with its experiments' least-squares terms compressed by a QR factorization: with ``J = Q R``
(its residuals' Jacobian in natural units) it sends ``R``, ``c = Q^T r`` and ``rho = |r - Q c|``,
so that ``J^T J = R^T R``, ``J^T r = R^T c`` and ``|r|^2 = |c|^2 + rho^2``: the size of the
reply is set by the parameters, not by the data. Newton methods also get ``S = sum_i r_i
hess(r_i)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..inference import _balance
from ..inference._lower import DATA, _bucket_arrays
from ..inference._problem import InferenceProblem
from ..inference._structure import (
    BucketPlan,
    FlatParameters,
    HostBucket,
    build_buckets,
    flat_parameters,
    parameter_index,
)

__all__ = ["Share", "assign", "share"]


def assign(problem: InferenceProblem, processes: int) -> list[list[str]]:
    """The experiment ids of each process: by ``work`` when every experiment gives one
    (longest first), else in order in equal contiguous blocks."""
    experiments = problem.experiments
    work = [e.work for e in experiments if e.work is not None]
    if len(work) == len(experiments) and len(experiments) > processes:
        groups = _balance.longest_first(work, processes)
    else:
        groups = _balance.contiguous(len(experiments), processes)
    return [[experiments[i].id for i in g] for g in groups]


@dataclass(frozen=True, eq=False)
class Share:
    """The experiments one process owns, placed on its first local device."""

    flat: FlatParameters
    plans: tuple[BucketPlan, ...]
    data: tuple[dict[str, Any], ...]
    n_residuals: int            # observations of the whole study
    mesh: Mesh


def share(problem: InferenceProblem, owned: Sequence[str]) -> Share:
    """Check the whole problem and place the data of the ``owned`` experiments."""
    flat = flat_parameters(problem)
    buckets = build_buckets(problem, flat)
    mesh = Mesh(np.array(jax.local_devices()[:1], dtype=object), (DATA,))
    sharding = NamedSharding(mesh, PartitionSpec(DATA))
    ids = set(owned)
    plans, data = [], []
    for b in buckets:
        keep = [i for i, e in enumerate(b.experiments) if e.id in ids]
        if not keep:
            continue
        mine = HostBucket(b.plan, [b.experiments[i] for i in keep], [b.times[i] for i in keep],
                          [b.obs[i] for i in keep], b.n_times, b.n_rows)
        index = parameter_index(mine, problem, flat)
        plans.append(b.plan)
        data.append(_bucket_arrays(mine, list(range(len(keep))), index, sharding))
    n_residuals = sum(len(o) for b in buckets for o in b.obs)
    return Share(flat, tuple(plans), tuple(data), n_residuals, mesh)


def _terms(plan: BucketPlan, n: int, second: bool, theta: jax.Array, d: dict[str, Any]):
    """One experiment's residuals, Jacobian (and ``sum r_i hess r_i``) in natural units."""
    idx = d["index"]

    def residuals(th):
        params = {name: th[i] for i, name in enumerate(plan.names)}
        pred = plan.flatten(plan.model(params, d["conditions"], d["times"]))[d["obs"]]
        w = d["weights"]
        r = jnp.where(w > 0, w * (pred - d["values"]), 0.0)
        return r, r

    th = theta[idx]
    jac, r = jax.jacfwd(residuals, has_aux=True)(th)
    full = jnp.zeros((r.shape[0], n), theta.dtype).at[:, idx].add(jac)
    if not second:
        return r, full, jnp.zeros((n, n), theta.dtype)
    fixed = jax.lax.stop_gradient(r)
    s = jax.jacfwd(lambda t: jax.jacfwd(residuals, has_aux=True)(t)[0].T @ fixed)(th)
    s = jnp.zeros((n, n), theta.dtype).at[idx[:, None], idx[None, :]].add(0.5 * (s + s.T))
    return r, full, s


@partial(jax.jit, static_argnums=(0, 1))
def _evaluate(plans: tuple[BucketPlan, ...], second: bool, data: tuple[dict[str, Any], ...],
              theta: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    n = theta.shape[0]
    rs, js, s_total = [], [], jnp.zeros((n, n), theta.dtype)
    for plan, d in zip(plans, data):
        fn = partial(_terms, plan, n, second, theta)
        r, j, s = jax.lax.map(fn, d) if plan.sequential else jax.vmap(fn)(d)
        rs.append(r.reshape(-1))
        js.append(j.reshape(-1, n))
        s_total = s_total + jnp.sum(s, axis=0)
    return jnp.concatenate(rs), jnp.concatenate(js), s_total


def compressed(mine: Share, theta: np.ndarray, second: bool
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(c, rho, R, S)`` of this share at natural parameters ``theta`` (see the module doc)."""
    n = theta.shape[0]
    if not mine.plans:
        zero = np.zeros(n, theta.dtype)
        return zero, np.zeros((), theta.dtype), np.zeros((n, n), theta.dtype), np.zeros((n, n))
    r, jac, s = (np.asarray(a) for a in _evaluate(mine.plans, second, mine.data,
                                                  jnp.asarray(theta)))
    q, upper = np.linalg.qr(jac, mode="reduced")
    c = q.T @ r
    rho = np.linalg.norm(r - q @ c)
    k = upper.shape[0]
    R = np.zeros((n, n), theta.dtype)
    R[:k] = upper
    cc = np.zeros(n, theta.dtype)
    cc[:k] = c
    return cc, np.asarray(rho, theta.dtype), R, s
