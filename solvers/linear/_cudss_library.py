"""Finding and loading the pieces of the cuDSS backend: our compiled FFI extension and NVIDIA's
``libcudss`` (from the ``nvidia-cudss-cu12`` / ``nvidia-cudss-cu13`` wheel, or the file named by
``DIFFSOUP_CUDSS_LIBRARY``).

Nothing here runs at import: the extension is opened with ctypes on first use, ``libcudss`` with
``dlopen`` inside it, and the FFI targets are registered once, for the CPU and the CUDA platforms.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import logging
import os
import threading
from pathlib import Path

import jax

__all__ = ["Extension", "comm_layer_path", "extension", "library_candidates"]

logger = logging.getLogger(__name__)

#: Our FFI target names (prefix + handler).
PREFIX = "diffsoup_cudss_"
HANDLERS = ("factor", "refactor", "solve", "free")
#: Where the wheels put libcudss, relative to a folder of the ``nvidia`` namespace package.
WHEEL_LIBRARIES = ("cu13/lib/libcudss.so.1", "cu12/lib/libcudss.so.1", "cu13/lib/libcudss.so.0",
                   "cu12/lib/libcudss.so.0", "cudss/lib/libcudss.so.0")
INSTALL_HINT = ("install the wheel that matches your JAX CUDA plugin (pip install "
                "nvidia-cudss-cu12 or nvidia-cudss-cu13, or the project's gpu-cu12 / gpu-cu13 "
                "extra), or set DIFFSOUP_CUDSS_LIBRARY to the path of libcudss.so")

_lock = threading.Lock()
_extension: Extension | None = None


def _nvidia_folders() -> list[Path]:
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    return [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []


def library_candidates() -> list[Path]:
    """The libcudss files to try, best first: ``DIFFSOUP_CUDSS_LIBRARY`` alone when set, else
    the wheels' (the CUDA major of an installed JAX plugin first)."""
    explicit = os.environ.get("DIFFSOUP_CUDSS_LIBRARY")
    if explicit:
        return [Path(explicit)]
    order = list(WHEEL_LIBRARIES)
    if importlib.util.find_spec("jax_cuda12_plugin") is not None:
        order.sort(key=lambda p: not p.startswith("cu12"))
    return [folder / rel for rel in order for folder in _nvidia_folders()
            if (folder / rel).is_file()]


def comm_layer_path(library: str | os.PathLike[str]) -> str:
    """The cuDSS communication layer for multi-node mode: ``DIFFSOUP_CUDSS_COMMLAYER`` or the
    wheel's Open MPI layer beside ``library`` (MPI is how the project starts several processes)."""
    explicit = os.environ.get("DIFFSOUP_CUDSS_COMMLAYER")
    if explicit:
        return explicit
    folder = Path(library).parent
    for name in ("libcudss_commlayer_openmpi.so.1", "libcudss_commlayer_openmpi.so.0",
                 "libcudss_commlayer_openmpi.so"):
        if (folder / name).is_file():
            return str(folder / name)
    raise RuntimeError(f"DIFFSOUP_MGMN=1 needs a cuDSS communication layer, but none lies beside "
                       f"{library}; set DIFFSOUP_CUDSS_COMMLAYER to libcudss_commlayer_openmpi.so "
                       "(or the NCCL layer) of the nvidia-cudss wheel")


def extension_path() -> Path | None:
    """The compiled extension beside this module, or ``None`` if not built: the one built for
    this interpreter first (``_cudss_ext`` + one of its ``EXTENSION_SUFFIXES``: compiled against
    the FFI headers of this environment's JAX), else any other ``_cudss_ext*.so``."""
    folder = Path(__file__).parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if (folder / f"_cudss_ext{suffix}").is_file():
            return folder / f"_cudss_ext{suffix}"
    found = sorted(folder.glob("_cudss_ext*.so"))
    return found[0] if found else None


def _preload_dependencies() -> None:
    """Make libcudss's dependencies (cuBLAS) resolvable: start JAX's backend (its CUDA plugin
    loads the CUDA wheels' libraries), then load the wheels' cuBLAS globally if still needed."""
    jax.devices()
    for folder in _nvidia_folders():
        for pattern in ("cu1*/lib/libcublasLt.so.*", "cublas/lib/libcublasLt.so.*",
                        "cu1*/lib/libcublas.so.*", "cublas/lib/libcublas.so.*"):
            for path in sorted(folder.glob(pattern)):
                try:
                    ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
                except OSError as exc:
                    logger.debug("cuDSS: could not preload %s: %s", path, exc)


