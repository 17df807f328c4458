#!/bin/bash
# Session 9, final build, part 2: speed against stock (lpbench), the final build against the
# v7 build side by side (sbs/), and the end-to-end model.
set -u
tar xzf .ship/carry.tgz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/v8; mkdir -p $O/sbs
S=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"))')
export RCCLX_UPSTREAM_LIB=$S
A=$PWD/.carry; B=$A/bench
timeout -k 5 200 env STEPS="info selftest lpgraph lpbench" bash scripts/gpu-tests.sh $O/speed > $O/run-speed.log 2>&1
L=stock=$S,v7=$A/librcclx-base.so,v8=$A/librcclx.so
for codec in fp8 int8; do
  for coll in all_reduce all_gather reduce_scatter alltoall; do
    timeout -k 5 90 env RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LOW_PRECISION_CODEC=$codec RCCLX_LP_MIN_BYTES=0 $B/${coll}_perf --libs $L -P 2 -g 1 -b 1M -e 256M -f 2 -n 20 -w 5 -N 5 -c 0 -d bfloat16 -J $O/sbs/$coll-$codec-bfloat16.json > $O/sbs/$coll-$codec-bfloat16.log 2>&1; echo "$coll-$codec rc=$?" >> $O/sbs/summary.txt
  done
done
for coll in all_reduce reduce_scatter; do
  for dt in bfloat16 float; do
    timeout -k 5 60 $B/${coll}_perf --libs $L -P 2 -g 1 -b 4K -e 32M -f 4 -n 20 -w 5 -N 3 -c 0 -d $dt -J $O/sbs/dda-$coll-$dt.json > $O/sbs/dda-$coll-$dt.log 2>&1; echo "dda-$coll-$dt rc=$?" >> $O/sbs/summary.txt
  done
done
python3 bench/ratios.py $O/sbs/*.json > $O/sbs/ratios.md 2>&1
timeout -k 5 250 env STEPS="e2e" bash scripts/gpu-tests.sh $O/e2e > $O/run-e2e.log 2>&1
cat $O/speed/summary.txt $O/sbs/summary.txt $O/e2e/summary.txt
cd $OUT && tar czf v8-speed.tgz v8 && rm -rf v8
