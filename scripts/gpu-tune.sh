#!/usr/bin/env bash
# Crossover sweep for the DDA kernels: the same size sweep with each algorithm forced, stock NCCL
# side by side, to pick the defaults of the rows of collective::COLLS and LL_MAX (RCCLX_DDA_LL_MAX_BYTES,
# RCCL_DDA_ALL_REDUCE_{FLAT,TREE}_MAX_BYTES, RCCL_DDA_{ALL_GATHER,REDUCE_SCATTER,ALL_TO_ALL}_MAX_BYTES).
#   bash scripts/gpu-tune.sh [OUTDIR]
# Environment: NRANKS (default 2), COLLS (default: all four), artifacts as gpu-tests.sh.
# One line per (collective, algorithm, mode) with the geomean ratio; the logs hold every size.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
N=${NRANKS:-2}
OUT=${1:-bench/results/$(date +%F)-tune}
ART=${RCCLX_ARTIFACTS:-.carry}
COLLS=${COLLS:-all_reduce all_gather reduce_scatter alltoall}
mkdir -p "$OUT"
LIB=$(readlink -f "$ART/librcclx.so")
STOCK=${RCCLX_UPSTREAM_LIB:-$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"))')}
export RCCLX_UPSTREAM_LIB=$STOCK
# Each algorithm forced: LL for every size its inbox holds (1 MiB per rank), flat or tree for all.
BIG="RCCL_DDA_ALL_GATHER_MAX_BYTES=1G RCCL_DDA_REDUCE_SCATTER_MAX_BYTES=1G RCCL_DDA_ALL_TO_ALL_MAX_BYTES=1G"
declare -A CFG=(
  [ll]="RCCLX_DDA_LL_MAX_BYTES=1M RCCL_DDA_ALL_REDUCE_FLAT_MAX_BYTES=0 RCCL_DDA_ALL_REDUCE_TREE_MAX_BYTES=0 RCCL_DDA_ALL_GATHER_MAX_BYTES=0 RCCL_DDA_REDUCE_SCATTER_MAX_BYTES=0 RCCL_DDA_ALL_TO_ALL_MAX_BYTES=0"
  [flat]="RCCLX_DDA_LL_MAX_BYTES=0 RCCL_DDA_ALL_REDUCE_FLAT_MAX_BYTES=1G RCCL_DDA_ALL_REDUCE_TREE_MAX_BYTES=1G $BIG"
  [tree]="RCCLX_DDA_LL_MAX_BYTES=0 RCCL_DDA_ALL_REDUCE_FLAT_MAX_BYTES=0 RCCL_DDA_ALL_REDUCE_TREE_MAX_BYTES=1G"
)
for c in $COLLS; do
  algos="ll flat"
  [ "$c" = all_reduce ] && algos="ll flat tree"
  for algo in $algos; do
    for mode in "eager:" "graph:-G 20"; do
      name=${mode%%:*}; flags=${mode#*:}
      log=$OUT/tune-$c-$algo-P$N-$name.log
      end=64M
      [ "$algo" = ll ] && end=$((N * 1))M
      env ${CFG[$algo]} timeout 300 "$ART/bench/${c}_perf" --libs "stock=$STOCK,rcclx=$LIB" -P "$N" -g 1 \
        -b 1K -e "$end" -f 2 -n 20 -w 5 -c 0 -d float $flags >"$log" 2>&1
      echo "$c $algo $name rc=$? $(grep geomean "$log")"
    done
  done
done
