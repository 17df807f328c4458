#!/usr/bin/env bash
# rcclx GPU test suite and benchmark: one command on a machine with >= 2 NVIDIA GPUs of one
# host (no Rust needed there: build with scripts/gpu-prep.sh first and copy .carry/ along).
#
#   bash scripts/gpu-tests.sh [OUTDIR]
#
# Environment:
#   NRANKS=2          ranks (GPUs) to use; 4 and 8 need that many GPUs
#   STEPS="..."       subset of: info selftest check stress graph timeout fidelity lowp lpgraph bench benchsym
#                     lpbench torch vllm a2av moebench e2e train plots ranks lifecycle capture time tune x2
#                     sim hosts p2p (default: all but time, tune, x2, sim, hosts and p2p)
#                     sim: simulated hosts on one GPU (issue 46): every program twice, stock alone and
#                     rcclx preloaded, one process per rank, N ranks on GPU 0 (needs 1 GPU; see the step)
#                     hosts: communicators spanning simulated hosts (issue 47): the hierarchy, exact and
#                     low precision, shapes 2x2 .. 4x1 on GPU 0 (needs 1 GPU; see the step)
#                     x2: issue 41 on 2 GPUs in one 10-minute call (link, protocol sweeps, summary;
#                     see the step and bench/README.md "2-GPU run")
#                     ranks: 3-8 ranks on the GPUs present, several per GPU (needs 1 GPU; see below)
#                     lifecycle: teardown of 2, 4 and 8 ranks on one GPU (needs 1 GPU; see below)
#                     capture: issue 48's checks in one short run (needs 1 GPU; see the step)
#                     time: per-call GPU time of N ranks on one GPU, A/B against $ART/ranks-base (see below)
#                     bench1: the one-GPU proxy (every DDA family vs its traffic twin, window sweep,
#                     flag round trip, fence under load; needs 1 GPU; see below)
#                     benchsym: AllGather/ReduceScatter/AllToAll up to 1 MiB against stock NCCL's
#                     symmetric kernels (-R 2)
#                     a2av: GPU-resident all-to-all-v (rcclx.all_to_all_v_dynamic and the C forms) against
#                     all_to_all_single, CUDA graph replays, bad counts, the FP8/INT8 wires against the
#                     codec's model; moebench: MoE layer (top-k routing, permutation on the GPU),
#                     PyTorch's all_to_all_single path vs rcclx bf16 and FP8 dispatch, eager and in a
#                     CUDA graph (OUTDIR/moebench/)
#                     train: a 0.5B-parameter decoder trained 25 steps (bench/train_e2e.py), per variant stock
#                     NCCL twice (the run is deterministic), rcclx, rcclx with RCCL_LOW_PRECISION_ENABLE=1; step
#                     time and the losses bit for bit (bench/train_compare.py: OUTDIR/train/summary.md)
#   A2AV_REPLAYS=1000, A2AV_LOWP_REPLAYS=200  CUDA graph replays of the a2av step (plain; FP8)
#   MOEBENCH_ARGS="..."  extra arguments of bench/moe_a2av.py (e.g. --tokens 256 --topk 2 --rounds 10)
#   MOEBENCH_BLOCKS="132 264"  moebench again with each grid of the AllToAllv (RCCL_DDA_MAX_BLOCKS)
#   TRAIN_VARIANTS="ddp fsdp2 fsdp2-sum"  train step: ddp (DDP, 25 MiB buckets, fp32 gradients), fsdp2
#                     (fully_shard, bf16 parameters, fp32 reduce-scatter with PyTorch's reduce op: AVG,
#                     or a pre-multiplied sum that rcclx forwards), fsdp2-sum (SUM, which rcclx takes), ddp-fp32
#                     (DDP without bf16 autocast); TRAIN_ARGS="..." extra arguments of bench/train_e2e.py
#                     (e.g. --layers 8 --steps 20)
#   CHECK_COLLS="..."  collectives of the check step (default: every intercepted one)
#   LOWP_CODECS="fp8 int8", LPBENCH_TYPES="bfloat16 float half", LPBENCH_CYCLES=3  (lowp, lpgraph,
#                     lpbench steps; lpbench runs the codecs side by side in one process, and
#                     lpbench-summary.md has the median ratio per size over the cycles and each
#                     codec's time over the first's)
#   RANKS_N="3 4 5 6 7 8", RANKS_GPUS (default: the GPUs present, at most 2),
#   RANKS_SUITES="dda windows stress a2av graph procs lowp"  (ranks step: rank counts, GPUs, parts)
#   RANKS_PROTO=window  ranks step: RCCLX_PROTO of every suite (`stream`: the stream kernels
#                     wherever the windowed ones would run, and their routes asserted)
#   RANKS_LL128=0     ranks step: RCCLX_LL128_MAX_BYTES of every ranks suite (`ranks --ll128-max`;
#                     above 0: the LL128 kernels above the LL sizes up to it, their routes asserted)
#   RCCLX_UPSTREAM_LIB  stock libnccl.so.2 (default: the one of python3's nvidia-nccl wheel)
#   BUDGET_S=540      a run starts only before this many seconds of the script have passed, and
#                     its timeout is cut to end by then (the device tool's 10-minute calls);
#                     the rest are listed as skipped in summary.txt
#   RCCLX_ARTIFACTS   folder with librcclx.so, selftest, lowp_accuracy, timeout, ranks, lifecycle, teardown and bench/ (default .carry)
# Every command runs under `timeout`; logs go to OUTDIR (default bench/results/<date>-gpu),
# with summary.txt listing each step and its exit code.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# rcclx's default limits, whatever tuning file this user has (`python -m rcclx tune`): the
# harnesses predict routes from the defaults.
export RCCLX_TUNING_FILE=
N=${NRANKS:-2}
OUT=${1:-bench/results/$(date +%F)-gpu}
ART=${RCCLX_ARTIFACTS:-.carry}
STEPS=${STEPS:-info selftest check stress graph timeout fidelity lowp lpgraph bench benchsym lpbench torch vllm a2av moebench e2e train plots ranks lifecycle capture}
mkdir -p "$OUT"
LIB=$(readlink -f "$ART/librcclx.so")
B=$ART/bench
if [ -z "${RCCLX_UPSTREAM_LIB:-}" ]; then
  RCCLX_UPSTREAM_LIB=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
fi
export RCCLX_UPSTREAM_LIB
STOCK=$RCCLX_UPSTREAM_LIB
LIBS="stock=$STOCK,rcclx=$LIB"
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
echo "rcclx GPU tests $(date -u +%FT%TZ) NRANKS=$N stock=$STOCK rcclx=$LIB" | tee -a "$SUMMARY"

step() { [[ " $STEPS " == *" $1 "* ]]; }
# run NAME TIMEOUT_S CMD...: logs to OUT/NAME.log, records the exit code.
run() {
  local name=$1 t=$2
  shift 2
  if [ -n "${BUDGET_S:-}" ] && [ "$SECONDS" -ge "$BUDGET_S" ]; then
    printf '%-28s skipped: BUDGET_S=%s reached\n' "$name" "$BUDGET_S" | tee -a "$SUMMARY"
    return
  fi
  if [ -n "${BUDGET_S:-}" ] && [ $((SECONDS + t)) -gt "$BUDGET_S" ]; then t=$((BUDGET_S - SECONDS)); fi
  echo "=== $name: $*" | tee -a "$OUT/$name.log"
  local start=$SECONDS
  timeout -k 10 "$t" "$@" >>"$OUT/$name.log" 2>&1
  local rc=$?
  printf '%-28s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - start))" "$(grep -E 'passed|failed|PASS|FAIL|Avg bus|geomean' "$OUT/$name.log" | tail -1)" | tee -a "$SUMMARY"
}

if step info; then
  {
    nvidia-smi; nvidia-smi topo -m; uname -a
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
    echo "stock: $STOCK"; echo "rcclx: $LIB"
  } >"$OUT/info.log" 2>&1
fi

