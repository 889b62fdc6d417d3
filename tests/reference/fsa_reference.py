"""A tight reference for idasRoberts_FSA_dns (test_idas_sensitivity_error_control.py, here):
Robertson as the ODE in (y1, y2), y3 = 1 - y1 - y2, with its forward sensitivity system for
the three parameters, solved by scipy's Radau at rtol 1e-11 (the sensitivities scaled by the
parameters, p_e dy/dp_e, so that they share the state's absolute tolerances 1e-22 and 1e-26).
It takes about 90 s here, so its values are stored in data/idas/fsa_reference.txt; rerun this
file to write them again (`quadrature`, G and dG/dp of the example's quadrature, is quick and
computed where it is used):

    python tests/reference/fsa_reference.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "idas" / "fsa_reference.txt"


def compute(rtol: float = 1e-11) -> tuple[np.ndarray, np.ndarray]:
    """``(y (12, 3), dy/dp (12, 3 parameters, 3 unknowns))`` at the example's output times."""
    import jax
    import jax.numpy as jnp
    from scipy.integrate import solve_ivp

    sys.path.insert(0, str(HERE))
    from ida_examples import FSA_P, FSA_TS

    jax.config.update("jax_enable_x64", True)
    p = jnp.asarray(FSA_P)

    def f(z, p):
        y1, y2 = z[0], z[1]
        y3 = 1.0 - y1 - y2
        return jnp.stack([-p[0] * y1 + p[1] * y2 * y3,
                          p[0] * y1 - p[1] * y2 * y3 - p[2] * y2 * y2])

    def augmented(t, w):
        z, s = w[:2], w[2:].reshape(3, 2)
        ds = jax.vmap(lambda se, e: jax.jvp(f, (z, p), (se, e * p))[1])(s, jnp.eye(3))
        return jnp.concatenate([f(z, p), ds.ravel()])

    fun = jax.jit(augmented)
    jac = jax.jit(jax.jacfwd(augmented, argnums=1))
    out = solve_ivp(lambda t, w: np.asarray(fun(t, w)), (0.0, 4e10),
                    np.r_[1.0, 0.0, np.zeros(6)], method="Radau", rtol=rtol,
                    atol=np.tile([1e-22, 1e-26], 4), t_eval=FSA_TS,
                    jac=lambda t, w: np.asarray(jac(t, w)))
    assert out.success, out.message
    w = out.y.T
    y = np.stack([w[:, 0], w[:, 1], 1.0 - w[:, 0] - w[:, 1]], axis=1)
    s = w[:, 2:].reshape(-1, 3, 2) / np.asarray(FSA_P)[None, :, None]
    s = np.concatenate([s, -(s[..., :1] + s[..., 1:])], axis=2)
    return y, s


def quadrature(rtol: float = 1e-9) -> tuple[float, np.ndarray]:
    """``(G, dG/dp (3,))`` for the example's G = int_0^4e10 y3 dt, from the same reduced ODE
    and sensitivity system with G and its sensitivities as four more unknowns (about 5 s;
    rtol 1e-9 and 1e-11 agree to 12 digits)."""
    import jax
    import jax.numpy as jnp
    from scipy.integrate import solve_ivp

    sys.path.insert(0, str(HERE))
    from ida_examples import FSA_P

    jax.config.update("jax_enable_x64", True)
    p = jnp.asarray(FSA_P)

    def f(z, p):
        y1, y2 = z[0], z[1]
        y3 = 1.0 - y1 - y2
        return jnp.stack([-p[0] * y1 + p[1] * y2 * y3,
                          p[0] * y1 - p[1] * y2 * y3 - p[2] * y2 * y2])

    def augmented(t, w):
        z, s = w[:2], w[2:8].reshape(3, 2)
        ds = jax.vmap(lambda se, e: jax.jvp(f, (z, p), (se, e * p))[1])(s, jnp.eye(3))
        g = jnp.stack([1.0 - z[0] - z[1]])
        return jnp.concatenate([f(z, p), ds.ravel(), g, -(s[:, 0] + s[:, 1])])

    fun = jax.jit(augmented)
    jac = jax.jit(jax.jacfwd(augmented, argnums=1))
    out = solve_ivp(lambda t, w: np.asarray(fun(t, w)), (0.0, 4e10), np.r_[1.0, np.zeros(11)],
                    method="Radau", rtol=rtol, atol=np.r_[np.tile([1e-22, 1e-26], 4), [1e-6] * 4],
                    jac=lambda t, w: np.asarray(jac(t, w)))
    assert out.success, out.message
    w = out.y[:, -1]
    return float(w[8]), w[9:] / np.asarray(FSA_P)


def load() -> tuple[np.ndarray, np.ndarray]:
    """The stored reference: ``(y (12, 3), dy/dp (12, 3, 3))``."""
    rows = np.loadtxt(DATA)
    return rows[:, :3], rows[:, 3:].reshape(-1, 3, 3)


if __name__ == "__main__":
    y, s = compute()
    header = ("idasRoberts_FSA_dns reference (tests/reference/fsa_reference.py): scipy Radau, "
              "rtol 1e-11, on the reduced ODE with its sensitivity system\n"
              "columns: y1 y2 y3, then dy/dp_e (y1 y2 y3) for e = 1, 2, 3; rows: t = 0.4 ... 4e10")
    np.savetxt(DATA, np.concatenate([y, s.reshape(len(y), 9)], axis=1), fmt="%.17e",
               header=header)
    print(f"wrote {DATA}")
