#!/bin/sh
# Linker for the wheel's librcclx.so: `zig cc` against glibc 2.28 (manylinux_2_28, the baseline of
# PyTorch's and NCCL's wheels). setup.py passes it to rustc as `-C linker=` for the rcclx crate only
# (as cargo-zigbuild and maturin --zig do); run by rustc with a gcc-style command line.
#
#   RCCLX_LINK_ZIG      the zig binary (default: zig on PATH)
#   RCCLX_LINK_TARGET   zig's target (default x86_64-linux-gnu.2.28: glibc 2.28)
# setup.py sets both.
#
# What it changes in rustc's command line (as cargo-zigbuild's src/zig/linker_args.rs does):
#   -fuse-ld=lld, -B<rust's gcc-ld>   dropped: zig links with its own lld
#   -lgcc_s                           -> -lunwind: zig's libunwind, linked statically (zig has no
#                                        libgcc_s; rcclx unwinds only inside itself: abi::boundary)
#   -Wl,--no-undefined-version        dropped (as cargo-zigbuild does)
#   --target=...                      dropped (zig gets -target)
# and adds:
#   -Wl,-z,defs   a symbol that glibc 2.28 lacks fails the link instead of loading lazily
#   -Wl,--build-id=sha1
#                 a GNU build ID, as cargo's own link (gcc/ld) gives: perf, gdb, debuginfod and
#                 systemd-coredump find librcclx.so.debug by it (zig's lld adds none by default)
# Response files (@file, which rustc uses for long command lines) are filtered the same way.
set -eu
ZIG="${RCCLX_LINK_ZIG:-zig}"
TARGET="${RCCLX_LINK_TARGET:-x86_64-linux-gnu.2.28}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/rcclx-zig-link.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

filter() {
  case "$1" in
    -fuse-ld=*|-B*|--target=*|-Wl,--no-undefined-version) return 1 ;;
    -lgcc_s) echo "-lunwind" ;;
    *) printf '%s\n' "$1" ;;
  esac
}

n=0
for arg in "$@"; do
  shift
  case "$arg" in
    @*)
      n=$((n + 1))
      # One argument per line; the arguments filtered here have no characters rustc escapes.
      sed -e '/^-fuse-ld=/d' -e '/^-B/d' -e '/^--target=/d' -e '/^-Wl,--no-undefined-version$/d' \
        -e 's/^-lgcc_s$/-lunwind/' "${arg#@}" > "$tmp/rsp$n"
      set -- "$@" "@$tmp/rsp$n"
      ;;
    *)
      if out="$(filter "$arg")"; then set -- "$@" "$out"; fi
      ;;
  esac
done

"$ZIG" cc -target "$TARGET" "$@" -Wl,-z,defs -Wl,--build-id=sha1
