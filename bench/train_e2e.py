#!/usr/bin/env python3
"""Training end to end: a decoder-only transformer trained with DDP or FSDP2 on NCCL, step time and
the loss of every step, to compare stock NCCL with rcclx bit for bit (issue 29).

The model (defaults: about 0.5 B parameters): GPT-style, pre-norm, --layers blocks of causal
self-attention (--heads heads, scaled_dot_product_attention) and a GELU MLP (4 x --hidden), learned
position embeddings, LayerNorm, untied LM head; no dropout, no bias in the linear layers. With
--layers 32 --hidden 1024 --heads 16 --vocab 50304: 507 M parameters.

- Initialisation: every parameter from its own generator, seeded by --seed and the parameter's
  name (normal, std 0.02; the output projections 0.02 / sqrt(2 x layers); LayerNorm 1 and 0), on
  the training device. The same model on every rank and in every run, whatever the wrapper.
- Data: synthetic, the same in every run: per step and rank, --batch sequences of --seq + 1
  tokens from a CPU generator seeded by (--seed, step, rank). Each sequence walks the vocabulary
  in random steps of 1-4 through a fixed random permutation, so the next token is predictable to
  within 4 choices and the loss falls from ln(vocab) towards ln(4) = 1.386. All batches are made
  and moved to the device before the first step.
- Optimiser: AdamW (lr --lr, betas 0.9/0.95, weight decay 0.1, foreach), gradient norm clipped to
  --clip (0: off); --steps steps (default 25).

Modes (--mode):

- ddp: DistributedDataParallel(bucket_cap_mb=--bucket-mb, 25 by default); parameters, gradients
  and the gradient all-reduces in fp32. The forward and backward run under bf16 autocast by
  default (--autocast bf16, as DDP jobs run); --autocast none computes in fp32 too.
- fsdp2: torch.distributed.fsdp.fully_shard on every block and on the root,
  MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): the blocks' parameters are
  all-gathered in bf16, the gradients reduce-scattered in fp32; the sharded parameters and
  AdamW's state are fp32. PyTorch reduce-scatters fp32 gradients with ReduceOp.AVG (ncclAvg:
  rcclx's kernels take it) or, depending on its version, a pre-multiplied sum
  (ncclRedOpCreatePreMulSum: a custom op, which rcclx forwards to the stock library); the route
  statistics in the output say which. --fsdp-reduce sum calls
  set_force_sum_reduction_for_comms(True) (SUM, then a division by the world size), which rcclx's
  ReduceScatter kernels always take.

Determinism (so that stock against stock gives the same bits, and stock against rcclx can be
compared bit for bit): torch.use_deterministic_algorithms(True), CUBLAS_WORKSPACE_CONFIG=:4096:8
(set here unless already set), cuDNN deterministic and not benchmarking, no dropout, fixed seeds,
no TF32. The loss is computed in fp32 from fp32 logits (F.cross_entropy; if it has no
deterministic implementation here, logsumexp - gather, and the JSON says which).

Per step: the loss of each rank (fp32), and the step time: CUDA events around forward, backward,
clipping, optimiser step and zero_grad, the slowest rank per step; nothing synchronises the host
inside the loop (the losses stay on the device until the end). The median excludes the first
--warmup steps (default 5). Also: peak memory (max_memory_allocated / reserved, the largest over
the ranks), and a checksum of the final parameters (each rank's shard: sums of their bit patterns,
plain and position-weighted, per parameter, hashed) so that the last optimiser step is compared
too.

Output (rank 0): OUT/train-<variant>-<label>.json and .md, where the variant is the mode and its
options (ddp, ddp-fp32 with --autocast none, fsdp2, fsdp2-sum with --fsdp-reduce sum), and lines on
stdout:

  STEP 3 loss=9.87654321 f32=0x411e0a3c,0x411e0b12 ms=143.210
  PASS train variant=ddp label=stock-1 steps=25 median_step_ms=143.2 final_loss=... (0x...) rcclx=no

The JSON holds the configuration, per step the loss of every rank (repr and the hex of its fp32
bits) and their mean (float64, repr and float.hex), the step times, the median, peak memory, the
parameter checksums, the environment that changes the collectives (RCCL_LOW_PRECISION_ENABLE,
RCCLX_*, NCCL_*), the libraries mapped, and, when rcclx is loaded (LD_PRELOAD), its route
statistics from the rcclx package (python/rcclx: rcclx.stats()): calls and bytes per route
(<collective>.<algorithm>, e.g. allreduce.flat, reducescatter.lowp, forwarded with its reasons)
for the process and for the world communicator, and the sums of the calls that ran rcclx kernels
and low-precision kernels. bench/train_compare.py tabulates several JSON files (step-time ratios,
bit-identical losses).

--expect stock|rcclx: exit 1 if rcclx is loaded (stock), or if it is not loaded or no collective
took an rcclx kernel (rcclx; with RCCL_LOW_PRECISION_ENABLE=1 also if none took a low-precision
one). Usage (2 GPUs; scripts/gpu-tests.sh step train runs every variant with stock twice, rcclx,
and rcclx with RCCL_LOW_PRECISION_ENABLE=1):

  python3 -m torch.distributed.run --standalone --nproc_per_node=2 bench/train_e2e.py \\
      --mode ddp --out OUTDIR --label stock-1 --expect stock
  LD_PRELOAD=$PWD/.carry/librcclx.so python3 -m torch.distributed.run --standalone --nproc_per_node=2 \\
      bench/train_e2e.py --mode fsdp2 --out OUTDIR --label rcclx --expect rcclx
  python3 bench/train_compare.py OUTDIR/train-ddp-*.json

--device cpu (gloo, CPU tensors) exists only to test this script without GPUs, with a tiny model:

  torchrun --standalone --nproc_per_node=2 bench/train_e2e.py --device cpu --mode ddp \\
      --layers 2 --hidden 64 --heads 4 --vocab 256 --seq 32 --batch 2 --steps 6 --warmup 2 --out /tmp/t
"""
import argparse
import contextlib
import hashlib
import json
import math
import os
import platform
import statistics
import struct
import sys
import time
import zlib

