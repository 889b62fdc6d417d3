"""The cuDSS backend's whole FFI path on the CPU platform: our compiled handlers, registry and
JAX calls, over a stand-in libcudss (dense host LU) — results, batches, validation, lifetimes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import klujax  # noqa: F401  a hard dependency (KLU is the reference here): missing is an error
import numpy as np
import pytest
from cudss_support import random_system

from solvers.linear import KLU, CuDSS, LinearSolver, linear_solver
from solvers.linear._cudss_library import PREFIX, extension


@pytest.fixture
def counts(fake_library):
    return lambda: extension().counts()


def test_factor_solve_refactor_match_scipy(fake_library, counts):
    pattern, values, a = random_system(40)
    backend = CuDSS()
    sym = backend.analyse(pattern)
    b = np.linspace(-1.0, 1.0, pattern.n)
    before = counts()
    num = backend.factor(sym, values)
    assert counts()["live"] == before["live"] + 1
    np.testing.assert_allclose(a @ np.asarray(backend.solve(sym, num, b)), b, atol=1e-12)
    # New values, same pattern: in place, the same handle, the new matrix's solution.
    new_values = values * np.linspace(1.0, 3.0, values.size)
    num2 = backend.refactor(sym, num, new_values)
    assert int(num2[0]) == int(num[0])
    x = np.asarray(backend.solve(sym, num2, b))
    np.testing.assert_allclose(pattern.to_scipy(new_values) @ x, b, atol=1e-12)
    fresh = backend.factor(sym, new_values)
    np.testing.assert_array_equal(np.asarray(backend.solve(sym, fresh, b)), x)
    backend.free(sym, fresh)
    backend.free(sym, num2)
    assert counts()["live"] == before["live"]


def test_agrees_with_klu(fake_library):
    pattern, values, _ = random_system(60, seed=3)
    b = np.cos(np.arange(pattern.n))
    out = []
    backends: tuple[LinearSolver, ...] = (CuDSS(), KLU())
    for backend in backends:
        sym = backend.analyse(pattern)
        num = backend.factor(sym, values)
        out.append(np.asarray(backend.solve(sym, num, b)))
        backend.free(sym, num)
    np.testing.assert_allclose(out[0], out[1], rtol=1e-10, atol=1e-12)


def test_vmap_is_one_uniform_batch(fake_library, counts):
    pattern, values, a = random_system(30, seed=1)
    backend = CuDSS()
    sym = backend.analyse(pattern)
    scales = np.array([1.0, 2.0, 5.0])
    rhs = np.stack([np.arange(pattern.n) + i for i in range(3)]).astype(float)
    factorizations = fake_library.fake_cudss_factorizations
    start = factorizations()

    @jax.jit
    def run(vs, bs):
        num = jax.vmap(lambda v: backend.factor(sym, v))(vs)
        num = jax.vmap(lambda n, v: backend.refactor(sym, n, v))(num, 2.0 * vs)
        x = jax.vmap(lambda n, b: backend.solve(sym, n, b))(num, bs)
        return backend.release(sym, num, x)

    live = counts()["live"]
    xs = np.asarray(run(values[None, :] * scales[:, None], rhs))
    assert factorizations() - start == 2  # one factor and one refactor call for all three
    for s, x, b in zip(scales, xs, rhs):
        np.testing.assert_allclose(2.0 * s * (a @ x), b, atol=1e-11)
    assert counts()["live"] == live


def test_vmap_over_right_hand_sides_is_one_solve(fake_library):
    pattern, values, a = random_system(25, seed=2)
    backend = CuDSS()
    sym = backend.analyse(pattern)
    num = backend.factor(sym, values)
    solves = fake_library.fake_cudss_solves
    start = solves()
    bs = np.random.default_rng(0).standard_normal((4, pattern.n))
    xs = np.asarray(jax.vmap(lambda b: backend.solve(sym, num, b))(bs))
    assert solves() - start == 1
    np.testing.assert_allclose(xs @ a.T.toarray(), bs, atol=1e-12)
    backend.free(sym, num)


def test_handle_lifetime_and_double_free(fake_library, counts):
    pattern, values, _ = random_system(20, seed=4)
    backend = CuDSS()
    sym = backend.analyse(pattern)
    start = counts()
    num = jax.jit(lambda v: backend.factor(sym, v))(values)  # made inside jit, freed outside
    assert counts()["live"] == start["live"] + 1
    backend.free(sym, num)
    assert counts()["live"] == start["live"]
    with pytest.raises(Exception, match=r"unknown cuDSS factorization handle .*freed already"):
        backend.free(sym, num)
    with pytest.raises(Exception, match="unknown cuDSS factorization handle"):
        backend.solve(sym, num, np.ones(pattern.n))
    backend.free(sym, backend.empty(sym, jnp.float64))  # the empty state: nothing to free
    assert counts()["live"] == start["live"]


def test_analysis_runs_once_per_pattern(fake_library):
    """Freed factorizations return to the pattern's pool; the next factor skips the analysis."""
    pattern, values, _ = random_system(35, seed=5)
    backend = CuDSS()
    sym = backend.analyse(pattern)
    analyses = fake_library.fake_cudss_analyses
    start = analyses()
    for _ in range(4):
        backend.free(sym, backend.factor(sym, values))
    assert analyses() - start == 1


