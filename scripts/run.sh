#!/usr/bin/env bash
# Build rcclx with its GPU kernels and, on a machine with GPUs, run the GPU test suite and benchmark.
#
#   bash scripts/run.sh
#
# Without a GPU: bash ci/install-toolchains.sh (the kernel compilers into .tools/, as ci/test.sh
# does; kept when already there), then RCCLX_REQUIRE_KERNELS=1 cargo build --release ->
# target/release/librcclx.so with the kernels of all three GPU targets (sm_90, gfx942, gfx950),
# then says what needs a GPU. With GPUs: scripts/gpu-prep.sh (toolchains, library with kernels,
# test programs, benchmark; staged in .carry/) and scripts/gpu-tests.sh (needs 2 GPUs; NRANKS=N
# for more; its step `ranks` runs 3-8 ranks on 1 GPU), logs under bench/results/<date>-gpu/.
#
# Environment: SKIP_APT=1 is passed on to install-toolchains.sh (clang-19 then has to be there
# already); RCCLX_NO_KERNELS=1 installs no compiler and builds a library that only forwards.
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

if [ "${RCCLX_NO_KERNELS:-0}" = 1 ]; then
  echo "run.sh: RCCLX_NO_KERNELS=1: no kernel compilers, a library that forwards every call"
  cargo build --release
else
  # The same compilers as ci/test.sh; each one already in .tools/ (or on the system) is reused.
  bash ci/install-toolchains.sh
  RCCLX_REQUIRE_KERNELS=1 cargo build --release
fi
[ -f "$lib" ] || { echo "run.sh: $lib was not built" >&2; exit 1; }
if [ "${RCCLX_NO_KERNELS:-0}" = 1 ]; then
  echo "run.sh: no GPU here. Built $lib ($(stat -c %s "$lib") bytes) without kernels: it forwards every call."
else
  echo "run.sh: no GPU here. Built $lib ($(stat -c %s "$lib") bytes) with the kernels of sm_90,"
  echo "  gfx942 and gfx950 (RCCLX_REQUIRE_KERNELS=1)."
fi
echo "  What needs a GPU: the GPU suite and benchmark (2 GPUs; its 3-8 rank and teardown steps,"
echo "  STEPS=\"ranks lifecycle\", run on 1): bash scripts/gpu-prep.sh here, copy the tree with"
echo "  .carry/, then bash scripts/gpu-tests.sh there. Or run this script on the GPU machine."