# Before anything initialises cuBLAS: its deterministic workspace configuration.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))  # this checkout's rcclx package
import rcclx  # noqa: E402

#: environment variables that change what the collectives do, recorded in the JSON
ENV_PREFIXES = ("RCCL_", "RCCLX_", "NCCL_")
ENV_NAMES = ("LD_PRELOAD", "CUBLAS_WORKSPACE_CONFIG", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")
#: rcclx route algorithms that are the low-precision kernels
LOWP_ALGOS = ("lowp", "int8", "lowp_pair", "int8_pair", "hier_lowp", "hier_int8")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", required=True, choices=("ddp", "fsdp2"))
    ap.add_argument("--out", required=True, help="output directory (JSON and markdown)")
    ap.add_argument("--label", help="run name in the file names and tables (default: stock, rcclx or rcclx-lowp)")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--seq", type=int, default=1024, help="tokens per sequence (1024)")
    ap.add_argument("--batch", type=int, default=8, help="sequences per rank per step (8)")
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--warmup", type=int, default=5, help="first steps left out of the median step time (5)")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--clip", type=float, default=1.0, help="gradient norm clipping (1.0; 0: off)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="ddp: bucket_cap_mb (25)")
    ap.add_argument("--autocast", choices=("bf16", "none"), default="bf16",
                    help="ddp: forward/backward under bf16 autocast (default) or all fp32; parameters, "
                         "gradients and all-reduces are fp32 either way (fsdp2: bf16 parameters by its policy)")
    ap.add_argument("--fsdp-reduce", choices=("avg", "sum"), default="avg",
                    help="fsdp2: PyTorch's ReduceOp.AVG (default) or SUM then a division "
                         "(set_force_sum_reduction_for_comms)")
    ap.add_argument("--expect", choices=("any", "stock", "rcclx"), default="any",
                    help="stock: fail if rcclx is loaded; rcclx: fail unless rcclx kernels ran")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cuda (NCCL; default); cpu: gloo on CPU tensors, only to test this script")
    args = ap.parse_args(argv)
    if args.hidden % args.heads:
        ap.error(f"--hidden {args.hidden} must divide by --heads {args.heads}")
    if not 0 <= args.warmup < args.steps:
        ap.error("--warmup must be at least 0 and less than --steps")
    return args


# ------------------------------------------------------------------------------------------
# The model
# ------------------------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
        self.proj = nn.Linear(hidden, hidden, bias=False)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc = nn.Linear(hidden, 4 * hidden, bias=False)
        self.out = nn.Linear(4 * hidden, hidden, bias=False)

    def forward(self, x):
        B, T, H = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, H // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [B, heads, T, hd]
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, H))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Decoder(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.tok = nn.Embedding(args.vocab, args.hidden)
        self.pos = nn.Embedding(args.seq, args.hidden)
        self.blocks = nn.ModuleList(Block(args.hidden, args.heads) for _ in range(args.layers))
        self.ln_f = nn.LayerNorm(args.hidden)
        self.head = nn.Linear(args.hidden, args.vocab, bias=False)

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


@torch.no_grad()
def init_weights(model, args):
    """Each parameter from its own generator (seed, name): independent of construction order."""
    out_std = 0.02 / math.sqrt(2 * args.layers)
    for name, p in model.named_parameters():
        if ".ln" in name or name.startswith("ln_"):
            p.fill_(1.0 if name.endswith("weight") else 0.0)
            continue
        g = torch.Generator(device=p.device)
        g.manual_seed((args.seed * 1000003 + zlib.crc32(name.encode())) & 0x7FFFFFFFFFFFFFFF)
        std = out_std if name.endswith(("proj.weight", "out.weight")) else 0.02
        p.normal_(0.0, std, generator=g)


def make_batches(args, rank, device):
    """[(inputs [B, T], targets [B, T])] for every step: a walk through a fixed permutation of the
    vocabulary in random steps of 1-4 (CPU generators, so the same tokens on every device)."""
    perm = torch.randperm(args.vocab, generator=torch.Generator().manual_seed(args.seed))
    out = []
    for step in range(args.steps):
        g = torch.Generator().manual_seed(args.seed * 1000003 + step * 1009 + rank + 1)
        start = torch.randint(0, args.vocab, (args.batch, 1), generator=g)
        walk = torch.randint(1, 5, (args.batch, args.seq), generator=g).cumsum(1)
        seq = perm[torch.cat([start, start + walk], dim=1) % args.vocab]
        out.append((seq[:, :-1].contiguous().to(device), seq[:, 1:].contiguous().to(device)))
    return out


def loss_cross_entropy(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def loss_logsumexp(logits, targets):
    lg = logits.reshape(-1, logits.shape[-1])
    return (torch.logsumexp(lg, -1) - lg.gather(-1, targets.reshape(-1, 1))[:, 0]).mean()


# ------------------------------------------------------------------------------------------
# Run context: rank, device, process group, timing, logging
# ------------------------------------------------------------------------------------------
class Ctx:
    def __init__(self, args):
        if "WORLD_SIZE" not in os.environ:
            raise SystemExit("run under torchrun: python3 -m torch.distributed.run --nproc_per_node=2 ...")
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", self.rank))
        if args.device == "cpu":  # gloo: only to test this script's code paths
            self.device = torch.device("cpu")
            torch.set_num_threads(1)
            dist.init_process_group("gloo")
        else:
            self.device = torch.device("cuda", local)
            torch.cuda.set_device(self.device)
            # device_id makes the init eager (the communicator exists before the first call).
            dist.init_process_group("nccl", device_id=self.device)
        self.cuda = self.device.type == "cuda"

    def log(self, *a):
        if self.rank == 0:
            print(*a, flush=True)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def ms(self, a, b):
        return a.elapsed_time(b) if self.cuda else (b - a) * 1e3

    def gather(self, t):
        """[world, *t.shape]: every rank's t (any dtype; as bytes, so no reduction touches it)."""
        t = t.contiguous()
        raw = t.view(-1).view(torch.uint8) if t.dtype != torch.uint8 else t.view(-1)
        bufs = [torch.empty_like(raw) for _ in range(self.world)]
        dist.all_gather(bufs, raw)
        return torch.stack([b.view(t.dtype).view(t.shape) for b in bufs]).cpu()


def set_determinism(args):
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    # TF32 stays off for matrix products (PyTorch's default; it would be deterministic too).


def wrap(model, args, ctx):
    """(the model to train, a description of the wrapping)."""
    if args.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        kw = {"device_ids": [ctx.device.index]} if ctx.cuda else {}
        return DDP(model, bucket_cap_mb=args.bucket_mb, **kw), (
            f"DistributedDataParallel(bucket_cap_mb={args.bucket_mb:g}), fp32 parameters and gradients, "
            f"compute {'bf16 autocast' if args.autocast == 'bf16' else 'fp32'}")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(ctx.device.type, (ctx.world,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for b in model.blocks:
        fully_shard(b, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    if args.fsdp_reduce == "sum":
        model.set_force_sum_reduction_for_comms(True)
    return model, (f"fully_shard per block and root, MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), "
                   f"reduce-scatter {'ReduceOp.AVG' if args.fsdp_reduce == 'avg' else 'ReduceOp.SUM then / world'}")


def local_tensor(p):
    return p.to_local() if hasattr(p, "to_local") else p


@torch.no_grad()
def param_checksum(model):
    """Hex digest of this rank's parameters (its shards under FSDP2): per parameter, in name order,
    the sum of the bit patterns and their position-weighted sum (int64, wrapping: the order of
    the additions does not matter), hashed on the host."""
    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    sums = []
    for _, p in sorted(model.named_parameters()):
        t = local_tensor(p.detach()).contiguous().view(-1)
        bits = t.view(ints[t.element_size()]).to(torch.int64)
        w = torch.arange(bits.numel(), device=bits.device) % 65521 + 1
        sums.append(torch.stack([bits.sum(), (bits * w).sum()]))
        del bits, w
    blob = torch.stack(sums).cpu().numpy().tobytes() if sums else b""
    return hashlib.sha256(blob).hexdigest()[:32]


def f32_hex(x):
    return "0x" + struct.pack(">f", x).hex()


def mapped_nccl_libs():
    """Paths of the NCCL-API libraries mapped in this process (stock libnccl, librcclx)."""
    found = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                path = parts[-1] if len(parts) >= 6 else ""
                name = os.path.basename(path)
                if ("libnccl" in name or "librcclx" in name or "librccl" in name) and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


def nccl_version(ctx):
    if not ctx.cuda:
        return None
    try:
        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v)
    except (RuntimeError, AttributeError):
        return None


def rcclx_info(ctx):
    """rcclx's route statistics (rcclx.stats()) when it is loaded in this process, else
    {"loaded": False}. kernel_calls: calls that took an rcclx kernel (every route but forwarded);
    lowp_calls: those of the low-precision kernels."""
    if not rcclx.is_active():
        return {"loaded": False}
    st = rcclx.stats(dist.group.WORLD if ctx.cuda else None)
    proc = st.get("process") or {}
    kernel = {k: v["calls"] for k, v in proc.items() if k != "forwarded"}
    return {
        "loaded": True,
        "version": st.get("version"),
        "library": st.get("library"),
        "upstream": st.get("upstream"),
        "process_routes": proc,
        "world_routes": st.get("comm"),
        "world_routes_error": st.get("comm_error") or st.get("error"),
        "kernel_calls": sum(kernel.values()),
        "lowp_calls": sum(v for k, v in kernel.items() if k.split(".")[-1] in LOWP_ALGOS),
        "forwarded_calls": (proc.get("forwarded") or {}).get("calls", 0),
    }


def collective_env():
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES) or k in ENV_NAMES}


# ------------------------------------------------------------------------------------------
def train(ctx, args, model, batches):
    """(per-rank losses [steps] fp32 tensor, per-step ms list, loss function name)."""
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1, eps=1e-8,
                            foreach=True)
    autocast = (torch.autocast(ctx.device.type, dtype=torch.bfloat16)
                if args.mode == "ddp" and args.autocast == "bf16" else contextlib.nullcontext())
    loss_fn, loss_name = loss_cross_entropy, "cross_entropy"
    losses, marks = [], []
    ctx.sync()
    dist.barrier()
    for step, (x, y) in enumerate(batches):
        t0 = ctx.mark()
        with autocast:
            logits = model(x)
        try:
            loss = loss_fn(logits.float(), y)
        except RuntimeError as e:  # no deterministic implementation on this device: the same loss, by hand
            if step or "deterministic" not in str(e):
                raise
            loss_fn, loss_name = loss_logsumexp, "logsumexp - gather (cross_entropy: no deterministic kernel)"
            loss = loss_fn(logits.float(), y)
        del logits
        loss.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        t1 = ctx.mark()
        losses.append(loss.detach().float().reshape(1))
        marks.append((t0, t1))
    ctx.sync()
    return torch.cat(losses), [ctx.ms(a, b) for a, b in marks], loss_name


def markdown(r):
    c = r["config"]
    rx = r["rcclx"]
    lines = [
        f"# Training end to end: {r['variant']} `{r['label']}`",
        "",
        f"{c['params'] / 1e6:.1f} M parameters ({c['layers']} layers, hidden {c['hidden']}, {c['heads']} heads, "
        f"vocab {c['vocab']}), {c['world']} ranks x batch {c['batch']} x {c['seq']} tokens, {c['steps']} steps, "
        f"AdamW lr {c['lr']:g}, clip {c['clip']:g}. {r['wrapping']}. Loss: {r['loss_function']}.",
        "",
        f"Median step time (steps {c['warmup']}..{c['steps'] - 1}, slowest rank): **{r['median_step_ms']:.3f} ms**; "
        f"peak memory {r['peak_memory_allocated_bytes'] / 2**30:.2f} GiB allocated, "
        f"{r['peak_memory_reserved_bytes'] / 2**30:.2f} GiB reserved.",
        "",
        f"rcclx: {'not loaded' if not rx['loaded'] else rx.get('version')}"
        + ("" if not rx["loaded"] else f"; {rx['kernel_calls']} calls took rcclx kernels ({rx['lowp_calls']} "
                                       f"low precision), {rx['forwarded_calls']} forwarded; routes "
                                       f"{ {k: v['calls'] for k, v in rx['process_routes'].items()} }"),
        "",
        f"Low precision: RCCL_LOW_PRECISION_ENABLE={r['env'].get('RCCL_LOW_PRECISION_ENABLE', '-')}, codec "
        f"{r['env'].get('RCCLX_LOW_PRECISION_CODEC', '-')}. Final parameter checksums per rank: "
        f"{', '.join(r['param_checksums'])}.",
        "",
        "| step | loss (mean over ranks) | float64 hex | fp32 bits per rank | ms |",
        "|---|---|---|---|---|",
    ]
    for s in r["steps"]:
        lines.append(f"| {s['step']} | {s['loss']} | {s['loss_hex']} | {' '.join(s['rank_loss_f32_hex'])} | "
                     f"{s['ms']:.3f} |")
    lines += ["", f"Command: `{r['command']}`", ""]
    return "\n".join(lines)


def main():
    args = parse_args()
    ctx = Ctx(args)
    set_determinism(args)
    rx0 = rcclx.is_active()
    lowp = os.environ.get("RCCL_LOW_PRECISION_ENABLE", "0") not in ("", "0")
    label = args.label or ("stock" if not rx0 else ("rcclx-lowp" if lowp else "rcclx"))
    variant = args.mode + {"ddp": "-fp32" if args.autocast == "none" else "",
                           "fsdp2": "-sum" if args.fsdp_reduce == "sum" else ""}[args.mode]
    dev_name = torch.cuda.get_device_name(ctx.device) if ctx.cuda else platform.processor() or "cpu"
    ctx.log(f"INFO torch {torch.__version__} {dev_name} x{ctx.world} backend {dist.get_backend()} "
            f"nccl={nccl_version(ctx) or '-'} rcclx={'loaded' if rx0 else 'no'} variant={variant} label={label}")

    t0 = time.time()
    model = Decoder(args).to(ctx.device)
    init_weights(model, args)
    n_params = sum(p.numel() for p in model.parameters())
    model, wrapping = wrap(model, args, ctx)
    batches = make_batches(args, ctx.rank, ctx.device)
    ctx.sync()
    ctx.log(f"INFO {n_params / 1e6:.1f} M parameters, {wrapping}; set up in {time.time() - t0:.1f} s")
    if ctx.cuda:
        torch.cuda.reset_peak_memory_stats(ctx.device)

    t0 = time.time()
    losses, ms, loss_name = train(ctx, args, model, batches)
    wall = time.time() - t0
    peak = torch.tensor([torch.cuda.max_memory_allocated(ctx.device), torch.cuda.max_memory_reserved(ctx.device)]
                        if ctx.cuda else [0, 0], dtype=torch.int64, device=ctx.device)
    all_losses = ctx.gather(losses)  # [world, steps] fp32
    all_ms = ctx.gather(torch.tensor(ms, dtype=torch.float64, device=ctx.device))
    all_peak = ctx.gather(peak)
    digest = param_checksum(model.module if args.mode == "ddp" else model)
    digests = ["".join(chr(c) for c in row.tolist())
               for row in ctx.gather(torch.tensor(list(digest.encode()), dtype=torch.uint8, device=ctx.device))]
    rx = rcclx_info(ctx)

    steps = []
    step_ms = all_ms.max(0).values.tolist()
    for i in range(args.steps):
        per = [float(v) for v in all_losses[:, i].tolist()]
        mean = math.fsum(per) / len(per)
        steps.append({"step": i, "loss": repr(mean), "loss_hex": mean.hex(), "rank_loss": [repr(v) for v in per],
                      "rank_loss_f32_hex": [f32_hex(v) for v in per], "ms": step_ms[i],
                      "rank_ms": all_ms[:, i].tolist()})
    timed = step_ms[args.warmup:]
    failures = []
    if args.expect == "stock" and rx["loaded"]:
        failures.append("rcclx is loaded but --expect stock")
    if args.expect == "rcclx" and not rx["loaded"]:
        failures.append("rcclx is not loaded (set LD_PRELOAD=librcclx.so)")
    elif args.expect == "rcclx" and rx["kernel_calls"] == 0:
        failures.append("rcclx is loaded but no collective took an rcclx kernel")
    elif args.expect == "rcclx" and lowp and rx["lowp_calls"] == 0:
        failures.append("RCCL_LOW_PRECISION_ENABLE is set but no collective took a low-precision kernel")
    if not all(math.isfinite(float(s["loss"])) for s in steps):
        failures.append("a loss is not finite")
    result = {
        "mode": args.mode,
        "variant": variant,
        "label": label,
        "config": {**{k: v for k, v in vars(args).items() if k not in ("out", "label", "expect")},
                   "world": ctx.world, "params": n_params, "tokens_per_step": ctx.world * args.batch * args.seq},
        "wrapping": wrapping,
        "loss_function": loss_name,
        "low_precision": lowp,
        "deterministic": {"use_deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
                          "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
                          "cudnn_deterministic": torch.backends.cudnn.deterministic,
                          "matmul_tf32": torch.backends.cuda.matmul.allow_tf32},
        "steps": steps,
        "median_step_ms": statistics.median(timed),
        "mean_step_ms": statistics.fmean(timed),
        "min_step_ms": min(timed),
        "wall_s": wall,
        "peak_memory_allocated_bytes": int(all_peak[:, 0].max()),
        "peak_memory_reserved_bytes": int(all_peak[:, 1].max()),
        "param_checksums": digests,
        "rcclx": rx,
        "env": collective_env(),
        "libraries": mapped_nccl_libs(),
        "device": dev_name,
        "torch": torch.__version__,
        "nccl": nccl_version(ctx),
        "backend": dist.get_backend(),
        "host": platform.node(),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "failures": failures,
    }
    for s in steps:
        ctx.log(f"STEP {s['step']} loss={s['loss']} f32={','.join(s['rank_loss_f32_hex'])} ms={s['ms']:.3f}")
    if rx["loaded"]:
        ctx.log(f"INFO rcclx routes (process, calls): { {k: v['calls'] for k, v in rx['process_routes'].items()} } "
                f"forward reasons: {(rx['process_routes'].get('forwarded') or {}).get('reasons', {})}")
    if ctx.rank == 0:
        os.makedirs(args.out, exist_ok=True)
        base = os.path.join(args.out, f"train-{variant}-{label}")
        with open(base + ".json", "w") as f:
            json.dump(result, f, indent=1)
        with open(base + ".md", "w") as f:
            f.write(markdown(result))
    last = steps[-1]
    ctx.log(f"{'FAIL' if failures else 'PASS'} train variant={variant} label={label} steps={args.steps} "
            f"median_step_ms={result['median_step_ms']:.3f} final_loss={last['loss']} ({last['loss_hex']}) "
            f"rcclx={'yes' if rx['loaded'] else 'no'} kernel_calls={rx.get('kernel_calls', 0)} "
            f"lowp_calls={rx.get('lowp_calls', 0)}{': ' + '; '.join(failures) if failures else ''}")
    dist.barrier()
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
