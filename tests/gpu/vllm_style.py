"""NCCL the way vLLM and SGLang use it: loaded by path with ctypes, driven from Python.

vLLM's PyNcclCommunicator (vllm/distributed/device_communicators/pynccl.py, pynccl_wrapper.py;
SGLang has the same code with SGLANG_NCCL_SO_PATH) opens the library named by VLLM_NCCL_SO_PATH
with ctypes.CDLL (RTLD_LOCAL, so LD_PRELOAD does not matter to it), creates its own communicator
(ncclGetUniqueId on rank 0, broadcast over a gloo group, ncclCommInitRank under the rank's CUDA
device, a warm-up all-reduce) and calls ncclAllReduce out of place on the current stream, eagerly
and inside CUDA graphs. This script does the same, with vLLM's function table and calling
convention, and checks:

* ncclAllReduce (sum) on bf16 and fp32 tensors of 1 KiB .. 8 MiB (and one odd count), out of
  place and in place: exact results (integer-valued data);
* the same calls captured in torch.cuda.CUDAGraph (one graph per dtype and size, plus one graph
  of two chained all-reduces), all graphs replayed 100 times interleaved, new inputs before each
  replay, every replay checked exactly;
* through the same handle, rcclxCommGetRouteStats: every call on this communicator took one of
  rcclx's own routes (none "forwarded"). Skipped when the library is not rcclx (no rcclx
  symbols): the script also runs, and must pass, against the stock libnccl.so.2 alone.

Run (2 GPUs):

    VLLM_NCCL_SO_PATH=$(python -c 'import rcclx; print(rcclx.library_path())') \\
        torchrun --nproc_per_node=2 tests/gpu/vllm_style.py
    python -m rcclx run -- torchrun --nproc_per_node=2 tests/gpu/vllm_style.py   # same, via rcclx's env
    VLLM_NCCL_SO_PATH=/path/to/stock/libnccl.so.2 torchrun --nproc_per_node=2 tests/gpu/vllm_style.py

`--lib PATH` overrides VLLM_NCCL_SO_PATH; with neither, libnccl.so.2 (librccl.so.1 on ROCm) is
loaded by name, as vLLM's find_nccl_library does. Prints PASS/FAIL lines (rank 0 prints the
passes, every rank its failures) and exits non-zero on any failure.
"""

import argparse
import ctypes
import os
import sys
from dataclasses import dataclass
from typing import Any, List

import torch
import torch.distributed as dist

# --- vLLM's pynccl_wrapper.py, reduced to what this test calls (same types and signatures) ---

ncclResult_t = ctypes.c_int
ncclComm_t = ctypes.c_void_p
cudaStream_t = ctypes.c_void_p
buffer_type = ctypes.c_void_p
ncclDataType_t = ctypes.c_int
ncclRedOp_t = ctypes.c_int


class ncclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


NCCL_DTYPE = {torch.int8: 0, torch.uint8: 1, torch.int32: 2, torch.int64: 4, torch.float16: 6,
              torch.float32: 7, torch.float64: 8, torch.bfloat16: 9}
NCCL_SUM = 0


@dataclass
class Function:
    name: str
    restype: Any
    argtypes: List[Any]


