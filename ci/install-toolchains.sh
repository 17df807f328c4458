#!/usr/bin/env bash
# Install the GPU kernel compilers that the build scripts use, into $REPO/.tools (git-ignored).
#
#   .tools/cuda/nvidia/cu13/bin/nvcc   nvcc 13.0.x from PyPI  -> sm_90 cubin + compute_90 PTX
#   clang++-19, lld-19, llvm-19        Debian apt             -> gfx942 (MI300) code object
#   llvm-22                            Debian apt (bookworm-security) -> llvm-objdump-22 and
#                                      llvm-readelf-22: the machine-code check reads the gfx950
#                                      object itself (LLVM 19 cannot disassemble gfx950)
#   .tools/zig/ziglang/zig             ziglang 0.17.1 (clang 22) from PyPI -> gfx950 (MI350), and
#                                      the wheel's linker (glibc 2.28: python/zig-link.sh)
#   .tools/zigbin/lld                  wrapper so clang's AMDGPU link step finds zig's lld
#   .tools/cuobjdump/nvidia/cu13/bin/cuobjdump
#                                      cuobjdump 13.2 from PyPI -> the sm_90 half of the machine-code
#                                      check (build/isa_check.rs; PyPI has no 13.0 cuobjdump, and a
#                                      newer one reads sm_90 cubins)
#
# Idempotent: a step whose result already exists is skipped. Needs pip, and root (or sudo)
# for apt-get. No GPU needed. Why these exact pins:
# nvcc 13.0 writes PTX 9.0, which every CUDA-13 driver can JIT (13.5 writes 9.5);
# Debian's clang-19 does not know gfx950, zig's clang 22 does.
#
# Usage: bash ci/install-toolchains.sh      (env SKIP_APT=1 skips the apt step)
#        bash ci/install-toolchains.sh zig  (zig only: what ci/wheel.sh needs to link the wheel)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$REPO/.tools"
mkdir -p "$TOOLS"

PIP=(python3 -m pip)
if ! "${PIP[@]}" --version >/dev/null 2>&1; then PIP=(pip); fi

ONLY="${1:-}"
case "$ONLY" in "" | zig) ;; *) echo "usage: bash ci/install-toolchains.sh [zig]" >&2; exit 2 ;; esac

installed=()
skipped=()

# --- 1. nvcc 13.0.x (pinned: see header) -----------------------------------------------------
NVCC="$TOOLS/cuda/nvidia/cu13/bin/nvcc"
if [ "$ONLY" = zig ]; then
  :
elif [ -x "$NVCC" ] && "$NVCC" --version 2>/dev/null | grep -q 'release 13\.0'; then
  skipped+=("nvcc ($NVCC)")
else
  rm -rf "$TOOLS/cuda"
  "${PIP[@]}" install --disable-pip-version-check --no-cache-dir --target "$TOOLS/cuda" \
    nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-runtime==13.0.96 \
    nvidia-cuda-cccl==13.0.85 nvidia-nvvm==13.0.88
  installed+=("nvcc 13.0.88 -> $NVCC")
fi

# --- 2. clang-19 + lld-19 + llvm-19 (gfx942; llvm-readelf-19 for checks), llvm-22 (gfx950's
#        disassembler, build/isa_check.rs) ----------------------------------------------------
if [ "$ONLY" = zig ]; then
  :
elif [ "${SKIP_APT:-0}" = 1 ]; then
  skipped+=("apt clang-19/lld-19/llvm-19/llvm-22 (SKIP_APT=1)")
elif command -v clang++-19 >/dev/null && command -v ld.lld-19 >/dev/null \
     && command -v llvm-readelf-19 >/dev/null && command -v llvm-objdump-22 >/dev/null \
     && command -v llvm-readelf-22 >/dev/null; then
  skipped+=("clang-19/lld-19/llvm-19/llvm-22 ($(command -v clang++-19), $(command -v llvm-objdump-22))")
else
  SUDO=()
  if [ "$(id -u)" != 0 ]; then SUDO=(sudo); fi
  "${SUDO[@]}" apt-get update
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends clang-19 lld-19 llvm-19 llvm-22
  installed+=("apt: clang-19 lld-19 llvm-19 llvm-22 -> $(command -v clang++-19), $(command -v llvm-objdump-22)")
fi

# --- 2b. cuobjdump (the machine-code check of sm_90, build/isa_check.rs) ----------------------
CUOBJDUMP="$TOOLS/cuobjdump/nvidia/cu13/bin/cuobjdump"
if [ "$ONLY" = zig ]; then
  :
elif [ -x "$CUOBJDUMP" ]; then
  skipped+=("cuobjdump ($CUOBJDUMP)")
else
  rm -rf "$TOOLS/cuobjdump"
  "${PIP[@]}" install --disable-pip-version-check --no-cache-dir --target "$TOOLS/cuobjdump" \
    nvidia-cuda-cuobjdump==13.2.51
  installed+=("cuobjdump 13.2.51 -> $CUOBJDUMP")
fi

# --- 3. zig 0.17.1 (bundles clang 22.1.x: the only gfx950-capable clang available here) -------
ZIG="$TOOLS/zig/ziglang/zig"
if [ -x "$ZIG" ] && [ "$("$ZIG" version 2>/dev/null)" = "0.17.1" ]; then
  skipped+=("zig ($ZIG)")
else
  rm -rf "$TOOLS/zig"
  "${PIP[@]}" install --disable-pip-version-check --no-cache-dir --target "$TOOLS/zig" ziglang==0.17.1
  installed+=("zig 0.17.1 -> $ZIG")
fi

# clang's AMDGPU link step runs `lld -flavor gnu ...`; zig embeds lld as `zig ld.lld`.
# Written every time (cheap) so a moved checkout gets the right absolute path.
mkdir -p "$TOOLS/zigbin"
cat > "$TOOLS/zigbin/lld.tmp" <<EOF
#!/bin/sh
[ "\$1" = "-flavor" ] && shift 2
exec "$ZIG" ld.lld "\$@"
EOF
chmod +x "$TOOLS/zigbin/lld.tmp"
mv -f "$TOOLS/zigbin/lld.tmp" "$TOOLS/zigbin/lld"

# Cargo only re-runs the build script when a watched file changes; a new compiler is not one
# of them. Bump the kernels' header mtime (content unchanged) so the next build picks them up.
if [ "${#installed[@]}" -gt 0 ] && [ -f "$REPO/hip_kernels/rcclx.cuh" ]; then
  touch "$REPO/hip_kernels/rcclx.cuh"
fi

# --- report ----------------------------------------------------------------------------------
echo "install-toolchains: done (tools in $TOOLS)"
for s in "${installed[@]+"${installed[@]}"}"; do echo "  installed: $s"; done
for s in "${skipped[@]+"${skipped[@]}"}"; do echo "  already present: $s"; done
if [ -x "$NVCC" ]; then echo "  nvcc:  $("$NVCC" --version | tail -n 2 | head -n 1)"; fi
if command -v clang++-19 >/dev/null; then echo "  clang: $(clang++-19 --version | head -n 1)"; fi
if command -v llvm-objdump-22 >/dev/null; then echo "  llvm-objdump-22: $(llvm-objdump-22 --version | grep 'LLVM version')"; fi
echo "  zig:   $("$ZIG" version) ($("$ZIG" cc --version 2>/dev/null | head -n 1))"
