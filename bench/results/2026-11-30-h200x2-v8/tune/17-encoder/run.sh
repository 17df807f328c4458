#!/bin/bash
# Session 9, run 2: the encoder's fast path (integer amax, NaN patch only for lanes with
# non-finite values) on top of the one-instruction 16-byte stores: enc (this build) against
# st16 and the v7 build (base), stock side by side; then the low-precision AllReduce suite.
set -u
tar xzf .ship/carry.tgz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/x; mkdir -p $O
S=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"))')
export RCCLX_UPSTREAM_LIB=$S
A=$PWD/.carry; B=$A/bench
t0=$SECONDS
log() { echo "$1 rc=$2 $((SECONDS-t0))s" >> $O/summary.txt; }
L=stock=$S,base=$A/librcclx-base.so,st16=$A/librcclx-st16.so,enc=$A/librcclx.so
for cd in fp8:bfloat16:5 fp8:float:3 fp8:half:3 int8:bfloat16:5 int8:float:3; do
  IFS=: read codec dt n <<< "$cd"
  timeout -k 5 $((n*30)) env RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LOW_PRECISION_CODEC=$codec RCCLX_LP_MIN_BYTES=0 $B/all_reduce_perf --libs $L -P 2 -g 1 -b 1M -e 256M -f 2 -n 20 -w 5 -N $n -c 0 -d $dt -J $O/ar-$codec-$dt.json > $O/ar-$codec-$dt.log 2>&1; log ar-$codec-$dt $?
done
for codec in fp8 int8; do
  for coll in all_gather reduce_scatter alltoall; do
    timeout -k 5 90 env RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LOW_PRECISION_CODEC=$codec RCCLX_LP_MIN_BYTES=0 $B/${coll}_perf --libs $L -P 2 -g 1 -b 1M -e 256M -f 2 -n 20 -w 5 -N 3 -c 0 -d bfloat16 -J $O/$coll-$codec-bfloat16.json > $O/$coll-$codec-bfloat16.log 2>&1; log $coll-$codec $?
  done
done
python3 bench/ratios.py $O/*.json > $O/ratios.md 2>&1
for codec in fp8 int8; do
  timeout -k 5 100 env RCCLX_TIMEOUT_MS=30000 RCCLX_LOW_PRECISION_CODEC=$codec $A/lowp_accuracy --procs 2 --filter allreduce > $O/acc-$codec.log 2>&1; log "acc-$codec $(tail -n 1 $O/acc-$codec.log)" $?
done
cat $O/summary.txt
cd $OUT && tar czf x.tgz x && rm -rf x
