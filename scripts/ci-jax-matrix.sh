#!/usr/bin/env bash
# The JAX matrix's second row: the JAX solver tests under Python 3.12 with the newest jax and
# jaxlib on PyPI (the main CI pass runs Python 3.11 and the newest JAX for it). A break with a newer
# JAX shows up here, not on a GPU machine lent for a few minutes.
#
#   bash scripts/ci-jax-matrix.sh                   # newest jax/jaxlib
#   JAX_VERSION=0.11.2 bash scripts/ci-jax-matrix.sh  # one release (the GPU machine's)
#
# A fresh virtual environment in a temporary folder (removed at the end, however the run ends), so
# the environment that called it is untouched. jax is installed first and the project is built
# against it (--no-build-isolation), so the optional cuDSS extension compiles against the FFI
# headers of the JAX the tests run; setuptools comes with it (Python 3.12's venv has none, and
# tests/cudss run setup.py). The tests: those of the code that calls JAX (tests/solvers,
# tests/dae, tests/cudss, tests/distributed, and the JAX-solved references: NIST StRD nonlinear and
# SUNDIALS IDA's examples); solvers.lsq is numpy/scipy only and is left to the main pass.
# pytest runs with the project's settings (warnings are errors). Environment: PYTHON312 (the
# interpreter; default the newest pyenv 3.12, else python3.12 on PATH), JAX_VERSION (default: the
# newest), DIFFSOUP_REQUIRE_ALL (default 1: a missing component fails instead of skipping).
set -euo pipefail
cd "$(dirname "$0")/.."

export DIFFSOUP_REQUIRE_ALL="${DIFFSOUP_REQUIRE_ALL:-1}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
export PIP_ROOT_USER_ACTION=ignore

TESTS=(tests/solvers tests/dae tests/cudss tests/distributed
       tests/reference/test_nist_nonlinear.py tests/reference/test_ida_examples.py)

find_python312() {
    local root candidates=()
    if [ -n "${PYTHON312:-}" ]; then
        candidates=("$PYTHON312")
    else
        root="$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")"
        # newest 3.12.x first (a glob that matches nothing stays literal and fails the -x test)
        mapfile -t candidates < <(printf '%s\n' "$root"/versions/3.12.*/bin/python3.12 | sort -rV)
        candidates+=("$(command -v python3.12 || true)")
    fi
    local p
    for p in "${candidates[@]}"; do
        # a pyenv shim on PATH exists but may refuse to run: ask the interpreter itself
        if [ -n "$p" ] && [ -x "$p" ] \
            && "$p" -c 'import sys, venv; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

if ! py312="$(find_python312)"; then
    if [ -n "${PYTHON312:-}" ]; then
        echo "ci-jax-matrix: PYTHON312=$PYTHON312 is not a runnable Python 3.12 with venv;" \
             "point it at a python3.12, or unset it to use pyenv's" >&2
    else
        echo "ci-jax-matrix: no Python 3.12 found (looked for" \
             "$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")/versions/3.12.*/bin/python3.12" \
             "and python3.12 on PATH); install one (pyenv install 3.12) or set PYTHON312" >&2
    fi
    exit 2
fi

if [ -n "${JAX_VERSION:-}" ]; then
    jax_spec=("jax==$JAX_VERSION" "jaxlib==$JAX_VERSION")
else
    jax_spec=(jax jaxlib)
fi

matrix_dir="$(mktemp -d "${TMPDIR:-/tmp}/diffsoup-jax-matrix.XXXXXX")"
trap 'rm -rf "$matrix_dir"' EXIT

# Installed and tested in a copy of the tree (scripts/ci-lib.sh), beside the main pass.
echo "== jax matrix: a copy of the tree in $matrix_dir/src"
# shellcheck source=scripts/ci-lib.sh
source scripts/ci-lib.sh
copy_tree "$matrix_dir/src"
cd "$matrix_dir/src"

echo "== jax matrix: $py312 -m venv $matrix_dir/venv"
"$py312" -m venv "$matrix_dir/venv"
# shellcheck disable=SC1091
source "$matrix_dir/venv/bin/activate"  # child processes, mpirun and srun find this python first

echo "== jax matrix: pip install -U setuptools wheel ${jax_spec[*]}"
pip install -q -U setuptools wheel "${jax_spec[@]}"
echo "== jax matrix: pip install --no-build-isolation -e .[test]"
pip install -q --no-build-isolation -e ".[test]"

python - <<'EOF'
import sys

import jax
import jaxlib

from solvers.linear._cudss_library import extension_path

print(f"== jax matrix: python {sys.version.split()[0]}, jax {jax.__version__}, "
      f"jaxlib {jaxlib.__version__}, cuDSS extension {extension_path() or 'not built'}")
EOF

status=0
python -m pytest -p no:cacheprovider "${TESTS[@]}" || status=$?
if [ "$status" -eq 5 ]; then
    echo "ci-jax-matrix: pytest collected no tests" >&2
    status=1
fi
echo "== jax matrix: exit $status after ${SECONDS} s"
exit "$status"
