#!/usr/bin/env bash
# Build the Python wheel of rcclx (python/) and test it in a fresh virtual environment. No GPU.
#
#   1. build venv       setuptools + setuptools-rust + auditwheel (pinned) in $WORK/build-venv;
#                       zig (ci/install-toolchains.sh zig) if .tools/ has none
#   2. benchmark        rccl-tests-compat/portable.sh: the benchmark for the wheel (nvcc, then zig
#                       against glibc 2.28), so `python -m rcclx tune` runs from the installed wheel
#                       (skipped with RCCLX_NO_KERNELS=1: no nvcc)
#      wheel            pip wheel --no-build-isolation ./python: setuptools-rust runs
#                       `cargo rustc --lib --release --crate-type cdylib -- -C linker=zig-link.sh`
#                       in the repository's target/: the library linked by zig against glibc 2.28
#                       (RCCLX_REQUIRE_KERNELS=1: the kernels of all three GPU targets must be in
#                       it). Kernels already built by `cargo build --release` (ci/test.sh) are
#                       reused, not compiled again (see "Why no build isolation" below); the rcclx
#                       crate itself is compiled again (its linker differs).
#   3. wheel contents   py3-none-manylinux_2_28_<arch>; rcclx/bin/rcclx_perf (the benchmark);
#                       rcclx/librcclx.so is cargo's file stripped
#                       (same code), with kernels, naming target/release/librcclx.so.debug (its
#                       debug info, CRC checked); LICENSE-MIT and LICENSE-APACHE in the metadata
#   4. auditwheel show  the wheel's policy is manylinux_2_28 or older (the glibc it needs)
#   5. fresh venv       pip install the wheel and nvidia-nccl-cu13==2.28.9 (PyPI)
#   6. CLI              python -m rcclx env / info (the library's JSON: commit, GPU targets, the
#                       stock library's path and version, settings), the warnings for a missing
#                       RCCLX_UPSTREAM_LIB, the `rcclx` script, eval of the env lines
#   7. run              python -m rcclx run -- python -c '...': LD_PRELOAD names the bundled
#                       library, rcclx.is_active(), ncclGetVersion through the preload = 22809,
#                       rcclx.stats(); the exit status of the command is passed through
#   8. ctypes smoke     the bundled library loaded by path (as vLLM does), RCCLX_UPSTREAM_LIB = the
#                       wheel's libnccl.so.2: rcclxGetVersion, ncclGetVersion (22809),
#                       rcclxRouteName(0) = forwarded, rcclxGetProcessRouteStats,
#                       rcclx.stats(group=...)
#   9. Python tests     python -m unittest on python/tests/ against the installed package (no torch,
#                       no GPU: a stand-in torch module), e.g. the coded AllToAllv's FP8 format check
#  10. tune             `python -m rcclx tune` finds the wheel's benchmark (no source tree) and it
#                       runs (--help)
#
# Ends with PASS/FAIL per check and "N passed, N failed"; exit status 1 if any check failed.
#
# Why no build isolation: the build requirements come pinned from this script's build venv
# (step 1), and the build then sees this shell's RCCLX_* and target/, so cargo compiles only the
# rcclx crate again (for its linker), not its dependencies or the kernels that ci/test.sh built.
#
# Environment: RCCLX_NO_KERNELS=1 builds without kernels (as ci/test.sh); WHEEL_OUT=DIR copies
# the wheel and librcclx.so.debug there; KEEP=1 keeps the work folder ($WORK: venvs, wheel, logs).
# Needs: cargo, python3 >= 3.9 with venv (or pip, for virtualenv), objcopy (binutils), network
# access to PyPI.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
# setuptools-rust runs cargo in python/: a relative target directory would land in python/ (a
# second tree of build outputs, inside the working tree); anchor it to the repository.
if [ -n "${CARGO_TARGET_DIR:-}" ] && [ "${CARGO_TARGET_DIR#/}" = "$CARGO_TARGET_DIR" ]; then
  export CARGO_TARGET_DIR="$REPO/$CARGO_TARGET_DIR"
fi
START=$SECONDS
PY="${PYTHON:-python3}"
NCCL_VERSION=2.28.9
NCCL_PIN="nvidia-nccl-cu13==$NCCL_VERSION"
NCCL_CODE=22809
BUILD_PINS=(setuptools==80.9.0 setuptools-rust==1.13.0 auditwheel==6.8.2)
# The newest glibc the wheel may need: manylinux_2_28, the baseline of PyTorch's and NCCL's wheels.
GLIBC_MINOR=28
ZIG="${RCCLX_WHEEL_ZIG:-$REPO/.tools/zig/ziglang/zig}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/rcclx-wheel.XXXXXX")"
cleanup() { if [ "${KEEP:-0}" = 1 ]; then echo "work folder kept: $WORK"; else rm -rf "$WORK"; fi; }
trap cleanup EXIT

