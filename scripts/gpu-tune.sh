#!/usr/bin/env bash
# Threshold tuning for DDA AllReduce: the same sweep with each algorithm forced, stock NCCL
# side by side, to pick RCCLX_DDA_LL_MAX_BYTES / RCCL_DDA_ALL_REDUCE_{FLAT,TREE}_MAX_BYTES.
#   bash scripts/gpu-tune.sh [OUTDIR]      (NRANKS=2 by default; artifacts as gpu-tests.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
N=${NRANKS:-2}
OUT=${1:-bench/results/$(date +%F)-tune}
ART=${RCCLX_ARTIFACTS:-.carry}
mkdir -p "$OUT"
LIB=$(readlink -f "$ART/librcclx.so")
STOCK=${RCCLX_UPSTREAM_LIB:-$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"))')}
export RCCLX_UPSTREAM_LIB=$STOCK
declare -A CFG=(
  [ll]="RCCLX_DDA_LL_MAX_BYTES=1M RCCL_DDA_ALL_REDUCE_FLAT_MAX_BYTES=0 RCCL_DDA_ALL_REDUCE_TREE_MAX_BYTES=0"
  [flat]="RCCLX_DDA_LL_MAX_BYTES=0 RCCL_DDA_ALL_REDUCE_FLAT_MAX_BYTES=64M RCCL_DDA_ALL_REDUCE_TREE_MAX_BYTES=64M"
  [tree]="RCCLX_DDA_LL_MAX_BYTES=0 RCCL_DDA_ALL_REDUCE_FLAT_MAX_BYTES=0 RCCL_DDA_ALL_REDUCE_TREE_MAX_BYTES=64M"
)
for algo in ll flat tree; do
  for mode in "eager:" "graph:-G 20"; do
    name=${mode%%:*}; flags=${mode#*:}
    log=$OUT/tune-$algo-P$N-$name.log
    env ${CFG[$algo]} timeout 300 "$ART/bench/all_reduce_perf" --libs "stock=$STOCK,rcclx=$LIB" -P "$N" -g 1 \
      -b 1K -e 64M -f 2 -n 20 -w 5 -c 0 -d float $flags >"$log" 2>&1
    echo "$algo $name rc=$? $(grep geomean "$log")"
  done
done
