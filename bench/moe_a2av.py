"""MoE dispatch + combine: PyTorch's all_to_all_single path against rcclx.all_to_all_v_dynamic.

One layer = dispatch (every token to the rank its router picked), an "expert" step, combine (the
tokens back to where they came from). Two ways to write it:

* PyTorch, as users write it today: the send splits are computed on the GPU; exchanged with
  dist.all_to_all_single on the int64 splits tensor; both read back with .tolist() (a
  device-to-host synchronisation); dist.all_to_all_single(out, inp, out_splits, in_splits) for the
  dispatch; the expert; dist.all_to_all_single back with the splits swapped. With unequal splits
  PyTorch runs this through the stock library's send/recv (rcclx forwards it). It cannot be
  captured in a CUDA graph (the .tolist()): the script tries once, at the end, and reports how it
  fails.
* rcclx: rcclx.all_to_all_v_dynamic for the dispatch (the received splits stay on the GPU), the
  same expert, rcclx.all_to_all_v_dynamic back with send_splits = the received splits. The
  buffers have fixed capacities (dispatch output: tokens x ranks rows); the expert runs over the
  rows received, as a grouped GEMM that reads the device-side counts would (the benchmark knows
  each routing's row count from the untimed check, so nothing is read back in the timed path).
  Eager, and inside a CUDA graph (N layers captured, the graph replayed).

Routing: every token goes to one destination rank drawn at random, with random uneven weights per
routing; every fourth routing sends all tokens of every rank to one rank (the others get zero
splits, and that rank gets an incast). A pool of --routings routings per size is made before
timing; layer i uses routing i % pool, in every path. Both paths are checked bit-identical
(received splits, dispatch output, combine output) on every routing of the pool, and the graph's
last layer after a replay.

Timing: CUDA events around blocks of --layers layers, after warm-up; the three paths alternate
block by block (the order rotates each round), --rounds rounds; the table gives the median per
layer over the rounds (the largest over the ranks), and ratios PyTorch / rcclx (> 1: rcclx
faster).

    LD_PRELOAD=$PWD/.carry/librcclx.so torchrun --standalone --nproc_per_node=2 bench/moe_a2av.py --out OUTDIR

Writes OUTDIR/moe_a2av.json and OUTDIR/moe_a2av.md (rank 0) and prints the table. Exits non-zero
when the outputs differ or rcclx is not loaded.
"""
import argparse
import json
import os
import platform
import statistics
import sys

import torch
import torch.distributed as dist

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))  # this checkout's rcclx package
import rcclx  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory (JSON and markdown)")
    ap.add_argument("--tokens", default="256,4096", help="tokens per rank, comma-separated (decode, prefill)")
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--experts", default="mul2,identity",
                    help="expert steps: mul2 (x * 2) and/or identity, comma-separated")
    ap.add_argument("--routings", type=int, default=8, help="routings in the pool per size")
    ap.add_argument("--layers", type=int, default=32, help="layers per timed block (eager)")
    ap.add_argument("--graph-layers", type=int, default=32, help="layers captured in one CUDA graph")
    ap.add_argument("--rounds", type=int, default=30, help="timed rounds (each times every path once)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-torch-capture", action="store_true",
                    help="skip the attempt to capture the PyTorch path in a CUDA graph")
    return ap.parse_args()


def as_bytes(t):
    return t.reshape(-1).view(torch.uint8)


def expert_fn(name):
    if name == "mul2":
        return lambda x, out=None: torch.mul(x, 2) if out is None else torch.mul(x, 2, out=out)
    if name == "identity":
        return None
    raise SystemExit(f"unknown expert {name!r}: mul2 or identity")


