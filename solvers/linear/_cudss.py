"""The GPU sparse backend: NVIDIA cuDSS through XLA FFI handlers of our own.

The handlers (``solvers/linear/cudss/cudss_ffi.cc``, built by setup.py into ``_cudss_ext``) run
on XLA's CUDA stream and keep each factorization in a registry keyed by a uint64 handle, carried
in the numeric state as KLU's pointers are. ``analyse`` makes the pattern's CSR arrays and a
registry entry on the host; the cuDSS analysis (reordering, symbolic factorization) runs at the
first ``factor`` and is kept with the state, and a freed state returns to a small per-pattern pool
that the next ``factor`` reuses, so a stepper that alternates ``FACTOR`` and ``refactor`` analyses
once. ``libcudss`` is opened lazily (`_cudss_library`), so CPU installs never need it.

Under ``vmap``, ``factor`` of a batch of value sets makes one cuDSS uniform batch (one call),
which ``refactor`` and ``solve`` under the same ``vmap`` process in one call too; ``solve`` of
many right-hand sides with one factorization is one call with several columns.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from ._base import LinearSolver, require_x64
from ._cudss_library import PREFIX, comm_layer_path, extension
from ._pattern import Pattern

__all__ = ["CuDSS", "cudss_available"]

_lock = threading.Lock()
_symbolic_cache: dict[tuple[Any, ...], _CuDSSSymbolic] = {}


def cudss_available() -> bool:
    """Whether linear='cudss' can run on a GPU here: the extension is built, libcudss loads and
    JAX's default backend is a GPU."""
    if jax.default_backend() != "gpu":
        return False
    try:
        extension().load_library()
    except RuntimeError:
        return False
    return True


@dataclass(frozen=True, eq=False)
class _CuDSSSymbolic:
    """A pattern's CSR arrays (``order`` maps `Pattern` order to row order) and registry id."""

    pattern: Pattern
    id: int
    order: np.ndarray
    rowptr: np.ndarray
    colind: np.ndarray


def _csr(pattern: Pattern) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    order = np.lexsort((pattern.cols, pattern.rows)).astype(np.int32)
    counts = np.bincount(pattern.rows, minlength=pattern.n)
    rowptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return order, rowptr, pattern.cols[order].astype(np.int32)


def _communicator() -> int:
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise RuntimeError("DIFFSOUP_MGMN=1 runs cuDSS over MPI and needs mpi4py (pip install "
                           "mpi4py), started with mpirun") from exc
    return int(MPI._addressof(MPI.COMM_WORLD))


