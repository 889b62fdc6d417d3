"""Linear-solver backends: the same answers as numpy, through jit, vmap and forward derivatives,
in every phase (analyse, factor, refactor, solve), with and without fresh pivots."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.linear import (
    FACTOR,
    KEEP,
    KLU,
    REFACTOR,
    Dense,
    LinearSolver,
    Pattern,
    klu_available,
    linear_solver,
)

BACKENDS = [Dense(), KLU()]


def random_system(n=40, density=0.1, seed=0):
    rng = np.random.default_rng(seed)
    a = sp.random(n, n, density=density, random_state=rng) + sp.eye(n) * 3.0
    pattern = Pattern.from_scipy(a)
    values = np.asarray(sp.csc_array(a)[pattern.rows, pattern.cols]).ravel()
    return pattern, values, a.toarray()


def test_klu_is_available_here():
    assert klu_available(), "the klujax wheel provides KLU on CPU: pip install klujax"


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_phases_match_numpy(backend: LinearSolver):
    pattern, values, dense = random_system()
    b = np.arange(pattern.n, dtype=float)
    symbolic = backend.analyse(pattern)

    @jax.jit
    def run(values, b):
        num = backend.update(symbolic, backend.empty(symbolic, values.dtype), values, FACTOR)
        x1 = backend.solve(symbolic, num, b)
        num = backend.update(symbolic, num, 2.0 * values, REFACTOR, after=x1)
        x2 = backend.solve(symbolic, num, b)
        num = backend.update(symbolic, num, 3.0 * values, KEEP, after=x2)
        x3 = backend.solve(symbolic, num, b)  # kept: still the 2 A factorization
        num = backend.update(symbolic, num, 4.0 * values, FACTOR, after=x3)
        x4 = backend.solve(symbolic, num, b)
        return backend.release(symbolic, num, (x1, x2, x3, x4))

    x1, x2, x3, x4 = run(values, b)
    ref = np.linalg.solve(dense, b)
    np.testing.assert_allclose(x1, ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(x2, ref / 2, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(x3, ref / 2, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(x4, ref / 4, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_vmap_over_matrices_modes_and_right_hand_sides(backend: LinearSolver):
    pattern, values, dense = random_system(seed=1)
    b = np.linspace(-1.0, 1.0, pattern.n)
    symbolic = backend.analyse(pattern)

    def run(scale, mode, b):
        v = scale * values
        num = backend.update(symbolic, backend.empty(symbolic, v.dtype), v, FACTOR)
        num = backend.update(symbolic, num, 2.0 * v, mode)  # per member: keep, refactor, factor
        many = jax.vmap(lambda c: backend.solve(symbolic, num, c * b))(jnp.arange(1.0, 4.0))
        return backend.release(symbolic, num, many)

    scales = jnp.array([1.0, 2.0, 5.0])
    modes = jnp.array([KEEP, REFACTOR, FACTOR])
    out = jax.jit(jax.vmap(run, (0, 0, None)))(scales, modes, b)
    ref = np.linalg.solve(dense, b)
    for i, (s, m) in enumerate(zip(np.asarray(scales), np.asarray(modes))):
        factor = s * (1.0 if m == KEEP else 2.0)
        for j, c in enumerate((1.0, 2.0, 3.0)):
            np.testing.assert_allclose(out[i, j], c * ref / factor, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_forward_derivatives_solve_against_the_same_factor(backend: LinearSolver):
    pattern, values, dense = random_system(n=12, density=0.3, seed=2)
    symbolic = backend.analyse(pattern)
    inverse = np.linalg.inv(dense)

    def x(b):
        num = backend.update(symbolic, backend.empty(symbolic, b.dtype), values, FACTOR)
        return backend.release(symbolic, num, backend.linear_solve(symbolic, num, b))

    b = np.arange(1.0, pattern.n + 1)
    np.testing.assert_allclose(jax.jit(jax.jacfwd(x))(b), inverse, rtol=1e-10, atol=1e-12)
    hess = jax.jit(jax.jacfwd(jax.jacfwd(lambda b: x(b) @ b)))(b)  # forward over forward
    np.testing.assert_allclose(hess, inverse + inverse.T, rtol=1e-10, atol=1e-12)


def test_klu_survives_nonfinite_values():
    pattern, values, _dense = random_system(seed=3)
    backend = KLU()
    symbolic = backend.analyse(pattern)
    bad = values.copy()
    bad[5] = np.nan

    @jax.jit
    def run(v):
        num = backend.update(symbolic, backend.empty(symbolic, v.dtype), v, FACTOR)
        return backend.release(symbolic, num, backend.solve(symbolic, num, jnp.ones(pattern.n)))

    # The identity replaces a non-finite matrix, so the caller sees a finite (wrong) answer and
    # its own convergence test fails; nothing crashes.
    np.testing.assert_allclose(run(bad), np.ones(pattern.n))


def test_pattern_is_sorted_unique_with_diagonal():
    p = Pattern.from_coo([2, 0, 2, 1], [0, 1, 0, 2], 3)
    assert p.nnz == 6  # (0,1), (1,2), (2,0) and the diagonal; the duplicate merged
    keys = p.cols.astype(int) * 3 + p.rows
    assert np.all(np.diff(keys) > 0)
    assert np.all(p.rows[p.diagonal_index] == p.cols[p.diagonal_index])
    with pytest.raises(ValueError, match=r"\(5, 0\).*outside the 3 x 3"):
        Pattern.from_coo([5], [0], 3)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 30), density=st.floats(0.0, 0.5), seed=st.integers(0, 2**16))
def test_coloring_separates_columns_that_share_a_row(n, density, seed):
    rng = np.random.default_rng(seed)
    mask = rng.random((n, n)) < density
    p = Pattern.from_dense(mask)
    n_colors, color = p.coloring()
    assert color.shape == (n,) and color.min() >= 0 and color.max() == n_colors - 1
    for c in range(n_colors):  # each row meets at most one column of each colour
        cols_c = np.isin(p.cols, np.flatnonzero(color == c))
        counts = np.bincount(p.rows[cols_c], minlength=n)
        assert counts.max(initial=0) <= 1


def test_tridiagonal_needs_three_colors():
    i = np.arange(100)
    p = Pattern.from_coo(np.r_[i[1:], i[:-1]], np.r_[i[:-1], i[1:]], 100)
    assert p.coloring()[0] == 3


def test_backend_names_and_errors():
    assert isinstance(linear_solver("auto"), KLU)  # a CPU with klujax and float64
    assert isinstance(linear_solver("dense"), Dense)
    with pytest.raises(ValueError, match=r"unknown linear solver 'superlu'.*'klu'"):
        linear_solver("superlu")
    # linear="cudss" without its extension or library: tests/cudss/test_loading.py (a process
    # here may have loaded the stand-in library of tests/cudss, which works on the CPU).
