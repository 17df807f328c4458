#!/bin/bash
# Session 9, final build, part 1: correctness (low-precision AllReduce suite, quick suite of all
# collectives, DDA checks against stock: the 16-byte store primitive changed under DDA too).
set -u
tar xzf .ship/carry.tgz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/v8; mkdir -p $O/verify
S=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"))')
for codec in fp8 int8; do
  timeout -k 5 100 env RCCLX_UPSTREAM_LIB=$S RCCLX_TIMEOUT_MS=30000 RCCLX_LOW_PRECISION_CODEC=$codec .carry/lowp_accuracy --procs 2 --filter allreduce > $O/verify/lowp-accuracy-allreduce-full-procs-$codec.log 2>&1; echo "full-ar-$codec rc=$? $(tail -n 1 $O/verify/lowp-accuracy-allreduce-full-procs-$codec.log)" >> $O/verify/summary-full.txt
done
timeout -k 5 120 env STEPS="lowp" LOWP_ARGS="--quick" bash scripts/gpu-tests.sh $O/verify > $O/run-verify.log 2>&1
timeout -k 5 250 env STEPS="check stress graph" bash scripts/gpu-tests.sh $O/dda > $O/run-dda.log 2>&1
cat $O/verify/summary-full.txt $O/verify/summary.txt $O/dda/summary.txt
cd $OUT && tar czf v8-verify.tgz v8 && rm -rf v8
