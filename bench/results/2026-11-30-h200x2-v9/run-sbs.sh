#!/bin/bash
# Session 10: both codecs side by side in one process, with the harness setting each copy's
# variables around its load and its communicator creation (first-try/ set them around the load
# only: rcclx reads the low-precision switches again per communicator, so "int8" ran FP8 there).
# 1. codec check: AllReduce and AllToAll with validation (-c 1) and each instance's configuration
#    logged: int8 by variable must give the same wrong-element counts as a build whose default is
#    int8, and fp8 others.
# 2. A/A: stock, fp8, int8, fp8b, int8b (copies with the same variables), bf16, 5 cycles.
# 3. scripts/gpu-tests.sh lpbench (stock, fp8, int8), 5 cycles.
# The library is the v8 final build (c8d1347).
set -u
tar xzf .ship/carry.tgz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/v9; mkdir -p $O/codec-check $O/aa
S=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"))')
T=$(mktemp -d)
for n in i8 f8b i8b; do cp .carry/librcclx.so $T/librcclx-$n.so; done
E=RCCLX_LOW_PRECISION_CODEC
D="RCCLX_LOG=rcclx=debug"
L="stock=$S,fp8[$E=fp8;$D]=.carry/librcclx.so,int8[$E=int8;$D]=$T/librcclx-i8.so,int8default[$D]=.carry/librcclx-int8default.so"
for c in all_reduce alltoall; do
  timeout -k 5 100 env RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LP_MIN_BYTES=0 .carry/bench/${c}_perf --libs "$L" -P 2 -g 1 -b 16M -e 16M -n 20 -w 5 -N 3 -c 1 -d bfloat16 -J $O/codec-check/$c.json > $O/codec-check/$c.log 2>&1; echo "check $c rc=$?"
done
L="stock=$S,fp8[$E=fp8]=.carry/librcclx.so,int8[$E=int8]=$T/librcclx-i8.so,fp8b[$E=fp8]=$T/librcclx-f8b.so,int8b[$E=int8]=$T/librcclx-i8b.so"
for c in all_reduce alltoall all_gather reduce_scatter; do
  timeout -k 5 120 env RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LP_MIN_BYTES=0 .carry/bench/${c}_perf --libs "$L" -P 2 -g 1 -b 1M -e 256M -f 2 -n 20 -w 5 -N 5 -c 0 -d bfloat16 -J $O/aa/$c-bfloat16.json > $O/aa/$c-bfloat16.log 2>&1; echo "aa $c rc=$?"
done
python3 bench/ratios.py --versus fp8 $O/aa/*.json > $O/aa/ratios.md 2>&1
timeout -k 5 300 env STEPS="info lpbench" LPBENCH_CYCLES=5 bash scripts/gpu-tests.sh $O/lpbench > $O/run-lpbench.log 2>&1
cat $O/lpbench/summary.txt
cd $OUT && tar czf v9-sbs.tgz v9 && rm -rf v9