class Extension:
    """The opened extension: its registry functions, and the library it loaded."""

    def __init__(self, path: Path) -> None:
        lib = ctypes.CDLL(str(path))
        lib.diffsoup_cudss_load.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.diffsoup_cudss_load.restype = ctypes.c_int
        lib.diffsoup_cudss_symbolic_new.argtypes = [
            ctypes.c_int64, ctypes.c_int64, ctypes.c_int, ctypes.POINTER(ctypes.c_int),
            ctypes.c_char_p, ctypes.c_uint64]
        lib.diffsoup_cudss_symbolic_new.restype = ctypes.c_uint64
        lib.diffsoup_cudss_symbolic_free.argtypes = [ctypes.c_uint64]
        lib.diffsoup_cudss_symbolic_free.restype = ctypes.c_int
        lib.diffsoup_cudss_counts.argtypes = [ctypes.POINTER(ctypes.c_int64)]
        lib.diffsoup_cudss_counts.restype = None
        lib.diffsoup_cudss_set_pool_limit.argtypes = [ctypes.c_int64]
        lib.diffsoup_cudss_set_pool_limit.restype = None
        self.path = path
        self.lib = lib
        self.library: str | None = None
        self._registered = False

    def load_library(self) -> str:
        """Open libcudss (once); returns its path.

        Raises:
            RuntimeError: no library found, or it lacks a cuDSS 1.x entry point (named).
        """
        if self.library is not None:
            return self.library
        _preload_dependencies()
        candidates = library_candidates()
        if not candidates:
            raise RuntimeError(f"linear='cudss' needs the GPU build of the cuDSS backend, and "
                               f"NVIDIA's libcudss was not found (no nvidia-cudss wheel is "
                               f"installed): {INSTALL_HINT}; or use linear='klu' on a CPU, "
                               "'dense' anywhere, or 'auto'")
        problems = []
        for path in candidates:
            error = ctypes.create_string_buffer(1024)
            if self.lib.diffsoup_cudss_load(os.fsencode(path), error, len(error)) == 0:
                self.library = str(path)
                logger.info("cuDSS: loaded %s", path)
                return self.library
            problems.append(f"{path}: {error.value.decode(errors='replace')}")
        raise RuntimeError("linear='cudss' could not load libcudss (" + "; ".join(problems)
                           + f"); {INSTALL_HINT}")

    def register(self) -> None:
        """Register the handlers as FFI targets for the CPU and CUDA platforms (once)."""
        if self._registered:
            return
        for name in HANDLERS:
            for platform, suffix in (("cpu", "cpu"), ("CUDA", "cuda")):
                handler = getattr(self.lib, f"{PREFIX}{name}_{suffix}")
                jax.ffi.register_ffi_target(PREFIX + name, jax.ffi.pycapsule(handler),
                                            platform=platform)
        self._registered = True

    def counts(self) -> dict[str, int]:
        """Live and pooled factorizations, analyses, and states created and destroyed."""
        out = (ctypes.c_int64 * 5)()
        self.lib.diffsoup_cudss_counts(out)
        return dict(zip(("live", "pooled", "analyses", "created", "destroyed"), out))


def extension() -> Extension:
    """The extension, opened and its handlers registered once per process.

    Raises:
        RuntimeError: the extension was not built (with the command that builds it).
    """
    global _extension
    with _lock:
        if _extension is not None:
            return _extension
        found = extension_path()
        if found is None:
            raise RuntimeError(
                "linear='cudss' needs the GPU build of the cuDSS backend: the compiled cuDSS "
                "extension (solvers/linear/_cudss_ext*.so), which this install does not have: "
                "build it with `pip install --no-build-isolation -e .` (a C++ compiler and jax "
                "are needed; the build only warns when it cannot compile), or use "
                "linear='klu' on a CPU, 'dense' anywhere, or 'auto'")
        ext = Extension(found)
        ext.register()
        _extension = ext
        return ext
