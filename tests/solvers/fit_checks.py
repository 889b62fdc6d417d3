"""Comparisons of fits for the solver tests."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh

import solvers as ds


def mesh(shape: tuple[int, ...], axes: tuple[str, ...] = ("data",)) -> Mesh:
    """A mesh over the first ``prod(shape)`` of the 8 emulated devices."""
    n = int(np.prod(shape))
    return Mesh(np.array(jax.devices()[:n], dtype=object).reshape(shape), axes)


def assert_same_fit(res, ref, rtol: float = 1e-10) -> None:
    """Values, cost and covariance agree to ``rtol`` (covariance relative to sqrt(C_ii C_jj))."""
    assert res.names == ref.names
    assert res.converged and ref.converged, (res, ref)
    for name in ref.names:
        assert abs(res.values[name] - ref.values[name]) <= rtol * abs(ref.values[name]), name
    assert abs(res.cost - ref.cost) <= rtol * abs(ref.cost)
    scale = np.sqrt(np.outer(np.diag(ref.covariance), np.diag(ref.covariance)))
    assert np.all(np.isfinite(ref.covariance))
    np.testing.assert_array_less(np.abs(res.covariance - ref.covariance), rtol * scale + 1e-300)


__all__ = ["assert_same_fit", "ds", "mesh"]
