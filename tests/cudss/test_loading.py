"""Finding and loading the cuDSS pieces: the build skips cleanly, a missing extension or library
and a library without a cuDSS symbol are clear errors, and CPU installs never need any of it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cudss_support import compile_fake
from testkit import ROOT, child_env, require

from solvers.linear._cudss_library import Extension, extension_path


@pytest.fixture
def fresh_extension(tmp_path: Path) -> Extension:
    """A private copy of the built extension (its own registry and library slot)."""
    built = extension_path()
    require(built is not None, "the cuDSS extension is not built: run "
                               "`python setup.py build_ext --inplace`")
    assert built is not None  # require() above stops the test otherwise
    copy = tmp_path / "ext_copy.so"
    shutil.copy(built, copy)
    return Extension(copy)


def test_missing_library_names_the_wheel_and_variable(fresh_extension, tmp_path, monkeypatch):
    missing = tmp_path / "nowhere" / "libcudss.so.1"
    monkeypatch.setenv("DIFFSOUP_CUDSS_LIBRARY", str(missing))
    with pytest.raises(RuntimeError) as info:
        fresh_extension.load_library()
    message = str(info.value)
    assert str(missing) in message
    assert "nvidia-cudss-cu12" in message and "DIFFSOUP_CUDSS_LIBRARY" in message


def test_library_missing_a_symbol_is_named(fresh_extension, tmp_path, monkeypatch):
    require(shutil.which("gcc") is not None, "gcc is needed to build the stand-in libcudss")
    broken = compile_fake(tmp_path / "libcudss.so.1", "-DFAKE_OMIT_EXECUTE")
    monkeypatch.setenv("DIFFSOUP_CUDSS_LIBRARY", str(broken))
    with pytest.raises(RuntimeError, match=r"has no symbol cudssExecute; it is not a cuDSS 1.x"):
        fresh_extension.load_library()


def test_build_without_usable_headers_warns_and_installs_nothing(tmp_path):
    """setup.py with an include folder lacking the FFI headers: the compile fails, the build
    warns and still succeeds, and no extension is produced."""
    require(shutil.which("g++") is not None or shutil.which("c++") is not None,
            "a C++ compiler is needed to try the build")
    shutil.copy(ROOT / "setup.py", tmp_path / "setup.py")
    shutil.copytree(ROOT / "solvers" / "linear" / "cudss", tmp_path / "solvers/linear/cudss")
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "probe"\nversion = "0"\n[tool.setuptools]\npackages = []\n')
    env = child_env()
    env["DIFFSOUP_FFI_INCLUDE"] = str(tmp_path / "no-such-include")
    proc = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tmp_path,
                          env=env, check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "was not built" in proc.stderr + proc.stdout
    assert not list(tmp_path.rglob("_cudss_ext*.so"))


def test_install_without_extension_falls_back(tmp_path):
    """A copy of the package without the compiled extension: cudss is unavailable with the build
    command in its error, and linear='auto' still works."""
    shutil.copytree(ROOT / "solvers", tmp_path / "solvers",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    script = textwrap.dedent("""
        import jax
        jax.config.update("jax_enable_x64", True)
        from solvers.linear import CuDSS, Pattern, cudss_available, linear_solver
        assert not cudss_available()
        print("auto:", linear_solver("auto").name)
        try:
            CuDSS().analyse(Pattern.from_dense([[1, 0], [1, 1]]))
        except RuntimeError as exc:
            print("error:", exc)
    """)
    env = child_env()
    env["PYTHONPATH"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, check=False,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "auto: " in proc.stdout and "auto: cudss" not in proc.stdout
    assert "the compiled cuDSS extension" in proc.stdout
    assert "pip install --no-build-isolation -e ." in proc.stdout
