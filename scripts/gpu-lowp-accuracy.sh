#!/usr/bin/env bash
# Runs the FP8 low-precision accuracy test (examples/lowp_accuracy.rs) on a machine with >= 2 GPUs:
# --procs 2 (two processes, one GPU each), --one-process (ncclCommInitAll + groups) and --toggle
# (LP switch per communicator), each under a time limit, each log kept.
#
# Usage: scripts/gpu-lowp-accuracy.sh [OUTDIR] [-- EXTRA ARGS]
#   OUTDIR      default lowp-accuracy-logs; logs: OUTDIR/lowp-accuracy-{procs,one-process,toggle}.log
#   EXTRA ARGS  passed to every mode (e.g. -- --quick, -- --filter allreduce, -- --no-lp)
# Environment:
#   BIN                 default target/release/examples/lowp_accuracy (cargo build --release --examples)
#   RCCLX_UPSTREAM_LIB  default the torch venv's NCCL (below)
#   LIMIT               seconds per mode, default 1500
#   MODES               default "procs one-process toggle"
# Exit status: 0 every mode passed, 1 a mode failed, 2 no GPU / no binary, 124 a mode timed out
# (the worst of the modes' statuses, in that order of precedence: 124, 1, 2).
set -uo pipefail

outdir="lowp-accuracy-logs"
if [[ $# -gt 0 && "$1" != "--" ]]; then
    outdir="$1"
    shift
fi
[[ "${1:-}" == "--" ]] && shift
extra=("$@")

bin="${BIN:-target/release/examples/lowp_accuracy}"
limit="${LIMIT:-1500}"
modes="${MODES:-procs one-process toggle}"
export RCCLX_UPSTREAM_LIB="${RCCLX_UPSTREAM_LIB:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2}"
# NVLink multicast stays off on the shared test machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

if [[ ! -x "$bin" ]]; then
    echo "gpu-lowp-accuracy: no executable at $bin (build it with: cargo build --release --examples)" >&2
    exit 2
fi
if [[ ! -e "$RCCLX_UPSTREAM_LIB" ]]; then
    echo "gpu-lowp-accuracy: warning: RCCLX_UPSTREAM_LIB=$RCCLX_UPSTREAM_LIB does not exist; rcclx will search the default paths" >&2
fi
mkdir -p "$outdir"

worst=0
for mode in $modes; do
    log="$outdir/lowp-accuracy-$mode.log"
    case "$mode" in
        procs) args=(--procs 2) ;;
        one-process) args=(--one-process) ;;
        toggle) args=(--toggle) ;;
        *) echo "gpu-lowp-accuracy: unknown mode $mode" >&2; exit 2 ;;
    esac
    echo "=== lowp_accuracy ${args[*]} ${extra[*]:-} (limit ${limit} s) -> $log"
    # -k: a mode that ignores SIGTERM (a hung GPU wait) is killed 10 s later.
    timeout -k 10 "$limit" "$bin" "${args[@]}" "${extra[@]}" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    [[ $rc -eq 137 ]] && rc=124
    [[ $rc -eq 124 ]] && echo "=== $mode: TIMED OUT after ${limit} s" | tee -a "$log"
    echo "=== $mode: exit status $rc"
    if [[ $rc -eq 124 || $worst -eq 124 ]]; then
        worst=124
    elif [[ $rc -eq 1 || $worst -eq 1 ]]; then
        worst=1
    elif [[ $rc -ne 0 ]]; then
        worst=$rc
    fi
done
echo "=== summary:"
grep -h -E "^[0-9]+ passed, [0-9]+ failed|^FATAL" "$outdir"/lowp-accuracy-*.log || true
exit "$worst"
