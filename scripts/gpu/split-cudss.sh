#!/usr/bin/env bash
# Download the nvidia-cudss-cu13 wheel (pip, here where PyPI is reachable) and split it into
# parts of at most 60 MiB under build/cudss-parts/ (ignored by git), with the wheel's SHA-256,
# so that a GPU machine without internet can be given it in pieces; gpu-check.sh reassembles it.
#   scripts/gpu/split-cudss.sh [version]      e.g. 1.0.0.35 (default: the newest)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$root/build/cudss-parts"
spec="nvidia-cudss-cu13${1:+==$1}"
rm -rf "$out" && mkdir -p "$out/download"
python -m pip download --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --python-version 3.12 -d "$out/download" "$spec"
wheel="$(ls "$out"/download/nvidia_cudss_cu13-*.whl | head -n 1)"
name="$(basename "$wheel")"
(cd "$out/download" && sha256sum "$name") > "$out/SHA256SUMS"
split -b 60M -d -a 2 "$wheel" "$out/$name.part-"
rm -rf "$out/download"
echo "wheel: $name"
ls -l "$out"
echo "carry these one or a few per call (each call carries at most 64 MiB):"
(cd "$root" && ls build/cudss-parts/*.part-*)
