#!/bin/bash
set -u
tar xzf .ship/carry.tgz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/x; mkdir -p $O
S=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"))')
export RCCLX_UPSTREAM_LIB=$S
A=$PWD/.carry; B=$A/bench
t0=$SECONDS
timeout -k 5 150 env RCCLX_TIMEOUT_MS=30000 RCCLX_LOW_PRECISION_CODEC=fp8 $A/lowp_accuracy --procs 2 --filter allreduce > $O/acc-ar-procs-fp8.log 2>&1; echo "acc-ar-procs-fp8 rc=$? $((SECONDS-t0))s" >> $O/summary.txt
timeout -k 5 150 env RCCLX_TIMEOUT_MS=30000 RCCLX_LOW_PRECISION_CODEC=int8 $A/lowp_accuracy --procs 2 --filter "allreduce bf16" > $O/acc-arbf16-procs-int8.log 2>&1; echo "acc-arbf16-procs-int8 rc=$? $((SECONDS-t0))s" >> $O/summary.txt
timeout -k 5 150 env RCCLX_TIMEOUT_MS=30000 RCCLX_LOW_PRECISION_CODEC=int8 $A/lowp_accuracy --one-process --quick --filter allreduce > $O/acc-ar-1proc-int8.log 2>&1; echo "acc-ar-1proc-int8 rc=$? $((SECONDS-t0))s" >> $O/summary.txt
for codec in fp8 int8; do
  abs=0; [ $codec = int8 ] && abs=0.04
  timeout -k 5 120 env RCCLX_TIMEOUT_MS=30000 RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LOW_PRECISION_CODEC=$codec RCCLX_LP_MIN_BYTES=0 $B/rcclx_check --libs stock=$S,rcclx=$A/librcclx.so -P 2 -g 1 --coll all_reduce -d bfloat16,float,half -o sum --counts 1,1023,65536,1048581,3000007,12582917,20000003 --graph --graph-replays 200 --rel-tol 0.2 --abs-tol $abs > $O/graph-$codec.log 2>&1; echo "graph-$codec rc=$? $((SECONDS-t0))s" >> $O/summary.txt
done
L=stock=$S,head=$A/librcclx-head.so,l4=$A/librcclx-l4.so,ws=$A/librcclx.so
for cd in fp8:bfloat16 fp8:half int8:bfloat16 fp8:float int8:float; do
  codec=${cd%%:*}; dt=${cd#*:}
  timeout -k 5 150 env RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LOW_PRECISION_CODEC=$codec RCCLX_LP_MIN_BYTES=0 $B/all_reduce_perf --libs $L -P 2 -g 1 -b 1M -e 256M -f 2 -n 20 -w 5 -N 3 -c 0 -d $dt -J $O/ar-$codec-$dt.json > $O/ar-$codec-$dt.log 2>&1; echo "ar-$codec-$dt rc=$? $((SECONDS-t0))s" >> $O/summary.txt
done
python3 bench/ratios.py $O/*.json > $O/ratios.md 2>&1
cat $O/summary.txt
cd $OUT && tar czf x.tgz x && rm -rf x
