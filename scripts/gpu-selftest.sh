#!/usr/bin/env bash
# Runs the GPU self-test (examples/gpu_selftest.rs) under a 300 s limit and keeps its output.
# Usage: scripts/gpu-selftest.sh [BINARY] [LOG]
#   BINARY  default target/release/examples/gpu_selftest (cargo build --release --examples)
#   LOG     default gpu-selftest.log
# Exit status: the self-test's (0 pass, 1 a check failed, 2 no GPU), 124 if it timed out.
set -uo pipefail
bin="${1:-target/release/examples/gpu_selftest}"
log="${2:-gpu-selftest.log}"
if [[ ! -x "$bin" ]]; then
    echo "gpu-selftest: no executable at $bin (build it with: cargo build --release --examples)" >&2
    exit 2
fi
mkdir -p "$(dirname "$log")"
timeout 300 "$bin" 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