SUMMARY=()
PASSED=0
FAILED=0
summary() {
  echo
  echo "================================ ci/wheel.sh summary ================================"
  for line in "${SUMMARY[@]+"${SUMMARY[@]}"}"; do echo "  $line"; done
  echo "  total time: $((SECONDS - START)) s"
  echo "$PASSED passed, $FAILED failed"
  echo "====================================================================================="
}
# check <stop-on-failure: 1|0> <name> <command...>
check() {
  local stop=$1 name=$2
  shift 2
  echo
  echo "=== [$name]"
  local t0=$SECONDS rc=0
  "$@" || rc=$?
  local dt=$((SECONDS - t0))
  if [ "$rc" = 0 ]; then
    SUMMARY+=("PASS  $name (${dt} s)")
    PASSED=$((PASSED + 1))
  else
    SUMMARY+=("FAIL  $name (${dt} s, exit status $rc)")
    FAILED=$((FAILED + 1))
    if [ "$stop" = 1 ]; then
      summary
      exit 1
    fi
  fi
}

for tool in cargo "$PY" objcopy; do
  command -v "$tool" >/dev/null || { echo "ci/wheel.sh: $tool is required" >&2; exit 1; }
done
echo "rcclx ci/wheel.sh in $REPO ($("$PY" --version 2>&1), $(cargo --version), $(nproc) cores)"
echo "  work folder: $WORK"

# Same kernel setting as ci/test.sh, so the build script's inputs (and its stamp) match.
if [ "${RCCLX_NO_KERNELS:-0}" = 1 ]; then
  export RCCLX_NO_KERNELS=1
  unset RCCLX_REQUIRE_KERNELS
  echo "  RCCLX_NO_KERNELS=1: the wheel's library forwards only"
else
  export RCCLX_REQUIRE_KERNELS=1
fi

# (The check functions below run with errexit off, as the condition of `||`: every command that
# matters ends in `|| return 1`.)
# A virtual environment at $1 (venv; virtualenv from PyPI where venv lacks ensurepip).
make_venv() {
  "$PY" -m venv "$1" 2>/dev/null && "$1/bin/python" -m pip --version >/dev/null 2>&1 && return 0
  echo "  python3 -m venv failed (no ensurepip?): using virtualenv"
  rm -rf "$1"
  "$PY" -m pip install --disable-pip-version-check -q --target "$WORK/virtualenv" virtualenv || return 1
  PYTHONPATH="$WORK/virtualenv" "$PY" -m virtualenv -q "$1"
}

# --- 1 + 2: build --------------------------------------------------------------------------
BVENV="$WORK/build-venv"
build_venv() {
  make_venv "$BVENV" || return 1
  "$BVENV/bin/python" -m pip install --disable-pip-version-check -q "${BUILD_PINS[@]}" || return 1
  "$BVENV/bin/python" -m pip list --disable-pip-version-check 2>/dev/null | grep -Ei '^(setuptools|setuptools-rust|auditwheel) '
  # zig links the library against glibc 2.28 (python/setup.py, python/zig-link.sh).
  if [ ! -x "$ZIG" ] && [ -z "${RCCLX_WHEEL_ZIG:-}" ]; then
    bash ci/install-toolchains.sh zig || return 1
  fi
  [ -x "$ZIG" ] || { echo "  FAIL: no zig at $ZIG"; return 1; }
  echo "  zig $("$ZIG" version): $ZIG"
}
check 1 "build venv (${BUILD_PINS[*]}), zig" build_venv

# The benchmark the wheel carries (python/setup.py: RCCLX_WHEEL_BENCH).
BENCH=""
if [ "${RCCLX_NO_KERNELS:-0}" = 1 ]; then
  echo "  RCCLX_NO_KERNELS=1: no nvcc, the wheel carries no benchmark"
else
  BENCH="$WORK/rcclx_perf"
  check 1 "the wheel's benchmark (rccl-tests-compat/portable.sh: glibc 2.28)" \
    env ZIG="$ZIG" bash rccl-tests-compat/portable.sh "$BENCH"
fi

