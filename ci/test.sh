#!/usr/bin/env bash
# THE test command of rcclx (README: `bash ci/test.sh`). Runs on a fresh Debian 12 machine with
# no GPU: installs what it needs, then formats, builds, lints and tests.
#
#   1. bash ci/install-toolchains.sh   nvcc (PyPI), clang-19 + llvm-22 (apt), zig (PyPI)
#   2. bash ci/fetch-nccl.sh           the stock libnccl.so.2 2.28.9 and 2.32.3 (PyPI wheels)
#   3. cargo fmt --all --check         (skipped with a note when rustfmt is not installed)
#   4. cargo build --release --workspace
#                                      librcclx.so and the GPU test programs (gpu-tests/), with
#                                      RCCLX_REQUIRE_KERNELS=1: the library's and the self-test's
#                                      kernels must compile for all three targets (sm_90,
#                                      gfx942, gfx950)
#   5. cargo clippy --release --workspace --all-targets -- -D warnings
#   6. cargo test --release --workspace
#                                      unit tests, tests/*.rs and gpu-tests' CPU-only checks
#                                      (all of them: --no-fail-fast), with the paths from step 2
#   7. bash ci/wheel.sh                the Python wheel (python/), manylinux_2_28: step 4's
#                                      library linked again by zig against glibc 2.28 (the rcclx
#                                      crate is compiled again for that linker, about 1 min; the
#                                      kernels are reused), stripped (debug info kept in
#                                      target/release/librcclx.so.debug), `auditwheel show` must
#                                      say manylinux_2_28 or older; installed in a fresh venv with
#                                      the stock NCCL wheel, its CLI (`info`: the library's JSON)
#                                      and ctypes loading checked, python/tests/ run on it; the
#                                      wheel and librcclx.so.debug (same GNU build ID) are left in
#                                      target/wheels/ (WHEEL_OUT)
#   8. rccl-tests-compat/build.sh, then its selftest's host section: the benchmark and checker
#                                      build (nvcc), usage errors exit 2, output in nccl-tests'
#                                      format, JSON read by bench/ratios.py (no GPU needed)
#
# Environment: RCCLX_NO_KERNELS=1 builds without GPU kernels (forwarding only) instead of
# requiring them; SKIP_APT=1 is passed on to install-toolchains.sh. Extra arguments are passed
# to `cargo test` (e.g. `bash ci/test.sh --test forwarding`).
#
# The integration tests fail (not skip) on a missing input when CI is set; this script sets
# every input, so a skip can only happen when a test is run by hand without them.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
START=$SECONDS
SUMMARY=()
FAILED=0
TEST_COUNTS=""

summary() {
  echo
  echo "================================ ci/test.sh summary ================================"
  for line in "${SUMMARY[@]+"${SUMMARY[@]}"}"; do echo "  $line"; done
  [ -n "$TEST_COUNTS" ] && echo "  tests: $TEST_COUNTS"
  echo "  total time: $((SECONDS - START)) s"
  if [ "$FAILED" = 0 ]; then echo "  RESULT: PASS"; else echo "  RESULT: FAIL"; fi
  echo "====================================================================================="
}

# step <stop-on-failure: 1|0> <name> <command...>
step() {
  local stop=$1 name=$2
  shift 2
  echo
  echo "=== [$name] $*"
  local t0=$SECONDS rc=0
  "$@" || rc=$?
  local dt=$((SECONDS - t0))
  if [ "$rc" = 0 ]; then
    SUMMARY+=("PASS  $name (${dt} s)")
  else
    SUMMARY+=("FAIL  $name (${dt} s, exit status $rc)")
    FAILED=1
    if [ "$stop" = 1 ]; then
      summary
      exit 1
    fi
  fi
}

note() { SUMMARY+=("NOTE  $*"); echo "NOTE: $*"; }

echo "rcclx ci/test.sh in $REPO (CI=${CI:-unset}, $(nproc) cores)"
for tool in cargo rustc cc c++ nm readelf python3; do
  if ! command -v "$tool" >/dev/null; then
    echo "ci/test.sh: $tool is required but not installed" >&2
    exit 1
  fi
done
echo "  $(cargo --version); $(rustc --version); $(cc --version | head -n 1)"

# 1 + 2: toolchains and the stock libraries.
if [ "${RCCLX_NO_KERNELS:-0}" = 1 ]; then
  note "RCCLX_NO_KERNELS=1: GPU toolchains not installed, library built without kernels"
else
  step 1 "install GPU toolchains" bash ci/install-toolchains.sh
fi
FETCH_OUT="$(mktemp)"
trap 'rm -f "$FETCH_OUT"' EXIT
step 1 "fetch stock NCCL wheels" bash -c 'bash ci/fetch-nccl.sh > "$1"' _ "$FETCH_OUT"
NCCL_2_28_LIB="$(sed -n 's/^NCCL_2_28_LIB=//p' "$FETCH_OUT")"
NCCL_2_32_LIB="$(sed -n 's/^NCCL_2_32_LIB=//p' "$FETCH_OUT")"
NCCL_2_32_INCLUDE="$(sed -n 's/^NCCL_2_32_INCLUDE=//p' "$FETCH_OUT")"

