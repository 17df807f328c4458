#!/usr/bin/env bash
# Builds gpu-tests/fidelity/build/fidelity (no GPU needed). Linked against the stock libnccl.so.2
# (no rpath: run.sh sets LD_LIBRARY_PATH), CUDA runtime linked statically, sm_90 code.
#
# Environment:
#   NVCC          nvcc to use (else .tools/cuda/nvidia/cu13/bin/nvcc, else nvcc on PATH)
#   NCCL_INCLUDE  folder holding nccl.h (else .cache/nccl/2.28.9/nvidia/nccl/include, the
#                 nvidia-nccl-cu13 2.28.9 wheel extracted by ci/fetch-nccl.sh)
#   NCCL_LIB      folder holding libnccl.so.2 (else $NCCL_INCLUDE/../lib)
#   GENCODE       nvcc -gencode flags (default: arch=compute_90,code=sm_90)
#   EXTRA_FLAGS   more nvcc flags (e.g. -g -lineinfo)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
BUILD="$HERE/build"

# shellcheck source=../../ci/cuda-toolkit.sh
source "$REPO/ci/cuda-toolkit.sh"

NCCL_INCLUDE="${NCCL_INCLUDE:-$REPO/.cache/nccl/2.28.9/nvidia/nccl/include}"
if [ ! -f "$NCCL_INCLUDE/nccl.h" ]; then
  echo "build.sh: $NCCL_INCLUDE/nccl.h not found: set NCCL_INCLUDE or run ci/fetch-nccl.sh" >&2
  exit 1
fi
NCCL_LIB="${NCCL_LIB:-$NCCL_INCLUDE/../lib}"
if [ ! -f "$NCCL_LIB/libnccl.so.2" ]; then
  echo "build.sh: $NCCL_LIB/libnccl.so.2 not found: set NCCL_LIB" >&2
  exit 1
fi

GENCODE="${GENCODE:--gencode arch=compute_90,code=sm_90}"
# shellcheck disable=SC2206
FLAGS=(-std=c++17 -O2 $GENCODE -I"$NCCL_INCLUDE" -Xcompiler -Wall,-Wextra,-Werror -Werror all-warnings
       ${EXTRA_FLAGS:-})
# The wheel has libnccl.so.2 only (no libnccl.so), hence -l:libnccl.so.2; DT_NEEDED is its SONAME.
LINK=(-cudart static -L"$CUDART_DIR" -L"$NCCL_LIB" -l:libnccl.so.2 -lpthread -ldl -lrt)

mkdir -p "$BUILD"
echo "build.sh: $NVCC ($("$NVCC" --version | tail -n 2 | head -n 1)), nccl.h from $NCCL_INCLUDE"
"$NVCC" "${FLAGS[@]}" "$HERE/fidelity.cu" -o "$BUILD/fidelity" "${LINK[@]}"
echo "build.sh: built $BUILD/fidelity"
