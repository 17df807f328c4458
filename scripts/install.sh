#!/usr/bin/env bash
# Install rcclx under a prefix:
#
#   PREFIX/lib/librcclx.so                    the library
#   PREFIX/lib/libnccl.so.2, libnccl.so       symlinks to it (NVIDIA NCCL names)
#   PREFIX/lib/librccl.so.1, librccl.so       symlinks to it (AMD RCCL names)
#   PREFIX/include/rcclx.h                    rcclx's own C API (includes the stock nccl.h)
#
# Usage: bash scripts/install.sh PREFIX
#   Builds with `cargo build --release` first (a no-op when up to date), unless RCCLX_LIB names
#   an already built librcclx.so to install instead (the tests do that).
#
# Link-time substitution: librcclx.so has no SONAME of its own, so a symlink named after the
# stock SONAME is what a binary with DT_NEEDED libnccl.so.2 (nccl-tests, PyTorch CUDA) or
# librccl.so.1 (rccl-tests, PyTorch ROCm) finds when PREFIX/lib comes first in its search
# path (LD_LIBRARY_PATH, rpath). Programs can also link against it with -L PREFIX/lib -lnccl.
#
# The stock library must then be given with RCCLX_UPSTREAM_LIB=/path/to/libnccl.so.2 (or be
# discoverable: see README "Troubleshooting"): inside such a process
# dlopen("libnccl.so.2") returns rcclx itself, which rcclx detects (marker symbol
# rcclxGetVersion / same file) and skips, so it never forwards to itself.
#
# Uninstall: remove the six files above.
set -euo pipefail

if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: bash scripts/install.sh PREFIX" >&2
  exit 2
fi
PREFIX="$1"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [ -n "${RCCLX_LIB:-}" ]; then
  LIB="$RCCLX_LIB"
else
  (cd "$REPO" && cargo build --release)
  LIB="$REPO/target/release/librcclx.so"
fi
if [ ! -f "$LIB" ]; then
  echo "install.sh: $LIB not found" >&2
  exit 1
fi
HEADER="$REPO/include/rcclx.h"
if [ ! -f "$HEADER" ]; then
  echo "install.sh: $HEADER not found" >&2
  exit 1
fi

mkdir -p "$PREFIX/lib" "$PREFIX/include"
# Copy to a temporary name and rename, so a process that has the old file mapped keeps working.
cp -f "$LIB" "$PREFIX/lib/.librcclx.so.tmp"
chmod 0755 "$PREFIX/lib/.librcclx.so.tmp"
mv -f "$PREFIX/lib/.librcclx.so.tmp" "$PREFIX/lib/librcclx.so"
for name in libnccl.so.2 libnccl.so librccl.so.1 librccl.so; do
  ln -sfn librcclx.so "$PREFIX/lib/$name"
done
install -m 0644 "$HEADER" "$PREFIX/include/rcclx.h"

echo "installed rcclx into $PREFIX:"
echo "  $PREFIX/lib/librcclx.so (+ libnccl.so.2, libnccl.so, librccl.so.1, librccl.so -> librcclx.so)"
echo "  $PREFIX/include/rcclx.h"
echo "use: LD_LIBRARY_PATH=$PREFIX/lib RCCLX_UPSTREAM_LIB=/path/to/stock/libnccl.so.2 <program>"
