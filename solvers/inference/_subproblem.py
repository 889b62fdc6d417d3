"""Steps from a quadratic model, through one eigendecomposition of the scaled curvature.

With ``H = V diag(mu) V^T`` (scaled, free variables only) and ``a = V^T g``, every step the methods
need is ``q(lam) = -V (a / (mu + lam))``: the Newton step (``lam = 0``), the Levenberg-Marquardt
step (given ``lam``) and the trust-region step (``lam`` solving ``|q(lam)| = radius``, found by
bisection, with the "hard case" of an indefinite Hessian handled by moving along the eigenvector of
the smallest eigenvalue). The number of parameters is small, so this costs nothing next to one
model evaluation.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["Eigen", "damped_step", "newton_step", "scaled_eigen", "trust_region_step"]


class Eigen(NamedTuple):
    mu: jax.Array   # eigenvalues, ascending
    v: jax.Array    # eigenvectors (columns)
    a: jax.Array    # V^T g (scaled gradient in the eigenbasis)
    tiny: jax.Array  # eigenvalues below this count as zero


def scaled_eigen(h: jax.Array, g: jax.Array, d: jax.Array, free: jax.Array) -> Eigen:
    """Eigendecomposition of ``D^-1 H D^-1`` on the free variables (fixed ones: identity)."""
    hs = h / (d[:, None] * d[None, :])
    both = free[:, None] & free[None, :]
    hs = jnp.where(both, hs, 0.0) + jnp.diag(jnp.where(free, 0.0, 1.0))
    gs = jnp.where(free, g / d, 0.0)
    mu, v = jnp.linalg.eigh(0.5 * (hs + hs.T))
    tiny = jnp.finfo(h.dtype).eps * len(g) * jnp.maximum(jnp.max(jnp.abs(mu)), 1e-300)
    return Eigen(mu, v, v.T @ gs, tiny)


def _pinv_components(e: Eigen) -> jax.Array:
    """``a / mu`` with the (near-)zero eigenvalues left out."""
    keep = jnp.abs(e.mu) > e.tiny
    return jnp.where(keep, e.a / jnp.where(keep, e.mu, 1.0), 0.0)


def _components(e: Eigen, lam: jax.Array) -> jax.Array:
    """``a / (mu + lam)`` for ``lam >= -mu[0]`` (a zero denominator gives a huge component)."""
    return e.a / jnp.maximum(e.mu + lam, jnp.finfo(e.mu.dtype).tiny)


def newton_step(e: Eigen) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The scaled Newton step, its predicted decrease, and whether the curvature is definite."""
    definite = e.mu[0] > 1e3 * e.tiny
    c = _pinv_components(e)
    decrease = 0.5 * jnp.sum(e.a * c)
    return -(e.v @ c), decrease, definite


def damped_step(e: Eigen, lam: jax.Array) -> jax.Array:
    """The scaled Levenberg-Marquardt step ``-(H + lam I)^-1 g`` (``H`` shifted if indefinite)."""
    shift = jnp.maximum(-e.mu[0], 0.0) + e.tiny
    return -(e.v @ _components(e, jnp.maximum(lam, 0.0) + shift))


def trust_region_step(e: Eigen, radius: jax.Array, iterations: int = 100) -> jax.Array:
    """The scaled step minimizing the quadratic model within ``|q| <= radius``."""
    zero = jnp.zeros((), e.mu.dtype)
    lam_lo = jnp.maximum(-e.mu[0], 0.0)
    norm_a = jnp.linalg.norm(e.a)

    def norm(lam):
        return jnp.linalg.norm(_components(e, lam))

    definite = e.mu[0] > 1e3 * e.tiny
    interior = definite & (norm(zero) <= radius)

    def bisect(_, bounds):
        lo, hi = bounds
        mid = 0.5 * (lo + hi)
        outside = norm(mid) > radius
        return jnp.where(outside, mid, lo), jnp.where(outside, hi, mid)

    hi0 = lam_lo + norm_a / radius + e.tiny
    _, lam = jax.lax.fori_loop(0, iterations, bisect, (lam_lo, hi0))
    lam = jnp.where(interior, zero, lam)
    q = -(e.v @ _components(e, lam))
    # Hard case: negative curvature with no gradient along its eigenvectors, so |q(lam)| stays
    # below the radius as lam -> -mu[0]; step to the boundary along the lowest eigenvector.
    null = jnp.abs(e.mu - e.mu[0]) <= 1e3 * e.tiny
    flat = jnp.all(jnp.where(null, jnp.abs(e.a), 0.0) <= 1e-8 * norm_a)
    c_lim = jnp.where(null, 0.0, e.a / jnp.where(null, 1.0, e.mu + lam_lo))
    short = jnp.linalg.norm(c_lim)
    hard = (e.mu[0] < -1e3 * e.tiny) & flat & (short < radius)
    tau = jnp.sqrt(jnp.maximum(radius**2 - short**2, 0.0))
    return jnp.where(hard, -(e.v @ c_lim) + tau * e.v[:, 0], q)
