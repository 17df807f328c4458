"""A rank that dies mid-job across (simulated) hosts: the others must end, not hang.

Run under torchrun, one process per rank (scripts/sim-host.sh, SIM_LOCAL=L for rcclx's hosts),
with the stock library alone or rcclx preloaded. After a warm-up AllReduce, the last rank exits;
the others call an AllReduce of `--elems` bf16 elements, whose rail step waits on the dead rank.
Each survivor must end within PyTorch's collective timeout (`--timeout-s`) plus its watchdog's
reaction: an error raised, or the watchdog ending the process. The caller bounds the whole run
(scripts/gpu-tests.sh, step hosts: the run must end by itself, not by `timeout`). A survivor whose
AllReduce completes without an error exits 4.

  torchrun --nproc_per_node=4 --no-python bash scripts/sim-host.sh python3 tests/gpu/hosts_kill.py
"""
import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--elems", type=int, default=16 << 20)
    ap.add_argument("--timeout-s", type=float, default=30)
    args = ap.parse_args()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev, timeout=datetime.timedelta(seconds=args.timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.ones(args.elems, dtype=torch.bfloat16, device=dev)
    dist.all_reduce(x)
    torch.cuda.synchronize()
    ok = bool((x == world).all())
    dist.barrier()
    if rank == world - 1:
        print(f"rank {rank}: warm-up right: {ok}; exiting now", flush=True)
        os._exit(0)
    time.sleep(1)
    t0 = time.time()
    try:
        dist.all_reduce(x)
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 (any error is the expected outcome)
        print(f"rank {rank}: error after {time.time() - t0:.1f} s: {type(e).__name__}: {str(e)[:200]}", flush=True)
        os._exit(3)
    print(f"rank {rank}: the AllReduce with a dead peer completed without an error after {time.time() - t0:.1f} s",
          flush=True)
    os._exit(4)


if __name__ == "__main__":
    sys.exit(main())
