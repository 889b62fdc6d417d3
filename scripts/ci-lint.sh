#!/usr/bin/env bash
# Lint and types: `ruff check campaign schedulers solvers` and `mypy` (the packages and settings
# of pyproject.toml's [tool.ruff] and [tool.mypy]), with the `lint` extra's versions. Exits 1 if
# either has findings, after both ran.
#
#   bash scripts/ci-lint.sh
#
# A fresh virtual environment of python3 in a temporary folder (removed at the end, however the
# run ends), with the project installed in a copy of the tree (scripts/ci-lib.sh): mypy reads the
# installed packages' types, and the environment that called it is untouched, so .ci/run runs
# it beside the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

export PIP_DISABLE_PIP_VERSION_CHECK=1
export PIP_ROOT_USER_ACTION=ignore

lint_dir="$(mktemp -d "${TMPDIR:-/tmp}/diffsoup-lint.XXXXXX")"
trap 'rm -rf "$lint_dir"' EXIT
# shellcheck source=scripts/ci-lib.sh
source scripts/ci-lib.sh
copy_tree "$lint_dir/src"
cd "$lint_dir/src"

echo "== lint: python3 -m venv $lint_dir/venv; pip install -e .[lint]"
python3 -m venv "$lint_dir/venv"
# shellcheck disable=SC1091
source "$lint_dir/venv/bin/activate"
pip install -q -e ".[lint]"

ruff_status=0
ruff check campaign schedulers solvers || ruff_status=$?
mypy_status=0
mypy || mypy_status=$?
echo "== lint: ruff exit $ruff_status, mypy exit $mypy_status after ${SECONDS} s"
[ "$ruff_status" -eq 0 ] && [ "$mypy_status" -eq 0 ]