BUILD_LOG="$WORK/build.log"
build_wheel() {
  local rc=0 marker="$WORK/before-build"
  touch "$marker"
  # -v: setuptools-rust prints the cargo command and cargo's progress (into the log).
  RCCLX_WHEEL_ZIG="$ZIG" RCCLX_WHEEL_BENCH="$BENCH" "$BVENV/bin/python" -m pip wheel --disable-pip-version-check \
    --no-build-isolation --no-deps -v -w "$WORK/dist" ./python > "$BUILD_LOG" 2>&1 || rc=$?
  grep -E '^ *(cargo rustc|Compiling|Finished|Created wheel|error|rcclx setup.py)' "$BUILD_LOG" \
    | sed 's/^ */  /' | cut -c1-240 || true
  local target="${CARGO_TARGET_DIR:-target}"
  if [ -n "$(find "$target/release/build" -path '*/rcclx-*/out/rcclx.*' -newer "$marker" 2>/dev/null | head -n 1)" ]; then
    echo "  the GPU kernels were compiled in this build (their inputs changed since the last cargo build)"
  else
    echo "  the GPU kernels were reused from the last cargo build"
  fi
  if [ "$rc" != 0 ]; then
    echo "--- last 60 lines of $BUILD_LOG"
    tail -n 60 "$BUILD_LOG"
  fi
  return "$rc"
}
check 1 "pip wheel ./python (cargo, RCCLX_REQUIRE_KERNELS=${RCCLX_REQUIRE_KERNELS:-0})" build_wheel
WHEELS=("$WORK"/dist/rcclx-*.whl)
WHEEL="${WHEELS[0]}"
DEBUG_FILE="${CARGO_TARGET_DIR:-target}/release/librcclx.so.debug"
echo "  wheel: $(basename "$WHEEL") ($(stat -c %s "$WHEEL") bytes)"
echo "  debug info: $DEBUG_FILE ($(stat -c %s "$DEBUG_FILE" 2>/dev/null || echo missing) bytes)"
if [ -n "${WHEEL_OUT:-}" ]; then
  mkdir -p "$WHEEL_OUT" && cp "$WHEEL" "$WHEEL_OUT/" && cp "$DEBUG_FILE" "$WHEEL_OUT/" \
    && echo "  wheel and librcclx.so.debug copied to $WHEEL_OUT/"
fi

