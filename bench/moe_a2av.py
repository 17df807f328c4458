"""MoE dispatch + combine: PyTorch's all_to_all_single path against rcclx.all_to_all_v_dynamic,
in bf16 and with the dispatch in FP8.

One layer, as a MoE layer runs it: the router's top-k (torch.topk over the router logits; softmax
of the k logits as gate weights), the permutation that builds the send rows and the splits on the
GPU (slots sorted by expert with a stable argsort, the rows gathered as x[token of slot], splits =
rows per destination rank, experts split evenly over the ranks), dispatch, an "expert" step over
the rows received, combine (the T*k rows back to where they came from), and the unpermute (the
rows back in slot order, weighted by the gates and summed per token). Everything but the exchange
is the same code in every path, so the times compare:

* torch_eager, as users write it today: the splits exchanged with dist.all_to_all_single on the
  int64 splits tensor; both read back with .tolist() (a device-to-host synchronisation);
  dist.all_to_all_single(out, inp, out_splits, in_splits) for the dispatch; the expert;
  dist.all_to_all_single back with the splits swapped. With unequal splits PyTorch runs this
  through the stock library's send/recv (rcclx forwards it). It cannot be captured in a CUDA
  graph (the .tolist()): the script tries once, at the end, and reports how it fails.
* rcclx_eager: rcclx.all_to_all_v_dynamic for the dispatch (the received splits stay on the GPU),
  the expert, rcclx.all_to_all_v_dynamic back with send_splits = the received splits. Fixed
  capacities (dispatch output: T*k x ranks rows); the expert runs over the rows received, as a
  grouped GEMM that reads the device-side counts would (the benchmark knows each routing's row
  count from the untimed check, so nothing is read back in the timed path). rcclx_graph: the
  same layer, --graph-layers of them captured in one CUDA graph, the graph replayed.
* rcclx_fp8_eager / rcclx_fp8_graph: the dispatch with wire="fp8", decoded delivery (the expert
  gets bf16 rows; rows between ranks went through the FP8 codec), the combine plain bf16.
* rcclx_fp8_coded_eager / rcclx_fp8_coded_graph: the dispatch with wire="fp8" and output_scales
  (the expert gets FP8 codes and one f32 scale per 128 elements, as FP8 GEMMs take them, and
  dequantizes them: code * scale, to bf16), the combine plain bf16.
* local: the same layer without any exchange (router, permutation, the expert over the T*k rows,
  unpermute): the share of the layer that is not communication.

Routing (--topk): "rank" is the routing of earlier versions of this benchmark: every token to one
rank drawn with random uneven weights per routing, every fourth routing all tokens of every rank
to one rank (incast, zero splits elsewhere); it runs as top-1 over one "expert" per rank. A
number k routes every token to its top k of --num-experts experts from random router logits
(torch.randn, seeded); every fourth routing adds a bias to one rank's experts (skew). A pool of
--routings routings per size is made before timing; layer i uses routing i % pool, in every path.

Checks, untimed, on every routing of the pool and after graph replays (the graph's last layer):
the bf16 paths bit-identical to PyTorch's (received splits, dispatch output, combine output,
layer output). The FP8 paths against the torch model of the codec (rcclx._codec_model): per
128-element block of each row received from another rank, amax over the finite |x|, scale =
amax / 448, codes = x * (448 / amax) rounded to E4M3, value = code * scale in f32, rounded to
the dtype (amax < 1e-30: zeros); rows from the own rank exact (decoded) or encoded likewise
(coded: codes and scales); the combine and the layer output equal to PyTorch's exchange of the
model's rows. Any element that differs fails the run (the largest difference is reported).

Timing: CUDA events around blocks of --layers layers, after warm-up; the paths alternate block
by block (the order rotates each round), --rounds rounds; the tables give the median per layer
over the rounds (the largest over the ranks). Effective GB/s = bytes this rank sends to other
ranks in a layer (dispatch + combine; FP8: one byte per element plus 4 bytes per 128-element
block) / time, the largest over the ranks; the link floor = per phase, the largest bytes any
rank sends or receives over --link-gbps (about 325 GB/s per direction on 2x H200 NVLink),
dispatch + combine. Ratios PyTorch / rcclx and bf16 / FP8 (> 1: the second faster).

    LD_PRELOAD=$PWD/.carry/librcclx.so torchrun --standalone --nproc_per_node=2 bench/moe_a2av.py --out OUTDIR

Writes OUTDIR/moe_a2av.json and OUTDIR/moe_a2av.md (rank 0) and prints the tables
(bench/plot_moe.py draws the JSON). Exits non-zero when an output differs or rcclx is not loaded.
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
from rcclx import _codec_model as codec  # noqa: E402  (the torch model of the wire codecs)

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
PATHS = ["torch_eager", "rcclx_eager", "rcclx_graph", "rcclx_fp8_eager", "rcclx_fp8_graph",
         "rcclx_fp8_coded_eager", "rcclx_fp8_coded_graph", "local"]
#: path -> dispatch wire: None (bf16), "fp8" (decoded), "coded"
WIRE = {"rcclx_eager": None, "rcclx_graph": None, "rcclx_fp8_eager": "fp8", "rcclx_fp8_graph": "fp8",
        "rcclx_fp8_coded_eager": "coded", "rcclx_fp8_coded_graph": "coded"}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory (JSON and markdown)")
    ap.add_argument("--tokens", default="256,4096", help="tokens per rank, comma-separated (decode, prefill)")
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--experts", default="mul2,identity",
                    help="expert steps: mul2 (x * 2) and/or identity, comma-separated")
    ap.add_argument("--topk", default="rank,2,8",
                    help="routings, comma-separated: 'rank' (one random rank per token, as earlier versions) "
                         "and/or k (each token to its top k of --num-experts experts)")
    ap.add_argument("--num-experts", default="64",
                    help="experts E for the top-k routings, comma-separated (each a multiple of the world size)")
    ap.add_argument("--paths", default=",".join(PATHS), help=f"paths to time, comma-separated, of {','.join(PATHS)}")
    ap.add_argument("--link-gbps", type=float, default=325.0,
                    help="link bandwidth per GPU per direction, GB/s, for the floor (325: 2x H200 NVLink)")
    ap.add_argument("--routings", type=int, default=8, help="routings in the pool per size")
    ap.add_argument("--layers", type=int, default=32, help="layers per timed block (eager)")
    ap.add_argument("--graph-layers", type=int, default=32, help="layers captured in one CUDA graph")
    ap.add_argument("--rounds", type=int, default=30, help="timed rounds (each times every path once)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-torch-capture", action="store_true",
                    help="skip the attempt to capture the PyTorch path in a CUDA graph")
    args = ap.parse_args(argv)
    args.path_list = [p for p in args.paths.split(",") if p]
    bad = [p for p in args.path_list if p not in PATHS]
    if bad or "torch_eager" not in args.path_list:
        ap.error(f"--paths: unknown {bad}; torch_eager (the reference) is required" if bad else
                 "--paths must include torch_eager (the reference of the checks and ratios)")
    args.topk_list = [x for x in args.topk.split(",") if x]
    for x in args.topk_list:
        if x != "rank" and not (x.isdigit() and int(x) >= 1):
            ap.error(f"--topk: {x!r} is neither 'rank' nor a positive integer")
    args.experts_e = [int(x) for x in args.num_experts.split(",") if x]
    return args


def as_bytes(t):
    return t.reshape(-1).view(torch.uint8)


def expert_fn(name):
    if name == "mul2":
        return lambda x, out=None: torch.mul(x, 2) if out is None else torch.mul(x, 2, out=out)
    if name == "identity":
        return None
    raise SystemExit(f"unknown expert {name!r}: mul2 or identity")


def geo(xs):
    return statistics.geometric_mean(xs) if xs else float("nan")


class Routing:
    """One routing of the pool: the tokens, the router logits, k, experts per rank; and what the
    untimed check learned (rows received, bytes on the link)."""

    def __init__(self, x, logits, k, per_rank):
        self.x, self.logits, self.k, self.per_rank = x, logits, k, per_rank
        self.T = x.shape[0]
        self.ones = torch.ones(self.T * k, dtype=torch.int64, device=x.device)
        self.rows = None  # rows received by the dispatch


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
        self.blocks = -(-self.H // codec.BLOCK)
        self.fmt = codec.fp8_format(self.dev)
        self.fp8 = codec.FP8[self.fmt][0]
        self.failures = []

    def log(self, msg):
        if self.rank == 0:
            print(msg, flush=True)

    # --- routing pool ---
    def routings(self, T, topk, E):
        """`topk` "rank" (one rank per token, uneven, every fourth routing an incast) or k over E
        experts (random logits, every fourth routing biased towards one rank's experts)."""
        world, out = self.world, []
        for j in range(self.args.routings):
            g = torch.Generator(device=self.dev).manual_seed(self.args.seed * 100003 + self.rank * 1009 + j)
            if topk == "rank":
                if j % 4 == 3:
                    dest = torch.full((T,), (j // 4) % world, dtype=torch.int64, device=self.dev)
                else:
                    w = torch.rand(world, device=self.dev, generator=g) + 0.05
                    dest = torch.multinomial(w, T, replacement=True, generator=g)
                logits = torch.zeros(T, world, device=self.dev)
                logits.scatter_(1, dest[:, None], 1.0)
                k, per_rank = 1, 1
            else:
                k, per_rank = int(topk), E // world
                logits = torch.randn(T, E, device=self.dev, generator=g)
                if j % 4 == 3:
                    hot = (j // 4) % world
                    logits[:, hot * per_rank:(hot + 1) * per_rank] += 4.0
            x = torch.randn(T, self.H, device=self.dev, generator=g).to(self.dtype)
            out.append(Routing(x, logits, k, per_rank))
        torch.cuda.synchronize()
        return out

    # --- what every path shares: router, permutation, unpermute ---
    def route(self, r):
        """(send rows packed by destination rank, send splits, slot order, gate weights)."""
        gate, expert = torch.topk(r.logits, r.k, dim=1)             # [T, k]
        gate = torch.softmax(gate, dim=1).to(self.dtype)
        slot_expert = expert.reshape(-1)                             # slot s = token s // k
        order = torch.argsort(slot_expert, stable=True)              # slots by expert (so by rank)
        send = r.x.index_select(0, order // r.k)
        splits = torch.zeros(self.world, dtype=torch.int64, device=self.dev).scatter_add_(
            0, slot_expert // r.per_rank, r.ones)  # bincount without reading the maximum back
        return send, splits, order, gate

    def unpermute(self, back, order, gate, r):
        """The T*k rows back in slot order, weighted by the gates, summed per token."""
        slots = torch.empty(r.T * r.k, self.H, dtype=self.dtype, device=self.dev).index_copy_(0, order, back)
        return (slots.view(r.T, r.k, self.H) * gate[:, :, None]).sum(dim=1)

    # --- the paths ---
    def torch_layer(self, r, expert, wire_model=None):
        """PyTorch's layer: (dispatch output, received splits, combine output, layer output).
        `wire_model(mid, out_splits)`: the rows the expert gets instead of the dispatch output
        (the checks' model of an FP8 dispatch)."""
        send, splits, order, gate = self.route(r)
        out_splits = torch.empty_like(splits)
        dist.all_to_all_single(out_splits, splits)
        in_l, out_l = splits.tolist(), out_splits.tolist()  # device-to-host synchronisation
        mid = send.new_empty((sum(out_l), self.H))
        dist.all_to_all_single(mid, send, out_l, in_l)
        xin = mid if wire_model is None else wire_model(mid, out_l)
        eo = xin if expert is None else expert(xin)
        back = send.new_empty((sum(in_l), self.H))
        dist.all_to_all_single(back, eo, in_l, out_l)
        return mid, out_splits, back, self.unpermute(back, order, gate, r)

    def local_layer(self, r, expert):
        send, _, order, gate = self.route(r)
        eo = send if expert is None else expert(send)
        return self.unpermute(eo, order, gate, r)

    def buffers(self, T, k):
        cap = T * k * self.world  # every slot of every rank to this one
        return {
            "mid": torch.empty(cap, self.H, dtype=self.dtype, device=self.dev),
            "eo": torch.empty(cap, self.H, dtype=self.dtype, device=self.dev),
            "codes": torch.empty(cap, self.H, dtype=self.fp8, device=self.dev),
            "scales": torch.empty(cap, self.blocks, dtype=torch.float32, device=self.dev),
            "back": torch.empty(T * k, self.H, dtype=self.dtype, device=self.dev),
            "recv": torch.empty(self.world, dtype=torch.int64, device=self.dev),
            "back_splits": torch.empty(self.world, dtype=torch.int64, device=self.dev),
        }

    def rcclx_layer(self, b, r, expert, wire):
        """rcclx's layer (wire None, "fp8" or "coded"): returns the layer output; the exchange's
        results stay in `b`. The expert works on the rows received, as a grouped GEMM reading the
        device-side counts would (`r.rows` is known here only because the benchmark's routings
        are fixed; nothing is read back in the timed path)."""
        send, splits, order, gate = self.route(r)
        rows = r.rows
        if wire == "coded":
            rcclx.all_to_all_v_dynamic(send, splits, b["codes"], recv_splits=b["recv"], wire="fp8",
                                       output_scales=b["scales"])
            xin = codec.fp8_decode(b["codes"][:rows], b["scales"][:rows], self.dtype, self.fmt)  # the expert's dequant
            eo = xin if expert is None else expert(xin, out=b["eo"][:rows])
        else:
            rcclx.all_to_all_v_dynamic(send, splits, b["mid"], recv_splits=b["recv"], wire=wire)
            eo = b["mid"] if expert is None else expert(b["mid"][:rows], out=b["eo"][:rows])
        rcclx.all_to_all_v_dynamic(eo, b["recv"], b["back"], recv_splits=b["back_splits"])
        return self.unpermute(b["back"], order, gate, r)

    def capture(self, layer, n, pool):
        """A CUDA graph of `n` layers, layer j on routing j % len(pool), after one eager warm-up
        on a side stream; returns (graph, the last layer's output)."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            layer(pool[0])
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for j in range(n):
                last = layer(pool[j % len(pool)])
        return graph, last

    # --- verification ---
    def fail(self, what, detail):
        self.failures.append(f"{what}: {detail}")
        print(f"FAIL rank{self.rank} {what}: {detail}", flush=True)

    def reference(self, r, expert, wire):
        """PyTorch's layer, and for an FP8 wire the same with the model's rows for the expert:
        {"mid", "splits", "back", "out"} (+ "codes", "scales" for coded delivery)."""
        ref = {}
        if wire is None:
            mid, osp, back, out = self.torch_layer(r, expert)
        elif wire == "fp8":
            def model(m, counts):
                ref["model"] = codec.received("fp8", m, counts, self.rank, self.fmt)
                return ref["model"]
            mid, osp, back, out = self.torch_layer(r, expert, model)
        else:
            def model(m, counts):
                ref["codes"], ref["scales"] = codec.fp8_encode(m, self.fmt)
                return codec.fp8_decode(ref["codes"], ref["scales"], self.dtype, self.fmt)
            mid, osp, back, out = self.torch_layer(r, expert, model)
        ref.update(mid=mid, splits=osp, back=back, out=out)
        return ref

    def same(self, what, ref, b, out, wire):
        """rcclx's buffers `b` and layer output `out` against the reference; returns
        (ok, max |difference| of the dispatch output from its model)."""
        n = ref["mid"].shape[0]
        checks = {"recv splits": b["recv"].tolist() == ref["splits"].tolist()}
        worst = 0.0
        if wire is None:
            checks["dispatch output"] = torch.equal(as_bytes(b["mid"][:n]), as_bytes(ref["mid"]))
        elif wire == "fp8":
            bad, worst = codec.same_values(b["mid"][:n], ref["model"])
            checks[f"dispatch output ({bad} elements differ from the model)"] = bad == 0
        else:
            bad_c = int((as_bytes(b["codes"][:n]) != as_bytes(ref["codes"])).sum())
            bad_s = int((b["scales"][:n].view(torch.int32) != ref["scales"].view(torch.int32)).sum())
            checks[f"dispatch codes ({bad_c} differ) and scales ({bad_s} differ)"] = bad_c == 0 and bad_s == 0
        checks["combine output"] = torch.equal(as_bytes(b["back"]), as_bytes(ref["back"]))
        checks["layer output"] = torch.equal(as_bytes(out), as_bytes(ref["out"]))
        bad = [k for k, v in checks.items() if not v]
        if bad:
            self.fail(what, f"{', '.join(bad)} (recv rcclx {b['recv'].tolist()} torch {ref['splits'].tolist()})")
        return not bad, worst

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

    def link_bytes(self, r, out_splits, in_splits):
        """(sent to peers, received from peers) per phase: {"dispatch": (s, r), "combine": (s, r)}
        in rows of this rank; the combine sends back what the dispatch received."""
        me = self.rank
        s = sum(c for p, c in enumerate(in_splits) if p != me)
        v = sum(c for p, c in enumerate(out_splits) if p != me)
        return {"dispatch": (s, v), "combine": (v, s)}

    def run_size(self, T, topk, E, expert_name):
        args = self.args
        expert = expert_fn(expert_name)
        k = 1 if topk == "rank" else int(topk)
        pool = self.routings(T, topk, E)
        K = len(pool)
        b = self.buffers(T, k)
        routing = "rank" if topk == "rank" else f"top{k} E={E}"
        label = f"tokens={T} {routing} expert={expert_name}"
        paths = args.path_list
        wires = sorted({WIRE[p] for p in paths if p in WIRE}, key=str)

        # Every routing of the pool, every wire: against PyTorch / the model (untimed). The rows
        # each routing brings, and its bytes on the link.
        ok = True
        worst = 0.0
        esz = torch.tensor([], dtype=self.dtype).element_size()
        row_bytes = {None: self.H * esz, "fp8": self.H + 4 * self.blocks}  # FP8: a code per element, a scale per block
        phase_rows = []
        fp8_err = []
        for j, r in enumerate(pool):
            ref = self.reference(r, expert, None)
            r.rows = ref["mid"].shape[0]
            phase_rows.append(self.link_bytes(r, ref["splits"].tolist(), self.route(r)[1].tolist()))
            for wire in wires:
                rr = ref if wire is None else self.reference(r, expert, wire)
                out = self.rcclx_layer(b, r, expert, wire)
                good, w = self.same(f"{label} routing {j} {wire or 'bf16'} eager", rr, b, out, wire)
                ok &= good
                worst = max(worst, w)
                if wire is not None:
                    d = (out.float() - ref["out"].float()).norm() / ref["out"].float().norm().clamp_min(1e-30)
                    fp8_err.append(float(d))
        zero_splits = sum(self.route(r)[1].tolist().count(0) for r in pool)

        # The graphs: G layers each, sharing the static buffers; checked after a replay.
        G = args.graph_layers
        graphs = {}
        for p in paths:
            if p.endswith("_graph"):
                wire = WIRE[p]
                graphs[p] = self.capture(lambda r, wire=wire: self.rcclx_layer(b, r, expert, wire), G, pool)

        def check_graph(p, when):
            nonlocal ok
            graph, out = graphs[p]
            graph.replay()
            wire = WIRE[p]
            good, _ = self.same(f"{label} {p} {when} (last layer)", self.reference(pool[(G - 1) % K], expert, wire),
                                b, out, wire)
            ok &= good

        for p in graphs:
            check_graph(p, "replay")

        fns = {
            "torch_eager": (lambda i: self.torch_layer(pool[i % K], expert), args.layers, 1),
            "local": (lambda i: self.local_layer(pool[i % K], expert), args.layers, 1),
        }
        for p in paths:
            if p.endswith("_eager") and p in WIRE:
                fns[p] = (lambda i, wire=WIRE[p]: self.rcclx_layer(b, pool[i % K], expert, wire), args.layers, 1)
            elif p in graphs:
                fns[p] = (lambda i, g=graphs[p][0]: g.replay(), max(1, args.layers // G), G)
        names = [p for p in paths if p in fns]
        times = {n: [] for n in names}
        for rnd in range(args.warmup + args.rounds):
            order = names[rnd % len(names):] + names[:rnd % len(names)]  # rotate: noise hits all
            for n in order:
                fn, calls, per = fns[n]
                t = self.timed(fn, calls, per)
                if rnd >= args.warmup:
                    times[n].append(t)
        # After timing: the graphs still give PyTorch's result.
        for p in graphs:
            check_graph(p, "replay after timing")
        torch.cuda.synchronize()

        med = torch.tensor([statistics.median(times[n]) for n in names], dtype=torch.float64, device=self.dev)
        dist.all_reduce(med, op=dist.ReduceOp.MAX)
        med = dict(zip(names, med.tolist()))
        # Bytes: this rank's sends per layer (mean over the pool), the largest over the ranks; the
        # floor per phase from the largest send or receive of any rank.
        mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
        sent_rows = mean([pr["dispatch"][0] + pr["combine"][0] for pr in phase_rows])
        disp_rows = [max(pr["dispatch"]) for pr in phase_rows]
        comb_rows = [max(pr["combine"]) for pr in phase_rows]
        sends = [mean([pr["dispatch"][0] for pr in phase_rows]), mean([pr["combine"][0] for pr in phase_rows])]
        stats = torch.tensor(sends + disp_rows + comb_rows, dtype=torch.float64, device=self.dev)
        dist.all_reduce(stats, op=dist.ReduceOp.MAX)  # per routing: the busiest rank
        stats = stats.tolist()
        disp_send, comb_send = stats[0], stats[1]
        disp_max, comb_max = stats[2:2 + K], stats[2 + K:]
        bw = args.link_gbps * 1e3  # bytes per us
        floor = {
            "bf16": mean([(d + c) * row_bytes[None] for d, c in zip(disp_max, comb_max)]) / bw,
            "fp8": mean([d * row_bytes["fp8"] + c * row_bytes[None] for d, c in zip(disp_max, comb_max)]) / bw,
        }
        link = {
            None: disp_send * row_bytes[None] + comb_send * row_bytes[None],
            "fp8": disp_send * row_bytes["fp8"] + comb_send * row_bytes[None],
        }
        link["coded"] = link["fp8"]
        gbps = {n: round(link[WIRE.get(n)] / 1e3 / med[n], 1) for n in names if n != "local"}

        def ratio(a, c):
            return round(med[a] / med[c], 3) if a in med and c in med else None

        ratios = {
            "torch_over_rcclx_eager": ratio("torch_eager", "rcclx_eager"),
            "torch_over_rcclx_graph": ratio("torch_eager", "rcclx_graph"),
            "torch_over_rcclx_fp8_graph": ratio("torch_eager", "rcclx_fp8_graph"),
            "bf16_over_fp8_eager": ratio("rcclx_eager", "rcclx_fp8_eager"),
            "bf16_over_fp8_graph": ratio("rcclx_graph", "rcclx_fp8_graph"),
            "bf16_over_fp8_coded_graph": ratio("rcclx_graph", "rcclx_fp8_coded_graph"),
        }
        row = {
            "tokens_per_rank": T,
            "routing": routing,
            "topk": k,
            "num_experts": self.world if topk == "rank" else E,
            "hidden": self.H,
            "dtype": args.dtype,
            "expert": expert_name,
            "bytes_per_rank_each_way": T * self.H * esz,
            "rows_sent_to_peers_per_layer": round(sent_rows, 1),
            "link_bytes_per_rank_per_layer": {("bf16" if w is None else w): round(v) for w, v in link.items()},
            "link_floor_us": {w: round(v, 2) for w, v in floor.items()},
            "zero_splits_in_pool": zero_splits,
            "us_per_layer": {n: round(med[n], 2) for n in names},
            "exchange_us_per_layer": {n: round(med[n] - med["local"], 2)
                                      for n in names if "local" in med and n != "local"},
            "effective_gbps": gbps,
            "ratios": ratios,
            "rank0_us_per_layer_all_rounds": {n: [round(x, 2) for x in times[n]] for n in names},
            "rank0_min_us": {n: round(min(times[n]), 2) for n in names},
            "fp8_dispatch_max_abs_diff_from_model": worst,
            "fp8_layer_output_rel_l2_vs_bf16": round(max(fp8_err), 5) if fp8_err else None,
            "checks_passed": bool(ok),
        }
        self.log(f"{label}: " + ", ".join(f"{n} {med[n]:.1f}" for n in names) + f" us per layer; floor bf16 "
                 f"{floor['bf16']:.1f} us, fp8 {floor['fp8']:.1f} us; checks passed: {ok}")
        return row

    def try_torch_capture(self, T):
        """The PyTorch path inside torch.cuda.graph: expected to fail at .tolist()."""
        r = self.routings(T, "rank", self.world)[0]
        expert = expert_fn("mul2")
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                self.torch_layer(r, expert)
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


SHORT = {"torch_eager": "PyTorch", "rcclx_eager": "bf16 eager", "rcclx_graph": "bf16 graph",
         "rcclx_fp8_eager": "fp8 eager", "rcclx_fp8_graph": "fp8 graph", "rcclx_fp8_coded_eager": "fp8 coded eager",
         "rcclx_fp8_coded_graph": "fp8 coded graph", "local": "local (no exchange)"}


def markdown(result):
    rows = result["rows"]
    names = [n for n in PATHS if any(n in r["us_per_layer"] for r in rows)]
    fmt = lambda v, f="{:.1f}": "-" if v is None else f.format(v)  # noqa: E731
    lines = [
        f"# MoE dispatch + combine, {result['world']} ranks, hidden {result['hidden']} {result['dtype']}",
        "",
        "us per layer (router top-k, permutation, dispatch, expert, combine, unpermute), median over rounds, "
        "slowest rank. fp8: dispatch in FP8 (decoded to bf16; coded: FP8 codes + scales, dequantized by the "
        "expert), combine bf16. local: the layer without the exchange.",
        "",
        "| tokens/rank | routing | expert | " + " | ".join(SHORT[n] for n in names) + " | checks |",
        "|---|---|---|" + "---|" * len(names) + "---|",
    ]
    for r in rows:
        u = r["us_per_layer"]
        lines.append(f"| {r['tokens_per_rank']} | {r['routing']} | {r['expert']} | "
                     + " | ".join(fmt(u.get(n)) for n in names) + f" | {'pass' if r['checks_passed'] else 'FAIL'} |")
    gnames = [n for n in names if n != "local"]
    lines += [
        "",
        f"Effective GB/s (bytes a rank sends to other ranks per layer / time; FP8 dispatch: 1 byte per element + "
        f"4 per 128) and the link floor at {result['link_gbps']:g} GB/s per direction (dispatch + combine, the "
        "busiest rank per phase). Ratios > 1: the second is faster.",
        "",
        "| tokens/rank | routing | expert | MiB sent/layer bf16 | floor bf16 us | floor fp8 us | "
        + " | ".join(f"GB/s {SHORT[n]}" for n in gnames)
        + " | PyTorch/bf16 graph | bf16/fp8 graph | bf16/fp8 coded graph | fp8 rel. L2 |",
        "|---|---|---|---|---|---|" + "---|" * len(gnames) + "---|---|---|---|",
    ]
    for r in rows:
        g, q = r["effective_gbps"], r["ratios"]
        lines.append(
            f"| {r['tokens_per_rank']} | {r['routing']} | {r['expert']} | "
            f"{r['link_bytes_per_rank_per_layer']['bf16'] / 2**20:.1f} | {r['link_floor_us']['bf16']:.1f} | "
            f"{r['link_floor_us']['fp8']:.1f} | " + " | ".join(fmt(g.get(n), "{:.0f}") for n in gnames)
            + f" | {fmt(q['torch_over_rcclx_graph'], '{:.2f}x')} | {fmt(q['bf16_over_fp8_graph'], '{:.2f}x')} | "
            f"{fmt(q['bf16_over_fp8_coded_graph'], '{:.2f}x')} | "
            f"{fmt(r['fp8_layer_output_rel_l2_vs_bf16'], '{:.4f}')} |")
    lines += [
        "",
        f"PyTorch path in a CUDA graph: {result['torch_graph_capture']}",
        "",
        f"rcclx routes on the world communicator (host calls; a captured call counts once): {result['rcclx_routes']}",
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
    for e in args.experts_e:
        if e % bench.world or e < bench.world:
            raise SystemExit(f"--num-experts {e}: not a multiple of the world size {bench.world}")
    t = torch.ones(1, device=bench.dev)
    dist.all_reduce(t)  # the world communicator is set up
    rows = []
    for T in [int(x) for x in args.tokens.split(",") if x]:
        for topk in args.topk_list:
            for E in ([bench.world] if topk == "rank" else args.experts_e):
                if topk != "rank" and int(topk) > E:
                    bench.log(f"skipped: top{topk} of {E} experts")
                    continue
                for e in [x for x in args.experts.split(",") if x]:
                    rows.append(bench.run_size(T, topk, E, e))
    st = rcclx.stats(dist.group.WORLD)
    routes = {name: v.get("calls", 0) for name, v in (st.get("comm") or {}).items() if name.startswith("alltoallv")}
    result = {
        "world": bench.world,
        "hidden": bench.H,
        "dtype": args.dtype,
        "link_gbps": args.link_gbps,
        "fp8_format": bench.fmt,
        "device": torch.cuda.get_device_name(bench.dev),
        "torch": torch.__version__,
        "nccl": nccl_version(),
        "rcclx": st.get("version"),
        "rcclx_library": st.get("library"),
        "host": platform.node(),
        "args": {k: v for k, v in vars(args).items() if not k.endswith("_list") and k != "experts_e"},
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "rows": rows,
        "rcclx_routes": routes,
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
    q = lambda key: [r["ratios"][key] for r in rows if r["ratios"][key]]  # noqa: E731
    bench.log(f"geomean PyTorch/rcclx: eager {geo(q('torch_over_rcclx_eager')):.2f}x, graph "
              f"{geo(q('torch_over_rcclx_graph')):.2f}x; bf16/fp8 graph {geo(q('bf16_over_fp8_graph')):.2f}x; "
              f"{'checks passed' if not bench.failures else 'FAIL: outputs differ'}; written to {args.out}")
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
