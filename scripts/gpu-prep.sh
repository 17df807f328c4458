#!/usr/bin/env bash
# Builds everything the GPU suite needs on a machine without a GPU and stages it in .carry/
# (git-ignored): librcclx.so, the GPU test programs of gpu-tests/ (selftest, lowp_accuracy,
# timeout, ranks, lifecycle, teardown) and the rccl-tests-compat binaries.
# Then, on the GPU machine: bash scripts/gpu-tests.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-toolchains.sh >/dev/null
# The library with its kernels, then the test programs with the self-test's kernels. Only the
# NVIDIA code object (the GPU machines are NVIDIA; CI builds all three targets), in a target
# directory of its own so that switching between the two builds recompiles nothing.
export RCCLX_TARGETS=${RCCLX_TARGETS:-sm_90} RCCLX_REQUIRE_KERNELS=1 CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/gpu}
# fault-inject: the test-only RCCLX_FAULT_INJECT sites (fidelity, teardown).
cargo build --release --lib --features fault-inject
T=$CARGO_TARGET_DIR/release
# (RCCLX_REQUIRE_KERNELS=1 fails the build without them; nvcc compresses the fatbin, so the
# kernel names are not visible in the library.)
cargo build --release -p rcclx-gpu-tests --bins --features rcclx/fault-inject
bash rccl-tests-compat/build.sh >/dev/null
bash gpu-tests/fidelity/build.sh >/dev/null
BINS="selftest lowp_accuracy timeout ranks lifecycle teardown"
rm -rf .carry && mkdir -p .carry/bench
cp "$T/librcclx.so" .carry/
for bin in $BINS; do cp "$T/$bin" .carry/; done
cp gpu-tests/fidelity/build/fidelity .carry/
cc -O1 -o .carry/p2p_level tests/gpu/p2p_level.c -ldl
cp rccl-tests-compat/build/*_perf rccl-tests-compat/build/rcclx_check .carry/bench/
(cd .carry && strip --strip-debug librcclx.so $BINS fidelity bench/* 2>/dev/null) || true
du -sh .carry
