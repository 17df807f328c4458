#!/usr/bin/env bash
# Builds everything the GPU suite needs on a machine without a GPU and stages it in .carry/
# (git-ignored): librcclx.so, the GPU test programs and the rccl-tests-compat binaries.
# Then, on the GPU machine: bash scripts/gpu-tests.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-toolchains.sh >/dev/null
RCCLX_REQUIRE_KERNELS=1 cargo build --release --examples
bash rccl-tests-compat/build.sh >/dev/null
rm -rf .carry && mkdir -p .carry/bench
for f in target/release/librcclx.so target/release/examples/gpu_selftest target/release/examples/lowp_accuracy; do [ -f "$f" ] && cp "$f" .carry/; done
cp rccl-tests-compat/build/*_perf rccl-tests-compat/build/rcclx_check .carry/bench/
strip --strip-debug .carry/librcclx.so .carry/gpu_selftest .carry/lowp_accuracy .carry/bench/* 2>/dev/null || true
du -sh .carry