export RCCLX_TEST_NCCL_2_28="$NCCL_2_28_LIB"
export RCCLX_TEST_NCCL_2_32="$NCCL_2_32_LIB"
export RCCLX_TEST_NCCL_INCLUDE="$NCCL_2_32_INCLUDE"
# The C ABI check compiles nccl.h, which includes cuda_runtime.h: nvcc's headers from step 1.
CUDA_INCLUDE="$REPO/.tools/cuda/nvidia/cu13/include"
if [ -n "${RCCLX_TEST_CUDA_INCLUDE:-}" ]; then CUDA_INCLUDE="$RCCLX_TEST_CUDA_INCLUDE"; fi
export RCCLX_TEST_CUDA_INCLUDE="$CUDA_INCLUDE"
if [ ! -f "$CUDA_INCLUDE/cuda_runtime.h" ]; then
  note "no CUDA headers in $CUDA_INCLUDE: the C ABI tests will fail (run ci/install-toolchains.sh)"
fi
# Keep NCCL's bootstrap (ncclGetUniqueId) on loopback; the tests set it for their children too.
export NCCL_SOCKET_IFNAME=lo
echo "  RCCLX_TEST_NCCL_2_28=$RCCLX_TEST_NCCL_2_28"
echo "  RCCLX_TEST_NCCL_2_32=$RCCLX_TEST_NCCL_2_32"
echo "  RCCLX_TEST_NCCL_INCLUDE=$RCCLX_TEST_NCCL_INCLUDE"
echo "  RCCLX_TEST_CUDA_INCLUDE=$RCCLX_TEST_CUDA_INCLUDE"

# Same kernel setting for every cargo command, so build, clippy and test share one build.
if [ "${RCCLX_NO_KERNELS:-0}" = 1 ]; then
  export RCCLX_NO_KERNELS=1
  unset RCCLX_REQUIRE_KERNELS
else
  export RCCLX_REQUIRE_KERNELS=1
fi

# 3. Formatting.
if cargo fmt --version >/dev/null 2>&1; then
  fmt_check() {
    local files rc=0
    files="$(cargo fmt --all --check -- --files-with-diff)" || rc=$?
    if [ "$rc" != 0 ]; then
      echo "$files"
      echo "these files are not formatted: run \`cargo fmt --all\` (\`cargo fmt --all --check\` shows the diff)"
    fi
    return "$rc"
  }
  step 0 "cargo fmt --all --check" fmt_check
else
  note "rustfmt is not installed: formatting not checked (rustup component add rustfmt)"
fi

# 4. Build: the product, target/release/librcclx.so, and the GPU test programs.
step 1 "cargo build --release --workspace" cargo build --release --workspace
LIB="${CARGO_TARGET_DIR:-target}/release/librcclx.so"
if [ -f "$LIB" ]; then
  echo "  built $LIB ($(stat -c %s "$LIB") bytes)"
fi

# 5. Lints.
if cargo clippy --version >/dev/null 2>&1; then
  step 0 "cargo clippy -D warnings" cargo clippy --release --workspace --all-targets -- -D warnings
else
  SUMMARY+=("FAIL  clippy is not installed (rustup component add clippy)")
  FAILED=1
fi

# 6. Tests.
TEST_LOG="$(mktemp)"
trap 'rm -f "$FETCH_OUT" "$TEST_LOG"' EXIT
step 0 "cargo test --release --workspace" bash -c 'set -o pipefail; cargo test --release --workspace --no-fail-fast "${@:2}" 2>&1 | tee "$1"' _ "$TEST_LOG" "$@"
TEST_COUNTS="$(awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) g += $i } }
  END { printf "%d passed, %d failed, %d ignored", p, f, g }' "$TEST_LOG")"

# 7. The Python package.
# The wheel and its debug file (same build ID) stay in CI's output, side by side.
step 0 "python wheel, manylinux_2_28 (ci/wheel.sh)" env WHEEL_OUT="${WHEEL_OUT:-$REPO/target/wheels}" bash ci/wheel.sh

# 8. The benchmark and checker (nvcc): they build, and their host-only checks (options, usage
# errors exit 2, output in nccl-tests' format, JSON readable by bench/) pass without a GPU.
if [ "${RCCLX_NO_KERNELS:-0}" = 1 ]; then
  note "RCCLX_NO_KERNELS=1: no nvcc, the benchmark is not built"
else
  step 0 "benchmark build and host checks (rccl-tests-compat)" \
    bash -c 'bash rccl-tests-compat/build.sh && SECTIONS=host bash rccl-tests-compat/selftest.sh'
fi

summary
exit "$FAILED"
