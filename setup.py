"""The optional compiled part of the package: the cuDSS XLA FFI extension.

Metadata lives in pyproject.toml; this file only adds ``solvers.linear._cudss_ext``, compiled
against ``jax.ffi.include_dir()`` (so jax is a build requirement: build with
``pip install --no-build-isolation -e .`` in an environment that has jax, or list jax under
[build-system] requires). It needs no CUDA or cuDSS headers: libcudss and libcuda are opened at
run time. When it cannot be compiled (no compiler, no jax, other headers) the build warns and the
package installs without it; linear="cudss" then says how to build it.

``DIFFSOUP_FFI_INCLUDE`` overrides the include folder; ``DIFFSOUP_SKIP_CUDSS_EXT=1`` skips it.
"""

from __future__ import annotations

import os
import warnings

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCE = "solvers/linear/cudss/cudss_ffi.cc"


def _include_dir() -> str | None:
    explicit = os.environ.get("DIFFSOUP_FFI_INCLUDE")
    if explicit:
        return explicit
    try:
        import jax.ffi
    except ImportError:
        return None
    return jax.ffi.include_dir()


class OptionalBuildExt(build_ext):
    """Builds the extension when it can; otherwise warns and leaves the package without it."""

    def build_extensions(self) -> None:
        built = []
        for ext in self.extensions:
            try:
                self.build_extension(ext)
            except Exception as exc:  # noqa: BLE001 (any compiler, linker or header failure)
                warnings.warn(f"the cuDSS extension {ext.name} was not built ({exc}); the "
                              "package works without it (linear='klu' / 'dense'), and "
                              "linear='cudss' will say how to build it", stacklevel=1)
            else:
                built.append(ext)
        # What failed is neither copied in place nor listed among the outputs.
        self.extensions[:] = built


def _extensions() -> list[Extension]:
    if os.environ.get("DIFFSOUP_SKIP_CUDSS_EXT") == "1":
        return []
    include = _include_dir()
    if include is None:
        warnings.warn("jax is not importable at build time, so the cuDSS extension is skipped; "
                      "install jax first and build with --no-build-isolation", stacklevel=1)
        return []
    return [Extension("solvers.linear._cudss_ext", sources=[SOURCE], include_dirs=[include],
                      depends=["solvers/linear/cudss/cudss_entries.inc"], language="c++",
                      extra_compile_args=["-std=c++17", "-O2"], libraries=["dl"])]


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
