#!/bin/bash
set -u
tar xzf .ship/carry.tgz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/x; mkdir -p $O
S=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"))')
export RCCLX_UPSTREAM_LIB=$S
A=$PWD/.carry; B=$A/bench
nvidia-smi -L > $O/info.log 2>&1
t0=$SECONDS
for codec in fp8 int8; do
  timeout -k 5 200 env RCCLX_TIMEOUT_MS=30000 RCCLX_LOW_PRECISION_CODEC=$codec $A/lowp_accuracy --procs 2 --filter allreduce > $O/acc-procs-$codec.log 2>&1; echo "acc-procs-$codec rc=$? $((SECONDS-t0))s" >> $O/summary.txt
done
timeout -k 5 150 env RCCLX_TIMEOUT_MS=30000 RCCLX_LOW_PRECISION_CODEC=fp8 $A/lowp_accuracy --one-process --quick --filter allreduce > $O/acc-1proc-fp8.log 2>&1; echo "acc-1proc-fp8 rc=$? $((SECONDS-t0))s" >> $O/summary.txt
for codec in fp8 int8; do
  abs=0; [ $codec = int8 ] && abs=0.04
  for v in rcclx:librcclx x1:librcclx-x1; do
    timeout -k 5 120 env RCCLX_TIMEOUT_MS=30000 RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LOW_PRECISION_CODEC=$codec RCCLX_LP_MIN_BYTES=0 $B/rcclx_check --libs stock=$S,${v%%:*}=$A/${v#*:}.so -P 2 -g 1 --coll all_reduce -d bfloat16,float -o sum --counts 1,1023,65536,1048581,3000007,12582917,20000003 --graph --graph-replays 200 --rel-tol 0.2 --abs-tol $abs > $O/graph-$codec-${v%%:*}.log 2>&1; echo "graph-$codec-${v%%:*} rc=$? $((SECONDS-t0))s" >> $O/summary.txt
  done
done
L=stock=$S,head=$A/librcclx-head.so,pf=$A/librcclx.so,x1=$A/librcclx-x1.so,x2=$A/librcclx-x2.so,x3=$A/librcclx-x3.so
for cd in fp8:bfloat16 fp8:float int8:bfloat16 fp8:half; do
  codec=${cd%%:*}; dt=${cd#*:}
  timeout -k 5 150 env RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LOW_PRECISION_CODEC=$codec RCCLX_LP_MIN_BYTES=0 $B/all_reduce_perf --libs $L -P 2 -g 1 -b 1M -e 256M -f 2 -n 20 -w 5 -N 3 -c 0 -d $dt -J $O/ar-$codec-$dt.json > $O/ar-$codec-$dt.log 2>&1; echo "ar-$codec-$dt rc=$? $((SECONDS-t0))s" >> $O/summary.txt
done
python3 bench/ratios.py $O/ar-*.json > $O/ratios.md 2>&1
cat $O/summary.txt
cd $OUT && tar czf x.tgz x && rm -rf x
