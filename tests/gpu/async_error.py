"""The stock library's asynchronous error fails rcclx's own routes too (issue 48, audit N11).

Two ranks under torchrun on one GPU as two simulated hosts for the stock library (sockets on
loopback, scripts/sim-host.sh) and one host for rcclx (SIM_LOCAL=2), so a small AllReduce runs on
rcclx's kernels. After warm-up AllReduces (one of FP8 elements, which rcclx forwards, so that the
stock library's connections exist) rank 1 exits. Rank 0 calls the FP8 AllReduce again (a stock
call that waits on the dead rank), waits until `ncclCommGetAsyncError` reports the dead peer, then
calls a small float AllReduce (rcclx's LL route when rcclx is preloaded) and a small FP8 one (the
stock library's): both must return the asynchronous error, as every operation does on the stock
library alone; neither may return `ncclSuccess` (a launch that waits on the dead peer).

  torchrun --nproc_per_node=2 --no-python bash scripts/sim-host.sh python3 tests/gpu/async_error.py --lib LIB

LIB: the library whose `ncclXxx` the test calls (librcclx.so when it is preloaded, else the stock
libnccl.so.2). Exit 0: PASS; 1: a wrong code; 3: the stock library never reported the dead peer.
"""
import argparse
import ctypes
import datetime
import os
import time

import torch
import torch.distributed as dist

NAMES = {0: "ncclSuccess", 1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
         4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress"}
FLOAT32 = 7
# ncclFloat8e4m3: the stock library reduces it (sm_90), rcclx forwards it.
FP8 = 10


def name(code):
    return NAMES.get(code, str(code))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--label", default="")
    ap.add_argument("--wait-s", type=float, default=60)
    args = ap.parse_args()
    # The watchdog must not abort the communicator under the test's own calls.
    os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0"
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev, timeout=datetime.timedelta(seconds=300))
    rank = dist.get_rank()
    lib = ctypes.CDLL(args.lib)
    comm = ctypes.c_void_p(dist.distributed_c10d._get_default_group()._get_backend(dev)._comm_ptr())
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    lib.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                  ctypes.c_void_p, ctypes.c_void_p]
    lib.ncclCommGetAsyncError.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    # FP8 elements as bytes: zeros sum to zeros.
    big = torch.zeros(16 << 20, dtype=torch.uint8, device=dev)
    small = torch.ones(1024, dtype=torch.float32, device=dev)

    def fp8_allreduce(buf):
        return lib.ncclAllReduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), FP8, 0, comm, stream)

    warm = fp8_allreduce(big)
    dist.all_reduce(small)
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    if warm != 0:
        print(f"FAIL {args.label}: the warm-up FP8 AllReduce returned {name(warm)}", flush=True)
        os._exit(1)
    if rank == 1:
        print("rank 1: exiting now", flush=True)
        os._exit(0)
    time.sleep(1)
    r = fp8_allreduce(big)
    print(f"rank 0: FP8 AllReduce of 16 MiB with the dead rank: {name(r)}", flush=True)
    state = ctypes.c_int(0)
    start = time.monotonic()
    while time.monotonic() - start < args.wait_s:
        g = lib.ncclCommGetAsyncError(comm, ctypes.byref(state))
        if g != 0 or state.value not in (0, 7):
            break
        time.sleep(0.1)
    seen = state.value
    print(f"rank 0: async error after {time.monotonic() - start:.1f} s: {name(seen)}", flush=True)
    if seen in (0, 7):
        print(f"SKIP {args.label}: the stock library reported no error within {args.wait_s} s", flush=True)
        os._exit(3)
    own = lib.ncclAllReduce(small.data_ptr(), small.data_ptr(), small.numel(), FLOAT32, 0, comm, stream)
    fwd = fp8_allreduce(big[:1024])
    print(f"rank 0: AllReduce of 1024 floats: {name(own)}; of 1024 FP8: {name(fwd)}", flush=True)
    ok = own == seen and fwd == seen
    verdict = "PASS" if ok else "FAIL"
    print(f"{verdict} {args.label}: async {name(seen)}, float AllReduce {name(own)}, FP8 AllReduce {name(fwd)}",
          flush=True)
    # The stream holds a stock kernel that never ends: leave without waiting on it.
    os._exit(0 if ok else 1)


if __name__ == "__main__":
    main()
