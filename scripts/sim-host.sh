#!/usr/bin/env bash
# One simulated host per process (issue 46): run a torchrun rank as a host of its own on one GPU.
#
#   python3 -m torch.distributed.run --nproc_per_node=8 --no-python bash scripts/sim-host.sh python3 prog.py
#
# The stock library groups ranks into hosts by NCCL_HOSTID, which it reads once per process, and
# refuses two ranks of one host on one GPU: each rank gets NCCL_HOSTID=<SIM_HOST_PREFIX>-<RANK>,
# so the stock library runs N ranks on one GPU as N hosts over sockets. Each process is then
# alone on its host: LOCAL_RANK=0 (every rank on cuda:0) and LOCAL_WORLD_SIZE=1. rcclx, given
# RCCLX_SIM_HOSTID (the same on every rank), sees one host of N ranks and runs its kernels.
#
# SIM_LOCAL=L (issue 47) gives rcclx hosts of L ranks instead: RCCLX_SIM_HOSTID=<prefix>-h<RANK / L>,
# or, with SIM_INTERLEAVE=1, <prefix>-h<RANK mod (WORLD_SIZE / L)> (hosts not contiguous in rank order).
set -euo pipefail
export NCCL_HOSTID="${SIM_HOST_PREFIX:-simhost}-${RANK:?torchrun sets RANK}" LOCAL_RANK=0 LOCAL_WORLD_SIZE=1
if [ -n "${SIM_LOCAL:-}" ]; then
  hosts=$((${WORLD_SIZE:?torchrun sets WORLD_SIZE} / SIM_LOCAL))
  if [ "${SIM_INTERLEAVE:-0}" = 1 ]; then host=$((RANK % hosts)); else host=$((RANK / SIM_LOCAL)); fi
  export RCCLX_SIM_HOSTID="${SIM_HOST_PREFIX:-simhost}-h$host"
fi
exec "$@"
