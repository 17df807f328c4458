#!/bin/bash
# Session 9, run 5: the INT8 decoder's code byte as a float in one byte permute (bp, this
# build) against the v8 build (v8), stock side by side; then the INT8 suites.
set -u
tar xzf .ship/carry.tgz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/x; mkdir -p $O
S=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"))')
export RCCLX_UPSTREAM_LIB=$S
A=$PWD/.carry; B=$A/bench
t0=$SECONDS
log() { echo "$1 rc=$2 $((SECONDS-t0))s" >> $O/summary.txt; }
L=stock=$S,v8=$A/librcclx-v8.so,bp=$A/librcclx.so
for cd in int8:bfloat16:5 int8:float:5 int8:half:5 fp8:bfloat16:3; do
  IFS=: read codec dt n <<< "$cd"
  timeout -k 5 $((n*30)) env RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LOW_PRECISION_CODEC=$codec RCCLX_LP_MIN_BYTES=0 $B/all_reduce_perf --libs $L -P 2 -g 1 -b 1M -e 256M -f 2 -n 20 -w 5 -N $n -c 0 -d $dt -J $O/ar-$codec-$dt.json > $O/ar-$codec-$dt.log 2>&1; log ar-$codec-$dt $?
done
for coll in all_gather reduce_scatter alltoall; do
  timeout -k 5 90 env RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LOW_PRECISION_CODEC=int8 RCCLX_LP_MIN_BYTES=0 $B/${coll}_perf --libs $L -P 2 -g 1 -b 1M -e 256M -f 2 -n 20 -w 5 -N 5 -c 0 -d bfloat16 -J $O/$coll-int8-bfloat16.json > $O/$coll-int8-bfloat16.log 2>&1; log $coll-int8 $?
done
python3 bench/ratios.py $O/*.json > $O/ratios.md 2>&1
timeout -k 5 100 env RCCLX_TIMEOUT_MS=30000 RCCLX_LOW_PRECISION_CODEC=int8 $A/lowp_accuracy --procs 2 --filter allreduce > $O/acc-int8.log 2>&1; log "acc-int8 $(tail -n 1 $O/acc-int8.log)" $?
timeout -k 5 60 env RCCLX_TIMEOUT_MS=30000 RCCLX_LOW_PRECISION_CODEC=int8 $A/lowp_accuracy --procs 2 --quick > $O/acc-int8-quick.log 2>&1; log "acc-int8-quick $(tail -n 1 $O/acc-int8-quick.log)" $?
cat $O/summary.txt
cd $OUT && tar czf x.tgz x && rm -rf x
