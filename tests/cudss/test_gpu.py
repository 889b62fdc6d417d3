"""cuDSS on a real GPU (run by scripts/gpu-check.sh; skipped, or failed in CI, elsewhere).

Solutions agree with a CPU sparse LU (KLU in a CPU-only child process when klujax is installed,
else scipy's SuperLU), a refactor with new values equals a fresh factor, a vmapped batch is one
uniform batch, and the DAE stepper gives KLU's answer on the particle model.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest
import scipy.sparse.linalg as spla
from cudss_support import poisson3d, random_system
from testkit import child_env, require

from solvers.linear import CuDSS, Pattern, cudss_available, linear_solver

jax.config.update("jax_enable_x64", True)


@pytest.fixture(scope="module", autouse=True)
def gpu():
    # No GPU is an expected absence on CPU machines (CI included): skipped, except under
    # scripts/gpu-check.sh, which sets DIFFSOUP_GPU_CHECK=1 and must not skip.
    if jax.default_backend() != "gpu":
        if os.environ.get("DIFFSOUP_GPU_CHECK") == "1":
            pytest.fail(f"DIFFSOUP_GPU_CHECK=1 but JAX's default backend is "
                        f"{jax.default_backend()!r}")
        pytest.skip(f"no GPU: JAX's default backend is {jax.default_backend()!r}")
    require(cudss_available(), "cuDSS is not available (extension built? libcudss found?)")


def klu_reference(matrix, b) -> np.ndarray:
    """x = A^-1 b by KLU in a child process on the CPU platform, or by SuperLU without klujax."""
    try:
        import klujax_cpp  # noqa: F401
    except ImportError:
        return spla.spsolve(matrix.tocsc(), b)
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        np.savez(f"{tmp}/in.npz", data=matrix.data, indices=matrix.indices,
                 indptr=matrix.indptr, n=matrix.shape[0], b=b)
        script = textwrap.dedent(f"""
            import jax, numpy as np, scipy.sparse as sp
            jax.config.update("jax_enable_x64", True)
            from solvers.linear import KLU, Pattern
            z = np.load("{tmp}/in.npz")
            a = sp.csc_array((z["data"], z["indices"], z["indptr"]), shape=(int(z["n"]),) * 2)
            p = Pattern.from_scipy(a)
            k = KLU(); s = k.analyse(p)
            num = k.factor(s, np.asarray(a[p.rows, p.cols]).ravel())
            np.save("{tmp}/x.npy", np.asarray(k.solve(s, num, z["b"])))
        """)
        env = child_env()
        env["JAX_PLATFORMS"] = "cpu"
        subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=240)
        return np.load(f"{tmp}/x.npy")


def values_of(pattern: Pattern, matrix) -> np.ndarray:
    return np.asarray(matrix.tocsc()[pattern.rows, pattern.cols]).ravel()


def test_auto_picks_cudss():
    assert linear_solver("auto").name == "cudss"


@pytest.mark.parametrize("case", ["random", "poisson"])
def test_solution_agrees_with_klu(case):
    if case == "random":
        pattern, values, matrix = random_system(2000, seed=11, density=0.003)
    else:
        matrix = poisson3d(20)
        pattern = Pattern.from_scipy(matrix)
        values = values_of(pattern, matrix)
    b = np.sin(np.arange(pattern.n))
    backend = CuDSS()
    sym = backend.analyse(pattern)
    num = backend.factor(sym, values)
    x = np.asarray(backend.solve(sym, num, b))
    backend.free(sym, num)
    ref = klu_reference(matrix, b)
    np.testing.assert_allclose(x, ref, rtol=1e-9, atol=1e-11 * np.abs(ref).max())


def test_refactor_with_new_values_equals_fresh_factor():
    pattern, values, _ = random_system(3000, seed=12, density=0.002)
    backend = CuDSS()
    sym = backend.analyse(pattern)
    b = np.cos(np.arange(pattern.n))
    new = values * np.linspace(0.5, 2.0, values.size)
    num = backend.refactor(sym, backend.factor(sym, values), new)
    fresh = backend.factor(sym, new)
    x_re, x_fresh = (np.asarray(backend.solve(sym, n, b)) for n in (num, fresh))
    np.testing.assert_allclose(pattern.to_scipy(new) @ x_re, b, atol=1e-10)
    np.testing.assert_allclose(x_re, x_fresh, rtol=1e-12, atol=1e-13)
    backend.free(sym, num)
    backend.free(sym, fresh)


def test_uniform_batch_under_vmap():
    pattern, values, matrix = random_system(1500, seed=13, density=0.004)
    backend = CuDSS()
    sym = backend.analyse(pattern)
    scales = np.array([1.0, 0.5, 3.0, 7.0])
    bs = np.random.default_rng(1).standard_normal((4, pattern.n))

    @jax.jit
    def run(vs, bs):
        num = jax.vmap(lambda v: backend.factor(sym, v))(vs)
        num = jax.vmap(lambda n, v: backend.refactor(sym, n, v))(num, 2.0 * vs)
        return backend.release(sym, num, jax.vmap(lambda n, b: backend.solve(sym, n, b))(num, bs))

    xs = np.asarray(run(values[None, :] * scales[:, None], bs))
    for s, x, b in zip(scales, xs, bs):
        np.testing.assert_allclose(2.0 * s * (matrix @ x), b, atol=1e-10)


def test_pdesolve_particle_model():
    from solvers import dae

    spec = dae.ParticleSpec(cells=2000)
    args = {"D": 0.5, "k": 0.2, "c_b": 1.0}
    ts = np.linspace(0.0, 1.0, 5)
    sol = dae.pdesolve(spec.build(), dae.JIDA(linear="cudss"), (0.0, 1.0), spec.initial_state(),
                       saveat=dae.SaveAt(ts=ts), args=args)
    ref = dae.pdesolve(spec.build(), dae.JIDA(linear="dense"), (0.0, 1.0),
                       spec.initial_state(), saveat=dae.SaveAt(ts=ts), args=args)
    assert sol.success, sol.summary()
    np.testing.assert_allclose(sol.ys, ref.ys, rtol=1e-7, atol=1e-10)
