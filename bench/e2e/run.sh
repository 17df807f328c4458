#!/usr/bin/env bash
# End-to-end benchmark: bench/e2e/tp_model.py (TP=2 Llama-3-8B-shaped model, random bf16
# weights) run with stock NCCL and with rcclx, logs and a markdown table in OUTDIR; and the
# accuracy of rcclx's low-precision all-reduce (FP8 and INT8) on the model's prefill output.
#
#   bash bench/e2e/run.sh OUTDIR [tp_model.py flags, e.g. --layers 16 --batches 1,8]
#
# Runs (each `python3 -m torch.distributed.run --standalone --nproc_per_node=$NPROC`, under
# `timeout $RUN_TIMEOUT`, with NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
# NVSHMEM_DISABLE_NVLS=1):
#   check          tp_model.py --check through rcclx: TP logits vs a single-GPU reference (tiny config)
#   stock          decode (batch 1, 8, 64; CUDA graph) and prefill (4096 tokens), plain PyTorch;
#                  saves the prefill's output (--save-output) as the exact reference
#   stock-perturb  prefill, stock, embedding output moved by one bf16 ulp (--perturb), compared
#                  with the reference: the model's own sensitivity, the scale for the errors below
#   rcclx          decode and prefill with LD_PRELOAD=$RCCLX_LIB RCCLX_UPSTREAM_LIB=$STOCK_NCCL,
#                  exact collectives; output compared with the reference (expected 0)
#   rcclx-fp8      prefill only, rcclx with RCCL_LOW_PRECISION_ENABLE=1 (block-scaled FP8 E4M3
#                  all-reduce: the 32 MiB prefill all-reduces are over RCCLX_LP_MIN_BYTES, 1 MiB for AllReduce at 2 ranks);
#                  output compared with the reference. Alias: rcclx-lowp (its old name)
#   rcclx-int8     the same with RCCLX_LOW_PRECISION_CODEC=int8 (block-scaled INT8)
#   check-stock    tp_model.py --check with stock NCCL (not run by default)
# Every run after stock gets --compare-output when stock saved the reference; the reference
# (32 MiB with the default flags) is written to a temporary folder in OUTDIR, removed at exit.
# Output: OUTDIR/<run>.log (<run>-<i>.log with REPEATS > 1), OUTDIR/info.log, OUTDIR/status.txt
# (exit status of each run) and OUTDIR/summary.md (bench/e2e/summarize.py), printed at the end.
#
# Environment:
#   RCCLX_LIB    librcclx.so (default .carry/librcclx.so, from scripts/gpu-prep.sh)
#   STOCK_NCCL   stock libnccl.so.2 (default $RCCLX_UPSTREAM_LIB, else the one of python3's
#                nvidia.nccl package, which is what PyTorch loads)
#   NPROC        processes = GPUs (2)
#   RUNS         subset of "check stock stock-perturb rcclx rcclx-fp8 rcclx-int8 check-stock"
#                (default: all but check-stock)
#   REPEATS      repeat the runs from stock to rcclx-int8, interleaved, N times (1); the tables
#                take medians
#   RUN_TIMEOUT  seconds per run (300; a full 32-layer run took 8-13 s on 2x H200,
#                bench/results/2026-11-30-h200x2-v8, e2e/status.txt in its logs.tar.gz)
#   PYTHON       python interpreter (python3)
# Exit status: 0 when every run exited 0.
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ $# -lt 1 ]; then
  sed -n '2,42p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
OUT=$1
shift
mkdir -p "$OUT"
PY=${PYTHON:-python3}
NPROC=${NPROC:-2}
T=${RUN_TIMEOUT:-300}
RUNS=${RUNS:-check stock stock-perturb rcclx rcclx-fp8 rcclx-int8}
REPEATS=${REPEATS:-1}
RCCLX_LIB=$(readlink -f "${RCCLX_LIB:-.carry/librcclx.so}")
STOCK_NCCL=${STOCK_NCCL:-${RCCLX_UPSTREAM_LIB:-}}
if [ -z "$STOCK_NCCL" ]; then
  STOCK_NCCL=$("$PY" -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -f "$RCCLX_LIB" ] || echo "run.sh: warning: $RCCLX_LIB not found (set RCCLX_LIB)" >&2
[ -f "$STOCK_NCCL" ] || echo "run.sh: warning: stock NCCL '$STOCK_NCCL' not found (set STOCK_NCCL)" >&2
WITH_RCCLX=(LD_PRELOAD="$RCCLX_LIB" RCCLX_UPSTREAM_LIB="$STOCK_NCCL")
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

# The exact prefill output (stock NCCL) that the other runs compare theirs with: large, so in a
# temporary folder, not left in OUTDIR.
REF_DIR=$(mktemp -d "$OUT/.ref-output.XXXXXX")
trap 'rm -rf "$REF_DIR"' EXIT
trap 'exit 143' TERM INT
REF=$REF_DIR/stock-prefill.pt
# --compare-output only when stock saved the reference (it may have failed or not be in RUNS).
cmp_ref() { CMP=(); [ -f "$REF" ] && CMP=(--compare-output "$REF"); }
LOWP=(RCCL_LOW_PRECISION_ENABLE=1)
has check && run check "${WITH_RCCLX[@]}" -- --check
has check-stock && run check-stock -- --check
for ((i = 1; i <= REPEATS; i++)); do
  sfx=""
  [ "$REPEATS" -gt 1 ] && sfx="-$i"
  if has stock; then
    rm -f "$REF"
    run "stock$sfx" -- --mode decode,prefill --save-output "$REF" "$@"
  fi
  cmp_ref
  if has stock-perturb; then
    if [ -f "$REF" ]; then
      run "stock-perturb$sfx" -- --mode prefill "${CMP[@]}" --perturb "$@"
    else
      printf '%-16s skipped: no reference output (stock failed or not in RUNS)\n' "stock-perturb$sfx" | tee -a "$OUT/status.txt"
    fi
  fi
  has rcclx && run "rcclx$sfx" "${WITH_RCCLX[@]}" -- --mode decode,prefill "${CMP[@]}" "$@"
  if has rcclx-fp8 || has rcclx-lowp; then
    run "rcclx-fp8$sfx" "${WITH_RCCLX[@]}" "${LOWP[@]}" -- --mode prefill "${CMP[@]}" "$@"
  fi
  has rcclx-int8 && run "rcclx-int8$sfx" "${WITH_RCCLX[@]}" "${LOWP[@]}" RCCLX_LOW_PRECISION_CODEC=int8 -- \
    --mode prefill "${CMP[@]}" "$@"
done

"$PY" bench/e2e/summarize.py "$OUT" >"$OUT/summary.md"
cat "$OUT/summary.md"
exit $FAILED
