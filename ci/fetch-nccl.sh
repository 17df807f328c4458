#!/usr/bin/env bash
# Download the stock NCCL libraries the tests forward to, from PyPI (no GPU needed):
#
#   nvidia-nccl-cu13==2.28.9   what PyTorch 2.11 pins (NCCL_VERSION_CODE 22809)
#   nvidia-nccl-cu13==2.32.3   the newest; its headers are the reference for the C ABI check
#
# Each wheel is unpacked to .cache/nccl/<version>/ (only nvidia/nccl/lib and
# nvidia/nccl/include are kept) and deleted afterwards. Idempotent: a version whose
# libnccl.so.2 and nccl.h are already there is skipped. Prints the paths at the end, as
# shell assignments ci/test.sh can eval:
#   NCCL_2_28_LIB=... NCCL_2_32_LIB=... NCCL_2_32_INCLUDE=...
#
# Usage: bash ci/fetch-nccl.sh      (needs python3 -m pip, or pip, and network access to PyPI)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$REPO/.cache/nccl"
VERSIONS=(2.28.9 2.32.3)
mkdir -p "$CACHE"

PIP=(python3 -m pip)
if ! "${PIP[@]}" --version >/dev/null 2>&1; then PIP=(pip); fi

for v in "${VERSIONS[@]}"; do
  dest="$CACHE/$v"
  if [ -f "$dest/nvidia/nccl/lib/libnccl.so.2" ] && [ -f "$dest/nvidia/nccl/include/nccl.h" ]; then
    echo "fetch-nccl: $v already in $dest" >&2
    continue
  fi
  dl="$CACHE/download-$v"
  rm -rf "$dl" "$dest.tmp"
  mkdir -p "$dl"
  # pip refuses two versions of one package in one command, hence one call per version.
  "${PIP[@]}" download --disable-pip-version-check --no-cache-dir --no-deps --only-binary=:all: \
    -d "$dl" "nvidia-nccl-cu13==$v" >&2
  whl=("$dl"/nvidia_nccl_cu13-"$v"-*.whl)
  if [ ! -f "${whl[0]}" ]; then
    echo "fetch-nccl: no wheel for nvidia-nccl-cu13==$v in $dl" >&2
    exit 1
  fi
  # Only lib/ and include/ are needed: unzip just those members.
  python3 - "${whl[0]}" "$dest.tmp" <<'EOF'
import sys, zipfile, os, stat
whl, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    for m in z.infolist():
        if m.filename.startswith(("nvidia/nccl/lib/", "nvidia/nccl/include/")):
            z.extract(m, out)
            mode = (m.external_attr >> 16) & 0o777
            if mode:
                os.chmod(os.path.join(out, m.filename), mode)
EOF
  chmod 0755 "$dest.tmp/nvidia/nccl/lib/libnccl.so.2"
  rm -rf "$dest"
  mv "$dest.tmp" "$dest"
  rm -rf "$dl"
  echo "fetch-nccl: $v -> $dest" >&2
done

for v in "${VERSIONS[@]}"; do
  lib="$CACHE/$v/nvidia/nccl/lib/libnccl.so.2"
  code=$(sed -n 's/^#define NCCL_VERSION_CODE \([0-9]*\).*/\1/p' "$CACHE/$v/nvidia/nccl/include/nccl.h")
  echo "fetch-nccl: $v: $lib (NCCL_VERSION_CODE $code)" >&2
done
echo "NCCL_2_28_LIB=$CACHE/2.28.9/nvidia/nccl/lib/libnccl.so.2"
echo "NCCL_2_32_LIB=$CACHE/2.32.3/nvidia/nccl/lib/libnccl.so.2"
echo "NCCL_2_32_INCLUDE=$CACHE/2.32.3/nvidia/nccl/include"
