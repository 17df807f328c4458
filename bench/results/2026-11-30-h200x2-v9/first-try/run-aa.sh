#!/bin/bash
# Session 10, run 3: how much of a side-by-side difference is the harness itself (an A/A test).
# One process loads stock, fp8, int8 and again fp8b, int8b (copies of the same file with the
# same variables), 5 cycles, bf16. fp8b/fp8 and int8b/int8 would be 1.000 without position
# or instance effects. The library is the v8 final build (c8d1347).
set -u
tar xzf .ship/carry.tgz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/v9/aa; mkdir -p $O
S=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"))')
T=$(mktemp -d)
for n in i8 f8b i8b; do cp .carry/librcclx.so $T/librcclx-$n.so; done
E=RCCLX_LOW_PRECISION_CODEC
L="stock=$S,fp8[$E=fp8]=.carry/librcclx.so,int8[$E=int8]=$T/librcclx-i8.so,fp8b[$E=fp8]=$T/librcclx-f8b.so,int8b[$E=int8]=$T/librcclx-i8b.so"
for c in all_reduce alltoall all_gather reduce_scatter; do
  timeout -k 5 120 env RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LP_MIN_BYTES=0 .carry/bench/${c}_perf --libs "$L" -P 2 -g 1 -b 1M -e 256M -f 2 -n 20 -w 5 -N 5 -c 0 -d bfloat16 -J $O/$c-bfloat16.json > $O/$c-bfloat16.log 2>&1; echo "$c rc=$?" >> $O/summary.txt
done
python3 bench/ratios.py --versus fp8 $O/*.json > $O/ratios.md 2>&1
cat $O/summary.txt
cd $OUT && tar czf v9-aa.tgz v9 && rm -rf v9
