#!/usr/bin/env bash
# Build rcclx and, on a machine with GPUs, run the GPU tests.
#
#   bash scripts/run.sh
#
# 1. cargo build --release -> target/release/librcclx.so. Works without any GPU toolchain
#    (the library then only forwards); with the compilers from ci/install-toolchains.sh in
#    .tools/ the DDA / FP8 kernels are built in as well.
# 2. If a GPU answers (nvidia-smi or rocm-smi) and scripts/gpu-tests.sh exists, runs it
#    (it needs 2 GPUs). Otherwise says so and stops: the CPU-only test suite is ci/test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cargo build --release
lib=target/release/librcclx.so
[ -f "$lib" ] || { echo "run.sh: $lib was not built" >&2; exit 1; }

gpus=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L | grep -c '^GPU ' || true)
elif command -v rocm-smi >/dev/null 2>&1 && rocm-smi --showid >/dev/null 2>&1; then
  gpus=$(rocm-smi --showid | grep -cE '^(GPU|card)\[?[0-9]' || true)
fi

if [ "$gpus" -gt 0 ]; then
  echo "run.sh: built $lib; $gpus GPU(s) found"
  if [ -f scripts/gpu-tests.sh ]; then
    exec bash scripts/gpu-tests.sh
  fi
  echo "run.sh: scripts/gpu-tests.sh does not exist yet; nothing more to run"
else
  echo "no GPU: built $lib (forwarding only); GPU tests need 2 GPUs: bash scripts/gpu-tests.sh"
fi
