#!/bin/bash
set -u
tar xzf .ship/carry.tgz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/v7; mkdir -p $O
S=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"))')
mkdir -p $O/verify
for codec in fp8 int8; do
  timeout -k 5 100 env RCCLX_UPSTREAM_LIB=$S RCCLX_TIMEOUT_MS=30000 RCCLX_LOW_PRECISION_CODEC=$codec .carry/lowp_accuracy --procs 2 --filter allreduce > $O/verify/lowp-accuracy-allreduce-full-procs-$codec.log 2>&1; echo "full-ar-$codec rc=$? $(tail -n 1 $O/verify/lowp-accuracy-allreduce-full-procs-$codec.log)" >> $O/verify/summary-full.txt
done
timeout -k 5 120 env STEPS="lowp" LOWP_ARGS="--quick" bash scripts/gpu-tests.sh $O/verify > $O/run-verify.log 2>&1
timeout -k 5 200 env STEPS="info selftest lpgraph lpbench" bash scripts/gpu-tests.sh $O/speed > $O/run-speed.log 2>&1
cat $O/speed/summary.txt $O/verify/summary.txt $O/verify/summary-full.txt
cd $OUT && tar czf v7.tgz v7 && rm -rf v7
