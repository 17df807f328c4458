"""PyTorch acceptance cases at any world size, for the stock library and rcclx side by side.

Run under torchrun, one process per rank, once with the stock library alone and once with rcclx
preloaded (scripts/gpu-tests.sh, step sim: on one GPU every process is a simulated host of its
own, scripts/sim-host.sh). Every case checks its output on every rank against the value it must
have, computed here:

- exact cases: inputs are small integers (or, for the copies, any bits), so every summation
  order gives the same bits: the output must equal the expected value exactly;
- AVG of floating types, and sums of random floats (`random`): the order of the summation, and
  where the division happens, are the library's. Bound per element:
  (world + 1) * u * sum_r |x_r| (divided by the world for AVG), u the unit roundoff of the type
  (2^-24 float, 2^-53 double, 2^-11 half, 2^-8 bfloat16): a sum of `world` terms in any order
  with a rounding after each addition, plus the rounding of the division or of a pre-multiplied
  1/world, errs by at most that (Higham, Accuracy and Stability, eq. 4.4).

Sections: `coll` (the world group: all_reduce, all_gather_into_tensor, reduce_scatter_tensor,
all_to_all_single, broadcast, reduce; every dtype and op they take, odd sizes on both sides of
rcclx's size limits, in place and out of place), `subgroup` (new_group of the even ranks, of ranks 1..w-1,
split_group into halves), `coalesced` (several collectives in one
_coalescing_manager: one NCCL group), `graph` (collectives captured in a CUDA graph, replayed
with new inputs), `nonblocking` (a group whose communicator is non-blocking).

Rank 0 writes OUT/torch-cases-<label>-w<world>.json: per case its name, section, collective,
dtype, op, size, placement, the ranks whose output was wrong, the worst error relative to its bound
(0 for the exact cases when right), a CRC of rank 0's output bits (so the compare sees whether
the two libraries gave the same bits), and the rcclx routes its calls took (rank 0's
statistics: rcclx decides every call alike on every rank); None without rcclx. Prints one
PASS/FAIL line per section and exits 1 when a case is wrong or a section fails.

  torchrun --nproc_per_node=8 tests/gpu/torch_cases.py --out OUT --label stock
"""
import argparse
import json
import os
import sys
import zlib

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _coalescing_manager

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))
import rcclx  # noqa: E402

R = dist.ReduceOp
FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INTS = (torch.int32, torch.int64, torch.int8, torch.uint8)
ALL_TYPES = FLOATS + INTS
CORE_TYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int32)
UNIT = {torch.float32: 2.0 ** -24, torch.float64: 2.0 ** -53, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}
OPS = {"sum": R.SUM, "prod": R.PRODUCT, "min": R.MIN, "max": R.MAX, "avg": R.AVG}


def short(dtype):
    return str(dtype).replace("torch.", "")


def ops_for(dtype):
    """The ops NCCL takes for dtype (AVG: floating types only)."""
    return [o for o in OPS if o != "avg" or dtype in FLOATS]


def pattern(op, n, r, device, dtype):
    """Rank r's input of n elements for op: small integers whose reduction over up to 8 ranks is
    exact in every type (sum: |x| <= 5, so |sum| <= 40; prod: at most two factors of 2 per
    element, the rest +-1; min/max: |x| <= 48). Unsigned types get non-negative values."""
    i = torch.arange(n, device=device, dtype=torch.int64)
    signed = dtype != torch.uint8
    if op in ("sum", "avg"):
        x = (i * 7 + r * 3) % 11 - (5 if signed else 0)
    elif op == "prod":
        two = (i + r) % 4 == 0
        neg = ((i + 2 * r) % 3 == 0) & signed
        x = torch.where(two, torch.full_like(i, 2), torch.where(neg, torch.full_like(i, -1), torch.ones_like(i)))
    else:
        x = (i * 13 + r * 29) % 97 - (48 if signed else 0)
    return x.to(torch.float64)


