#!/bin/bash
set -u
tar xzf .ship/carry.tgz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/e2e7; mkdir -p $O
timeout -k 5 400 env STEPS="e2e" bash scripts/gpu-tests.sh $O > $O/run.log 2>&1
cat $O/summary.txt
cd $OUT && tar czf e2e7.tgz e2e7 && rm -rf e2e7