@dataclass(frozen=True)
class CuDSS(LinearSolver):
    """Sparse LU by NVIDIA cuDSS on GPUs (general matrices, pivoting within its supernodes).

    Attributes:
        devices: CUDA device ordinals to factor each matrix across (cuDSS multi-GPU mode), as
            `CuDSS.on_mesh` finds them on a ``model`` mesh axis; ``None`` uses the device the
            program runs on. With ``DIFFSOUP_MGMN=1`` and several processes the factorization
            spans them through cuDSS's communication layer (mpi4py's ``COMM_WORLD``).

    ``refactor`` keeps the analysis and reuses the previous factor's structure
    (``CUDSS_PHASE_REFACTORIZATION``); ``factor`` factors afresh. float64 only
    (``jax_enable_x64``). Non-finite entries are replaced by the identity so that a failed trial
    step is rejected by the stepper; a singular matrix stops the program with cuDSS's error. On
    the CPU platform the same handlers run with host pointers, for whatever library was loaded
    (``DIFFSOUP_CUDSS_LIBRARY``).
    """

    devices: tuple[int, ...] | None = None

    name: ClassVar[str] = "cudss"
    stateful: ClassVar[bool] = True

    @classmethod
    def on_mesh(cls, mesh: jax.sharding.Mesh | None) -> CuDSS:
        """The backend that factors across the ``model`` axis of ``mesh`` (this process's
        devices of the first model group; the solve runs on the first of them)."""
        if mesh is None or "model" not in mesh.axis_names or mesh.shape["model"] == 1:
            return cls()
        grid = np.moveaxis(np.asarray(mesh.devices), list(mesh.axis_names).index("model"), -1)
        group = grid.reshape(-1, grid.shape[-1])[0]
        local = [d for d in group if d.process_index == jax.process_index()]
        return cls(devices=tuple(int(d.local_hardware_id) for d in local))

    def analyse(self, pattern: Pattern) -> _CuDSSSymbolic:
        require_x64("cudss")
        ext = extension()
        library = ext.load_library()
        mgmn = os.environ.get("DIFFSOUP_MGMN") == "1" and jax.process_count() > 1
        key = (pattern.key, self.devices, mgmn)
        with _lock:
            cached = _symbolic_cache.get(key)
        if cached is not None:
            return cached
        devices = self.devices or ()
        comm_library = comm_layer_path(library).encode() if mgmn else None
        comm = _communicator() if mgmn else 0
        order, rowptr, colind = _csr(pattern)
        ident = ext.lib.diffsoup_cudss_symbolic_new(
            pattern.n, pattern.nnz, len(devices), (ctypes.c_int * max(len(devices), 1))(*devices),
            comm_library, comm)
        symbolic = _CuDSSSymbolic(pattern, int(ident), order, rowptr, colind)
        weakref.finalize(symbolic, ext.lib.diffsoup_cudss_symbolic_free, ident)
        with _lock:
            return _symbolic_cache.setdefault(key, symbolic)

    def empty(self, symbolic: _CuDSSSymbolic, dtype: Any) -> jax.Array:
        return jnp.zeros((1,), jnp.uint64)

    def _values(self, symbolic: _CuDSSSymbolic, values: ArrayLike) -> jax.Array:
        values = jnp.asarray(values, jnp.float64)
        if values.shape != (symbolic.pattern.nnz,):
            raise ValueError(f"values have shape {values.shape} but {symbolic.pattern!r} has "
                             f"{symbolic.pattern.nnz} entries; give one value per pattern entry "
                             "(in Pattern order)")
        eye = jnp.zeros_like(values).at[symbolic.pattern.diagonal_index].set(1.0)
        return jnp.where(jnp.all(jnp.isfinite(values)), values, eye)[symbolic.order]

    def _call(self, target: str, out: jax.ShapeDtypeStruct) -> Any:
        return jax.ffi.ffi_call(PREFIX + target, out, has_side_effect=True,
                                vmap_method="broadcast_all")

    def factor(self, symbolic: _CuDSSSymbolic, values: ArrayLike) -> jax.Array:
        call = self._call("factor", jax.ShapeDtypeStruct((1,), jnp.uint64))
        return call(symbolic.rowptr, symbolic.colind, self._values(symbolic, values),
                    symbolic=np.uint64(symbolic.id))

    def refactor(self, symbolic: _CuDSSSymbolic, numeric: jax.Array,
                 values: ArrayLike) -> jax.Array:
        call = self._call("refactor", jax.ShapeDtypeStruct((1,), jnp.uint64))
        return call(symbolic.rowptr, symbolic.colind, self._values(symbolic, values),
                    jnp.asarray(numeric, jnp.uint64), symbolic=np.uint64(symbolic.id))

    def solve(self, symbolic: _CuDSSSymbolic, numeric: jax.Array, b: ArrayLike) -> jax.Array:
        b = jnp.asarray(b, jnp.float64)
        if b.shape != (symbolic.pattern.n,):
            raise ValueError(f"the right-hand side has shape {b.shape}; {symbolic.pattern!r} "
                             f"needs ({symbolic.pattern.n},) (vmap for several)")
        return self._call("solve", jax.ShapeDtypeStruct(b.shape, jnp.float64))(
            jnp.asarray(numeric, jnp.uint64), b)

    def free(self, symbolic: _CuDSSSymbolic, numeric: jax.Array) -> None:
        self._call("free", jax.ShapeDtypeStruct((), jnp.int32))(jnp.asarray(numeric, jnp.uint64))

    def __repr__(self) -> str:
        return "CuDSS()" if self.devices is None else f"CuDSS(devices={self.devices!r})"
