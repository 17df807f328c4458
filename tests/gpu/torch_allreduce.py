"""PyTorch job through rcclx: run with torchrun (2 processes) and LD_PRELOAD=librcclx.so.

Checks that dist.all_reduce results are correct (eager and captured in a CUDA graph), that
all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single, broadcast and reduce give exact results, and that
rcclx's own kernels ran for each (rcclxGetProcessRouteStats, exported by the preloaded library).
Prints PASS/FAIL lines and exits non-zero on any failure.
"""
import ctypes
import os
import sys

import torch
import torch.distributed as dist


class Stats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "ddaLlCalls", "ddaLlBytes", "ddaFlatCalls", "ddaFlatBytes", "ddaTreeCalls", "ddaTreeBytes",
        "lowpCalls", "lowpBytes", "forwardedCalls", "forwardedBytes")] + [
        ("forwardedByReason", ctypes.c_uint64 * 16)]


def stats():
    lib = ctypes.CDLL(None)
    s = Stats()
    if not hasattr(lib, "rcclxGetProcessStats"):
        return None
    assert lib.rcclxGetProcessStats(ctypes.byref(s)) == 0
    return s


def route_stats():
    """{route name: calls} of the whole process, or None without rcclx."""
    lib = ctypes.CDLL(None)
    if not hasattr(lib, "rcclxGetProcessRouteStats"):
        return None
    lib.rcclxRouteName.restype = ctypes.c_char_p
    count = ctypes.c_int(0)
    assert lib.rcclxGetProcessRouteStats(None, 0, ctypes.byref(count)) == 0
    arr = (ctypes.c_uint64 * (2 * count.value))()
    assert lib.rcclxGetProcessRouteStats(arr, count.value, ctypes.byref(count)) == 0
    return {lib.rcclxRouteName(i).decode(): arr[2 * i] for i in range(count.value)}


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    # device_id makes the init eager, which PyTorch does with a non-blocking communicator.
    dist.init_process_group("nccl", device_id=dev)
    failures = 0

    def check(name, ok, detail=""):
        nonlocal failures
        if rank == 0 or not ok:
            print(f"{'PASS' if ok else 'FAIL'} rank{rank} {name} {detail}", flush=True)
        failures += 0 if ok else 1

    expected_sum = world * (world + 1) / 2
    for dtype in (torch.bfloat16, torch.float32, torch.float16):
        for n in (1, 7, 1000, 4096 + 3, 65536, 1 << 20, (1 << 22) + 5):
            x = torch.full((n,), float(rank + 1), dtype=dtype, device=dev)
            dist.all_reduce(x)
            check(f"eager constant {dtype} n={n}", bool((x == expected_sum).all()))
            g = torch.Generator(device=dev).manual_seed(1234 + rank)
            y = torch.randn(n, dtype=torch.float32, device=dev, generator=g).to(dtype)
            ref = [torch.empty_like(y) for _ in range(world)]
            dist.all_gather(ref, y)
            exact = torch.stack([r.double() for r in ref]).sum(0)
            dist.all_reduce(y)
            err = (y.double() - exact).abs().max().item()
            tol = {torch.float32: 1e-5, torch.bfloat16: 0.05, torch.float16: 0.01}[dtype] * max(1.0, exact.abs().max().item())
            check(f"eager random {dtype} n={n}", err <= tol, f"maxerr={err:.3g} tol={tol:.3g}")

    # CUDA graph: warm up on a side stream, capture, replay with new inputs.
    for n in (1024, 1 << 18):
        y = torch.zeros(n, dtype=torch.bfloat16, device=dev)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                dist.all_reduce(y)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            dist.all_reduce(y)
        ok = True
        for it in range(200):
            y.fill_(float(rank + 1 + it % 5))
            graph.replay()
            want = sum(r + 1 + it % 5 for r in range(world))
            if it % 20 == 0 or it == 199:
                torch.cuda.synchronize()
                ok &= bool((y == want).all())
        check(f"cuda-graph replay bf16 n={n} x200", ok)

    # The other three collectives: exact results (integer-valued data), small and large.
    for dtype in (torch.bfloat16, torch.float32):
        for n in (8, 1000 + 3, 1 << 16, (1 << 20) + 5):
            x = torch.arange(n, dtype=torch.float32, device=dev).remainder(61).add(100 * rank).to(dtype)
            out = torch.empty(world * n, dtype=dtype, device=dev)
            dist.all_gather_into_tensor(out, x)
            want = torch.cat([torch.arange(n, device=dev).remainder(61).add(100 * r) for r in range(world)]).to(dtype)
            check(f"all_gather_into_tensor {dtype} n={n}", bool((out == want).all()))
            big = torch.arange(world * n, dtype=torch.float32, device=dev).remainder(53).add(rank).to(dtype)
            rs = torch.empty(n, dtype=dtype, device=dev)
            dist.reduce_scatter_tensor(rs, big)
            base = torch.arange(world * n, device=dev).remainder(53)[rank * n:(rank + 1) * n]
            want = (base * world + sum(range(world))).to(dtype)
            check(f"reduce_scatter_tensor {dtype} n={n}", bool((rs == want).all()))
            a2a_in = torch.arange(world * n, dtype=torch.float32, device=dev).remainder(47).add(1000 * rank).to(dtype)
            a2a_out = torch.empty_like(a2a_in)
            dist.all_to_all_single(a2a_out, a2a_in)
            want = torch.cat([(torch.arange(world * n, device=dev).remainder(47).add(1000 * r))[rank * n:(rank + 1) * n]
                              for r in range(world)]).to(dtype)
            check(f"all_to_all_single {dtype} n={n}", bool((a2a_out == want).all()))
            # Broadcast from every root (rcclx's kernels up to 256 KiB; the stock library above).
            for root in range(world):
                b = torch.arange(n, dtype=torch.float32, device=dev).remainder(59).add(10 * rank).to(dtype)
                dist.broadcast(b, src=root)
                want = torch.arange(n, device=dev).remainder(59).add(10 * root).to(dtype)
                check(f"broadcast {dtype} n={n} root={root}", bool((b == want).all()))
            # Reduce to every root (a sum of small integers: exact in bf16 too); off the root the
            # tensor is the rank's input, unchanged.
            for root in range(world):
                r_in = torch.arange(n, dtype=torch.float32, device=dev).remainder(43).add(rank).to(dtype)
                keep = r_in.clone()
                dist.reduce(r_in, dst=root)
                want = (torch.arange(n, device=dev).remainder(43) * world + sum(range(world))).to(dtype)
                check(f"reduce {dtype} n={n} root={root}", bool((r_in == (want if rank == root else keep)).all()))

    torch.cuda.synchronize()
    routes = route_stats()
    if routes is not None:
        taken = {k: v for k, v in routes.items() if v}
        for coll in ("allgather", "reducescatter", "alltoall", "broadcast", "reduce"):
            check(f"rcclx DDA {coll} taken", routes.get(f"{coll}.ll", 0) + routes.get(f"{coll}.flat", 0) > 0, str(taken))
    st = stats()
    if st is None:
        check("rcclx loaded (rcclxGetProcessStats)", False, "symbol not found: is LD_PRELOAD set?")
    else:
        detail = (f"ll={st.ddaLlCalls} flat={st.ddaFlatCalls} tree={st.ddaTreeCalls} "
                  f"fp8={st.lowpCalls} forwarded={st.forwardedCalls}")
        # With 2 ranks the default crossovers send every size up to 64 MiB to LL or flat.
        check("rcclx DDA path taken", st.ddaLlCalls > 0 and st.ddaFlatCalls + st.ddaTreeCalls > 0, detail)
    dist.destroy_process_group()
    print(f"rank{rank}: {failures} failures", flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
