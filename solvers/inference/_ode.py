"""A small explicit ODE model: adaptive Dormand-Prince 5(4) with dense output, in JAX.

Stands in for `pdesolve` (the DAE stepper) in fits until that lands, and serves non-stiff models
for good. It is differentiable in forward mode (the fit's Jacobians and Hessians are forward-mode),
with the step-size controller held out of the derivative, so a Jacobian is the exact derivative of
the discrete solution on the steps taken. It counts its steps, which `Layout(balance_steps=...)`
uses to spread experiments between devices.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["ODEModel"]

_C = np.array([0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0])
_A = (
    (),
    (1 / 5,),
    (3 / 40, 9 / 40),
    (44 / 45, -56 / 15, 32 / 9),
    (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
    (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
)
_B = np.array([35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0])
_E = np.array([-71 / 57600, 0.0, 71 / 16695, -71 / 1920, 17253 / 339200, -22 / 525, 1 / 40])
# Dense output: y(t + s h) = y + h K^T (P [s, s^2, s^3, s^4]) (Dormand & Prince; as in scipy).
_P = np.array([
    [1.0, -8048581381 / 2820520608, 8663915743 / 2820520608, -12715105075 / 11282082432],
    [0.0, 0.0, 0.0, 0.0],
    [0.0, 131558114200 / 32700410799, -68118460800 / 10900136933, 87487479700 / 32700410799],
    [0.0, -1754552775 / 470086768, 14199869525 / 1410260304, -10690763975 / 1880347072],
    [0.0, 127303824393 / 49829197408, -318862633887 / 49829197408,
     701980252875 / 199316789632],
    [0.0, -282668133 / 205662961, 2019193451 / 616988883, -1453857185 / 822651844],
    [0.0, 40617522 / 29380423, -110615467 / 29380423, 69997945 / 29380423],
])


@dataclass(frozen=True)
class ODEModel:
    """A model ``y' = rhs(t, y, params, conditions)`` observed at the measurement times.

    Attributes:
        rhs: ``rhs(t, y, params, conditions) -> dy/dt`` (``y`` a 1-D array).
        initial: ``initial(params, conditions) -> y(t0)``.
        observe: ``observe(y, params, conditions)`` maps the state at one time to the outputs (a
            scalar, a 1-D array of observables, or a mapping of them); default: the state itself.
        t0: the initial time; measurement times must be ``>= t0``.
        rtol, atol: error tolerances of the adaptive steps.
        max_steps: the most steps one solve may take; a solve that needs more returns NaN
            predictions, which the fit treats as a failed trial point.

    An instance is a model (``model(params, conditions, times)``); ``model.steps(...)`` returns the
    number of steps the same solve takes.
    """

    rhs: Callable[..., Any]
    initial: Callable[..., Any]
    observe: Callable[..., Any] | None = None
    t0: float = 0.0
    rtol: float = 1e-8
    atol: float = 1e-10
    max_steps: int = 10_000

    def __call__(self, params: Mapping[str, Any], conditions: Mapping[str, Any],
                 times: jax.Array) -> Any:
        states, _ = self._solve(params, conditions, times)
        observe = self.observe
        if observe is None:
            return states
        return jax.vmap(lambda y: observe(y, params, conditions))(states)

    def steps(self, params: Mapping[str, Any], conditions: Mapping[str, Any],
              times: jax.Array) -> jax.Array:
        """The number of steps (accepted and rejected) the solve up to ``max(times)`` takes."""
        return self._solve(params, conditions, times)[1]

    def _solve(self, params: Mapping[str, Any], conditions: Mapping[str, Any],
               times: jax.Array) -> tuple[jax.Array, jax.Array]:
        times = jnp.asarray(times)
        dtype = jnp.result_type(times.dtype, float)
        y0 = jnp.atleast_1d(jnp.asarray(self.initial(params, conditions), dtype=dtype))
        t0 = jnp.asarray(self.t0, dtype)
        t_end = jnp.max(times)

        def f(t, y):
            return jnp.asarray(self.rhs(t, y, params, conditions), dtype=dtype).reshape(y.shape)

        def scale(a, b):
            return self.atol + self.rtol * jnp.maximum(jnp.abs(a), jnp.abs(b))

        def rms(v):
            return jnp.sqrt(jnp.mean(v * v))

        f0 = f(t0, y0)
        # Initial step (Hairer, Norsett & Wanner II.4), held out of derivatives.
        sy0, sf0 = jax.lax.stop_gradient(y0), jax.lax.stop_gradient(f0)
        sc = scale(sy0, sy0)
        d0, d1 = rms(sy0 / sc), rms(sf0 / sc)
        h0 = jnp.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / jnp.maximum(d1, 1e-300))
        f1 = jax.lax.stop_gradient(f(t0 + h0, sy0 + h0 * sf0))
        d2 = rms((f1 - sf0) / sc) / h0
        h1 = jnp.where(jnp.maximum(d1, d2) <= 1e-15, jnp.maximum(1e-6, h0 * 1e-3),
                       (0.01 / jnp.maximum(jnp.maximum(d1, d2), 1e-300)) ** 0.2)
        span = jnp.maximum(t_end - t0, 1e-300)
        h_init = jnp.minimum(jnp.minimum(100 * h0, h1), span)

        out0 = jnp.where((times <= t0)[:, None], y0[None, :], jnp.nan)
        p = jnp.asarray(_P, dtype)
        powers = jnp.arange(1, 5, dtype=dtype)

        def cond(carry):
            t, _, _, _, _, n = carry
            return (t < t_end) & (n < self.max_steps)

        def body(carry):
            t, y, k0, h, out, n = carry
            last = h >= t_end - t
            h = jnp.where(last, t_end - t, h)
            ks = [k0]
            for i in range(1, 6):
                incr = sum(a * kj for a, kj in zip(_A[i], ks))
                ks.append(f(t + _C[i] * h, y + h * incr))
            y_new = y + h * sum(b * kj for b, kj in zip(_B[:6], ks))
            k_new = f(t + h, y_new)
            ks.append(k_new)
            kmat = jnp.stack(ks)  # (7, n)
            err = h * jnp.tensordot(jnp.asarray(_E, dtype), kmat, axes=1)
            err_norm = jax.lax.stop_gradient(rms(err / scale(y, y_new)))
            accept = err_norm <= 1.0
            t_new = jnp.where(last, t_end, t + h)
            theta = jnp.clip((times - t) / h, 0.0, 1.0)
            q = kmat.T @ p  # (n, 4)
            dense = y[None, :] + h * (theta[:, None] ** powers[None, :]) @ q.T
            fill = accept & (times > t) & (times <= t_new)
            out = jnp.where(fill[:, None], dense, out)
            factor = jnp.clip(0.9 * jnp.maximum(err_norm, 1e-10) ** -0.2, 0.2, 10.0)
            factor = jnp.where(accept, factor, jnp.minimum(factor, 1.0))
            h_next = jax.lax.stop_gradient(h * factor)
            return (jnp.where(accept, t_new, t), jnp.where(accept, y_new, y),
                    jnp.where(accept, k_new, k0), h_next, out, n + 1)

        carry = (t0, y0, f0, h_init, out0, jnp.asarray(0, jnp.int32))
        _, _, _, _, out, n = jax.lax.while_loop(cond, body, carry)
        return out, n