def copy_pattern(n, r, device, dtype):
    """Rank r's data for the copies (gather, all-to-all, broadcast): arbitrary bits of the type,
    made from a generator seeded by the rank, identical wherever they are regenerated."""
    g = torch.Generator(device=device).manual_seed(1000 + r)
    if dtype in FLOATS:
        return torch.randn(n, generator=g, device=device, dtype=torch.float32).mul_(100).to(dtype)
    lo, hi = (-(1 << 62), 1 << 62) if dtype == torch.int64 else (torch.iinfo(dtype).min, torch.iinfo(dtype).max + 1)
    return torch.randint(lo, hi, (n,), generator=g, device=device, dtype=torch.int64).to(dtype)


def reduce_exact(op, parts):
    """The reduction of float64 parts [world, n] (exact for the patterns above)."""
    if op in ("sum", "avg"):
        out = parts.sum(0)
        return out / parts.shape[0] if op == "avg" else out
    if op == "prod":
        return parts.prod(0)
    return parts.min(0).values if op == "min" else parts.max(0).values


class Cases:
    def __init__(self, rank, world, dev):
        self.rank, self.world, self.dev = rank, world, dev
        self.cases = []
        self.section = None
        self.rx = rcclx.is_active()
        self.routes_before = self.routes()

    def routes(self):
        if not self.rx:
            return None
        return {k: v["calls"] for k, v in rcclx.stats()["process"].items()}

    def taken(self):
        """The routes counted since the last call: {route: calls}."""
        now = self.routes()
        if now is None:
            return None
        before, self.routes_before = self.routes_before, now
        return {k: v - before.get(k, 0) for k, v in now.items() if v - before.get(k, 0)}

    def check(self, name, coll, dtype, op, n, inplace, out, want, bound=None):
        """Records one case: out against want (exact, or within bound per element)."""
        torch.cuda.synchronize(self.dev)
        if bound is None:
            bad = out.view(torch.uint8) != want.view(torch.uint8) if out.dtype in FLOATS else out != want
            wrong, err = bool(bad.any()), 0.0
            if wrong:  # how far off, in the type's own units
                err = float((out.double() - want.double()).abs().max())
        else:
            diff = (out.double() - want.double()).abs()
            ratio = diff / bound.clamp_min(1e-300)
            err = float(ratio.max()) if ratio.numel() else 0.0
            wrong = bool((diff > bound).any()) or not bool(torch.isfinite(out.double()).all())
        crc = zlib.crc32(out.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes())
        self.cases.append({"section": self.section, "name": name, "coll": coll, "dtype": short(dtype), "op": op,
                           "n": n, "inplace": inplace, "exact": bound is None, "wrong": wrong, "err": err,
                           "crc": crc, "routes": self.taken()})

    # --- the collectives, one case each ------------------------------------------------------
    def all_reduce(self, dtype, op, n, group=None, tag=""):
        g_rank, g_world = dist.get_rank(group), dist.get_world_size(group)
        parts = torch.stack([pattern(op, n, r, self.dev, dtype) for r in range(g_world)])
        x = parts[g_rank].to(dtype, copy=True)  # never a view of parts (float64)
        dist.all_reduce(x, op=OPS[op], group=group)
        want = reduce_exact(op, parts)
        bound = None
        if op == "avg":
            bound = (g_world + 1) * UNIT[dtype] * parts.abs().sum(0) / g_world
        self.check(f"all_reduce {short(dtype)} {op} n={n}{tag}", "allreduce", dtype, op, n, True, x,
                   want.to(dtype) if bound is None else want, bound)

    def all_reduce_random(self, dtype, n):
        parts = torch.stack([copy_pattern(n, r, self.dev, dtype).double() for r in range(self.world)])
        x = parts[self.rank].to(dtype, copy=True)
        dist.all_reduce(x)
        bound = (self.world + 1) * UNIT[dtype] * parts.abs().sum(0)
        self.check(f"all_reduce random {short(dtype)} sum n={n}", "allreduce", dtype, "sum", n, True, x,
                   parts.sum(0), bound)

    def all_gather(self, dtype, n, inplace, group=None, tag=""):
        g_rank, g_world = dist.get_rank(group), dist.get_world_size(group)
        want = torch.cat([copy_pattern(n, r, self.dev, dtype) for r in range(g_world)])
        out = torch.zeros(g_world * n, dtype=dtype, device=self.dev)
        if inplace:
            inp = out.narrow(0, g_rank * n, n)
            inp.copy_(want.narrow(0, g_rank * n, n))
        else:
            inp = want.narrow(0, g_rank * n, n).clone()
        dist.all_gather_into_tensor(out, inp, group=group)
        self.check(f"all_gather_into_tensor {short(dtype)} n={n}{' in place' if inplace else ''}{tag}",
                   "allgather", dtype, "-", n, inplace, out, want)

    def reduce_scatter(self, dtype, op, n, inplace, group=None, tag=""):
        g_rank, g_world = dist.get_rank(group), dist.get_world_size(group)
        parts = torch.stack([pattern(op, g_world * n, r, self.dev, dtype) for r in range(g_world)])
        big = parts[g_rank].to(dtype, copy=True)
        out = big.narrow(0, g_rank * n, n) if inplace else torch.empty(n, dtype=dtype, device=self.dev)
        dist.reduce_scatter_tensor(out, big, op=OPS[op], group=group)
        mine = parts[:, g_rank * n:(g_rank + 1) * n]
        want = reduce_exact(op, mine)
        bound = (g_world + 1) * UNIT[dtype] * mine.abs().sum(0) / g_world if op == "avg" else None
        self.check(f"reduce_scatter_tensor {short(dtype)} {op} n={n}{' in place' if inplace else ''}{tag}",
                   "reducescatter", dtype, op, n, inplace, out, want.to(dtype) if bound is None else want, bound)

    def all_to_all(self, dtype, n, group=None, tag=""):
        g_rank, g_world = dist.get_rank(group), dist.get_world_size(group)
        sent = [copy_pattern(g_world * n, r, self.dev, dtype) for r in range(g_world)]
        out = torch.empty(g_world * n, dtype=dtype, device=self.dev)
        dist.all_to_all_single(out, sent[g_rank].clone(), group=group)
        want = torch.cat([sent[r][g_rank * n:(g_rank + 1) * n] for r in range(g_world)])
        self.check(f"all_to_all_single {short(dtype)} n={n}{tag}", "alltoall", dtype, "-", n, False, out, want)

    def broadcast(self, dtype, n, root, group=None, tag=""):
        g_rank = dist.get_rank(group)
        x = copy_pattern(n, g_rank, self.dev, dtype)
        dist.broadcast(x, group_src=root, group=group)
        self.check(f"broadcast {short(dtype)} n={n} root={root}{tag}", "broadcast", dtype, "-", n, True, x,
                   copy_pattern(n, root, self.dev, dtype))

    def reduce(self, dtype, op, n, root, group=None, tag=""):
        g_rank, g_world = dist.get_rank(group), dist.get_world_size(group)
        parts = torch.stack([pattern(op, n, r, self.dev, dtype) for r in range(g_world)])
        x = parts[g_rank].to(dtype, copy=True)  # never a view of parts (float64)
        keep = x.clone()
        dist.reduce(x, group_dst=root, op=OPS[op], group=group)
        want = reduce_exact(op, parts)
        bound = None
        if op == "avg" and g_rank == root:
            bound = (g_world + 1) * UNIT[dtype] * parts.abs().sum(0) / g_world
        if g_rank != root:  # off the root the tensor is the rank's input, unchanged
            want = keep
        elif bound is None:
            want = want.to(dtype)
        self.check(f"reduce {short(dtype)} {op} n={n} root={root}{tag}", "reduce", dtype, op, n, True, x, want, bound)


