#!/bin/bash
# Session 9, final review: the FP8 encoder packs through rcclx_f32x4_to_e4m3x4 (mend, this
# build); of the 30 low-precision kernels only AllToAll FP8 bf16 compiles differently. Against
# the previous commit (head), stock side by side.
set -u
tar xzf .ship/carry.tgz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/x; mkdir -p $O
S=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"))')
export RCCLX_UPSTREAM_LIB=$S
A=$PWD/.carry; B=$A/bench
L=stock=$S,head=$A/librcclx-head.so,mend=$A/librcclx.so
for dt in bfloat16 half; do
  timeout -k 5 120 env RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LOW_PRECISION_CODEC=fp8 RCCLX_LP_MIN_BYTES=0 $B/alltoall_perf --libs $L -P 2 -g 1 -b 1M -e 256M -f 2 -n 20 -w 5 -N 5 -c 0 -d $dt -J $O/alltoall-fp8-$dt.json > $O/alltoall-fp8-$dt.log 2>&1; echo "alltoall-fp8-$dt rc=$?" >> $O/summary.txt
done
python3 bench/ratios.py $O/*.json > $O/ratios.md 2>&1
timeout -k 5 60 env RCCLX_TIMEOUT_MS=30000 RCCLX_LOW_PRECISION_CODEC=fp8 $A/lowp_accuracy --procs 2 --quick --filter alltoall > $O/acc-fp8-alltoall-quick.log 2>&1; echo "acc $(tail -n 1 $O/acc-fp8-alltoall-quick.log) rc=$?" >> $O/summary.txt
cat $O/summary.txt
cd $OUT && tar czf x.tgz x && rm -rf x
