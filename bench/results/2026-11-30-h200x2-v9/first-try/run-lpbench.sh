#!/bin/bash
# Session 10, run 2: the low-precision benchmark with both codecs side by side in one process
# (scripts/gpu-tests.sh lpbench: stock, fp8 = librcclx.so, int8 = a copy of it loaded with
# RCCLX_LOW_PRECISION_CODEC=int8), 5 cycles. The library is the v8 final build (c8d1347).
set -u
tar xzf .ship/carry.tgz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/v9; mkdir -p $O
timeout -k 5 400 env STEPS="info lpbench" LPBENCH_CYCLES=5 bash scripts/gpu-tests.sh $O/lpbench > $O/run-lpbench.log 2>&1
cat $O/lpbench/summary.txt
cd $OUT && tar czf v9-lpbench.tgz v9 && rm -rf v9
