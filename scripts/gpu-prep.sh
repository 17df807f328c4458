#!/usr/bin/env bash
# Builds everything the GPU suite needs on a machine without a GPU and stages it in .carry/
# (git-ignored): librcclx.so, the GPU test programs and the rccl-tests-compat binaries.
# Then, on the GPU machine: bash scripts/gpu-tests.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-toolchains.sh >/dev/null
# The cdylib and the examples (`--examples` alone may leave an old librcclx.so behind).
RCCLX_REQUIRE_KERNELS=1 cargo build --release --lib --examples
grep -qa rcclx_allreduce_ll_f32_sum target/release/librcclx.so || { echo "librcclx.so has no kernels" >&2; exit 1; }
bash rccl-tests-compat/build.sh >/dev/null
rm -rf .carry && mkdir -p .carry/bench
for f in target/release/librcclx.so target/release/examples/gpu_selftest target/release/examples/lowp_accuracy target/release/examples/dda_timeout; do [ -f "$f" ] && cp "$f" .carry/; done
cp rccl-tests-compat/build/*_perf rccl-tests-compat/build/rcclx_check .carry/bench/
strip --strip-debug .carry/librcclx.so .carry/gpu_selftest .carry/lowp_accuracy .carry/dda_timeout .carry/bench/* 2>/dev/null || true
du -sh .carry