# The tuner (python -m rcclx tune, issue 40; not in the default STEPS): on fewer than 2 GPUs it
# must refuse (rc=1, "needs at least 2" in OUT/tune.log, no OUT/tune/tuning.toml); on 2-8 it
# measures every collective (JSON in OUT/tune/json/) and writes OUT/tune/tuning.toml, which
# tune-info then shows as rcclx reads it (`tuning_file`).
if step tune; then
  # The package with this library, outside OUT (the results keep no copy of the library).
  PKG=$(mktemp -d) && mkdir -p "$OUT/tune" && cp -r python/rcclx "$PKG/" && cp "$LIB" "$PKG/rcclx/librcclx.so"
  run tune 3000 env PYTHONPATH="$PKG" python3 -m rcclx tune --nranks "$N" --bench-dir "$B" --out "$OUT/tune/tuning.toml" --keep "$OUT/tune/json"
  if [ -f "$OUT/tune/tuning.toml" ]; then
    run tune-info 120 env PYTHONPATH="$PKG" RCCLX_TUNING_FILE="$OUT/tune/tuning.toml" python3 -m rcclx info
  fi
  rm -rf "$PKG"
fi

if step selftest; then
  run selftest 300 "$ART/selftest"
fi

# Correctness of the DDA kernels against the stock library: every collective x type x op x
# count (LL, flat, tree and forwarded sizes), in-place and out-of-place; one process driving
# all GPUs, then one process per GPU.
COUNTS=1,7,255,1023,4099,65541,1048581,12582913
if step check; then
  for coll in ${CHECK_COLLS:-all_reduce all_gather reduce_scatter alltoall broadcast}; do
    run check-$coll-1proc 600 "$B/rcclx_check" --libs "$LIBS" -g "$N" --coll $coll -d all -o all --counts "$COUNTS" --inplace both
    run check-$coll-${N}proc 600 "$B/rcclx_check" --libs "$LIBS" -P "$N" -g 1 --coll $coll -d all -o all --counts "$COUNTS" --inplace both
  done
fi
if step stress; then
  run stress-random-sizes 600 "$B/rcclx_check" --libs "$LIBS" -P "$N" -g 1 --coll all_reduce -d float -o sum --random-sizes 100000 --counts 1048576
  run stress-random-sizes-others 600 "$B/rcclx_check" --libs "$LIBS" -P "$N" -g 1 --coll all_gather,reduce_scatter,alltoall,broadcast -d float -o sum --random-sizes 20000 --counts 524288
fi
if step graph; then
  run graph-replay 300 "$B/rcclx_check" --libs "$LIBS" -P "$N" -g 1 --coll all_reduce,all_gather,reduce_scatter,alltoall,broadcast -d bfloat16,float -o sum --counts 1,1023,65536,1048581,3000007 --graph --graph-replays 1000
fi

# The same C program (NCCL API only) with the stock library alone and with rcclx preloaded:
# two streams on one communicator, a slow peer, NaN/Inf/extreme reductions, simulated groups,
# non-blocking communicators of one thread, setup failures, abort, create/destroy while another
# communicator is busy, leaks, finalize, revoke. Result lines must be identical.
# The leak case does FIDELITY_LEAK_CYCLES (default here 100) create/destroy cycles per run: the
# stock library's init takes ~0.7 s on the 2x H200 machine, so 500 cycles twice would not fit a
# 10-minute job.
if step fidelity; then
  run fidelity 3000 env RCCLX_LIB="$LIB" STOCK_NCCL="$STOCK" FIDELITY_BIN="$ART/fidelity" \
    FIDELITY_LEAK_CYCLES="${FIDELITY_LEAK_CYCLES:-100}" bash gpu-tests/fidelity/run.sh "$OUT"
fi

# A peer that never comes: the kernel gives up after RCCLX_TIMEOUT_MS, the error is reported,
# and ncclCommAbort returns promptly.
if step timeout; then
  run dda-timeout-abort 120 "$ART/timeout"
fi

# Low precision (FP8 and INT8 codecs): accuracy against FP64 and the CPU reference codec, both
# process layouts.
if step lowp; then
  # LOWP_ARGS=--quick for a shorter run; LOWP_CODECS="fp8 int8" (default both).
  for codec in ${LOWP_CODECS:-fp8 int8}; do
    run lowp-accuracy-procs-$codec 600 env RCCLX_LOW_PRECISION_CODEC=$codec "$ART/lowp_accuracy" --procs "$N" ${LOWP_ARGS:-}
    run lowp-accuracy-1proc-$codec 600 env RCCLX_LOW_PRECISION_CODEC=$codec "$ART/lowp_accuracy" --one-process ${LOWP_ARGS:-}
  done
  run lowp-toggle 300 "$ART/lowp_accuracy" --toggle
  # rcclx's default thresholds (per collective and rank count) decide which cases are low
  # precision; the others must be exact.
  for codec in ${LOWP_CODECS:-fp8 int8}; do
    run lowp-default-min-bytes-$codec 300 env RCCLX_LOW_PRECISION_CODEC=$codec "$ART/lowp_accuracy" --procs "$N" --quick --default-min-bytes
  done
fi

# Low precision under CUDA graph capture: per collective, one graph of mixed-size calls on the
# low-precision path, inputs regenerated inside the graph, 1000 replays, then checked against
# the stock result within the codec's error and, for AllReduce, bit-identical on every rank.
# FP8: |err| <= 0.2 * sum|inputs| per element for the reductions (the bound of
# gpu-tests/src/codec.rs is about 0.13 for 2 ranks), 0.2 * (|x| + 0.01) for AllGather and
# AllToAll. INT8 errs by up to amax/254 per quantization, absolute: plus 0.04 (inputs in [-4, 4],
# two quantizations per AllReduce element: 0.032, and the bf16 output's rounding).
if step lpgraph; then
  for codec in ${LOWP_CODECS:-fp8 int8}; do
    abs=0
    [ "$codec" = int8 ] && abs=0.04
    run lp-graph-replay-$codec 300 env RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LOW_PRECISION_CODEC=$codec RCCLX_LP_MIN_BYTES=0 "$B/rcclx_check" --libs "$LIBS" -P "$N" -g 1 --coll all_reduce,all_gather,reduce_scatter,alltoall -d bfloat16,float -o sum --counts 1,1023,65536,1048581,3000007 --graph --graph-replays 1000 --rel-tol 0.2 --abs-tol $abs
  done
fi

# Speed: stock and rcclx side by side in one process per run (ratio = stock / rcclx time).
if step bench; then
  for dt in float bfloat16; do
    run bench-ar-g${N}-eager-$dt 300 "$B/all_reduce_perf" --libs "$LIBS" -g "$N" -b 1K -e 256M -f 4 -n 50 -w 10 -d $dt -J "$OUT/bench-ar-g${N}-eager-$dt.json"
    run bench-ar-P${N}-eager-$dt 300 "$B/all_reduce_perf" --libs "$LIBS" -P "$N" -g 1 -b 1K -e 256M -f 4 -n 50 -w 10 -d $dt -J "$OUT/bench-ar-P${N}-eager-$dt.json"
    run bench-ar-g${N}-graph-$dt 300 "$B/all_reduce_perf" --libs "$LIBS" -g "$N" -b 1K -e 16M -f 4 -n 20 -w 5 -G 50 -d $dt -J "$OUT/bench-ar-g${N}-graph-$dt.json"
    run bench-ar-P${N}-graph-$dt 300 "$B/all_reduce_perf" --libs "$LIBS" -P "$N" -g 1 -b 1K -e 16M -f 4 -n 20 -w 5 -G 50 -d $dt -J "$OUT/bench-ar-P${N}-graph-$dt.json"
    for c in all_gather reduce_scatter alltoall broadcast; do
      run bench-$c-P${N}-eager-$dt 300 "$B/${c}_perf" --libs "$LIBS" -P "$N" -g 1 -b 1K -e 256M -f 4 -n 50 -w 10 -d $dt -J "$OUT/bench-$c-P${N}-eager-$dt.json"
      run bench-$c-P${N}-graph-$dt 300 "$B/${c}_perf" --libs "$LIBS" -P "$N" -g 1 -b 1K -e 16M -f 4 -n 20 -w 5 -G 50 -d $dt -J "$OUT/bench-$c-P${N}-graph-$dt.json"
    done
  done