# --- 3: contents ---------------------------------------------------------------------------
wheel_contents() {
  "$PY" - "$WHEEL" "$REPO" "${RCCLX_REQUIRE_KERNELS:-0}" "$GLIBC_MINOR" "$BENCH" <<'EOF'
import os, re, struct, sys, zipfile, zlib
whl, repo, require, glibc_minor = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
bench = sys.argv[5]
bad = []
name = os.path.basename(whl)
m = re.fullmatch(r"rcclx-([0-9][^-]*)-py3-none-manylinux_2_(\d+)_[a-z0-9_]+\.whl", name)
if not m or int(m.group(2)) > glibc_minor:
    bad.append(f"unexpected wheel name/tag {name} (want py3-none-manylinux_2_N_<arch>, N <= {glibc_minor})")
z = zipfile.ZipFile(whl)
names = set(z.namelist())
dist_info = f"rcclx-{m.group(1)}.dist-info" if m else "rcclx-?.dist-info"
for want in ("rcclx/__init__.py", "rcclx/__main__.py", "rcclx/_capi.py", "rcclx/_version.py", "rcclx/librcclx.so",
             f"{dist_info}/licenses/LICENSE-MIT", f"{dist_info}/licenses/LICENSE-APACHE"):
    if want not in names:
        bad.append(f"missing {want}")
for lic, line in (("LICENSE-MIT", b"MIT License"), ("LICENSE-APACHE", b"Apache License")):
    path = f"{dist_info}/licenses/{lic}"
    if path in names and line not in z.read(path)[:200]:
        bad.append(f"{path} is not the license text")
so = z.read("rcclx/librcclx.so") if "rcclx/librcclx.so" in names else b""
info = z.getinfo("rcclx/librcclx.so") if so else None
if so[:4] != b"\x7fELF":
    bad.append("rcclx/librcclx.so is not an ELF file")
if info and not (info.external_attr >> 16) & 0o111:
    bad.append("rcclx/librcclx.so is not executable in the wheel")
if bench:
    perf = "rcclx/bin/rcclx_perf"
    if perf not in names:
        bad.append(f"missing {perf}")
    elif z.read(perf) != open(bench, "rb").read():
        bad.append(f"{perf} is not {bench}")
    elif not (z.getinfo(perf).external_attr >> 16) & 0o111:
        bad.append(f"{perf} is not executable in the wheel")


def sections(data):
    """{name: bytes} of an ELF64 little-endian file's sections (empty for NOBITS)."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = hdrs[shstrndx][4]
    out = {}
    for nm, kind, _, _, off, size, *_ in hdrs:
        n = data[strtab + nm:data.index(b"\0", strtab + nm)].decode()
        out[n] = b"" if kind == 8 else data[off:off + size]
    return out


# setuptools-rust copied cargo's output and setup.py stripped it: the wheel's code and data are
# target/release/librcclx.so's; its debug info is in target/release/librcclx.so.debug, which the
# wheel's library names (.gnu_debuglink: the file name, then the file's CRC-32).
target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(repo, "target")
built = os.path.join(target, "release", "librcclx.so")
debug = built + ".debug"
same = stripped = False
if so[:4] == b"\x7fELF" and os.path.isfile(built):
    mine, theirs = sections(so), sections(open(built, "rb").read())
    code = (".text", ".rodata", ".data", ".data.rel.ro", ".dynsym", ".dynstr")
    same = all(mine.get(s) == theirs.get(s) for s in code) and ".text" in mine
    if not same:
        bad.append(f"rcclx/librcclx.so's {code} differ from {built}'s")
    debug_sections = sorted(s for s in mine if s.startswith(".debug") or s == ".symtab")
    stripped = not debug_sections
    if not stripped:
        bad.append(f"rcclx/librcclx.so is not stripped: {debug_sections}")
    link = mine.get(".gnu_debuglink", b"")
    fname = link.split(b"\0", 1)[0].decode()
    if fname != "librcclx.so.debug":
        bad.append(f"rcclx/librcclx.so's .gnu_debuglink names {fname!r}, not librcclx.so.debug")
    elif not os.path.isfile(debug):
        bad.append(f"{debug} is missing")
    else:
        dbg = open(debug, "rb").read()
        if struct.unpack_from("<I", link, len(link) - 4)[0] != zlib.crc32(dbg):
            bad.append(f"the CRC in rcclx/librcclx.so's .gnu_debuglink is not {debug}'s")
        if ".debug_info" not in sections(dbg):
            bad.append(f"{debug} has no .debug_info")
        # A GNU build ID (python/zig-link.sh), the same in the library and its debug file.
        bid = mine.get(".note.gnu.build-id", b"")
        if len(bid) < 16 + 20:
            bad.append("rcclx/librcclx.so has no 20-byte GNU build ID (.note.gnu.build-id)")
        elif sections(dbg).get(".note.gnu.build-id") != bid:
            bad.append(f"{debug}'s build ID is not rcclx/librcclx.so's")
        else:
            print(f"  build ID {bid[16:].hex()} in the wheel's librcclx.so and in {debug}")
elif not os.path.isfile(built):
    bad.append(f"{built} is missing")
# With RCCLX_REQUIRE_KERNELS=1 the code objects of all three targets are embedded: an NVIDIA
# fatbin (magic 0xBA55ED50) and AMDGPU ELF images (ELFOSABI_AMDGPU_HSA, e_machine EM_AMDGPU = 224)
# whose e_flags name the GPU (EF_AMDGPU_MACH 0x4c = gfx942, 0x4f = gfx950).
mach = {0x4C: "gfx942", 0x4F: "gfx950"}
kernels = {"sm_90": so.count(struct.pack("<I", 0xBA55ED50)) > 0, "gfx942": False, "gfx950": False}
i = so.find(b"\x7fELF", 1)
while i != -1 and i + 64 <= len(so):
    if so[i + 4] == 2 and so[i + 7] == 0x40 and struct.unpack_from("<H", so, i + 18)[0] == 224:
        gpu = mach.get(struct.unpack_from("<I", so, i + 48)[0] & 0xFF)
        if gpu:
            kernels[gpu] = True
    i = so.find(b"\x7fELF", i + 1)
if require and not all(kernels.values()):
    bad.append(f"kernel code objects missing: {kernels}")
print(f"  {name}: {len(names)} files; librcclx.so {len(so)} bytes, stripped: {stripped}, same code as "
      f"{built}: {same}; embedded code objects: {kernels}")
print(f"  {built}: {os.path.getsize(built) if os.path.isfile(built) else '?'} bytes; {debug}: "
      f"{os.path.getsize(debug) if os.path.isfile(debug) else '?'} bytes")
for b in bad:
    print("  FAIL:", b)
sys.exit(1 if bad else 0)
EOF
}
check 0 "wheel contents" wheel_contents

# --- 4: auditwheel -------------------------------------------------------------------------
audit() {
  local out policy
  out="$("$BVENV/bin/auditwheel" show "$WHEEL" 2>&1)" || { echo "$out" | sed 's/^/  /'; return 1; }
  echo "$out" | sed 's/^/  /'
  # "... is consistent with the following platform tag: "manylinux_2_28_x86_64"."
  policy="$(echo "$out" | tr -d '\n' | sed -n 's/.*following platform tag: *"manylinux_2_\([0-9]*\)_.*/\1/p')"
  [ -n "$policy" ] || { echo "  FAIL: auditwheel names no manylinux platform tag"; return 1; }
  [ "$policy" -le "$GLIBC_MINOR" ] || { echo "  FAIL: the wheel needs manylinux_2_$policy, newer than manylinux_2_$GLIBC_MINOR"; return 1; }
  echo "  policy manylinux_2_$policy: installs where glibc >= 2.$policy (PyTorch's and NCCL's wheels: 2.28)"
}
check 0 "auditwheel show: manylinux_2_$GLIBC_MINOR or older" audit

# --- 5: install ----------------------------------------------------------------------------
VENV="$WORK/venv"
VPY="$VENV/bin/python"
install_wheel() {
  make_venv "$VENV" || return 1
  "$VPY" -m pip install --disable-pip-version-check -q "$WHEEL" "$NCCL_PIN" || return 1
  "$VPY" -m pip list --disable-pip-version-check 2>/dev/null | grep -Ei '^(rcclx|nvidia-nccl)'
}
check 1 "fresh venv: pip install wheel + $NCCL_PIN" install_wheel
SITE="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')"
LIB="$SITE/rcclx/librcclx.so"
STOCK="$SITE/nvidia/nccl/lib/libnccl.so.2"
echo "  bundled: $LIB"
echo "  stock:   $STOCK"

# --- 6: CLI --------------------------------------------------------------------------------
cli_env() {
  local out
  out="$(cd "$WORK" && env -u LD_PRELOAD -u RCCLX_UPSTREAM_LIB "$VPY" -m rcclx env)"
  echo "$out" | sed 's/^/  /'
  local want
  want="$(printf 'export LD_PRELOAD=%s\nexport RCCLX_UPSTREAM_LIB=%s\nexport VLLM_NCCL_SO_PATH=%s\nexport SGLANG_NCCL_SO_PATH=%s' \
    "$LIB" "$STOCK" "$LIB" "$LIB")"
  if [ "$out" != "$want" ]; then
    echo "  FAIL: expected"
    echo "$want" | sed 's/^/    /'
    return 1
  fi
  # The lines work in a shell.
  (
    eval "$out"
    [ "$LD_PRELOAD" = "$LIB" ] && [ "$RCCLX_UPSTREAM_LIB" = "$STOCK" ]
  ) || { echo "  FAIL: eval of the lines"; return 1; }
  # An LD_PRELOAD already set is kept behind librcclx.so (and librcclx.so is not repeated);
  # an RCCLX_UPSTREAM_LIB already set is kept.
  "$VPY" -c '
import rcclx, sys
lib = rcclx.library_path()
e = rcclx.activation_env({"LD_PRELOAD": "/x/libother.so " + lib, "RCCLX_UPSTREAM_LIB": "/y/libnccl.so.2"})
sys.exit(not (e["LD_PRELOAD"] == lib + ":/x/libother.so" and e["RCCLX_UPSTREAM_LIB"] == "/y/libnccl.so.2"))
' || { echo "  FAIL: activation_env with LD_PRELOAD / RCCLX_UPSTREAM_LIB already set"; return 1; }
  echo "  the lines eval in a shell; a set LD_PRELOAD / RCCLX_UPSTREAM_LIB is kept"
}
check 0 "python -m rcclx env" cli_env

cli_info() {
  local out rc=0 crate
  crate="$(sed -n '/^\[package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)"
  # As a user runs it: the library loaded in a child process, with the stock library of this venv.
  out="$(cd "$WORK" && env -u LD_PRELOAD -u RCCLX_UPSTREAM_LIB "$VPY" -m rcclx info 2>"$WORK/info.err")" || rc=$?
  [ "$rc" = 0 ] || { echo "  FAIL: exit status $rc"; sed 's/^/    /' "$WORK/info.err"; return 1; }
  echo "$out" | WANT_VERSION="$crate" WANT_LIB="$LIB" WANT_STOCK="$STOCK" WANT_STOCK_VERSION="$NCCL_VERSION" \
    WANT_COMMIT="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)" \
    WANT_TARGETS="$([ "${RCCLX_REQUIRE_KERNELS:-0}" = 1 ] && echo gfx942,gfx950,sm_90)" "$VPY" -c '
import json, os, sys
e = os.environ
d = json.load(sys.stdin)
shown = {k: (f"{{... {len(v)} variables}}" if k == "settings" else v) for k, v in d.items()}
print("\n".join("  " + line for line in json.dumps(shown, indent=2).splitlines()))
bad = []
def want(what, ok):
    if not ok:
        bad.append(what)
want("version " + e["WANT_VERSION"], d.get("version") == e["WANT_VERSION"] and "library_version" not in d)
want("library_loaded", d.get("library_loaded") is True and d.get("library") == e["WANT_LIB"])
want("commit " + e["WANT_COMMIT"], d.get("commit") == e["WANT_COMMIT"])
want("gpu_targets " + e["WANT_TARGETS"], ",".join(sorted(d.get("gpu_targets") or [])) == e["WANT_TARGETS"])
stock = d.get("stock_library") or {}
want("stock_library path", stock.get("path") and os.path.samefile(stock["path"], e["WANT_STOCK"]))
want("stock_library version " + e["WANT_STOCK_VERSION"], stock.get("version") == e["WANT_STOCK_VERSION"])
want("disabled false", d.get("disabled") is False)
fp8 = {"gfx942": "e4m3fnuz", "gfx950": "e4m3fn", "sm_90": "e4m3fn"}
want("fp8_formats", d.get("fp8_formats") == {t: fp8[t] for t in d.get("gpu_targets") or []})
want("gpu_runtime, devices", isinstance(d.get("gpu_runtime"), dict) and isinstance(d.get("devices"), list))
settings = d.get("settings") or {}
want("settings", isinstance(settings, dict) and "RCCLX_DISABLE" in settings
     and all(set(v) == {"value", "default"} for v in settings.values()))
want("settings: RCCLX_UPSTREAM_LIB in effect", (settings.get("RCCLX_UPSTREAM_LIB") or {}).get("value") == stock.get("path"))
for b in bad:
    print("  FAIL: info:", b)
sys.exit(1 if bad else 0)
' || return 1

  # RCCLX_UPSTREAM_LIB naming a missing file: info reports that path with an error and exits 1
  # (every NCCL call would fail), env passes it through, both warn on stderr.
  local missing=/nonexistent/libnccl.so.2
  out="$(cd "$WORK" && env -u LD_PRELOAD RCCLX_UPSTREAM_LIB=$missing "$VPY" -m rcclx info 2>"$WORK/info.err")" || rc=$?
  [ "$rc" = 1 ] || { echo "  FAIL: info with a missing RCCLX_UPSTREAM_LIB: exit status $rc (want 1)"; return 1; }
  grep -q "the stock library did not load" "$WORK/info.err" \
    || { echo "  FAIL: info with a missing RCCLX_UPSTREAM_LIB: no line saying the stock library did not load"; return 1; }
  rc=0
  echo "$out" | "$VPY" -c "import json, sys; s = json.load(sys.stdin)['stock_library']; sys.exit(not (s['path'] == '$missing' and 'error' in s and 'version' not in s))" \
    || { echo "  FAIL: info with RCCLX_UPSTREAM_LIB=$missing: stock_library is not {path, error}"; return 1; }
  grep -q "RCCLX_UPSTREAM_LIB names $missing, which does not exist" "$WORK/info.err" \
    || { echo "  FAIL: info: no warning for RCCLX_UPSTREAM_LIB=$missing"; return 1; }
  out="$(cd "$WORK" && env -u LD_PRELOAD RCCLX_UPSTREAM_LIB=$missing "$VPY" -m rcclx env 2>"$WORK/env.err")" || rc=$?
  [ "$rc" = 0 ] && echo "$out" | grep -qx "export RCCLX_UPSTREAM_LIB=$missing" \
    && grep -q "RCCLX_UPSTREAM_LIB names $missing, which does not exist" "$WORK/env.err" \
    || { echo "  FAIL: env with RCCLX_UPSTREAM_LIB=$missing: exit status $rc, no warning or no line"; return 1; }
  echo "  RCCLX_UPSTREAM_LIB=$missing: info reports the path and the error, env and info warn:"
  sed 's/^/    /' "$WORK/env.err"

  # Without a loadable library, info still prints what it knows and exits 1.
  rc=0
  echo "not a shared library" > "$WORK/bogus.so"
  out="$(cd "$WORK" && BOGUS="$WORK/bogus.so" "$VPY" -c 'import os, sys, rcclx.__main__ as m
m.library_path = lambda: os.environ["BOGUS"]
sys.exit(m.main(["info"]))' 2>"$WORK/info.err")" || rc=$?
  [ "$rc" = 1 ] && echo "$out" | "$VPY" -c "import json, sys; d = json.load(sys.stdin); sys.exit(not (d['library_loaded'] is False and d['error'] and d['version']))" \
    || { echo "  FAIL: info with a library that does not load: exit status $rc (want 1) or no JSON"; return 1; }
  echo "  a library that does not load: exit status 1, JSON with the error: $(grep -m1 '^rcclx: loading' "$WORK/info.err" | cut -c1-150)"

  "$VENV/bin/rcclx" --version | grep -qx "rcclx $("$VPY" -c 'import rcclx; print(rcclx.__version__)')" \
    || { echo "  FAIL: rcclx --version"; return 1; }
  # The package version is the crate's.
  "$VPY" -c "import rcclx, sys; sys.exit(rcclx.__version__ != '$crate')" || { echo "  FAIL: __version__ != $crate"; return 1; }
  echo "  rcclx.__version__ = $crate (Cargo.toml), \`rcclx --version\` agrees"
}
check 0 "python -m rcclx info (the library's JSON), warnings, rcclx --version, __version__" cli_info

# --- 7: run --------------------------------------------------------------------------------
INSIDE='
import ctypes, os, sys
import rcclx
lib = rcclx.library_path()
pre = os.environ.get("LD_PRELOAD", "").split(":")
assert pre[0] == lib, f"LD_PRELOAD={pre} does not start with {lib}"
assert os.environ["VLLM_NCCL_SO_PATH"] == lib and os.environ["SGLANG_NCCL_SO_PATH"] == lib
assert rcclx.is_active(), "rcclx.is_active() is False under LD_PRELOAD"
v = ctypes.c_int(0)
assert ctypes.CDLL(None).ncclGetVersion(ctypes.byref(v)) == 0
assert v.value == int(os.environ["WANT_CODE"]), f"ncclGetVersion {v.value}"
s = rcclx.stats(all_routes=True)
assert s["active"] and os.path.samefile(s["library"], lib), s
assert s["version"] == rcclx.__version__, s
assert os.path.samefile(s["upstream"], os.environ["RCCLX_UPSTREAM_LIB"]), s
assert "allreduce.ll" in s["process"] and "forwarded" in s["process"], s
assert all(r["calls"] == 0 for r in s["process"].values()), s
assert rcclx.stats()["process"] == {}, "routes without calls are left out by default"
assert "torch" not in sys.modules
ver, up, nroutes = s["version"], s["upstream"], len(s["process"])
print(f"  inside: LD_PRELOAD[0]={lib}; is_active=True; ncclGetVersion={v.value}; "
      f"stats: version {ver}, upstream {up}, {nroutes} routes")
'
run_inside() {
  (cd "$WORK" && env -u LD_PRELOAD -u RCCLX_UPSTREAM_LIB WANT_CODE="$NCCL_CODE" \
    "$VPY" -m rcclx run -- "$VPY" -c "$INSIDE")
}
check 0 "python -m rcclx run -- python -c '...' (LD_PRELOAD, is_active, ncclGetVersion, stats)" run_inside

run_status() {
  local rc=0
  "$VPY" -m rcclx run -- "$VPY" -c 'import sys; sys.exit(7)' || rc=$?
  [ "$rc" = 7 ] || { echo "  FAIL: exit status $rc, want 7"; return 1; }
  rc=0
  "$VPY" -m rcclx run -- /nonexistent/command 2>/dev/null || rc=$?
  [ "$rc" = 127 ] || { echo "  FAIL: missing command: exit status $rc, want 127"; return 1; }
  echo "  exit status 7 passed through; a missing command gives 127"
}
check 0 "python -m rcclx run: exit status passed through" run_status

# --- 8: ctypes smoke test ------------------------------------------------------------------
SMOKE='
import ctypes, os, sys
import rcclx
from ctypes import byref, c_char_p, c_int, c_void_p
assert not rcclx.is_active(), "rcclx loaded before the test loaded it"
s = rcclx.stats(group=1234)
assert not s["active"] and s["comm"] is None and "not loaded" in s["comm_error"], s
path = rcclx.library_path()
lib = ctypes.CDLL(path)  # by path, RTLD_LOCAL: what vLLM and SGLang do with VLLM_NCCL_SO_PATH
v = c_int(0)
assert lib.rcclxGetVersion(byref(v)) == 0
assert rcclx._capi.version_string(v.value) == rcclx.__version__, (v.value, rcclx.__version__)
n = c_int(0)
assert lib.ncclGetVersion(byref(n)) == 0 and n.value == int(os.environ["WANT_CODE"]), n.value
lib.rcclxGetUpstreamPath.restype = c_char_p
up = lib.rcclxGetUpstreamPath().decode()
assert os.path.samefile(up, os.environ["RCCLX_UPSTREAM_LIB"]), up
lib.rcclxRouteName.restype = c_char_p
assert lib.rcclxRouteName(0) == b"forwarded", lib.rcclxRouteName(0)  # index 0: include/rcclx.h
count = c_int(-1)
assert lib.rcclxGetProcessRouteStats(None, 0, byref(count)) == 0 and count.value >= 2, count.value
arr = (rcclx._capi.rcclxRouteStats * count.value)()
assert lib.rcclxGetProcessRouteStats(arr, count.value, byref(count)) == 0
names = [lib.rcclxRouteName(i).decode() for i in range(count.value)]
assert lib.rcclxRouteName(count.value) is None and "allreduce.ll" in names, names
assert all(r.calls == 0 and r.bytes == 0 for r in arr)
lib.rcclxForwardReasonName.restype = c_char_p
assert lib.rcclxForwardReasonName(0)
lib.rcclxCommGetRouteStats.argtypes = [c_void_p, c_void_p, c_int, ctypes.POINTER(c_int)]
assert lib.rcclxCommGetRouteStats(c_void_p(0x1234), None, 0, byref(count)) == 4, "unknown comm: ncclInvalidArgument"
# The Python API finds an rcclx loaded by path (RTLD_LOCAL) too.
assert rcclx.is_active()
s = rcclx.stats(group=0x1234)
assert s["active"] and os.path.samefile(s["library"], path) and s["process"] == {}, s
assert s["comm"] is None and "not known to rcclx" in s["comm_error"], s
s = rcclx.stats(group=object())
assert s["comm"] is None and "unsupported" in s["comm_error"], s
assert "torch" not in sys.modules
print(f"  rcclxGetVersion={v.value} ({rcclx.__version__}); ncclGetVersion={n.value}; upstream={up}")
print(f"  routes ({count.value}): {names}; rcclxForwardReasonName(0)={lib.rcclxForwardReasonName(0).decode()}")
print("  rcclx.is_active() and rcclx.stats() see the by-path load; unknown/unsupported groups are reported, not raised")
'
smoke() {
  (cd "$WORK" && env -u LD_PRELOAD RCCLX_UPSTREAM_LIB="$STOCK" WANT_CODE="$NCCL_CODE" "$VPY" -c "$SMOKE")
}
check 0 "ctypes smoke test (bundled library by path, RCCLX_UPSTREAM_LIB = wheel's libnccl.so.2)" smoke

# --- 9: Python unit tests ------------------------------------------------------------------
pytests() {
  # From $WORK, so that `import rcclx` is the installed package, not the checkout's python/.
  (cd "$WORK" && env -u LD_PRELOAD "$VPY" -m unittest discover -v -s "$REPO/python/tests" -t "$REPO/python/tests")
}
check 0 "python unit tests (python/tests/, installed package)" pytests

# --- 10: tune's benchmark --------------------------------------------------------------------
tune_bench() {
  # From the work folder: no source tree around the installed package.
  (cd "$WORK" && "$VPY" -c '
import subprocess, sys
from rcclx import tune
found = tune.find_bench()
if found is None:
    sys.exit("tune.find_bench() found no benchmark")
where, command = found
if where != tune.BUNDLED:
    sys.exit(f"tune uses {where}, not the wheel'"'"'s {tune.BUNDLED}")
cmd = command("all_reduce") + ["--help"]
p = subprocess.run(cmd, capture_output=True, text=True)
if p.returncode != 0 or "USAGE" not in p.stdout:
    sys.exit(f"{cmd}: exit {p.returncode}: {p.stdout[:200]} {p.stderr[:200]}")
print(f"  {where}: {p.stdout.splitlines()[0]}")
')
}
if [ -n "$BENCH" ]; then
  check 0 "python -m rcclx tune finds the wheel's benchmark, which runs" tune_bench
fi

summary
[ "$FAILED" = 0 ]
