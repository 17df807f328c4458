#!/bin/bash
set -u
tar xzf .ship/carry.tgz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/x; mkdir -p $O
S=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"))')
export RCCLX_UPSTREAM_LIB=$S
A=$PWD/.carry; B=$A/bench
t0=$SECONDS
for codec in fp8 int8; do
  timeout -k 5 150 env RCCLX_TIMEOUT_MS=30000 RCCLX_LOW_PRECISION_CODEC=$codec $A/lowp_accuracy --procs 2 --quick > $O/acc-quick-procs-$codec.log 2>&1; echo "acc-quick-procs-$codec rc=$? $((SECONDS-t0))s" >> $O/summary.txt
  timeout -k 5 150 env RCCLX_TIMEOUT_MS=30000 RCCLX_LOW_PRECISION_CODEC=$codec $A/lowp_accuracy --procs 2 --filter "allreduce bf16" > $O/acc-arbf16-procs-$codec.log 2>&1; echo "acc-arbf16-procs-$codec rc=$? $((SECONDS-t0))s" >> $O/summary.txt
done
L=stock=$S,head=$A/librcclx-head.so,pf=$A/librcclx-pf.so,cv=$A/librcclx.so
for cd in fp8:bfloat16 fp8:half int8:bfloat16 fp8:float; do
  codec=${cd%%:*}; dt=${cd#*:}
  timeout -k 5 150 env RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LOW_PRECISION_CODEC=$codec RCCLX_LP_MIN_BYTES=0 $B/all_reduce_perf --libs $L -P 2 -g 1 -b 1M -e 256M -f 2 -n 20 -w 5 -N 3 -c 0 -d $dt -J $O/ar-$codec-$dt.json > $O/ar-$codec-$dt.log 2>&1; echo "ar-$codec-$dt rc=$? $((SECONDS-t0))s" >> $O/summary.txt
done
for c in reduce_scatter all_gather alltoall; do
  timeout -k 5 150 env RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LOW_PRECISION_CODEC=fp8 RCCLX_LP_MIN_BYTES=0 $B/${c}_perf --libs stock=$S,head=$A/librcclx-head.so,cv=$A/librcclx.so -P 2 -g 1 -b 1M -e 256M -f 2 -n 20 -w 5 -N 3 -c 0 -d bfloat16 -J $O/$c-fp8-bfloat16.json > $O/$c-fp8-bfloat16.log 2>&1; echo "$c rc=$? $((SECONDS-t0))s" >> $O/summary.txt
done
python3 bench/ratios.py $O/*.json > $O/ratios.md 2>&1
cat $O/summary.txt
cd $OUT && tar czf x.tgz x && rm -rf x
