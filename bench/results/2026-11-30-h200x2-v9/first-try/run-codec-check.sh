#!/bin/bash
# Which codec ran: the same AllReduce with validation (-c 1), per library: fp8 (default), int8 via the
# per-library variable, int8 via a build whose default is int8; RCCLX_LOG=debug prints each instance's configuration.
set -u
tar xzf .ship/carry.tgz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/cc; mkdir -p $O
S=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"))')
T=$(mktemp -d); cp .carry/librcclx.so $T/librcclx-i8.so
E=RCCLX_LOW_PRECISION_CODEC
L="stock=$S,fp8[$E=fp8;RCCLX_LOG=rcclx=debug]=.carry/librcclx.so,int8[$E=int8;RCCLX_LOG=rcclx=debug]=$T/librcclx-i8.so,int8default[RCCLX_LOG=rcclx=debug]=.carry/librcclx-int8default.so"
timeout -k 5 100 env RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LP_MIN_BYTES=0 .carry/bench/all_reduce_perf --libs "$L" -P 2 -g 1 -b 16M -e 16M -n 20 -w 5 -N 3 -c 1 -d bfloat16 -J $O/ar.json > $O/ar.log 2>&1; echo "ar rc=$?"
timeout -k 5 100 env RCCL_LOW_PRECISION_ENABLE=1 RCCLX_LP_MIN_BYTES=0 .carry/bench/alltoall_perf --libs "$L" -P 2 -g 1 -b 16M -e 16M -n 20 -w 5 -N 3 -c 1 -d bfloat16 -J $O/a2a.json > $O/a2a.log 2>&1; echo "a2a rc=$?"
grep -v "^vm:" $O/ar.log | tail -25; grep -c "lowp_codec: Int8" $O/ar.log; grep -c "lowp_codec: Fp8" $O/ar.log
cd $OUT && tar czf cc.tgz cc && rm -rf cc
