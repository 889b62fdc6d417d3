"""cuDSS backend tests on a machine without a GPU: the real extension and FFI path, driven by a
stand-in libcudss (fake_cudss.c, dense LU on the host) compiled here with gcc.

The stand-in is loaded into this process through ``DIFFSOUP_CUDSS_LIBRARY`` (one library per
process), so these tests run where no real cuDSS is loaded; tests/cudss/test_gpu.py is the GPU
counterpart, run by scripts/gpu-check.sh in a process of its own.
"""

from __future__ import annotations

import ctypes
import os
import shutil

import jax
import pytest
from cudss_support import compile_fake

jax.config.update("jax_enable_x64", True)


@pytest.fixture(scope="session")
def fake_library(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    """The stand-in library, loaded by the extension (the same handle: its counters are shared)."""
    from testkit import require

    from solvers.linear._cudss_library import extension, extension_path

    require(shutil.which("gcc") is not None, "gcc is needed to build the stand-in libcudss")
    require(extension_path() is not None,
            "the cuDSS extension is not built: run `python setup.py build_ext --inplace`")
    path = compile_fake(tmp_path_factory.mktemp("fake") / "libcudss.so.1")
    ext = extension()
    require(ext.library in (None, str(path)),
            f"another libcudss is loaded in this process already ({ext.library}); run "
            "tests/cudss in a process of its own")
    previous = os.environ.get("DIFFSOUP_CUDSS_LIBRARY")
    os.environ["DIFFSOUP_CUDSS_LIBRARY"] = str(path)
    try:
        ext.load_library()
    finally:
        if previous is None:
            os.environ.pop("DIFFSOUP_CUDSS_LIBRARY")
        else:
            os.environ["DIFFSOUP_CUDSS_LIBRARY"] = previous
    return ctypes.CDLL(str(path))
