#!/bin/bash
# Session 9, the final build, part 2: the FP8 AllReduce full suite and the end-to-end model.
set -u
tar xzf .ship/carry.tgz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/final2; mkdir -p $O
S=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"))')
timeout -k 5 100 env RCCLX_UPSTREAM_LIB=$S RCCLX_TIMEOUT_MS=30000 RCCLX_LOW_PRECISION_CODEC=fp8 .carry/lowp_accuracy --procs 2 --filter allreduce > $O/lowp-accuracy-allreduce-full-procs-fp8.log 2>&1; echo "full-ar-fp8 rc=$? $(tail -n 1 $O/lowp-accuracy-allreduce-full-procs-fp8.log)" > $O/summary-full.txt
timeout -k 5 250 env STEPS="e2e" bash scripts/gpu-tests.sh $O/e2e > $O/run-e2e.log 2>&1
cat $O/summary-full.txt $O/e2e/summary.txt
cd $OUT && tar czf final2.tgz final2 && rm -rf final2
