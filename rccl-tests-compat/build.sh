#!/usr/bin/env bash
# Build the rccl-tests-compat binaries into rccl-tests-compat/build/ (no GPU needed):
#   all_reduce_perf all_gather_perf reduce_scatter_perf alltoall_perf broadcast_perf reduce_perf
#                 (one program, 6 names: the collective comes from the name)
#   rcclx_check
#   link_perf     (two GPUs' link: bandwidth, flag latency, release cost; src/link.cu)
#   libfaultshim.so, report_test (test helpers for selftest.sh)
# CUDA runtime linked statically, sm_90 code, NCCL loaded at run time with dlopen (not linked).
#
# Environment:
#   NVCC          nvcc to use (else .tools/cuda/nvidia/cu13/bin/nvcc, else nvcc on PATH;
#                 ci/cuda-toolkit.sh)
#   NCCL_INCLUDE  folder holding nccl.h (else ci/fetch-nccl.sh's 2.28.9 in .cache/nccl/, else the
#                 nvidia-nccl-cu13==2.28.9 wheel is downloaded with pip and extracted into
#                 build/nccl-2.28.9/; nccl-header.sh)
#   GENCODE       nvcc -gencode flags (default: arch=compute_90,code=sm_90)
#   EXTRA_FLAGS   more nvcc flags (e.g. -g -lineinfo)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
BUILD="$HERE/build"
mkdir -p "$BUILD"

# shellcheck source=../ci/cuda-toolkit.sh
source "$REPO/ci/cuda-toolkit.sh"

# shellcheck source=nccl-header.sh
source "$HERE/nccl-header.sh"

GENCODE="${GENCODE:--gencode arch=compute_90,code=sm_90}"
# shellcheck disable=SC2206
FLAGS=(-std=c++17 -O2 $GENCODE -I"$NCCL_INCLUDE" -Xcompiler -Wall,-Wextra,-Werror -Werror all-warnings
       ${EXTRA_FLAGS:-})
echo "build.sh: $NVCC ($("$NVCC" --version | tail -n 2 | head -n 1)), nccl.h from $NCCL_INCLUDE"

SRC="$HERE/src"
OBJ="$BUILD/obj"
mkdir -p "$OBJ"
pids=()
for f in common perf check; do
  "$NVCC" "${FLAGS[@]}" -c "$SRC/$f.cu" -o "$OBJ/$f.o" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done

LINK=(-cudart static -L"$CUDART_DIR" -lpthread -ldl -lrt)
"$NVCC" $GENCODE "$OBJ/perf.o" "$OBJ/common.o" -o "$BUILD/all_reduce_perf" "${LINK[@]}"
PERF_NAMES=(all_reduce_perf all_gather_perf reduce_scatter_perf alltoall_perf broadcast_perf reduce_perf)
for n in "${PERF_NAMES[@]:1}"; do
  cp -f "$BUILD/all_reduce_perf" "$BUILD/$n"
done
"$NVCC" $GENCODE "$OBJ/check.o" "$OBJ/common.o" -o "$BUILD/rcclx_check" "${LINK[@]}"
# The link between two GPUs (bandwidth, flag latency, release cost; no NCCL): the x2 step of
# scripts/gpu-tests.sh.
"$NVCC" "${FLAGS[@]}" "$SRC/link.cu" -o "$BUILD/link_perf" "${LINK[@]}"
# Test helpers only (for selftest.sh), not benchmarks: fault injection, and the benchmark's
# option parsing and output on made-up results (runs without a GPU).
"$NVCC" "${FLAGS[@]}" -shared -Xcompiler -fPIC "$HERE/test/faultshim.cu" -o "$BUILD/libfaultshim.so" "${LINK[@]}"
"$NVCC" "${FLAGS[@]}" "$HERE/test/report_test.cu" "$OBJ/common.o" -o "$BUILD/report_test" "${LINK[@]}"
echo "build.sh: built $(cd "$BUILD" && ls "${PERF_NAMES[@]}" link_perf rcclx_check libfaultshim.so report_test | tr '\n' ' ')in $BUILD"