fi
# Against stock NCCL's symmetric-memory kernels: buffers from ncclMemAlloc registered as
# symmetric windows with both libraries (-R 2), the small sizes where those kernels are stock's
# fastest path for AllGather and ReduceScatter.
if step benchsym; then
  for dt in float bfloat16; do
    for c in all_gather reduce_scatter alltoall; do
      run benchsym-$c-P${N}-eager-$dt 300 "$B/${c}_perf" --libs "$LIBS" -P "$N" -g 1 -b 1K -e 1M -f 2 -n 50 -w 10 -R 2 -d $dt -J "$OUT/benchsym-$c-P${N}-eager-$dt.json"
      run benchsym-$c-P${N}-graph-$dt 300 "$B/${c}_perf" --libs "$LIBS" -P "$N" -g 1 -b 1K -e 1M -f 2 -n 20 -w 5 -G 50 -R 2 -d $dt -J "$OUT/benchsym-$c-P${N}-graph-$dt.json"
    done
  done
fi
# Low precision vs stock, both codecs, from 1 MiB (RCCLX_LP_MIN_BYTES=0: the low-precision path
# at every size, to see where it starts to pay; the default threshold is set from these runs).
# The codecs run side by side in one process: librcclx.so as the first codec, a copy of it as
# the second, each loaded with its own RCCLX_LOW_PRECISION_CODEC (rccl-tests-compat sets a
# library's variables while it loads and creates its communicators; one file loads once).
if step lpbench; then
  LPTMP=$(mktemp -d)
  LPLIBS="stock=$STOCK"
  for codec in ${LOWP_CODECS:-fp8 int8}; do
    f=$LIB
    if [ "$LPLIBS" != "stock=$STOCK" ]; then f=$LPTMP/librcclx-$codec.so; cp "$LIB" "$f"; fi
    LPLIBS="$LPLIBS,$codec[RCCLX_LOW_PRECISION_CODEC=$codec]=$f"
  done
  for c in all_reduce all_gather reduce_scatter alltoall; do
    for dt in ${LPBENCH_TYPES:-bfloat16 float half}; do
      run lpbench-$c-P${N}-$dt 300 env RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LP_MIN_BYTES=0 "$B/${c}_perf" --libs "$LPLIBS" -P "$N" -g 1 -b 1M -e 256M -f 2 -n 20 -w 5 -N "${LPBENCH_CYCLES:-3}" -c 0 -d $dt -J "$OUT/lpbench-$c-P${N}-$dt.json"
    done
  done
  rm -rf "$LPTMP"
  # Median ratio per size over the cycles, the slow samples ("stalls") of each library, and
  # each codec's time against the first's.
  python3 bench/ratios.py --versus "$(set -- ${LOWP_CODECS:-fp8 int8}; echo $1)" "$OUT"/lpbench-*.json > "$OUT/lpbench-summary.md" 2>&1
fi

# PyTorch with LD_PRELOAD: results, CUDA graph, and the DDA path really taken.
if step torch; then
  run torch-ld-preload 300 env LD_PRELOAD="$LIB" NCCL_DEBUG=WARN python3 -m torch.distributed.run --standalone --nproc_per_node="$N" tests/gpu/torch_allreduce.py
fi

# vLLM / SGLang: the library loaded by path with ctypes (VLLM_NCCL_SO_PATH), eager and CUDA graph.
if step vllm; then
  run vllm-style 300 env VLLM_NCCL_SO_PATH="$LIB" NCCL_DEBUG=WARN python3 -m torch.distributed.run --standalone --nproc_per_node="$N" tests/gpu/vllm_style.py
fi

# GPU-resident all-to-all-v (rcclxAllToAllvDynamic*, rcclx.all_to_all_v_dynamic) with LD_PRELOAD:
# bit-identical to all_to_all_single, CUDA graph replays with new counts, counts over capacity,
# argument errors, a communicator without rcclx kernels; the FP8 and INT8 wires (the ...Ex forms)
# bit for bit against the codec's torch model.
if step a2av; then
  run a2av-dynamic 600 env LD_PRELOAD="$LIB" NCCL_DEBUG=WARN A2AV_REPLAYS="${A2AV_REPLAYS:-1000}" A2AV_LOWP_REPLAYS="${A2AV_LOWP_REPLAYS:-200}" python3 -m torch.distributed.run --standalone --nproc_per_node="$N" tests/gpu/a2av_dynamic.py
fi

# MoE dispatch + combine (top-k routing, the permutation on the GPU): PyTorch's all_to_all_single
# path (splits read back to the host) vs rcclx.all_to_all_v_dynamic, bf16 and FP8 dispatch, eager
# and in a CUDA graph (OUT/moebench/moe_a2av.{json,md}).
if step moebench; then
  mkdir -p "$OUT/moebench"
  run moebench 600 env LD_PRELOAD="$LIB" NCCL_DEBUG=WARN python3 -m torch.distributed.run --standalone --nproc_per_node="$N" bench/moe_a2av.py --out "$OUT/moebench" ${MOEBENCH_ARGS:-}
  # The AllToAllv's grid is RCCL_DDA_MAX_BLOCKS (128, agreed through rank 0): other grids, to
  # learn whether more blocks help (issue 28).
  for b in ${MOEBENCH_BLOCKS:-}; do
    mkdir -p "$OUT/moebench-blocks$b"
    run moebench-blocks$b 600 env LD_PRELOAD="$LIB" NCCL_DEBUG=WARN RCCL_DDA_MAX_BLOCKS="$b" python3 -m torch.distributed.run --standalone --nproc_per_node="$N" bench/moe_a2av.py --out "$OUT/moebench-blocks$b" ${MOEBENCH_ARGS:-}
  done
fi

# End to end: tensor-parallel decode and prefill, stock vs rcclx (OUT/e2e/summary.md).
if step e2e; then
  run e2e 1500 env RCCLX_LIB="$LIB" STOCK_NCCL="$STOCK" NPROC="$N" bash bench/e2e/run.sh "$OUT/e2e"
fi

