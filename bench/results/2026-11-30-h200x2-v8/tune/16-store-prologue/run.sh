#!/bin/bash
# Session 9, run 1: one-instruction 16-byte stores (st16) and window 0 encoded before the
# sequence number is read (pro = st16 + that), against the v7 build (base), stock side by side.
set -u
tar xzf .ship/carry.tgz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/x; mkdir -p $O
S=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"))')
export RCCLX_UPSTREAM_LIB=$S
A=$PWD/.carry; B=$A/bench
t0=$SECONDS
log() { echo "$1 rc=$2 $((SECONDS-t0))s" >> $O/summary.txt; }
L3=stock=$S,base=$A/librcclx-base.so,st16=$A/librcclx-st16.so,pro=$A/librcclx.so
for cd in fp8:bfloat16:5 fp8:float:3 fp8:half:3 int8:bfloat16:3; do
  IFS=: read codec dt n <<< "$cd"
  timeout -k 5 $((n*30)) env RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LOW_PRECISION_CODEC=$codec RCCLX_LP_MIN_BYTES=0 $B/all_reduce_perf --libs $L3 -P 2 -g 1 -b 1M -e 256M -f 2 -n 20 -w 5 -N $n -c 0 -d $dt -J $O/ar-$codec-$dt.json > $O/ar-$codec-$dt.log 2>&1; log ar-$codec-$dt $?
done
L2=stock=$S,base=$A/librcclx-base.so,st16=$A/librcclx-st16.so
for coll in all_gather reduce_scatter alltoall; do
  timeout -k 5 90 env RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LOW_PRECISION_CODEC=fp8 RCCLX_LP_MIN_BYTES=0 $B/${coll}_perf --libs $L2 -P 2 -g 1 -b 1M -e 256M -f 2 -n 20 -w 5 -N 3 -c 0 -d bfloat16 -J $O/$coll-fp8-bfloat16.json > $O/$coll-fp8-bfloat16.log 2>&1; log $coll $?
done
for dt in bfloat16 float; do
  timeout -k 5 60 $B/all_reduce_perf --libs $L2 -P 2 -g 1 -b 4K -e 32M -f 4 -n 20 -w 5 -N 3 -c 0 -d $dt -J $O/dda-ar-$dt.json > $O/dda-ar-$dt.log 2>&1; log dda-ar-$dt $?
done
python3 bench/ratios.py $O/*.json > $O/ratios.md 2>&1
cat $O/summary.txt
cd $OUT && tar czf x.tgz x && rm -rf x
