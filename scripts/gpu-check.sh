#!/usr/bin/env bash
# The GPU check of the cuDSS backend, in one command, on a machine with an NVIDIA GPU, Python 3.12
# and JAX with its CUDA plugin installed, but neither cuDSS nor internet:
#   1. reassemble the nvidia-cudss-cu13 wheel from build/cudss-parts/ (scripts/gpu/split-cudss.sh
#      made the parts; carried over in pieces), verify its SHA-256, unpack it to a temporary folder;
#   2. build the extension against the installed JAX (python setup.py build_ext --inplace);
#   3. run tests/cudss/test_gpu.py (and the CPU tests of the handlers);
#   4. print factor / refactor / solve times of cuDSS and of KLU (CPU, in a CPU-only process) on a
#      3-D Poisson matrix, and pdesolve times of the particle model at a large radial resolution.
# Budget: under 8 minutes on an H200. Environment: PYTHON (default python3.12), POISSON_M (100:
# 1e6 unknowns), KLU_POISSON_M (30: KLU's 3-D fill-in makes 1e6 unknowns take hours),
# CELLS (100000), PARTS (build/cudss-parts), CUDSS_DIR (an unpacked wheel: skips step 1).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3.12}"
PARTS="$(cd "${PARTS:-build/cudss-parts}" 2>/dev/null && pwd || echo "${PARTS:-build/cudss-parts}")"
POISSON_M="${POISSON_M:-100}"
KLU_POISSON_M="${KLU_POISSON_M:-30}"
CELLS="${CELLS:-100000}"
status=0
step() { echo; echo "== $* ($(date +%T))"; }

step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PYTHON" -c "import jax, sys; print('python', sys.version.split()[0], 'jax', jax.__version__, jax.devices())"

step "1. cuDSS library"
if [ -z "${CUDSS_DIR:-}" ]; then
    CUDSS_DIR="$(mktemp -d)/cudss"
    name="$(awk '{print $2}' "$PARTS/SHA256SUMS")"
    cat "$PARTS/$name".part-* > "$CUDSS_DIR.whl" || { echo "no wheel parts under $PARTS"; exit 2; }
    (cd "$(dirname "$CUDSS_DIR")" && cp "$PARTS/SHA256SUMS" . && mv cudss.whl "$name" \
        && sha256sum -c SHA256SUMS) || { echo "SHA-256 mismatch: parts missing or damaged"; exit 2; }
    "$PYTHON" -m zipfile -e "$(dirname "$CUDSS_DIR")/$name" "$CUDSS_DIR"
fi
lib="$(ls "$CUDSS_DIR"/nvidia/cu1*/lib/libcudss.so.* 2>/dev/null | head -n 1)"
[ -n "$lib" ] || { echo "no libcudss.so under $CUDSS_DIR"; exit 2; }
export DIFFSOUP_CUDSS_LIBRARY="$lib"
echo "DIFFSOUP_CUDSS_LIBRARY=$lib"

step "2. build the extension"
"$PYTHON" setup.py build_ext --inplace 2>&1 | tail -n 3
ls solvers/linear/_cudss_ext*.so || { echo "the extension did not build"; exit 2; }

step "3. tests"
export DIFFSOUP_REQUIRE_ALL=1 DIFFSOUP_GPU_CHECK=1
if "$PYTHON" -c "import pytest" 2>/dev/null; then
    timeout 240 "$PYTHON" -m pytest tests/cudss/test_gpu.py -q -p no:cacheprovider -o addopts="" \
        || status=1
    # The handlers on the CPU platform with the stand-in library (its own process: one
    # libcudss per process).
    env -u DIFFSOUP_CUDSS_LIBRARY JAX_PLATFORMS=cpu timeout 150 "$PYTHON" -m pytest \
        tests/cudss/test_handlers.py tests/cudss/test_mesh_groups.py -q -p no:cacheprovider \
        -o addopts="" || status=1
else
    echo "pytest is not installed for $PYTHON: tests skipped (status 1)"; status=1
fi

step "4. timings: cuDSS (GPU)"
timeout 200 "$PYTHON" scripts/gpu/bench_cudss.py cudss --poisson "$POISSON_M" --cells "$CELLS" \
    || status=1
step "4. timings: KLU (CPU baseline)"
if "$PYTHON" -c "import klujax_cpp" 2>/dev/null; then
    JAX_PLATFORMS=cpu OMP_NUM_THREADS=1 timeout 150 "$PYTHON" scripts/gpu/bench_cudss.py klu \
        --poisson "$KLU_POISSON_M" --cells "$CELLS" --repeats 2 || status=1
    timeout 60 "$PYTHON" scripts/gpu/bench_cudss.py cudss --poisson "$KLU_POISSON_M" || status=1
else
    echo "klujax is not installed for $PYTHON: no KLU baseline; scipy's SuperLU instead"
    timeout 150 "$PYTHON" - "$KLU_POISSON_M" <<'PY' || status=1
import sys, time, numpy as np, scipy.sparse.linalg as spla
sys.path.insert(0, "tests/cudss")
from cudss_support import poisson3d
a = poisson3d(int(sys.argv[1])); t = time.perf_counter(); lu = spla.splu(a.tocsc())
print(f"superlu poisson3d n={a.shape[0]} factor: {time.perf_counter() - t:.4f}")
t = time.perf_counter(); lu.solve(np.ones(a.shape[0]))
print(f"superlu poisson3d n={a.shape[0]} solve: {time.perf_counter() - t:.4f}")
PY
fi
step "done: status $status"
exit "$status"