def test_validation(fake_library):
    pattern, values, _ = random_system(15, seed=6)
    other, other_values, _ = random_system(15, seed=7, density=0.3)
    backend = CuDSS()
    sym, sym_other = backend.analyse(pattern), backend.analyse(other)
    with pytest.raises(ValueError, match=r"values have shape \(3,\) but Pattern\(n=15"):
        backend.factor(sym, np.ones(3))
    with pytest.raises(ValueError, match=r"right-hand side has shape \(14,\)"):
        backend.solve(sym, backend.empty(sym, jnp.float64), np.ones(14))
    num = backend.factor(sym, values)
    with pytest.raises(Exception, match=r"belongs to analysis .*the pattern changed"):
        backend.refactor(sym_other, num, other_values)
    call = jax.ffi.ffi_call(PREFIX + "factor", jax.ShapeDtypeStruct((1,), jnp.uint64),
                            has_side_effect=True)
    with pytest.raises(Exception, match="do not match the analysed pattern"):
        call(sym_other.rowptr, sym_other.colind[:-1], jnp.ones(other.nnz - 1),
             symbolic=np.uint64(sym.id))
    with pytest.raises(Exception, match=r"(?i)f64|dtype|type"):
        call(sym.rowptr, sym.colind, jnp.ones(pattern.nnz, jnp.float32),
             symbolic=np.uint64(sym.id))
    with pytest.raises(Exception, match="unknown cuDSS analysis"):
        call(sym.rowptr, sym.colind, jnp.ones(pattern.nnz), symbolic=np.uint64(2**40))
    backend.free(sym, num)


def test_auto_never_picks_cudss_on_cpu(fake_library):
    assert jax.default_backend() == "cpu"
    assert linear_solver("auto").name != "cudss"


def test_pdesolve_particle_model_matches_klu(fake_library, counts):
    from solvers import dae

    spec = dae.ParticleSpec(cells=30)
    problem = spec.build()
    args = {"D": 0.5, "k": 0.2, "c_b": 1.0}
    ts = np.linspace(0.0, 1.0, 6)
    live = counts()["live"]
    sols = [dae.pdesolve(problem, dae.JIDA(linear=linear), (0.0, 1.0), spec.initial_state(),
                         saveat=dae.SaveAt(ts=ts), args=args) for linear in ("cudss", "klu")]
    assert all(sol.success for sol in sols)
    # Two factorizations round differently, and a rounding can turn one step decision (here
    # 254 steps against KLU's 270 with XLA's legacy CPU emitters, the same count with the
    # default ones): the solutions agree to the integrator's tolerance (rtol 1e-6), not to
    # rounding.
    np.testing.assert_allclose(sols[0].ys, sols[1].ys, rtol=1e-5, atol=1e-8)
    assert counts()["live"] == live  # every factorization released
