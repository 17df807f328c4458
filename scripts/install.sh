#!/usr/bin/env bash
# Install rcclx under a prefix:
#
#   PREFIX/lib/librcclx.so.0                  the library (SONAME librcclx.so.0)
#   PREFIX/lib/librcclx.so                    symlink to it (link with -lrcclx)
#   PREFIX/lib/libnccl.so.2                   a copy, SONAME libnccl.so.2 (NVIDIA NCCL's name)
#   PREFIX/lib/libnccl.so                     symlink to libnccl.so.2 (link with -lnccl)
#   PREFIX/lib/librccl.so.1                   a copy, SONAME librccl.so.1 (AMD RCCL's name)
#   PREFIX/lib/librccl.so                     symlink to librccl.so.1 (link with -lrccl)
#   PREFIX/include/rcclx.h                    rcclx's own C API (includes the stock nccl.h)
#
# Usage: bash scripts/install.sh PREFIX
#   Builds with `cargo build --release` first (a no-op when up to date), unless RCCLX_LIB names
#   an already built librcclx.so to install instead (the tests do that).
#
# Link-time substitution: each copy's SONAME is the stock library's (scripts/set-soname.py
# rewrites the library's own, librcclx.so.0, in place), so a binary with DT_NEEDED libnccl.so.2
# (nccl-tests, PyTorch CUDA) or librccl.so.1 (rccl-tests, PyTorch ROCm) finds it when
# PREFIX/lib comes first in its search path (LD_LIBRARY_PATH, rpath), and a program linked with
# -L PREFIX/lib -lnccl records libnccl.so.2, as it would against the stock library.
#
# The stock library must then be given with RCCLX_UPSTREAM_LIB=/path/to/libnccl.so.2 (or be
# discoverable: see README "Troubleshooting"): inside such a process dlopen("libnccl.so.2")
# returns rcclx itself, which rcclx detects (marker symbol rcclxGetVersion / same file) and
# skips, so it never forwards to itself.
#
# Uninstall: remove the seven files above.
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
# Each file is written under a temporary name and renamed, so a process that has the old file
# mapped keeps working.
put() { # put SONAME FILE
  local tmp="$PREFIX/lib/.$2.tmp"
  cp -f "$LIB" "$tmp"
  chmod 0755 "$tmp"
  if [ "$1" != librcclx.so.0 ]; then
    python3 "$REPO/scripts/set-soname.py" "$tmp" "$1" || { rm -f "$tmp"; exit 1; }
  fi
  mv -f "$tmp" "$PREFIX/lib/$2"
}
rm -f "$PREFIX/lib/librcclx.so" "$PREFIX/lib/libnccl.so.2" "$PREFIX/lib/librccl.so.1" # older symlinks
put librcclx.so.0 librcclx.so.0
put libnccl.so.2 libnccl.so.2
put librccl.so.1 librccl.so.1
ln -sfn librcclx.so.0 "$PREFIX/lib/librcclx.so"
ln -sfn libnccl.so.2 "$PREFIX/lib/libnccl.so"
ln -sfn librccl.so.1 "$PREFIX/lib/librccl.so"
install -m 0644 "$HEADER" "$PREFIX/include/rcclx.h"

echo "installed rcclx into $PREFIX:"
echo "  $PREFIX/lib/librcclx.so.0, libnccl.so.2, librccl.so.1 (SONAME each its own name)"
echo "  $PREFIX/lib/librcclx.so, libnccl.so, librccl.so (symlinks for linking)"
echo "  $PREFIX/include/rcclx.h"
echo "use: LD_LIBRARY_PATH=$PREFIX/lib RCCLX_UPSTREAM_LIB=/path/to/stock/libnccl.so.2 <program>"