def section_coll(c, quick):
    """The world group: every dtype and op, sizes around rcclx's limits (8 ranks: LL to 32 KiB
    per rank, AllReduce flat to 72 KiB and two-shot to 8 MiB, AllToAll to 2 MiB, Broadcast and
    Reduce to 256 KiB); the largest go past them to the stock library."""
    w = c.world
    sizes = [1, 7, 1023, 16387, 262147] if not quick else [7, 16387]
    for dtype in ALL_TYPES:
        for op in ops_for(dtype):
            for n in sizes:
                c.all_reduce(dtype, op, n)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for n in (1023, 262147):
            c.all_reduce_random(dtype, n)
    c.all_reduce(torch.float32, "sum", (1 << 21) + 5)  # 8 MiB + 20 B: past the 8-rank limit
    for dtype in ALL_TYPES:
        for n in (sizes if not quick else [7, 4099]):
            for inplace in (False, True):
                c.all_gather(dtype, n, inplace)
        for op in ops_for(dtype):
            for n in ([1, 7, 1023, 16387, 131075] if not quick else [7, 4099]):
                c.reduce_scatter(dtype, op, n, inplace=False)
        c.reduce_scatter(dtype, "sum", 4099, inplace=True)
        for n in ([1, 7, 1023, 16387, 65539] if not quick else [7, 4099]):
            c.all_to_all(dtype, n)
    roots = sorted({0, w // 2, w - 1})
    for dtype in CORE_TYPES + (torch.int8,):
        for n in ([1, 7, 1023, 16387, 65539] if not quick else [7, 4099]):
            for root in roots:
                c.broadcast(dtype, n, root)
        for op in ops_for(dtype):
            for n in ([7, 1023, 16387] if not quick else [1023]):
                for root in roots:
                    c.reduce(dtype, op, n, root)


def subset(c, group, tag, all_to_all=True):
    """A short list of every collective on group (its ranks' own numbering)."""
    for dtype in (torch.float32, torch.bfloat16):
        for n in (1023, 65539):
            c.all_reduce(dtype, "sum", n, group=group, tag=tag)
            c.all_gather(dtype, n, False, group=group, tag=tag)
            c.reduce_scatter(dtype, "sum", n, False, group=group, tag=tag)
            if all_to_all:
                c.all_to_all(dtype, n // 4 + 1, group=group, tag=tag)
        c.all_reduce(dtype, "max", 4099, group=group, tag=tag)
        c.broadcast(dtype, 4099, dist.get_world_size(group) - 1, group=group, tag=tag)
        c.reduce(dtype, "sum", 4099, 0, group=group, tag=tag)


def section_subgroup(c):
    w, r = c.world, c.rank
    evens = list(range(0, w, 2))
    g = dist.new_group(evens)
    if r in evens:
        subset(c, g, " [new_group evens]")
    rest = list(range(1, w))  # an odd size at even world sizes
    g = dist.new_group(rest)
    if r in rest:
        subset(c, g, " [new_group 1..w-1]")
    halves = [list(range(0, (w + 1) // 2)), list(range((w + 1) // 2, w))]
    g = dist.split_group(split_ranks=halves)
    if g is not None and dist.get_world_size(g) > 1:
        subset(c, g, " [split_group halves]")


def section_coalesced(c):
    """Several collectives in one coalescing manager (one NCCL group), then checked."""
    w, r, dev = c.world, c.rank, c.dev
    for dtype in (torch.float32, torch.bfloat16):
        sizes = (7, 4099, 65539)
        parts = [torch.stack([pattern("sum", n, q, dev, dtype) for q in range(w)]) for n in sizes]
        xs = [p[r].to(dtype, copy=True) for p in parts]
        with _coalescing_manager(device=dev):
            for x in xs:
                dist.all_reduce(x)
        for n, x, p in zip(sizes, xs, parts):
            c.check(f"coalesced all_reduce {short(dtype)} n={n}", "allreduce", dtype, "sum", n, True, x,
                    p.sum(0).to(dtype))
        ins = [copy_pattern(n, r, dev, dtype) for n in sizes]
        outs = [torch.empty(w * n, dtype=dtype, device=dev) for n in sizes]
        with _coalescing_manager(device=dev):
            for o, i in zip(outs, ins):
                dist.all_gather_into_tensor(o, i)
        for n, o in zip(sizes, outs):
            want = torch.cat([copy_pattern(n, q, dev, dtype) for q in range(w)])
            c.check(f"coalesced all_gather_into_tensor {short(dtype)} n={n}", "allgather", dtype, "-", n, False, o,
                    want)
        bigs = [torch.stack([pattern("sum", w * n, q, dev, dtype) for q in range(w)]) for n in sizes]
        outs = [torch.empty(n, dtype=dtype, device=dev) for n in sizes]
        with _coalescing_manager(device=dev):
            for o, b in zip(outs, bigs):
                dist.reduce_scatter_tensor(o, b[r].to(dtype, copy=True))
        for n, o, b in zip(sizes, outs, bigs):
            c.check(f"coalesced reduce_scatter_tensor {short(dtype)} n={n}", "reducescatter", dtype, "sum", n, False,
                    o, b[:, r * n:(r + 1) * n].sum(0).to(dtype))


def section_graph(c, replays):
    """One CUDA graph of every collective, replayed with new inputs each time."""
    w, r, dev = c.world, c.rank, c.dev
    dtype = torch.bfloat16
    n_small, n_big, n_a2a = 1023, 65539, 4099
    ar_s = torch.zeros(n_small, dtype=dtype, device=dev)
    ar_b = torch.zeros(n_big, dtype=dtype, device=dev)
    ag_in = torch.zeros(n_small, dtype=dtype, device=dev)
    ag_out = torch.zeros(w * n_small, dtype=dtype, device=dev)
    rs_in = torch.zeros(w * n_small, dtype=dtype, device=dev)
    rs_out = torch.zeros(n_small, dtype=dtype, device=dev)
    a2a_in = torch.zeros(w * n_a2a, dtype=dtype, device=dev)
    a2a_out = torch.zeros(w * n_a2a, dtype=dtype, device=dev)
    bc = torch.zeros(n_small, dtype=dtype, device=dev)

    def body():
        dist.all_reduce(ar_s)
        dist.all_reduce(ar_b)
        dist.all_gather_into_tensor(ag_out, ag_in)
        dist.reduce_scatter_tensor(rs_out, rs_in)
        dist.all_to_all_single(a2a_out, a2a_in)
        dist.broadcast(bc, src=w - 1)

    s = torch.cuda.Stream(device=dev)
    s.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(s):
        for _ in range(2):
            body()
    torch.cuda.current_stream(dev).wait_stream(s)
    torch.cuda.synchronize(dev)
    c.taken()  # the warm-up's calls are eager
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    captured = c.taken()
    base = lambda q, it, n: (torch.arange(n, device=dev) * 3 + q * 7 + it) % 13 - 6  # noqa: E731
    for it in range(replays):
        ar_s.copy_(base(r, it, n_small))
        ar_b.copy_(base(r, it, n_big))
        ag_in.copy_(base(r, it, n_small))
        rs_in.copy_(base(r, it, w * n_small))
        a2a_in.copy_(base(r, it, w * n_a2a))
        bc.copy_(base(r, it, n_small))
        graph.replay()
        if it % max(1, replays // 4) and it != replays - 1:
            continue
        c.routes_before = c.routes()  # replays are not calls
        stack = lambda n: torch.stack([base(q, it, n) for q in range(w)]).double()  # noqa: E731
        tag = f" replay {it}"
        c.check(f"graph all_reduce n={n_small}{tag}", "allreduce", dtype, "sum", n_small, True, ar_s,
                stack(n_small).sum(0).to(dtype))
        c.check(f"graph all_reduce n={n_big}{tag}", "allreduce", dtype, "sum", n_big, True, ar_b,
                stack(n_big).sum(0).to(dtype))
        c.check(f"graph all_gather_into_tensor n={n_small}{tag}", "allgather", dtype, "-", n_small, False, ag_out,
                torch.cat([base(q, it, n_small) for q in range(w)]).to(dtype))
        c.check(f"graph reduce_scatter_tensor n={n_small}{tag}", "reducescatter", dtype, "sum", n_small, False,
                rs_out, stack(w * n_small)[:, r * n_small:(r + 1) * n_small].sum(0).to(dtype))
        want = torch.cat([base(q, it, w * n_a2a)[r * n_a2a:(r + 1) * n_a2a] for q in range(w)]).to(dtype)
        c.check(f"graph all_to_all_single n={n_a2a}{tag}", "alltoall", dtype, "-", n_a2a, False, a2a_out, want)
        c.check(f"graph broadcast n={n_small} root={w - 1}{tag}", "broadcast", dtype, "-", n_small, True, bc,
                base(w - 1, it, n_small).to(dtype))
    # The graph's routes: what its capture counted (rcclx counts a captured call once).
    c.cases[-1]["routes"] = captured
    del graph


def section_nonblocking(c):
    opts = dist.ProcessGroupNCCL.Options()
    opts.config.blocking = 0
    g = dist.new_group(list(range(c.world)), pg_options=opts)
    # Not all_to_all_single: PyTorch 2.11 runs it as send/recv pairs in one NCCL group, whose
    # ncclGroupEnd returns ncclInProgress on a non-blocking communicator of the stock library
    # (it connects peers on first use), and PyTorch raises that as an error.
    subset(c, g, " [non-blocking]", all_to_all=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder of the JSON file (rank 0)")
    ap.add_argument("--label", required=True, help="stock or rcclx: in the file name")
    ap.add_argument("--quick", action="store_true", help="fewer sizes in section coll (odd world sizes)")
    ap.add_argument("--sections", default="coll,subgroup,coalesced,graph,nonblocking")
    ap.add_argument("--replays", type=int, default=20, help="graph replays (20)")
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)  # eager init; split_group needs it
    cpu = dist.new_group(backend="gloo")  # the bookkeeping, outside NCCL
    c = Cases(rank, world, dev)
    run = {"coll": lambda: section_coll(c, args.quick), "subgroup": lambda: section_subgroup(c),
           "coalesced": lambda: section_coalesced(c), "graph": lambda: section_graph(c, args.replays),
           "nonblocking": lambda: section_nonblocking(c)}
    errors = {}
    for name in args.sections.split(","):
        c.section = name
        try:
            run[name]()
        except Exception as e:  # a section that cannot run fails, the others still run
            errors[name] = f"{type(e).__name__}: {e}"
            print(f"FAIL rank{rank} section {name}: {errors[name]}", flush=True)
    torch.cuda.synchronize(dev)
    gathered = [None] * world
    dist.all_gather_object(gathered, {"cases": c.cases, "errors": errors}, group=cpu)
    failures = 0
    if rank == 0:
        cases = c.cases
        for i, case in enumerate(cases):  # every rank's verdict on the same case (same order)
            per = [g["cases"][i] if i < len(g["cases"]) else None for g in gathered]
            case["wrong_ranks"] = [q for q, p in enumerate(per) if p is None or p["wrong"]]
            case["err"] = max(p["err"] for p in per if p is not None)
            case.pop("wrong")
        all_errors = {f"rank{q}": g["errors"] for q, g in enumerate(gathered) if g["errors"]}
        counts = {}
        for case in cases:
            s = counts.setdefault(case["section"], [0, 0])
            s[0] += 1
            s[1] += bool(case["wrong_ranks"])
        for name in args.sections.split(","):
            n, bad = counts.get(name, [0, 0])
            ok = bad == 0 and not any(name in e for e in all_errors.values()) and n > 0
            failures += not ok
            print(f"{'PASS' if ok else 'FAIL'} {args.label} w{world} {name}: {n} cases, {bad} wrong", flush=True)
        for case in cases:
            if case["wrong_ranks"]:
                print(f"  WRONG {case['name']}: ranks {case['wrong_ranks']} err {case['err']:.3g}", flush=True)
        os.makedirs(args.out, exist_ok=True)
        st = rcclx.stats(dist.group.WORLD) if c.rx else None
        with open(os.path.join(args.out, f"torch-cases-{args.label}-w{world}.json"), "w") as f:
            json.dump({"label": args.label, "world": world, "torch": torch.__version__,
                       "nccl": ".".join(map(str, torch.cuda.nccl.version())), "rcclx": c.rx,
                       "device": torch.cuda.get_device_name(dev), "errors": all_errors,
                       "process_routes": st["process"] if st else None, "cases": cases}, f, indent=0)
    dist.barrier(group=cpu)
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