# Training end to end (issue 29): bench/train_e2e.py per variant with stock NCCL twice (stock
# against itself: the training is deterministic), with rcclx (losses bit-identical to stock's,
# rcclx kernels counted), and with rcclx and RCCL_LOW_PRECISION_ENABLE=1 (losses reported, expected
# to differ); bench/train_compare.py tabulates them (OUT/train/summary.md; FAIL when a
# full-precision run differs from its variant's first stock run).
if step train; then
  mkdir -p "$OUT/train"
  TRAIN=(python3 -m torch.distributed.run --standalone --nproc_per_node="$N" bench/train_e2e.py --out "$OUT/train")
  TRAIN_JSON=()
  for v in ${TRAIN_VARIANTS:-ddp fsdp2 fsdp2-sum}; do
    case $v in
      ddp) va=(--mode ddp) ;;
      ddp-fp32) va=(--mode ddp --autocast none) ;;
      fsdp2) va=(--mode fsdp2) ;;
      fsdp2-sum) va=(--mode fsdp2 --fsdp-reduce sum) ;;
      *) echo "TRAIN_VARIANTS: unknown variant $v" | tee -a "$SUMMARY"; continue ;;
    esac
    run train-$v-stock-1 600 "${TRAIN[@]}" "${va[@]}" --label stock-1 --expect stock ${TRAIN_ARGS:-}
    run train-$v-stock-2 600 "${TRAIN[@]}" "${va[@]}" --label stock-2 --expect stock ${TRAIN_ARGS:-}
    run train-$v-rcclx 600 env LD_PRELOAD="$LIB" NCCL_DEBUG=WARN "${TRAIN[@]}" "${va[@]}" --label rcclx \
      --expect rcclx ${TRAIN_ARGS:-}
    run train-$v-rcclx-lowp 600 env LD_PRELOAD="$LIB" NCCL_DEBUG=WARN RCCL_LOW_PRECISION_ENABLE=1 "${TRAIN[@]}" \
      "${va[@]}" --label rcclx-lowp --expect rcclx ${TRAIN_ARGS:-}
    for l in stock-1 stock-2 rcclx rcclx-lowp; do
      [ -f "$OUT/train/train-$v-$l.json" ] && TRAIN_JSON+=("$OUT/train/train-$v-$l.json")
    done
  done
  if [ ${#TRAIN_JSON[@]} -ge 2 ]; then
    run train-compare 120 python3 bench/train_compare.py --out "$OUT/train/summary.md" "${TRAIN_JSON[@]}"
  fi
fi

# 3-8 ranks on the GPUs present, by putting several ranks on one GPU (the stock library refuses
# that, so the harness makes the communicators: gpu-tests/src/world.rs). Every kernel family at
# every rank count, with that rank count's crossovers and buffer sizes:
#   dda      ranks: every collective x DDA algorithm x type x op, odd counts, both placements,
#            bit-exact against the CPU model of rcclx's reduction order; ranks identical
#   windows  the same (quick) and the AllToAllv with 256 KiB of staging: many windows per call
#   stress   10,000 random calls per rank count, back to back, every one checked
#   a2av     the GPU-resident AllToAllv, three C forms, every split pattern
#   graph    one call per kernel family (low precision included) replayed 1,000 times in a graph
#   procs    one process per rank (the IPC path; time-sliced on a shared GPU: quick cases)
#   lowp     lowp_accuracy --world: FP8 and INT8, all four collectives, against the codec model
#            and its bounds (1 MiB of staging: several windows), streams and processes
# Ranks as streams of one process run at once (grids capped to fit together on the GPU); as
# processes they are time-sliced (milliseconds per barrier), hence the quick case lists there.
if step ranks; then
  G=${RANKS_GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')}
  [ "${G:-0}" -ge 1 ] || G=1
  [ "$G" -gt 2 ] && G=2
  RS=" ${RANKS_SUITES:-dda windows stress a2av graph procs lowp} "
  has() { [[ $RS == *" $1 "* ]]; }
  for n in ${RANKS_N:-3 4 5 6 7 8}; do
    g=$G
    [ "$g" -gt "$n" ] && g=$n
    R="$ART/ranks --nranks $n --gpus $g --proto ${RANKS_PROTO:-window} --ll128-max ${RANKS_LL128:-0}"
    tag=n$n-g$g${RANKS_PROTO:+-$RANKS_PROTO}${RANKS_LL128:+-ll128}
    if has dda; then run ranks-dda-$tag 300 $R --suite dda; fi
    if has windows; then
      run ranks-dda-windows-$tag 300 env RCCL_DDA_SENDBUF_BYTES=256K $R --suite dda --quick
      run ranks-a2av-windows-$tag 300 env RCCL_DDA_SENDBUF_BYTES=256K $R --suite a2av
    fi
    if has stress; then run ranks-stress-$tag 300 $R --suite stress; fi
    if has a2av; then run ranks-a2av-$tag 300 $R --suite a2av; fi
    if has graph; then
      for c in ${LOWP_CODECS:-fp8 int8}; do run ranks-graph-$c-$tag 300 $R --suite graph --codec $c; done
    fi
    if has procs; then
      run ranks-procs-dda-$tag 300 $R --layout procs --suite dda --quick
      run ranks-procs-a2av-$tag 300 $R --layout procs --suite a2av --quick
    fi
    if has lowp; then
      for c in ${LOWP_CODECS:-fp8 int8}; do
        run ranks-lowp-$c-$tag 300 env RCCL_DDA_SENDBUF_BYTES=1M RCCLX_LOW_PRECISION_CODEC=$c \
          "$ART/lowp_accuracy" --world $g --one-process --procs $n --quick ${RANKS_LOWP_ARGS:-}
        run ranks-lowp-procs-$c-$tag 300 env RCCLX_LOW_PRECISION_CODEC=$c \
          "$ART/lowp_accuracy" --world $g --procs $n --quick --filter " 129 "
      done
    fi
  done
fi

# Timing proxy on one GPU (gpu-tests/src/bin/ranks/time.rs): N ranks as streams of one process,
# back-to-back calls per case, GPU time per call. With $ART/ranks-base (the same harness built
# from other kernels: an A/B of kernels), both run alternately and time-ab.txt has base/new per
# case. Ranks share one GPU: link bandwidth and latency do not transfer to NVLink; instruction
# counts, memory passes and serialized phases do.
if step time; then
  for n in ${TIME_N:-2 4}; do
    for suite in time time-lowp; do
      codecs=fp8; [ $suite = time-lowp ] && codecs=${LOWP_CODECS:-fp8 int8}
      for c in $codecs; do
        for round in 1 2; do
          run time-$suite-$c-n$n-new-$round 300 "$ART/ranks" --nranks $n --suite $suite --codec $c
          if [ -x "$ART/ranks-base" ]; then
            run time-$suite-$c-n$n-base-$round 300 "$ART/ranks-base" --nranks $n --suite $suite --codec $c
          fi
        done
      done
    done
  done
  if [ -x "$ART/ranks-base" ]; then
    # Per case: the better of the two rounds of each build, and base / new (> 1: new faster).
    best() { cat "$@" 2>/dev/null | awk '/^TIME /{k=$2" "$3" "$4" "$5" "$6; if(!(k in m)||$7<m[k])m[k]=$7} END{for(k in m)print k, m[k]}'; }
    {
      printf '%-26s %-28s %-14s %-5s %-4s %10s %10s %10s %8s\n' run route coll type op bytes base_us new_us base/new
      for f in "$OUT"/time-*-new-1.log; do
        b=${f%-new-1.log}
        join <(best "$b"-base-*.log | awk '{print $1"|"$2"|"$3"|"$4"|"$5, $6}' | sort) \
             <(best "$b"-new-*.log | awk '{print $1"|"$2"|"$3"|"$4"|"$5, $6}' | sort) |
          awk -v run="$(basename "$b")" '{split($1,a,"|"); printf "%-26s %-28s %-14s %-5s %-4s %10s %10.2f %10.2f %8.3f\n", run, a[1], a[2], a[3], a[4], a[5], $2, $3, $2/$3}'
      done
    } >"$OUT/time-ab.txt"
    cat "$OUT/time-ab.txt" | tee -a "$SUMMARY"
  fi
fi

# One-GPU proxy of issue 39 (gpu-tests/src/bin/ranks/bench.rs; runs on 1 GPU): every DDA family
# forced at 1 KiB-64 MiB, back to back and in CUDA graph replays, against its traffic twin (the
# same kernel without barriers or flag waits); the window-cost sweep, once per staging size; the
# flag round trip and the fence under load. OUT/bench1-n<N>.csv is the table, bench1-n<N>.md its
# summary (bench/proxy_report.py). Ranks share one GPU: link bandwidth and latency do not
# transfer to NVLink; instruction counts, HBM passes, serialized phases and synchronization
# against the same traffic do. BENCH1_N="2" rank counts, BENCH1_STAGING="1M 2M 4M 8M 16M 32M"
# (RCCL_DDA_SENDBUF_BYTES of the sweep), BENCH1_ARGS="..." more `ranks` arguments (--quick).
if step bench1; then
  for n in ${BENCH1_N:-2}; do
    # LL128 on (4 MiB), so that its families have their region and are timed too.
    run bench1-n$n 240 "$ART/ranks" --nranks $n --suite bench --ll128-max $((4 << 20)) ${BENCH1_ARGS:-}
    for s in ${BENCH1_STAGING:-1M 2M 4M 8M 16M 32M}; do
      run bench1-sweep-n$n-$s 120 env RCCL_DDA_SENDBUF_BYTES=$s RCCLX_BENCH_TAG=staging=$s \
        "$ART/ranks" --nranks $n --suite bench --parts sweep ${BENCH1_ARGS:-}
    done
    grep -h '^BENCH ' "$OUT/bench1-n$n.log" "$OUT"/bench1-sweep-n$n-*.log 2>/dev/null | sed 's/^BENCH //' |
      awk 'NR == 1 || !/^part,/' >"$OUT/bench1-n$n.csv"
    python3 bench/proxy_report.py "$OUT/bench1-n$n.csv" >"$OUT/bench1-n$n.md" 2>&1
    rc=$?
    rows=$(($(wc -l <"$OUT/bench1-n$n.csv") - 1))
    echo "bench1-n$n: $rows rows in bench1-n$n.csv, summary bench1-n$n.md (report rc=$rc)" | tee -a "$SUMMARY"
  done
fi

# Issue 41 on 2 GPUs in one call of the device tool (not in the default STEPS; run with
# BUDGET_S=540): the link (link_perf: bidirectional bandwidth of SM pull, SM push and copy
# engines, flag one-way latency, the release after a pull or push), then nccl-tests-style sweeps
# 1 KiB-256 MiB, eager and in a CUDA graph, -c 1, of AllReduce, AllGather, ReduceScatter and
# AllToAll with four libraries side by side in one process per rank: stock, rcclx with its
# defaults (`default`), and rcclx with every DDA limit raised to 256 MiB (its kernels at every
# size) and RCCLX_PROTO=window (`window`) or =stream (`stream`; copies of librcclx.so: one file
# loads once), and with RCCLX_LL128_MAX_BYTES=4M (`ll128`). Then FP8/INT8 AllReduce of bf16
# (RCCL_LOW_PRECISION_ENABLE=1, from 1 MiB; -c 0: not bit-exact, the lowp steps check accuracy).
# bench/x2_summary.py writes OUT/x2-summary.md (ratios, the issue's targets, proposed defaults,
# the model against the measurement) and OUT/x2-summary.json. X2_TYPES="bfloat16 float" (the
# second type runs last, the first one the budget cuts), X2_COLLS, X2_CYCLES=2 (-N).
if step x2; then
  X2TMP=$(mktemp -d)
  run x2-link 60 "$B/link_perf"
  RAISED="RCCL_DDA_ALL_REDUCE_TREE_MAX_BYTES=256M;RCCL_DDA_ALL_GATHER_MAX_BYTES=256M;RCCL_DDA_REDUCE_SCATTER_MAX_BYTES=256M;RCCL_DDA_ALL_TO_ALL_MAX_BYTES=256M"
  cp "$LIB" "$X2TMP/librcclx-window.so"
  cp "$LIB" "$X2TMP/librcclx-stream.so"
  cp "$LIB" "$X2TMP/librcclx-ll128.so"
  X2LIBS="stock=$STOCK,default=$LIB,window[$RAISED;RCCLX_PROTO=window]=$X2TMP/librcclx-window.so"
  X2LIBS="$X2LIBS,stream[$RAISED;RCCLX_PROTO=stream;RCCLX_STREAM_MIN_BYTES=0]=$X2TMP/librcclx-stream.so"
  X2LIBS="$X2LIBS,ll128[$RAISED;RCCLX_LL128_MAX_BYTES=4M]=$X2TMP/librcclx-ll128.so"
  X2ARGS=(-P "$N" -g 1 -b 1K -e 256M -f 2 -c 1 -N "${X2_CYCLES:-2}")
  for dt in ${X2_TYPES:-bfloat16 float}; do
    for c in ${X2_COLLS:-all_reduce all_gather reduce_scatter alltoall}; do
      run x2-$c-eager-$dt 120 "$B/${c}_perf" --libs "$X2LIBS" "${X2ARGS[@]}" -n 20 -w 5 -d $dt -J "$OUT/x2-$c-eager-$dt.json"
      run x2-$c-graph-$dt 120 "$B/${c}_perf" --libs "$X2LIBS" "${X2ARGS[@]}" -n 10 -w 3 -G 10 -d $dt -J "$OUT/x2-$c-graph-$dt.json"
    done
    if [ "$dt" = bfloat16 ]; then
      cp "$LIB" "$X2TMP/librcclx-int8.so"
      LP="RCCL_LOW_PRECISION_ENABLE=1;RCCLX_LP_MIN_BYTES=0;RCCLX_LOW_PRECISION_CODEC"
      X2LP="stock=$STOCK,fp8[$LP=fp8]=$LIB,int8[$LP=int8]=$X2TMP/librcclx-int8.so"
      for mode in eager graph; do
        g=(); [ $mode = graph ] && g=(-G 10)
        run x2-lowp-all_reduce-$mode-bfloat16 120 "$B/all_reduce_perf" --libs "$X2LP" -P "$N" -g 1 -b 1M -e 256M -f 2 \
          -n 20 -w 5 -c 0 -N "${X2_CYCLES:-2}" "${g[@]}" -d bfloat16 -J "$OUT/x2-lowp-all_reduce-$mode-bfloat16.json"
      done
    fi
  done
  rm -rf "$X2TMP"
  # Outside the budget: a few seconds of Python, so a cut run still leaves its summary.
  timeout 120 python3 bench/x2_summary.py "$OUT" --out "$OUT/x2-summary.md" --json "$OUT/x2-summary.json" \
    >"$OUT/x2-summary.log" 2>&1
  echo "x2-summary                   rc=$?  $OUT/x2-summary.md ($(grep -c 'MISSED' "$OUT/x2-summary.md" 2>/dev/null) targets missed)" | tee -a "$SUMMARY"
fi

# The communicator life cycle with N ranks as streams of one process on GPU 0 (rcclx's setup,
# kernels and teardown; gpu-tests/src/bin/lifecycle.rs): 200 destroy and 200 abort cycles back to
# their first cycle's device memory, files and /dev/shm; aborts that never wait with another
# clique's kernels stuck; destroys that do not wait for other cliques' calls; a destroyed stream.
if step lifecycle; then
  for n in ${LIFECYCLE_N:-2 4 8}; do run lifecycle-n$n 300 "$ART/lifecycle" --nranks "$n"; done
  # Issue 37 (gpu-tests/src/bin/teardown/): captures during teardown with peers in other
  # processes, replay after destroy, a fault at each setup stage, /dev/shm residue, fork, an
  # abort of a pending setup while another clique's kernel is stuck, and concurrent destroys
  # (the last two as streams only). A check that hangs fails by name within 90 s.
  for layout in streams procs; do
    for n in ${LIFECYCLE_N:-2 4 8}; do
      run teardown-$layout-n$n 900 "$ART/teardown" --layout "$layout" --nranks "$n"
    done
  done
  # The captures during teardown in the other two capture modes (the runs above: global, PyTorch's
  # default): rcclx's own driver calls run in relaxed mode, so none breaks a capture in any mode.
  for mode in thread-local relaxed; do
    run teardown-capture-$mode 300 "$ART/teardown" --layout procs --nranks 2 --only capture-teardown --capture-mode $mode
  done
  # A full /dev/shm (a 64 KiB tmpfs filled up, in a mount namespace of its own; needs root):
  # every setup ends with the kernels off (a WARN, no SIGBUS), the exchange faults in error.
  if unshare --mount true 2>/dev/null; then
    run teardown-shm-full 120 unshare --mount sh -c \
      'mount -t tmpfs -o size=64k tmpfs /dev/shm 2>/dev/null || { echo "SKIP teardown --shm-full: no tmpfs mount here"; exit 0; }
       cat /dev/zero >/dev/shm/fill 2>/dev/null; exec "$@"' sh "$ART/teardown" --only fault- --shm-full
  else
    printf '%-28s skipped: no mount namespace here (needs root)\n' teardown-shm-full | tee -a "$SUMMARY"
  fi
fi

# Issue 48 in one short run on GPU 0 (the lifecycle step runs the same programs in full): the
# captures during teardown in all three capture modes, each of rcclx's driver calls during
# another thread's global capture (with a control that must break one), an abort whose launch
# is blocked behind a stuck kernel, and one clique's device memory per rank against its budget
# at 2, 4 and 8 ranks, without and with low precision (its staging is twice as large), with the
# captures on two streams (`capture-order`), and the stock library's asynchronous error on
# rcclx's routes (two ranks as simulated hosts, one killed). CAPTURE_N="2 4 8" the teardown captures' rank counts.
if step capture; then
  for n in ${CAPTURE_N:-2 4 8}; do
    for mode in global thread-local relaxed; do
      run capture-teardown-n$n-$mode 120 "$ART/teardown" --layout procs --nranks $n --cycles 20 --only capture-teardown --capture-mode $mode
    done
  done
  run capture-probe 120 "$ART/teardown" --only capture-probe
  run capture-abort-behind-launch 120 "$ART/teardown" --only abort-behind-launch
  for n in ${CAPTURE_MEMORY_N:-2 4 8}; do
    run capture-memory-n$n 120 "$ART/lifecycle" --nranks "$n" --cycles 2
    run capture-memory-lowp-n$n 120 env RCCL_LOW_PRECISION_ENABLE=1 "$ART/lifecycle" --nranks "$n" --cycles 2
  done
  # The stock library's asynchronous error (a dead peer on its sockets) fails rcclx's own routes
  # as it fails stock's (tests/gpu/async_error.py): stock alone, then rcclx preloaded.
  AE=(NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 python3 -m torch.distributed.run --standalone --no-python
    --nproc_per_node=2 bash scripts/sim-host.sh python3 tests/gpu/async_error.py)
  run capture-async-error-stock 120 env SIM_LOCAL=2 "${AE[@]}" --lib "$STOCK" --label stock
  run capture-async-error-rcclx 120 env SIM_LOCAL=2 LD_PRELOAD="$LIB" RCCLX_TIMEOUT_MS=20000 NCCL_DEBUG=WARN \
    "${AE[@]}" --lib "$LIB" --label rcclx
fi

# NCCL_P2P_LEVEL as the stock library reads it (issue 49; not in the default STEPS): one-rank
# communicators with each value (tests/gpu/p2p_level.c, built by scripts/gpu-prep.sh); stock's
# INFO line gives the level it took. OUT/p2p-levels.tsv is tests/data/nccl-p2p-levels.tsv, which
# src/topo.rs's test compares with rcclx's reading.
if step p2p; then
  run p2p-level 120 bash -c '"$@" > "$0"' "$OUT/p2p-levels.tsv" "$ART/p2p_level" "$STOCK" \
    LOC NVL NVB C2C PIX PXB P2C PXN PHB SYS 0 1 2 3 4 5 9 0x2 07 nvl bogus ""
fi

# Simulated hosts (issue 46; not in the default STEPS): N ranks as N processes on GPU 0, each a
# host of its own for the stock library (scripts/sim-host.sh: NCCL_HOSTID per process, so it runs
# them over sockets on loopback) and all of them one host for rcclx (RCCLX_SIM_HOSTID). Each
# program runs twice, stock alone and rcclx preloaded; bench/sim_compare.py compares them and
# fails when a case is wrong, a loss or logit leaves its bound, or rcclx's routes did not run
# (OUT/sim/summary.md). Under MPS when it starts (kernels of all processes at once; rcclx caps
# every grid at multiprocessors / (2 x ranks)), else time-sliced (correct, slower). Parts
# (SIM_PARTS, default all; world sizes SIM_WORLDS="8 4 2 6 3", 3 and 6 with fewer sizes). They run
# in this order, with torch at the largest world size first and at the others last:
#   torch  tests/gpu/torch_cases.py: every collective, dtype and op, in place, odd sizes,
#          subgroups, coalesced calls, a CUDA graph, a non-blocking communicator (every world size)
#   train  bench/train_e2e.py, DDP and FSDP2, 20 steps at the largest world size: stock, rcclx, and
#          rcclx with RCCL_LOW_PRECISION_ENABLE=1 (RCCLX_LP_MIN_BYTES=1M: every bucket and shard)
#   tp     bench/e2e/tp_model.py at TP = the largest world size: stock saves its prefill output and
#          the logits of decode steps replayed from a CUDA graph; stock with its input moved by one
#          bf16 step (the model's own sensitivity) and rcclx compare theirs with it
#   bench  rccl-tests-compat at the largest world size: rcclx_check (stock against rcclx, routes
#          checked against the model) and every *_perf with its checks on (-c 1)
#   budget NCCL's SM budget, 4 ranks, rcclx_check: NCCL_MAX_CTAS=4 (every rank's INFO line says
#          its grids are capped at 4 blocks; rcclx's routes, right results) and NCCL_MAX_CTAS=1
#          (every rank forwards and says why)
#   wrong  RCCLX_SIM_HOSTID set wrong, 4 ranks: a different id per rank (ranks that share memory),
#          and one id with rank 1 unable to open its peers' IPC handles (RCCLX_FAULT_INJECT=ipc:1:
#          ranks that cannot map each other): every rank forwards, with a WARN, and every case
#          is right (tests/gpu/torch_cases.py --quick, section coll)
# The 8-rank sizes (OUT/sim/, bench/README.md "Simulated hosts") keep the stock library's runs
# over loopback sockets short.
# Processes of simulated hosts share GPU 0: under MPS when it starts (their kernels run at
# once), else time-sliced. sim_start DIR starts it (MPS=1) or not (MPS=0); srun is `run` with a
# fresh MPS server (after a client dies, the old one refuses new clients); sim_stop ends it.
mps_restart() { echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; nvidia-cuda-mps-control -d; }
sim_start() {
  local dir=$1
  mkdir -p "$dir"
  MPS=0
  if [ "${SIM_MPS:-1}" = 1 ] && command -v nvidia-cuda-mps-control >/dev/null; then
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/rcclx-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/rcclx-mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if mps_restart >"$dir/mps.log" 2>&1 &&
      timeout 60 python3 -c 'import torch; assert torch.ones(1, device="cuda").sum().item() == 1' >>"$dir/mps.log" 2>&1; then
      MPS=1
    else
      echo quit | timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    fi
  fi
  MPS_LOG=$dir/mps.log
  echo "$(basename "$dir"): MPS=$MPS (1: kernels of the ranks' processes run at once; 0: time-sliced)" | tee -a "$SUMMARY" "$MPS_LOG"
  export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1
}
srun() {
  if [ "$MPS" = 1 ]; then mps_restart >>"$MPS_LOG" 2>&1; fi
  run "$@"
}
sim_stop() {
  if [ "$MPS" = 1 ]; then
    echo quit | timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  fi
}

if step sim; then
  SIM=$OUT/sim
  sim_start "$SIM"
  # A wait that never ends fails the call in 20 s instead of at the run's timeout.
  RX=(LD_PRELOAD="$LIB" RCCLX_SIM_HOSTID=sim RCCLX_TIMEOUT_MS=20000 NCCL_DEBUG=WARN)
  TR=(python3 -m torch.distributed.run --standalone --no-python)
  WORLDS=${SIM_WORLDS:-8 4 2 6 3}
  W=$(echo $WORLDS | tr ' ' '\n' | sort -n | tail -1)
  PARTS=" ${SIM_PARTS:-torch train tp bench budget wrong} "
  part() { [[ $PARTS == *" $1 "* ]]; }
  lib_env() { if [ "$1" = rcclx ]; then echo "${RX[@]}"; fi; }
  # The largest world size first, then the other parts, then the other world sizes.
  torch_cases() {
    local w=$1 q=()
    [ $((w & (w - 1))) != 0 ] && q=(--quick)
    for lib in stock rcclx; do
      srun sim-torch-$lib-w$w 150 env $(lib_env $lib) "${TR[@]}" --nproc_per_node=$w bash scripts/sim-host.sh \
        python3 tests/gpu/torch_cases.py --out "$SIM" --label $lib "${q[@]}"
    done
  }
  if part torch; then torch_cases $W; fi
  if part train; then
    # 13 M parameters: DDP buckets of 4 MiB and FSDP2 blocks of 7 MiB (fp32) stay under rcclx's
    # 8-rank limits (AllReduce and ReduceScatter 8 MiB), so its kernels carry them.
    TA=(--layers 4 --hidden 384 --heads 6 --vocab 8192 --seq 256 --batch 4 --steps 20 --warmup 5 --bucket-mb 4 --out "$SIM/train")
    for mode in ddp fsdp2; do
      srun sim-train-$mode-stock 150 "${TR[@]}" --nproc_per_node=$W bash scripts/sim-host.sh \
        python3 bench/train_e2e.py --mode $mode --label stock --expect stock "${TA[@]}"
      srun sim-train-$mode-rcclx 150 env "${RX[@]}" "${TR[@]}" --nproc_per_node=$W bash scripts/sim-host.sh \
        python3 bench/train_e2e.py --mode $mode --label rcclx --expect rcclx "${TA[@]}"
      srun sim-train-$mode-rcclx-lowp 150 env "${RX[@]}" RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LP_MIN_BYTES=1M "${TR[@]}" \
        --nproc_per_node=$W bash scripts/sim-host.sh python3 bench/train_e2e.py --mode $mode --label rcclx-lowp \
        --expect rcclx "${TA[@]}"
    done
  fi
  if part tp; then
    TPA=(--layers 4 --hidden 1024 --heads 8 --kv-heads 8 --intermediate 2048 --vocab 8192 --prefill-tokens 256
      --batches 1,8 --steps 20 --warmup 3 --context 128 --prefill-iters 2)
    REF=$SIM/tp-stock-output.pt
    srun sim-tp-stock 150 "${TR[@]}" --nproc_per_node=$W bash scripts/sim-host.sh \
      python3 bench/e2e/tp_model.py "${TPA[@]}" --mode decode,prefill --save-output "$REF"
    srun sim-tp-stock-perturb 150 "${TR[@]}" --nproc_per_node=$W bash scripts/sim-host.sh \
      python3 bench/e2e/tp_model.py "${TPA[@]}" --mode prefill --compare-output "$REF" --perturb
    srun sim-tp-rcclx 150 env "${RX[@]}" "${TR[@]}" --nproc_per_node=$W bash scripts/sim-host.sh \
      python3 bench/e2e/tp_model.py "${TPA[@]}" --mode decode,prefill --compare-output "$REF"
    rm -f "$REF"
  fi
  if part bench; then
    BX=(env RCCLX_BENCH_SIM_HOSTS=simbench RCCLX_SIM_HOSTID=sim RCCLX_TIMEOUT_MS=20000)
    srun sim-check-w$W 300 "${BX[@]}" "$B/rcclx_check" --libs "$LIBS" -P "$W" -g 1 \
      --coll all_reduce,all_gather,reduce_scatter,alltoall,broadcast,reduce -d float,bfloat16,half,int32,int8 -o all \
      --counts 1,7,1023,16387,262147 --inplace both
    for c in all_reduce all_gather reduce_scatter alltoall broadcast reduce; do
      srun sim-perf-$c-w$W 120 "${BX[@]}" "$B/${c}_perf" --libs "$LIBS" -P "$W" -g 1 -b 1K -e 4M -f 4 -n 5 -w 2 -c 1 \
        -d float -J "$SIM/perf-$c-w$W.json"
    done
  fi
  if part budget; then
    # NCCL's SM budget at 4 ranks: NCCL_MAX_CTAS=4 caps every rank's grids at 4 blocks (its INFO
    # line), with rcclx's routes and right results; NCCL_MAX_CTAS=1 forwards every rank.
    BG=(env RCCLX_BENCH_SIM_HOSTS=simbench RCCLX_SIM_HOSTID=sim RCCLX_TIMEOUT_MS=20000 NCCL_DEBUG=INFO
      NCCL_DEBUG_SUBSYS=INIT)
    BC=("$B/rcclx_check" --libs "$LIBS" -P 4 -g 1 --coll all_reduce,all_gather,reduce_scatter,alltoall
      -d float,bfloat16 -o sum --counts 1,1023,262147,4194311 --inplace both)
    for b in 4 1; do
      want="every grid at most 4 blocks" routes=()
      if [ $b = 1 ]; then want="SM budget is one block per grid" routes=(--expect-routes off); fi
      srun sim-budget-$b 150 bash -c 'out=$0 want=$1; shift; "$@" >"$out" 2>&1; rc=$?; cat "$out"
        n=$(grep -c "$want" "$out"); echo "ranks saying \"$want\": $n of 4"; [ $rc = 0 ] && [ "$n" = 4 ]' \
        "$SIM/budget-$b.out" "$want" "${BG[@]}" NCCL_MAX_CTAS=$b "${BC[@]}" "${routes[@]}"
    done
  fi
  if part wrong; then
    WQ=(python3 tests/gpu/torch_cases.py --out "$SIM" --quick --sections coll)
    srun sim-wrong-ids 150 env "${RX[@]}" "${TR[@]}" --nproc_per_node=4 bash scripts/sim-host.sh \
      bash -c 'export RCCLX_SIM_HOSTID=sim-$RANK; exec "$@"' _ "${WQ[@]}" --label wrong-ids
    srun sim-wrong-unmapped 150 env "${RX[@]}" RCCLX_FAULT_INJECT=ipc:1 "${TR[@]}" --nproc_per_node=4 \
      bash scripts/sim-host.sh "${WQ[@]}" --label wrong-unmapped
  fi
  if part torch; then
    for w in $WORLDS; do if [ "$w" != "$W" ]; then torch_cases $w; fi; done
  fi
  sim_stop
  # Outside the budget: seconds of Python, so a cut run still leaves its summary.
  timeout 120 python3 bench/sim_compare.py "$OUT" --out "$SIM/summary.md" --mps "$MPS" >"$OUT/sim-compare.log" 2>&1
  rc=$?
  printf '%-28s rc=%-3s %s\n' sim-compare "$rc" "$(tail -1 "$OUT/sim-compare.log")" | tee -a "$SUMMARY"
fi

# Hosts (issue 47; not in the default STEPS): communicators spanning simulated hosts, N ranks as
# N processes on GPU 0. The stock library sees N one-rank hosts (NCCL_HOSTID per process: sockets
# on loopback); rcclx sees H hosts of L ranks (RCCLX_SIM_HOSTID by rank / L; i2x2: rank mod H,
# hosts interleaved in rank order). Under MPS when it starts. Per shape HxL (HOSTS_SHAPES, default
# "2x2 2x4 4x2 3x2 i2x2 1x4 4x1"; 1x4 is one host, 4x1 rails only):
#   exact     RCCLX_HIER_EXACT=1, rcclx_check: AllReduce on the exact hierarchy, AllGather and
#             ReduceScatter forwarded (routes checked against the model), int32 bitwise, floats
#             within the model's tolerance, every op, odd counts, in place and out of place
#   fp8 int8  RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LP_MIN_BYTES=0 RCCLX_HIER_RS=1 RCCLX_HIER_AG=1:
#             AllReduce, ReduceScatter and AllGather of bf16, float and half within 0.2 x
#             sum|inputs| per element (int8: plus 0.035 x N absolute), an AllReduce's the same
#             bits on every rank
# At 2x2 (HOSTS_PARTS, default all): graph (one CUDA graph of AllReduces, 20 replays, exact and
# fp8), split (RCCLX_FAULT_INJECT=split:1: every rank forwards, with a WARN each), torch
# (tests/gpu/torch_cases.py with the exact hierarchy: subgroups made after the rails, coalesced
# calls, a graph, a non-blocking communicator), kill (tests/gpu/hosts_kill.py: a rank dies, the
# others end by themselves, stock and rcclx), error (tests/gpu/hosts_error.py: the codecs'
# error across hosts against one host of the same ranks and the stock library), train (DDP 20
# steps: stock, rcclx low precision across hosts), perf (AllReduce 1-256 MiB, bf16 and float:
# stock, the exact hierarchy, FP8 and INT8; ReduceScatter, AllGather: stock, FP8 and INT8; HOSTS_PERF_MAX:
# the largest size, 256M; HOSTS_PERF_TYPES, HOSTS_PERF_CODECS a subset, HOSTS_PERF_EXACT=0 no
# exact hierarchy). bench/hosts_summary.py judges them (OUT/hosts/summary.md).
if step hosts; then
  HO=$OUT/hosts
  sim_start "$HO"
  BX=(env RCCLX_BENCH_SIM_HOSTS=hostsim RCCLX_TIMEOUT_MS=20000 NCCL_DEBUG=WARN)
  CK=("$B/rcclx_check" --libs "$LIBS" -g 1)
  LP=(RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LP_MIN_BYTES=0 RCCLX_HIER_RS=1 RCCLX_HIER_AG=1)
  hosts_shape() {
    local il=0 s=$1 h l n abs codec
    if [[ $s == i* ]]; then il=1 s=${s#i}; fi
    h=${s%x*} l=${s#*x}
    n=$((h * l))
    local HX=("${BX[@]}" RCCLX_BENCH_SIM_LOCAL=$l RCCLX_BENCH_SIM_INTERLEAVE=$il)
    srun hosts-exact-$1 150 "${HX[@]}" RCCLX_HIER_EXACT=1 "${CK[@]}" -P $n \
      --coll all_reduce,all_gather,reduce_scatter -d float,bfloat16,int32 -o all --counts 1,7,1023,16387,262147 --inplace both
    for codec in fp8 int8; do
      abs=0
      if [ $codec = int8 ]; then abs=$(awk "BEGIN { print 0.035 * $n }"); fi
      srun hosts-$codec-$1 150 "${HX[@]}" "${LP[@]}" RCCLX_LOW_PRECISION_CODEC=$codec "${CK[@]}" -P $n \
        --coll all_reduce,reduce_scatter,all_gather -d bfloat16,float,half -o sum --counts 1,4095,65536,1048581,3000007 \
        --inplace both --rel-tol 0.2 --abs-tol $abs
    done
  }
  # The first shape, then the parts at 2x2 (their numbers), then the other shapes.
  SHAPES=(${HOSTS_SHAPES:-2x2 2x4 4x2 3x2 i2x2 1x4 4x1})
  hosts_shape "${SHAPES[0]}"
  HPARTS=" ${HOSTS_PARTS:-perf error train graph split torch kill} "
  hpart() { [[ $HPARTS == *" $1 "* ]]; }
  H2=("${BX[@]}" RCCLX_BENCH_SIM_LOCAL=2)
  TR=(python3 -m torch.distributed.run --standalone --no-python)
  RX=(LD_PRELOAD="$LIB" RCCLX_TIMEOUT_MS=20000 NCCL_DEBUG=WARN SIM_LOCAL=2)
  if hpart perf; then
    PA=(-P 4 -g 1 -b 1M -e "${HOSTS_PERF_MAX:-256M}" -f 4 -n 5 -w 2)
    for d in ${HOSTS_PERF_TYPES:-bfloat16 float}; do
      if [ "${HOSTS_PERF_EXACT:-1}" = 1 ]; then
        srun hosts-perf-exact-$d 150 "${H2[@]}" RCCLX_HIER_EXACT=1 "$B/all_reduce_perf" --libs "$LIBS" "${PA[@]}" -c 1 -d $d \
          -J "$HO/perf-exact-$d.json"
      fi
      for codec in ${HOSTS_PERF_CODECS:-fp8 int8}; do
        srun hosts-perf-$codec-$d 150 "${H2[@]}" "${LP[@]}" RCCLX_LOW_PRECISION_CODEC=$codec "$B/all_reduce_perf" \
          --libs "$LIBS" "${PA[@]}" -c 0 -d $d -J "$HO/perf-$codec-$d.json"
        srun hosts-perf-rs-$codec-$d 150 "${H2[@]}" "${LP[@]}" RCCLX_LOW_PRECISION_CODEC=$codec \
          "$B/reduce_scatter_perf" --libs "$LIBS" "${PA[@]}" -c 0 -d $d -J "$HO/perf-rs-$codec-$d.json"
        srun hosts-perf-ag-$codec-$d 150 "${H2[@]}" "${LP[@]}" RCCLX_LOW_PRECISION_CODEC=$codec \
          "$B/all_gather_perf" --libs "$LIBS" "${PA[@]}" -c 0 -d $d -J "$HO/perf-ag-$codec-$d.json"
      done
    done
  fi

  if hpart error; then
    HE=(python3 tests/gpu/hosts_error.py --out "$HO")
    srun hosts-error-stock 150 env SIM_LOCAL=2 "${TR[@]}" --nproc_per_node=4 bash scripts/sim-host.sh "${HE[@]}" --label stock
    for codec in fp8 int8; do
      srun hosts-error-$codec 150 env "${RX[@]}" "${LP[@]}" RCCLX_LOW_PRECISION_CODEC=$codec "${TR[@]}" --nproc_per_node=4 \
        bash scripts/sim-host.sh "${HE[@]}" --label rcclx-$codec
      srun hosts-error-$codec-1host 150 env "${RX[@]}" SIM_LOCAL=4 "${LP[@]}" RCCLX_LOW_PRECISION_CODEC=$codec "${TR[@]}" \
        --nproc_per_node=4 bash scripts/sim-host.sh "${HE[@]}" --label rcclx-$codec-1host
    done
  fi
  if hpart train; then
    TA=(--mode ddp --layers 4 --hidden 384 --heads 6 --vocab 8192 --seq 256 --batch 4 --steps 20 --warmup 5 --bucket-mb 4
      --out "$HO/train")
    srun hosts-train-stock 150 env SIM_LOCAL=2 "${TR[@]}" --nproc_per_node=4 bash scripts/sim-host.sh \
      python3 bench/train_e2e.py --label stock --expect stock "${TA[@]}"
    srun hosts-train-rcclx-lowp 150 env "${RX[@]}" RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LP_MIN_BYTES=1M \
      RCCLX_LOW_PRECISION_CODEC=int8 "${TR[@]}" --nproc_per_node=4 bash scripts/sim-host.sh \
      python3 bench/train_e2e.py --label rcclx-lowp --expect rcclx "${TA[@]}"
  fi
  if hpart graph; then
    srun hosts-graph-exact 150 "${H2[@]}" RCCLX_HIER_EXACT=1 "${CK[@]}" -P 4 --coll all_reduce -d float,bfloat16 -o sum \
      --counts 1,1023,65536,1048581 --graph --graph-replays 20
    srun hosts-graph-fp8 150 "${H2[@]}" "${LP[@]}" "${CK[@]}" -P 4 --coll all_reduce -d float,bfloat16 -o sum \
      --counts 1,1023,65536,1048581 --graph --graph-replays 20 --rel-tol 0.2
  fi
  if hpart split; then
    # A rank without its rail: every rank forwards (the stock results), each says so.
    srun hosts-split-fault 150 bash -c '"$@" >"$0" 2>&1; rc=$?; cat "$0"; n=$(grep -c "could not map its peers or take its rail" "$0");
      echo "ranks that forward with a WARN: $n of 4"; [ $rc = 0 ] && [ "$n" = 4 ]' "$HO/split-fault.out" \
      "${H2[@]}" "${LP[@]}" RCCLX_FAULT_INJECT=split:1 "${CK[@]}" -P 4 --coll all_reduce -d float -o sum \
      --counts 1048581 --expect-routes off
  fi
  if hpart torch; then
    srun hosts-torch-exact 150 env "${RX[@]}" RCCLX_HIER_EXACT=1 "${TR[@]}" --nproc_per_node=4 bash scripts/sim-host.sh \
      python3 tests/gpu/torch_cases.py --out "$HO" --label rcclx-exact
  fi
  if hpart kill; then
    # The last rank exits before an AllReduce across hosts: the others end within PyTorch's 30 s
    # collective timeout (an error, or its watchdog), stock alone and with rcclx (low precision).
    for lib in ${HOSTS_KILL_LIBS:-stock rcclx}; do
      env_=(SIM_LOCAL=2)
      if [ $lib = rcclx ]; then env_=("${RX[@]}" "${LP[@]}"); fi
      srun hosts-kill-$lib 150 bash -c 'timeout -k 5 110 "$@"; rc=$?; echo "torchrun exit $rc";
        [ $rc != 124 ] && [ $rc != 137 ] && echo "PASS ended by itself"' _ env "${env_[@]}" "${TR[@]}" --nproc_per_node=4 \
        bash scripts/sim-host.sh python3 tests/gpu/hosts_kill.py
    done
  fi
  for shape in "${SHAPES[@]:1}"; do hosts_shape "$shape"; done
  sim_stop
  timeout 120 python3 bench/hosts_summary.py "$OUT" --out "$HO/summary.md" --mps "$MPS" >"$OUT/hosts-summary.log" 2>&1
  rc=$?
  printf '%-28s rc=%-3s %s\n' hosts-summary "$rc" "$(tail -1 "$OUT/hosts-summary.log")" | tee -a "$SUMMARY"
fi

# Plots of the benchmark's JSON files (needs matplotlib).
if step plots && ls "$OUT"/*.json >/dev/null 2>&1; then
  run plots 300 python3 bench/plot.py "$OUT"/*.json --outdir "$OUT/plots"
fi
if step plots && [ -f "$OUT/moebench/moe_a2av.json" ]; then
  run plots-moe 120 python3 bench/plot_moe.py "$OUT/moebench/moe_a2av.json"
fi

echo "logs in $OUT" | tee -a "$SUMMARY"
! grep -E ' rc=[1-9]' "$SUMMARY" >/dev/null
