#!/bin/bash
set -u
tar xzf .ship/carry.tgz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/x; mkdir -p $O
S=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"))')
export RCCLX_UPSTREAM_LIB=$S
A=$PWD/.carry; B=$A/bench
t0=$SECONDS
L=stock=$S,l4=$A/librcclx.so,cv=$A/librcclx-cv.so
for cd in int8:bfloat16 int8:half int8:float fp8:bfloat16; do
  codec=${cd%%:*}; dt=${cd#*:}
  timeout -k 5 150 env RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LOW_PRECISION_CODEC=$codec RCCLX_LP_MIN_BYTES=0 $B/all_reduce_perf --libs $L -P 2 -g 1 -b 4M -e 256M -f 2 -n 20 -w 5 -N 5 -c 0 -d $dt -J $O/ar-$codec-$dt.json > $O/ar-$codec-$dt.log 2>&1; echo "ar-$codec-$dt rc=$? $((SECONDS-t0))s" >> $O/summary.txt
done
python3 bench/ratios.py $O/*.json > $O/ratios.md 2>&1
cat $O/summary.txt
cd $OUT && tar czf x.tgz x && rm -rf x
