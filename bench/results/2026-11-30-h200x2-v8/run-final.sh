#!/bin/bash
# Session 9, the final build (v8 + the INT8 decoder's byte permute): quick suites of every
# collective for both codecs, low-precision graph replay, speed against stock.
set -u
tar xzf .ship/carry.tgz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/final; mkdir -p $O
timeout -k 5 150 env STEPS="lowp" LOWP_ARGS="--quick" bash scripts/gpu-tests.sh $O/verify > $O/run-verify.log 2>&1
timeout -k 5 200 env STEPS="info selftest lpgraph lpbench" bash scripts/gpu-tests.sh $O/speed > $O/run-speed.log 2>&1
cat $O/verify/summary.txt $O/speed/summary.txt
cd $OUT && tar czf final.tgz final && rm -rf final