# vLLM's exported_functions (same order and signatures). The window functions are optional there
# (NCCL >= 2.27 only); rcclx exports them too.
EXPORTED_FUNCTIONS = [
    Function("ncclGetErrorString", ctypes.c_char_p, [ncclResult_t]),
    Function("ncclGetVersion", ncclResult_t, [ctypes.POINTER(ctypes.c_int)]),
    Function("ncclGetUniqueId", ncclResult_t, [ctypes.POINTER(ncclUniqueId)]),
    Function("ncclCommInitRank", ncclResult_t,
             [ctypes.POINTER(ncclComm_t), ctypes.c_int, ncclUniqueId, ctypes.c_int]),
    Function("ncclAllReduce", ncclResult_t,
             [buffer_type, buffer_type, ctypes.c_size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t]),
    Function("ncclReduce", ncclResult_t,
             [buffer_type, buffer_type, ctypes.c_size_t, ncclDataType_t, ncclRedOp_t, ctypes.c_int, ncclComm_t,
              cudaStream_t]),
    Function("ncclAllGather", ncclResult_t,
             [buffer_type, buffer_type, ctypes.c_size_t, ncclDataType_t, ncclComm_t, cudaStream_t]),
    Function("ncclReduceScatter", ncclResult_t,
             [buffer_type, buffer_type, ctypes.c_size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t]),
    Function("ncclSend", ncclResult_t,
             [buffer_type, ctypes.c_size_t, ncclDataType_t, ctypes.c_int, ncclComm_t, cudaStream_t]),
    Function("ncclRecv", ncclResult_t,
             [buffer_type, ctypes.c_size_t, ncclDataType_t, ctypes.c_int, ncclComm_t, cudaStream_t]),
    Function("ncclBroadcast", ncclResult_t,
             [buffer_type, buffer_type, ctypes.c_size_t, ncclDataType_t, ctypes.c_int, ncclComm_t, cudaStream_t]),
    Function("ncclCommDestroy", ncclResult_t, [ncclComm_t]),
    Function("ncclCommAbort", ncclResult_t, [ncclComm_t]),
    Function("ncclGroupStart", ncclResult_t, []),
    Function("ncclGroupEnd", ncclResult_t, []),
]
OPTIONAL_FUNCTIONS = [
    Function("ncclCommWindowRegister", ncclResult_t,
             [ncclComm_t, buffer_type, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]),
    Function("ncclCommWindowDeregister", ncclResult_t, [ncclComm_t, ctypes.c_void_p]),
]


class rcclxRouteStats(ctypes.Structure):
    _fields_ = [("calls", ctypes.c_uint64), ("bytes", ctypes.c_uint64)]


