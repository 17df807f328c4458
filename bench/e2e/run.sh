#!/usr/bin/env bash
# End-to-end benchmark: bench/e2e/tp_model.py (TP=2 Llama-3-8B-shaped model, random bf16
# weights) run with stock NCCL and with rcclx, logs and a markdown table in OUTDIR.
#
#   bash bench/e2e/run.sh OUTDIR [tp_model.py flags, e.g. --layers 16 --batches 1,8]
#
# Runs (each `python3 -m torch.distributed.run --standalone --nproc_per_node=$NPROC`, under
# `timeout $RUN_TIMEOUT`, with NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
# NVSHMEM_DISABLE_NVLS=1):
#   check       tp_model.py --check through rcclx: TP logits vs a single-GPU reference (tiny config)
#   stock       decode (batch 1, 8, 64; CUDA graph) and prefill (4096 tokens), plain PyTorch
#   rcclx       the same with LD_PRELOAD=$RCCLX_LIB RCCLX_UPSTREAM_LIB=$STOCK_NCCL
#   rcclx-lowp  prefill only, rcclx with RCCL_LOW_PRECISION_ENABLE=1 (FP8 all-reduce)
#   check-stock tp_model.py --check with stock NCCL (not run by default)
# Output: OUTDIR/<run>.log (<run>-<i>.log with REPEATS > 1), OUTDIR/info.log, OUTDIR/status.txt
# (exit status of each run) and OUTDIR/summary.md (bench/e2e/summarize.py), printed at the end.
#
# Environment:
#   RCCLX_LIB    librcclx.so (default .carry/librcclx.so, from scripts/gpu-prep.sh)
#   STOCK_NCCL   stock libnccl.so.2 (default $RCCLX_UPSTREAM_LIB, else the one of python3's
#                nvidia.nccl package, which is what PyTorch loads)
#   NPROC        processes = GPUs (2)
#   RUNS         subset of "check stock rcclx rcclx-lowp check-stock" (default: the first four)
#   REPEATS      repeat stock/rcclx/rcclx-lowp, interleaved, N times (1); the table takes medians
#   RUN_TIMEOUT  seconds per run (300; a full 32-layer run took 13-16 s on 2x H200,
#                bench/results/2026-11-30-h200x2-v2/integrations/e2e/status.txt)
#   PYTHON       python interpreter (python3)
# Exit status: 0 when every run exited 0.
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ $# -lt 1 ]; then
  sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
OUT=$1
shift
mkdir -p "$OUT"
PY=${PYTHON:-python3}
NPROC=${NPROC:-2}
T=${RUN_TIMEOUT:-300}
RUNS=${RUNS:-check stock rcclx rcclx-lowp}
REPEATS=${REPEATS:-1}
RCCLX_LIB=$(readlink -f "${RCCLX_LIB:-.carry/librcclx.so}")
STOCK_NCCL=${STOCK_NCCL:-${RCCLX_UPSTREAM_LIB:-}}
if [ -z "$STOCK_NCCL" ]; then
  STOCK_NCCL=$("$PY" -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -f "$RCCLX_LIB" ] || echo "run.sh: warning: $RCCLX_LIB not found (set RCCLX_LIB)" >&2
[ -f "$STOCK_NCCL" ] || echo "run.sh: warning: stock NCCL '$STOCK_NCCL' not found (set STOCK_NCCL)" >&2
RCCLX_ENV=(LD_PRELOAD="$RCCLX_LIB" RCCLX_UPSTREAM_LIB="$STOCK_NCCL")
LAUNCH=("$PY" -m torch.distributed.run --standalone --nproc_per_node="$NPROC" bench/e2e/tp_model.py)

{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo '?') $(git status --porcelain 2>/dev/null | grep -q . && echo '(modified tree)')"
  echo "rcclx: $RCCLX_LIB $(sha256sum "$RCCLX_LIB" 2>/dev/null | cut -c1-16)"
  echo "stock: $STOCK_NCCL"
  echo "runs: $RUNS  repeats: $REPEATS  nproc: $NPROC  timeout: $T s  extra flags: $*"
  echo "env: NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST=$TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS=$NVSHMEM_DISABLE_NVLS"
  nvidia-smi -L 2>&1
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count(), "nccl", torch.cuda.nccl.version())' 2>&1
} >"$OUT/info.log"
cat "$OUT/info.log"

: >"$OUT/status.txt"
FAILED=0
has() { [[ " $RUNS " == *" $1 "* ]]; }
# run LOGNAME [VAR=value ...] -- tp_model.py flags...
run() {
  local name=$1
  shift
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local log="$OUT/$name.log"
  echo "=== $name: ${envs[*]} ${LAUNCH[*]} $*" | tee "$log"
  local t0=$SECONDS
  timeout -k 15 "$T" env "${envs[@]}" "${LAUNCH[@]}" "$@" >>"$log" 2>&1
  local rc=$?
  [ "$rc" = 0 ] || FAILED=1
  printf '%-16s rc=%-3s %4ss\n' "$name" "$rc" "$((SECONDS - t0))" | tee -a "$OUT/status.txt"
  grep -E '^(RESULT|CHECK|SUMMARY)' "$log" | sed 's/^/    /'
}

has check && run check "${RCCLX_ENV[@]}" -- --check
has check-stock && run check-stock -- --check
for ((i = 1; i <= REPEATS; i++)); do
  sfx=""
  [ "$REPEATS" -gt 1 ] && sfx="-$i"
  has stock && run "stock$sfx" -- --mode decode,prefill "$@"
  has rcclx && run "rcclx$sfx" "${RCCLX_ENV[@]}" -- --mode decode,prefill "$@"
  has rcclx-lowp && run "rcclx-lowp$sfx" "${RCCLX_ENV[@]}" RCCL_LOW_PRECISION_ENABLE=1 -- --mode prefill "$@"
done

"$PY" bench/e2e/summarize.py "$OUT" >"$OUT/summary.md"
cat "$OUT/summary.md"
exit $FAILED
