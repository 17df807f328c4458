#!/usr/bin/env bash
# Build the benchmark as one program for the Python wheel: rccl-tests-compat's perf program
# (every collective, chosen with --coll), runnable on any manylinux_2_28 machine, so that
# `python -m rcclx tune` works from an installed wheel, without a source tree.
#
#   bash rccl-tests-compat/portable.sh OUT_FILE
#
# How it differs from build.sh's programs:
#   - sm_90 code and compute_90 PTX (newer GPUs compile the PTX at load);
#   - linked by `zig cc` against glibc 2.28, as the wheel's librcclx.so (python/zig-link.sh):
#     GCC's libstdc++ linked statically (nvcc compiles the host code with g++; CUDA's headers
#     refuse zig's libc++), LLVM's libunwind in place of libgcc_eh (whose unwinder needs glibc
#     2.35's _dl_find_object), and src/glibc_compat.c for the two glibc symbols newer than 2.28
#     that libstdc++.a names;
#   - stripped (binutils' objcopy).
# Fails if the program needs a glibc newer than 2.28 or a library outside the manylinux set.
#
# Environment: NVCC, NCCL_INCLUDE as build.sh; ZIG (default .tools/zig/ziglang/zig from
# ci/install-toolchains.sh).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
OUT="${1:?usage: portable.sh OUT_FILE}"
# shellcheck source=../ci/cuda-toolkit.sh
source "$REPO/ci/cuda-toolkit.sh"
ZIG="${ZIG:-$REPO/.tools/zig/ziglang/zig}"
[ -x "$ZIG" ] || { echo "portable.sh: no zig at $ZIG (bash ci/install-toolchains.sh zig)" >&2; exit 1; }
# shellcheck source=nccl-header.sh
source "$HERE/nccl-header.sh"
GXX_LIB="$(dirname "$(g++ -print-libgcc-file-name)")"
[ -f "$GXX_LIB/libstdc++.a" ] || { echo "portable.sh: no libstdc++.a in $GXX_LIB" >&2; exit 1; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/rcclx-portable.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
FLAGS=(-std=c++17 -O2 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
       -I"$NCCL_INCLUDE" -Xcompiler -Wall,-Wextra,-Werror -Werror all-warnings)
for f in perf common; do
  "$NVCC" "${FLAGS[@]}" -c "$HERE/src/$f.cu" -o "$WORK/$f.o" &
done
wait -n && wait -n
TARGET="$(uname -m)-linux-gnu.2.28"
"$ZIG" cc -target "$TARGET" -O2 -c "$HERE/src/glibc_compat.c" -o "$WORK/glibc_compat.o"
"$ZIG" cc -target "$TARGET" -o "$WORK/rcclx_perf" "$WORK/perf.o" "$WORK/common.o" "$WORK/glibc_compat.o" \
  "$CUDART_DIR/libcudart_static.a" "$GXX_LIB/libstdc++.a" -lunwind -lpthread -ldl -lrt -lm
objcopy --strip-all "$WORK/rcclx_perf" "$WORK/rcclx_perf.stripped"

# What it needs from the system: libraries (DT_NEEDED) and glibc versions.
needs="$(objdump -p "$WORK/rcclx_perf.stripped")"
bad_libs="$(awk '$1 == "NEEDED" { print $2 }' <<<"$needs" \
  | grep -vxE 'lib(c|m|dl|rt|pthread)\.so\.[0-9]+|ld-linux-[a-z0-9_-]+\.so\.[0-9]+' || true)"
newest="$(grep -oE 'GLIBC_2\.[0-9]+' <<<"$needs" | sort -t. -k2 -n -u | tail -n 1)"
if [ -n "$bad_libs" ] || [ "${newest#GLIBC_2.}" -gt 28 ]; then
  echo "portable.sh: the program needs ${bad_libs:+$bad_libs }$newest: not manylinux_2_28" >&2
  exit 1
fi
mkdir -p "$(dirname "$OUT")"
cp "$WORK/rcclx_perf.stripped" "$OUT"
chmod 755 "$OUT"
echo "portable.sh: $OUT ($(stat -c %s "$OUT") bytes; needs $newest at most)"