class NCCLLibrary:
    """vLLM's NCCLLibrary: ctypes.CDLL(so_file), restype/argtypes from the table."""

    def __init__(self, so_file):
        self.so_file = so_file
        self.lib = ctypes.CDLL(so_file)
        self._funcs = {}
        for func in EXPORTED_FUNCTIONS + OPTIONAL_FUNCTIONS:
            try:
                f = getattr(self.lib, func.name)
            except AttributeError:
                if func in OPTIONAL_FUNCTIONS:
                    continue
                raise
            f.restype = func.restype
            f.argtypes = func.argtypes
            self._funcs[func.name] = f

    def NCCL_CHECK(self, result):
        if result != 0:
            raise RuntimeError(f"NCCL error: {self._funcs['ncclGetErrorString'](result).decode()}")

    def ncclGetRawVersion(self):
        v = ctypes.c_int()
        self.NCCL_CHECK(self._funcs["ncclGetVersion"](ctypes.byref(v)))
        return v.value

    def ncclGetUniqueId(self):
        uid = ncclUniqueId()
        self.NCCL_CHECK(self._funcs["ncclGetUniqueId"](ctypes.byref(uid)))
        return uid

    def ncclCommInitRank(self, world_size, unique_id, rank):
        comm = ncclComm_t()
        self.NCCL_CHECK(self._funcs["ncclCommInitRank"](ctypes.byref(comm), world_size, unique_id, rank))
        return comm

    def ncclAllReduce(self, sendbuff, recvbuff, count, datatype, op, comm, stream):
        self.NCCL_CHECK(self._funcs["ncclAllReduce"](sendbuff, recvbuff, count, datatype, op, comm, stream))

    def ncclCommDestroy(self, comm):
        self.NCCL_CHECK(self._funcs["ncclCommDestroy"](comm))

    # rcclx's own API, through the same handle (absent from a stock library).
    def is_rcclx(self):
        return hasattr(self.lib, "rcclxCommGetRouteStats")

    def rcclx_comm_routes(self, comm):
        f = self.lib.rcclxCommGetRouteStats
        f.restype = ncclResult_t
        f.argtypes = [ncclComm_t, ctypes.POINTER(rcclxRouteStats), ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
        name = self.lib.rcclxRouteName
        name.restype = ctypes.c_char_p
        name.argtypes = [ctypes.c_int]
        count = ctypes.c_int(0)
        self.NCCL_CHECK(f(comm, None, 0, ctypes.byref(count)))
        arr = (rcclxRouteStats * count.value)()
        self.NCCL_CHECK(f(comm, arr, count.value, ctypes.byref(count)))
        return {name(i).decode(): (arr[i].calls, arr[i].bytes) for i in range(count.value)}

    def rcclx_info(self):
        v = ctypes.c_int()
        self.lib.rcclxGetVersion(ctypes.byref(v))
        up = self.lib.rcclxGetUpstreamPath
        up.restype = ctypes.c_char_p
        p = up()
        return v.value, (p.decode() if p else None)


# --- vLLM's PyNcclCommunicator, reduced ------------------------------------------------------

class PyNcclCommunicator:
    def __init__(self, nccl, cpu_group, device):
        self.nccl = nccl
        self.rank = dist.get_rank(cpu_group)
        self.world_size = dist.get_world_size(cpu_group)
        self.device = device
        self.calls = 0  # host-side ncclAllReduce calls on this communicator
        uid = nccl.ncclGetUniqueId() if self.rank == 0 else ncclUniqueId()
        # vLLM broadcasts the 128 id bytes as a CPU tensor over the gloo group.
        tensor = torch.tensor(list(bytes(uid.internal)), dtype=torch.uint8)
        dist.broadcast(tensor, src=dist.get_process_group_ranks(cpu_group)[0], group=cpu_group)
        ctypes.memmove(ctypes.addressof(uid), bytes(tensor.tolist()), 128)
        with torch.cuda.device(device):
            self.comm = nccl.ncclCommInitRank(self.world_size, uid, self.rank)
            stream = torch.cuda.current_stream()
            data = torch.zeros(1, device=device)  # vLLM's warm-up all-reduce
            self.all_reduce(data)
            stream.synchronize()
            del data

    def all_reduce(self, in_tensor, out_tensor=None, stream=None):
        assert in_tensor.device == self.device
        if out_tensor is None:
            out_tensor = torch.empty_like(in_tensor)
        if stream is None:
            stream = torch.cuda.current_stream()
        self.nccl.ncclAllReduce(buffer_type(in_tensor.data_ptr()), buffer_type(out_tensor.data_ptr()),
                                in_tensor.numel(), NCCL_DTYPE[in_tensor.dtype], NCCL_SUM, self.comm,
                                cudaStream_t(stream.cuda_stream))
        self.calls += 1
        return out_tensor


# --- the test --------------------------------------------------------------------------------

SIZES_BYTES = [1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 8 << 20]
ODD_COUNT = 777  # not a multiple of any vector width
DTYPES = [torch.bfloat16, torch.float32]
REPLAYS = 100


def pattern(n, rank, it, device, dtype):
    """Integer-valued input of `rank` at replay `it`: ((i + it) % 13) + rank + 1. Every partial
    sum stays below 256, so bf16 sums are exact for up to 8 ranks."""
    i = torch.arange(n, device=device, dtype=torch.int64)
    return ((i + it) % 13 + rank + 1).to(dtype)


def expected(n, world, it, device, dtype):
    i = torch.arange(n, device=device, dtype=torch.int64)
    return (world * ((i + it) % 13) + world * (world + 1) // 2).to(dtype)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default=None, help="NCCL library to load (default: $VLLM_NCCL_SO_PATH)")
    ap.add_argument("--replays", type=int, default=REPLAYS)
    args = ap.parse_args()

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    device = torch.device("cuda", local)
    torch.cuda.set_device(device)
    so_file = args.lib or os.environ.get("VLLM_NCCL_SO_PATH") or (
        "librccl.so.1" if torch.version.hip else "libnccl.so.2")

    # vLLM: the world group, plus a gloo group for CPU-side exchanges (the unique id).
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    cpu_group = dist.new_group(backend="gloo")

    passed = failed = 0

    def check(name, ok, detail=""):
        nonlocal passed, failed
        if ok:
            passed += 1
        else:
            failed += 1
        if rank == 0 or not ok:
            print(f"{'PASS' if ok else 'FAIL'} rank{rank} {name} {detail}".rstrip(), flush=True)

    nccl = NCCLLibrary(so_file)
    rcclx = nccl.is_rcclx()
    version = nccl.ncclGetRawVersion()
    info = ""
    if rcclx:
        code, upstream = nccl.rcclx_info()
        info = f" rcclx {code // 10000}.{code // 100 % 100}.{code % 100}, forwarding to {upstream}"
    check("library loaded by path", True, f"{so_file}: ncclGetVersion {version}{info}")

    comm = PyNcclCommunicator(nccl, cpu_group, device)
    check("ncclCommInitRank + warm-up all-reduce", True)

    # torch's own NCCL group still works beside it (vLLM keeps both).
    t = torch.full((1024,), float(rank + 1), device=device)
    dist.all_reduce(t)
    check("torch.distributed.all_reduce beside it", bool((t == world * (world + 1) / 2).all()))

    cases = [(dt, nb // torch.tensor([], dtype=dt).element_size()) for dt in DTYPES for nb in SIZES_BYTES]
    cases += [(dt, ODD_COUNT) for dt in DTYPES]

    # Eager: out of place (vLLM's way) and in place.
    for dt, n in cases:
        x = pattern(n, rank, 0, device, dt)
        want = expected(n, world, 0, device, dt)
        out = comm.all_reduce(x)
        ok_oop = torch.equal(out, want) and torch.equal(x, pattern(n, rank, 0, device, dt))
        comm.all_reduce(x, out_tensor=x)
        ok_ip = torch.equal(x, want)
        check(f"eager {str(dt)[6:]} n={n} ({n * x.element_size()} B)", ok_oop and ok_ip,
              "" if ok_oop and ok_ip else f"out-of-place ok={ok_oop} in-place ok={ok_ip}")

    # CUDA graphs: vLLM warms up on a side stream, then captures; the graphs are replayed later,
    # interleaved (one graph per batch size in vLLM).
    graphs = []
    pool = torch.cuda.graph_pool_handle()
    for dt, n in cases:
        inp = pattern(n, rank, 0, device, dt)
        out = torch.empty_like(inp)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            comm.all_reduce(inp, out_tensor=out)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool):
            comm.all_reduce(inp, out_tensor=out)
        graphs.append(("single", dt, n, g, inp, [out]))
    # Two chained all-reduces in one graph (layers in vLLM): y = AR(x); z = AR(y).
    for dt in DTYPES:
        n = (64 << 10) // torch.tensor([], dtype=dt).element_size()
        inp = torch.ones(n, dtype=dt, device=device)
        y = torch.empty_like(inp)
        z = torch.empty_like(inp)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool):
            comm.all_reduce(inp, out_tensor=y)
            comm.all_reduce(y, out_tensor=z)
        graphs.append(("chain", dt, n, g, inp, [y, z]))
    check(f"captured {len(graphs)} CUDA graphs", True)

    bad = {}
    for it in range(1, args.replays + 1):
        for kind, dt, n, g, inp, outs in graphs:
            key = (kind, dt, n)
            if kind == "single":
                inp.copy_(pattern(n, rank, it, device, dt))
                g.replay()
                ok = torch.equal(outs[0], expected(n, world, it, device, dt))
            else:
                # x = ((i + it) % 3) + 1 on every rank; y = world * x; z = world^2 * x (<= 192 for 8
                # ranks: exact in bf16).
                i = torch.arange(n, device=device)
                x = ((i + it) % 3 + 1).to(dt)
                inp.copy_(x)
                g.replay()
                ok = torch.equal(outs[0], (x.double() * world).to(dt)) and \
                    torch.equal(outs[1], (x.double() * world * world).to(dt))
            if not ok:
                bad.setdefault(key, it)
    torch.cuda.synchronize()
    for kind, dt, n, _, inp, _ in graphs:
        key = (kind, dt, n)
        check(f"graph {kind} {str(dt)[6:]} n={n} x{args.replays} replays", key not in bad,
              f"first wrong replay: {bad[key]}" if key in bad else "")

    # Which route each call took, through the same handle.
    if rcclx:
        routes = nccl.rcclx_comm_routes(comm.comm)
        taken = {k: v for k, v in routes.items() if v[0]}
        own = sum(c for k, (c, _) in routes.items() if k != "forwarded")
        fwd = routes.get("forwarded", (0, 0))[0]
        check("rcclx routes: every call on this communicator ran on rcclx's kernels",
              fwd == 0 and own == comm.calls,
              f"host calls {comm.calls}, own routes {own}, forwarded {fwd}: {taken}")
        check("rcclx routes: allreduce.ll and a larger-message route both used",
              routes.get("allreduce.ll", (0, 0))[0] > 0 and
              routes.get("allreduce.flat", (0, 0))[0] + routes.get("allreduce.tree", (0, 0))[0] > 0, str(taken))
    elif rank == 0:
        print(f"SKIP rank{rank} route check: {so_file} has no rcclx symbols (stock library)", flush=True)

    torch.cuda.synchronize()
    dist.barrier(group=cpu_group)
    del graphs
    nccl.ncclCommDestroy(comm.comm)
    dist.destroy_process_group()
    print(f"rank{rank}: {passed} passed, {failed} failed", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