class Bench:
    def __init__(self, args):
        self.args = args
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", self.rank))
        self.dev = torch.device("cuda", local)
        torch.cuda.set_device(self.dev)
        dist.init_process_group("nccl", device_id=self.dev)
        self.dtype = DTYPES[args.dtype]
        self.H = args.hidden
        self.failures = []

    def log(self, msg):
        if self.rank == 0:
            print(msg, flush=True)

    # --- routing pool ---
    def routings(self, T):
        world, out = self.world, []
        for k in range(self.args.routings):
            g = torch.Generator(device=self.dev).manual_seed(self.args.seed * 100003 + self.rank * 1009 + k)
            if k % 4 == 3:
                dest = torch.full((T,), (k // 4) % world, dtype=torch.int64, device=self.dev)
            else:
                w = torch.rand(world, device=self.dev, generator=g) + 0.05
                dest = torch.multinomial(w, T, replacement=True, generator=g)
            x = torch.randn(T, self.H, device=self.dev, generator=g).to(self.dtype)
            order = torch.argsort(dest, stable=True)
            inp = x[order].contiguous()  # rows packed by destination rank
            splits = torch.bincount(dest, minlength=world).to(torch.int64)
            out.append((inp, splits))
        torch.cuda.synchronize()
        return out

    # --- the two paths ---
    def torch_layer(self, inp, splits, expert):
        out_splits = torch.empty_like(splits)
        dist.all_to_all_single(out_splits, splits)
        in_l, out_l = splits.tolist(), out_splits.tolist()  # device-to-host synchronisation
        mid = inp.new_empty((sum(out_l), self.H))
        dist.all_to_all_single(mid, inp, out_l, in_l)
        eo = mid if expert is None else expert(mid)
        back = inp.new_empty((sum(in_l), self.H))
        dist.all_to_all_single(back, eo, in_l, out_l)
        return mid, out_splits, back

    def rcclx_buffers(self, T):
        mid = torch.empty(T * self.world, self.H, dtype=self.dtype, device=self.dev)
        return {
            "mid": mid,
            "eo": torch.empty_like(mid),
            "back": torch.empty(T, self.H, dtype=self.dtype, device=self.dev),
            "recv": torch.empty(self.world, dtype=torch.int64, device=self.dev),
            "back_splits": torch.empty(self.world, dtype=torch.int64, device=self.dev),
        }

    @staticmethod
    def rcclx_layer(b, inp, splits, expert, rows):
        rcclx.all_to_all_v_dynamic(inp, splits, b["mid"], recv_splits=b["recv"])
        # The expert works on the rows received, as a grouped GEMM reading the device-side
        # counts would (`rows` is known here only because the benchmark's routings are fixed;
        # nothing is read back in the timed path).
        eo = b["mid"] if expert is None else expert(b["mid"][:rows], out=b["eo"][:rows])
        if expert is not None:
            eo = b["eo"]
        rcclx.all_to_all_v_dynamic(eo, b["recv"], b["back"], recv_splits=b["back_splits"])
        return b["mid"], b["recv"], b["back"]

    # --- verification ---
    def same(self, what, ref, b, splits):
        """rcclx's buffers `b` hold the same layer as the PyTorch result `ref`."""
        mid_t, osp_t, back_t = ref
        n = mid_t.shape[0]
        checks = {
            "recv splits": b["recv"].tolist() == osp_t.tolist(),
            "combine splits": b["back_splits"].tolist() == splits.tolist(),
            "dispatch output": torch.equal(as_bytes(b["mid"][:n]), as_bytes(mid_t)),
            "combine output": torch.equal(as_bytes(b["back"]), as_bytes(back_t)),
        }
        bad = [k for k, v in checks.items() if not v]
        if bad:
            self.failures.append(f"{what}: {', '.join(bad)} differ")
            print(f"FAIL rank{self.rank} {what}: {', '.join(bad)} differ "
                  f"(send {splits.tolist()} recv rcclx {b['recv'].tolist()} torch {osp_t.tolist()})", flush=True)
        return not bad

    # --- timing ---
    @staticmethod
    def timed(fn, n_calls, layers_per_call):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(n_calls):
            fn(i)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1000.0 / (n_calls * layers_per_call)

    def run_size(self, T, expert_name):
        args = self.args
        expert = expert_fn(expert_name)
        pool = self.routings(T)
        K = len(pool)
        b = self.rcclx_buffers(T)
        label = f"tokens={T} expert={expert_name}"

        # Bit-identical on every routing of the pool; the rows each routing brings (untimed).
        ok = True
        rows = []
        for k, (inp, splits) in enumerate(pool):
            ref = self.torch_layer(inp, splits, expert)
            rows.append(ref[0].shape[0])
            self.rcclx_layer(b, inp, splits, expert, rows[k])
            ok &= self.same(f"{label} routing {k} eager", ref, b, splits)
        zero_splits = sum(s.tolist().count(0) for _, s in pool)

        # The graph: G layers, layer j on routing j % K, sharing the static buffers.
        G = args.graph_layers
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.rcclx_layer(b, *pool[0], expert, rows[0])  # warm-up outside the capture
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for j in range(G):
                self.rcclx_layer(b, *pool[j % K], expert, rows[j % K])
        graph.replay()
        last = pool[(G - 1) % K]
        ok &= self.same(f"{label} graph replay (last layer)", self.torch_layer(*last, expert), b, last[1])

        paths = {
            "torch_eager": (lambda i: self.torch_layer(*pool[i % K], expert), args.layers, 1),
            "rcclx_eager": (lambda i: self.rcclx_layer(b, *pool[i % K], expert, rows[i % K]), args.layers, 1),
            "rcclx_graph": (lambda i: graph.replay(), max(1, args.layers // G), G),
        }
        names = list(paths)
        times = {n: [] for n in names}
        for rnd in range(args.warmup + args.rounds):
            order = names[rnd % len(names):] + names[:rnd % len(names)]  # rotate: noise hits all
            for n in order:
                fn, calls, per = paths[n]
                t = self.timed(fn, calls, per)
                if rnd >= args.warmup:
                    times[n].append(t)
        # After timing: the graph still gives PyTorch's result.
        graph.replay()
        ok &= self.same(f"{label} graph replay after timing", self.torch_layer(*last, expert), b, last[1])
        torch.cuda.synchronize()

        med = torch.tensor([statistics.median(times[n]) for n in names], dtype=torch.float64, device=self.dev)
        dist.all_reduce(med, op=dist.ReduceOp.MAX)
        med = dict(zip(names, med.tolist()))
        esz = torch.tensor([], dtype=self.dtype).element_size()
        row = {
            "tokens_per_rank": T,
            "hidden": self.H,
            "dtype": args.dtype,
            "expert": expert_name,
            "bytes_per_rank_each_way": T * self.H * esz,
            "zero_splits_in_pool": zero_splits,
            "us_per_layer": {n: round(med[n], 2) for n in names},
            "rank0_us_per_layer_all_rounds": {n: [round(x, 2) for x in times[n]] for n in names},
            "rank0_min_us": {n: round(min(times[n]), 2) for n in names},
            "ratio_torch_over_rcclx_eager": round(med["torch_eager"] / med["rcclx_eager"], 3),
            "ratio_torch_over_rcclx_graph": round(med["torch_eager"] / med["rcclx_graph"], 3),
            "bit_identical": bool(ok),
        }
        self.log(f"{label}: torch eager {med['torch_eager']:.1f} us, rcclx eager {med['rcclx_eager']:.1f} us, "
                 f"rcclx graph {med['rcclx_graph']:.1f} us per layer; identical outputs: {ok}")
        return row

    def try_torch_capture(self, T):
        """The PyTorch path inside torch.cuda.graph: expected to fail at .tolist()."""
        inp, splits = self.routings(T)[0]
        expert = expert_fn("mul2")
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                self.torch_layer(inp, splits, expert)
            return "captured without error (unexpected: the .tolist() synchronises)"
        except Exception as e:  # this failure is what is being shown
            chain = []
            while e is not None and len(chain) < 3:  # the first error, then what the capture's end says
                chain.insert(0, f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}")
                e = e.__cause__ or e.__context__
            return "fails: " + " / then: ".join(chain)


def nccl_version():
    v = torch.cuda.nccl.version()  # (major, minor, patch), or an int in older releases
    return ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)


def markdown(result):
    lines = [
        f"# MoE dispatch + combine, {result['world']} ranks, hidden {result['hidden']} {result['dtype']}",
        "",
        "us per layer (dispatch + expert + combine), median over rounds, slowest rank; ratio = PyTorch / rcclx "
        "(> 1: rcclx faster).",
        "",
        "| tokens/rank | expert | PyTorch eager | rcclx eager | rcclx graph | ratio eager | ratio graph | identical |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        u = r["us_per_layer"]
        lines.append(f"| {r['tokens_per_rank']} | {r['expert']} | {u['torch_eager']:.1f} | {u['rcclx_eager']:.1f} | "
                     f"{u['rcclx_graph']:.1f} | {r['ratio_torch_over_rcclx_eager']:.2f}x | "
                     f"{r['ratio_torch_over_rcclx_graph']:.2f}x | {'yes' if r['bit_identical'] else 'NO'} |")
    lines += [
        "",
        f"PyTorch path in a CUDA graph: {result['torch_graph_capture']}",
        "",
        f"rcclx route alltoallv.dynamic on the world communicator: {result['rcclx_route_calls']} host calls "
        "(a captured call counts once).",
        "",
        f"Command: `{result['command']}`",
        "",
    ]
    return "\n".join(lines)


def main():
    args = parse_args()
    bench = Bench(args)
    if not rcclx.is_active():
        print(f"FAIL rank{bench.rank}: rcclx is not loaded (set LD_PRELOAD=librcclx.so)", flush=True)
        sys.exit(1)
    t = torch.ones(1, device=bench.dev)
    dist.all_reduce(t)  # the world communicator is set up
    rows = []
    for T in [int(x) for x in args.tokens.split(",") if x]:
        for e in [x for x in args.experts.split(",") if x]:
            rows.append(bench.run_size(T, e))
    st = rcclx.stats(dist.group.WORLD)
    result = {
        "world": bench.world,
        "hidden": bench.H,
        "dtype": args.dtype,
        "device": torch.cuda.get_device_name(bench.dev),
        "torch": torch.__version__,
        "nccl": nccl_version(),
        "rcclx": st.get("version"),
        "rcclx_library": st.get("library"),
        "host": platform.node(),
        "args": vars(args),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "rows": rows,
        "rcclx_route_calls": ((st.get("comm") or {}).get("alltoallv.dynamic") or {}).get("calls", 0),
        "failures": bench.failures,
        "torch_graph_capture": "not tried (--no-torch-capture)",
    }
    out_json = os.path.join(args.out, "moe_a2av.json")
    out_md = os.path.join(args.out, "moe_a2av.md")

    def write():
        if bench.rank == 0:
            os.makedirs(args.out, exist_ok=True)
            with open(out_json, "w") as f:
                json.dump(result, f, indent=1)
            with open(out_md, "w") as f:
                f.write(markdown(result))

    # Results first: the capture attempt below is the last thing the job does.
    write()
    if not args.no_torch_capture:
        result["torch_graph_capture"] = bench.try_torch_capture(int(args.tokens.split(",")[0]))
        write()
    bench.log("\n" + markdown(result))
    ratios = [r["ratio_torch_over_rcclx_eager"] for r in rows]
    gratios = [r["ratio_torch_over_rcclx_graph"] for r in rows]
    geo = (lambda xs: statistics.geometric_mean(xs) if xs else float("nan"))
    bench.log(f"geomean PyTorch/rcclx: eager {geo(ratios):.2f}x, graph {geo(gratios):.2f}x; "
              f"{'identical outputs' if not bench.failures else 'FAIL: outputs differ'}; written to {args.out}")
    code = 1 if bench.failures else 0
    if args.no_torch_capture:
        dist.destroy_process_group()
        sys.exit(code)
    # After a failed capture the world communicator has a collective captured into a graph that
    # was thrown away: leave without tearing it down (the process exit frees everything).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
