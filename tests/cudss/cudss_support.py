"""What the cuDSS tests share: test matrices, and the build of the stand-in libcudss."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from solvers.linear import Pattern

HERE = Path(__file__).resolve().parent


def compile_fake(out: Path, *defines: str) -> Path:
    """Build fake_cudss.c into ``out`` (a shared library) with gcc."""
    cmd = ["gcc", "-O2", "-fPIC", "-shared", *defines, str(HERE / "fake_cudss.c"), "-o", str(out),
           "-lm"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


def random_system(n: int, seed: int = 0, density: float = 0.1
                  ) -> tuple[Pattern, np.ndarray, sp.csc_array]:
    """A well-conditioned, non-symmetric sparse matrix: its pattern, values (pattern order), and
    the scipy matrix."""
    a = sp.random(n, n, density=density, random_state=seed) + 4.0 * sp.eye(n)
    pattern = Pattern.from_scipy(a)
    a = sp.csc_array(a)
    values = np.asarray(a[pattern.rows, pattern.cols]).ravel()
    return pattern, values, a


def poisson3d(m: int) -> sp.csc_array:
    """The 7-point Laplacian on an ``m^3`` grid (Dirichlet), ``m^3`` unknowns."""
    one = sp.diags([-np.ones(m - 1), 2 * np.ones(m), -np.ones(m - 1)], [-1, 0, 1])
    eye = sp.eye(m)
    lap = (sp.kron(sp.kron(one, eye), eye) + sp.kron(sp.kron(eye, one), eye)
           + sp.kron(sp.kron(eye, eye), one))
    return sp.csc_array(lap)
