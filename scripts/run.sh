#!/usr/bin/env bash
# Build rcclx and, on a machine with GPUs, run the GPU test suite and benchmark.
#
#   bash scripts/run.sh
#
# Without a GPU: cargo build --release -> target/release/librcclx.so (with kernels only if the
# compilers of ci/install-toolchains.sh are in .tools/; else it only forwards), then says
# what needs a GPU. With GPUs: scripts/gpu-prep.sh (toolchains, library with kernels, test
# programs, benchmark; staged in .carry/) and scripts/gpu-tests.sh (needs 2 GPUs; NRANKS=N
# for more; its step `ranks` runs 3-8 ranks on 1 GPU), logs under bench/results/<date>-gpu/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

lib=target/release/librcclx.so
gpus=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L | grep -c '^GPU ' || true)
elif command -v rocm-smi >/dev/null 2>&1 && rocm-smi --showid >/dev/null 2>&1; then
  gpus=$(rocm-smi --showid | grep -cE '^(GPU|card)\[?[0-9]' || true)
fi

if [ "$gpus" -gt 0 ]; then
  echo "run.sh: $gpus GPU(s) found: building with kernels, then the GPU suite"
  bash scripts/gpu-prep.sh
  exec bash scripts/gpu-tests.sh
fi
cargo build --release
[ -f "$lib" ] || { echo "run.sh: $lib was not built" >&2; exit 1; }
echo "run.sh: no GPU here. Built $lib; it forwards every call unless its kernels were compiled"
echo "  (they are when ci/install-toolchains.sh has run). The GPU suite and benchmark need 2 GPUs"
echo "  (its 3-8 rank and teardown steps, STEPS=\"ranks lifecycle\", run on 1): bash scripts/gpu-prep.sh here, copy the tree"
echo "  with .carry/, then bash scripts/gpu-tests.sh there."
