#!/bin/bash
# Session 10, run 1: the INT8 codec's fused multiply-adds. Correctness of the new INT8 kernels
# (quick suite of all collectives, both layouts; full AllReduce suite; graph replay), then
# speed: stock, FP8 and three INT8 builds side by side in one process per run (c8 = the v8
# final build, enc = fused encoder + fused accumulate, dec = enc + one-instruction decode).
# The INT8 builds are the same library with the codec's default set to int8 (the codec is read
# from one environment variable per process; a different default lets both codecs share a run).
set -u
tar xzf .ship/carry.tgz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/v9; mkdir -p $O/int8-verify $O/int8-speed
S=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"))')
timeout -k 5 150 env STEPS="lowp" LOWP_CODECS=int8 LOWP_ARGS="--quick" bash scripts/gpu-tests.sh $O/int8-verify > $O/run-int8-verify.log 2>&1
timeout -k 5 120 env RCCLX_UPSTREAM_LIB=$S RCCLX_TIMEOUT_MS=30000 RCCLX_LOW_PRECISION_CODEC=int8 .carry/lowp_accuracy --procs 2 --filter allreduce > $O/int8-verify/lowp-accuracy-allreduce-full-procs-int8.log 2>&1; echo "full-ar-int8 rc=$? $(tail -n 1 $O/int8-verify/lowp-accuracy-allreduce-full-procs-int8.log)" >> $O/int8-verify/summary-full.txt
timeout -k 5 100 env STEPS="lpgraph" LOWP_CODECS=int8 bash scripts/gpu-tests.sh $O/int8-graph > $O/run-int8-graph.log 2>&1
L=stock=$S,fp8=.carry/librcclx.so,c8=.carry/librcclx-int8-c8.so,enc=.carry/librcclx-int8-enc.so,dec=.carry/librcclx-int8-dec.so
for cd in alltoall:bfloat16 alltoall:half alltoall:float all_reduce:bfloat16 all_reduce:float all_reduce:half reduce_scatter:bfloat16 all_gather:bfloat16; do
  c=${cd%%:*}; dt=${cd##*:}
  timeout -k 5 120 env RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LP_MIN_BYTES=0 .carry/bench/${c}_perf --libs "$L" -P 2 -g 1 -b 1M -e 256M -f 2 -n 20 -w 5 -N 3 -c 0 -d $dt -J $O/int8-speed/$c-$dt.json > $O/int8-speed/$c-$dt.log 2>&1; echo "$c $dt rc=$?" >> $O/int8-speed/summary.txt
done
python3 bench/ratios.py $O/int8-speed/*.json > $O/int8-speed/ratios.md 2>&1
cat $O/int8-verify/summary.txt $O/int8-verify/summary-full.txt $O/int8-graph/summary.txt $O/int8-speed/summary.txt
cd $OUT && tar czf v9-int8.tgz v9 && rm -rf v9
