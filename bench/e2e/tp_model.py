#!/usr/bin/env python3
"""Tensor-parallel Llama-3-8B-shaped model: end-to-end decode and prefill time through NCCL.

A Llama-3-8B-shaped decoder with random bf16 weights (hidden 4096, 32 heads, 8 KV heads,
head dim 128, intermediate 14336, 32 layers, vocab 128256), split over the ranks Megatron
style:

- QKV and gate/up are column-parallel (each rank holds heads/TP query heads, kv_heads/TP KV
  heads and intermediate/TP MLP columns);
- O and down are row-parallel; their partial sums are added by one all_reduce after the
  attention and one after the MLP: 2 x layers all-reduces per step (64 with 32 layers);
- the embedding is replicated and the LM head is split by vocabulary, so neither adds a
  collective (each rank keeps the logits of its vocabulary shard; they are gathered only in
  --check and for --save-output/--compare-output);
- RMSNorm, rotary embeddings (rotate-half, theta 500000), a KV cache per layer, and grouped-query
  attention.

Measurements (bf16, CUDA events, max over the ranks):

- decode: for each batch size (--batches, default 1,8,64), one token per sequence per step
  against a KV cache of --context positions (default 1024). The whole step (embedding, all
  layers, LM head, cache write, position advance) is captured in one CUDA graph and replayed,
  as serving engines do; time per step = time per generated token, over --steps replays
  (default 100) after --warmup replays. --no-graph runs the same step eagerly;
- prefill: --prefill-tokens tokens (default 4096) of one sequence, eager, time per prefill over
  --prefill-iters runs after 2 warm-up runs.

Output: one machine-readable line per measurement, then a summary, e.g.

  RESULT decode batch=8 ms_per_token=4.123 median_step_ms=4.120 tokens_per_s=1940.3 ...
  RESULT prefill tokens=4096 batch=1 ms_per_prefill=61.52 tokens_per_s=66580.0 ...

Accuracy of low-precision collectives (bench/e2e/run.sh): after the benchmarks, one more prefill
of the same tokens, eager:

- --save-output PATH: rank 0 saves its final hidden states (after the final RMSNorm, all tokens,
  bf16), the last token's logits (gathered over the vocabulary shards) and the top-1 token of every
  position (taken per shard and gathered: the [tokens, vocab] logits are never held). A second
  identical prefill is compared with the first (ref=repeat: run-to-run noise, 0 when deterministic);
- --compare-output PATH: compares this run's with the saved one (ref=saved), e.g. rcclx with
  RCCL_LOW_PRECISION_ENABLE=1 against the output saved with stock NCCL. From the CPU smoke test
  below, with --perturb:

  RESULT accuracy ref=saved perturb=1 input_rel_l2=5.703e-03 hidden_rel_l2=1.163e-02
      last_logits_rel_l2=1.130e-02 argmax_agree=0.9531 last_argmax_same=1 positions=64 ranks_same=1
      lowp=0 codec=-

  rel_l2 = ||out - saved|| / ||saved|| (hidden states: over all tokens); argmax_agree: fraction of
  positions whose top-1 token matches; last_argmax_same: that of the last position (0/1);
  ranks_same: 1 when every rank's replica of the hidden states has the same bits as rank 0's;
- --perturb (with --compare-output): the scale for that error, how far the model's output moves
  when its input moves by bf16 rounding size. Each element of the embedding output is multiplied
  by (1 + 2^-8 s) with s = +-1 at random (fixed seed) and rounded to bf16, i.e. moved to its
  neighbouring bf16 value (one unit in the last place; relative 2^-8 to 2^-7, input_rel_l2 about
  5.7e-3). Random signs, not a uniform factor: the input is already bf16, so most factors in
  [1 - 2^-8, 1 + 2^-8] would round back to the same value.

--check compares the TP model's logits with an independent single-GPU reference (plain
causal attention recomputed over the whole sequence, no KV cache, unsharded weights) on a tiny
configuration: prefill logits of every position, then decode steps, eager and replayed from a
CUDA graph. It prints CHECK lines and exits 1 when the relative L2 error of any step exceeds
--check-tol (bf16 noise is about 1e-2).

Usage (2 GPUs; bench/e2e/run.sh runs it for stock NCCL and for rcclx):

  python3 -m torch.distributed.run --standalone --nproc_per_node=2 bench/e2e/tp_model.py
  python3 -m torch.distributed.run --standalone --nproc_per_node=2 bench/e2e/tp_model.py --check
  python3 -m torch.distributed.run --standalone --nproc_per_node=2 bench/e2e/tp_model.py \\
      --mode decode --batches 8 --layers 8

Without torchrun it runs as one rank. --simulate-tp N then holds all N shards in this one
process and adds their partial sums itself instead of all_reduce, so the sharding can be checked
without GPUs: python3 bench/e2e/tp_model.py --check --simulate-tp 2 --device cpu, and the accuracy
flags (the unperturbed compare gives 0 error, the perturbed one about 1e-2):

  T="--simulate-tp 2 --device cpu --mode prefill --layers 2 --hidden 256 --heads 8 --kv-heads 4
     --intermediate 512 --vocab 1000 --prefill-tokens 64"
  python3 bench/e2e/tp_model.py $T --save-output /tmp/ref.pt
  python3 bench/e2e/tp_model.py $T --compare-output /tmp/ref.pt
  python3 bench/e2e/tp_model.py $T --compare-output /tmp/ref.pt --perturb
"""
import argparse
import ctypes
import math
import os
import statistics
import sys
import time
import zlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F

try:
    import torch.distributed as dist
except ImportError:  # pragma: no cover - builds without distributed support
    dist = None


@dataclass
class Config:
    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 8
    intermediate: int = 14336
    layers: int = 32
    vocab: int = 128256
    rope_theta: float = 500000.0
    eps: float = 1e-5

    @property
    def head_dim(self):
        return self.hidden // self.heads


# --check: small enough for any GPU (and a CPU), shaped like the real one (GQA group 4).
TINY = Config(hidden=512, heads=16, kv_heads=4, intermediate=1024, layers=3, vocab=1000)


# ------------------------------------------------------------------------------------------
# Communication: real all_reduce between processes, or the sum of the shards held here
# ------------------------------------------------------------------------------------------
class Comm:
    """distributed: one shard per process, torch.distributed (NCCL) all_reduce.
    simulated: all shards in this process; all_reduce = sum of the partials."""

    def __init__(self, tp, distributed):
        self.tp = tp
        self.distributed = distributed
        self.calls = 0

    def all_reduce(self, partials):
        self.calls += 1
        if self.distributed:
            (x,) = partials
            if self.tp > 1:
                dist.all_reduce(x)
            return x
        out = partials[0]
        for p in partials[1:]:
            out = out + p
        return out

    def gather_last_dim(self, parts):
        """Concatenate the per-rank vocabulary shards of the logits (only for --check)."""
        if not self.distributed:
            return torch.cat(parts, dim=-1)
        (x,) = parts
        if self.tp == 1:
            return x
        bufs = [torch.empty_like(x) for _ in range(self.tp)]
        dist.all_gather(bufs, x.contiguous())
        return torch.cat(bufs, dim=-1)


# ------------------------------------------------------------------------------------------
# Weights: deterministic per name, so every rank (and the reference) sees the same model
# ------------------------------------------------------------------------------------------
def gen(name, shape, scale, seed, device, offset=0.0):
    g = torch.Generator(device=device)
    g.manual_seed((seed * 1000003 + zlib.crc32(name.encode())) & 0x7FFFFFFFFFFFFFFF)
    w = torch.randn(shape, generator=g, device=device, dtype=torch.float32)
    w.mul_(scale).add_(offset)
    return w.to(torch.bfloat16)


class Shard:
    """The weights one tensor-parallel rank holds for the parallel parts (per layer)."""

    def __init__(self):
        self.wqkv, self.wo, self.wgu, self.wd = [], [], [], []
        self.lm_head = None


def build_weights(cfg, tp, ranks, seed, device, keep_full=False):
    """(replicated weights, [Shard for each rank in ranks], full weights or None)."""
    H, hd, nh, nkv, I = cfg.hidden, cfg.head_dim, cfg.heads, cfg.kv_heads, cfg.intermediate
    assert nh % tp == 0 and nkv % tp == 0 and I % tp == 0 and cfg.vocab % tp == 0, \
        f"heads {nh}, kv heads {nkv}, intermediate {I} and vocab {cfg.vocab} must divide by TP={tp}"
    assert nh % nkv == 0 and hd % 2 == 0
    qh, kvh, il, vl = nh // tp, nkv // tp, I // tp, cfg.vocab // tp
    rep = {"ln1": [], "ln2": []}
    full = {"wq": [], "wk": [], "wv": [], "wo": [], "wg": [], "wu": [], "wd": []} if keep_full else None
    shards = [Shard() for _ in ranks]
    for l in range(cfg.layers):
        p = f"layer{l}."
        rep["ln1"].append(gen(p + "ln1", (H,), 0.1, seed, device, 1.0))
        rep["ln2"].append(gen(p + "ln2", (H,), 0.1, seed, device, 1.0))
        wq = gen(p + "wq", (nh * hd, H), H ** -0.5, seed, device)
        wk = gen(p + "wk", (nkv * hd, H), H ** -0.5, seed, device)
        wv = gen(p + "wv", (nkv * hd, H), H ** -0.5, seed, device)
        wo = gen(p + "wo", (H, nh * hd), (nh * hd) ** -0.5, seed, device)
        for s, r in zip(shards, ranks):
            s.wqkv.append(torch.cat([wq[r * qh * hd:(r + 1) * qh * hd], wk[r * kvh * hd:(r + 1) * kvh * hd],
                                     wv[r * kvh * hd:(r + 1) * kvh * hd]]).contiguous())
            s.wo.append(wo[:, r * qh * hd:(r + 1) * qh * hd].contiguous())
        if keep_full:
            full["wq"].append(wq), full["wk"].append(wk), full["wv"].append(wv), full["wo"].append(wo)
        del wq, wk, wv, wo
        wg = gen(p + "wg", (I, H), H ** -0.5, seed, device)
        wu = gen(p + "wu", (I, H), H ** -0.5, seed, device)
        for s, r in zip(shards, ranks):
            s.wgu.append(torch.cat([wg[r * il:(r + 1) * il], wu[r * il:(r + 1) * il]]).contiguous())
        if keep_full:
            full["wg"].append(wg), full["wu"].append(wu)
        del wg, wu
        wd = gen(p + "wd", (H, I), I ** -0.5, seed, device)
        for s, r in zip(shards, ranks):
            s.wd.append(wd[:, r * il:(r + 1) * il].contiguous())
        if keep_full:
            full["wd"].append(wd)
        del wd
    rep["embed"] = gen("embed", (cfg.vocab, H), 1.0, seed, device)
    rep["ln_f"] = gen("ln_f", (H,), 0.1, seed, device, 1.0)
    lm = gen("lm_head", (cfg.vocab, H), H ** -0.5, seed, device)
    for s, r in zip(shards, ranks):
        s.lm_head = lm[r * vl:(r + 1) * vl].contiguous()
    if keep_full:
        full["lm_head"] = lm
    del lm
    return rep, shards, full


def rms_norm(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rope_tables(cfg, positions, device):
    hd = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2, device=device, dtype=torch.float32) / hd))
    ang = torch.arange(positions, device=device, dtype=torch.float32)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], dim=-1)  # rotate-half layout: [theta_0..theta_{d/2-1}] twice
    return ang.cos(), ang.sin()


def apply_rope(x, cos, sin):
    """x [B, heads, T, hd]; cos/sin [T, hd]. Rotate-half (x1, x2) -> (x1 c - x2 s, x2 c + x1 s)."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x.float() * cos + rot.float() * sin).to(x.dtype)


# ------------------------------------------------------------------------------------------
# The tensor-parallel model
# ------------------------------------------------------------------------------------------
class TPModel:
    def __init__(self, cfg, comm, rep, shards, device, max_pos):
        self.cfg, self.comm, self.rep, self.shards, self.device = cfg, comm, rep, shards, device
        self.tp = comm.tp
        self.qh, self.kvh = cfg.heads // self.tp, cfg.kv_heads // self.tp
        self.cos, self.sin = rope_tables(cfg, max_pos, device)
        self.caches = None  # [shard][layer] = (k, v), each [B, kvh, S, hd]
        self.positions = None  # arange(S), for the decode mask

    def alloc_cache(self, batch, length, fill_random=False):
        self.caches = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        shape = (batch, self.kvh, length, self.cfg.head_dim)
        self.caches = []
        for _ in self.shards:
            per = []
            for _ in range(self.cfg.layers):
                k = torch.empty(shape, dtype=torch.bfloat16, device=self.device)
                v = torch.empty(shape, dtype=torch.bfloat16, device=self.device)
                if fill_random:  # stands for the context already in the cache
                    k.normal_()
                    v.normal_()
                else:
                    k.zero_()
                    v.zero_()
                per.append((k, v))
            self.caches.append(per)
        self.positions = torch.arange(length, device=self.device)

    def _attention_prefill(self, q, k, v):
        try:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        except TypeError:  # torch without enable_gqa
            g = q.shape[1] // k.shape[1]
            return F.scaled_dot_product_attention(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1),
                                                  is_causal=True)

    def _attention_decode(self, q, kc, vc, pos):
        """q [B, qh, 1, hd] against the whole cache [B, kvh, S, hd], positions > pos masked."""
        B, qh, _, hd = q.shape
        kvh, S = kc.shape[1], kc.shape[2]
        qg = q.reshape(B, kvh, qh // kvh, hd)  # local query head j uses local kv head j // group
        s = torch.matmul(qg, kc.transpose(-1, -2)).float() * (hd ** -0.5)  # [B, kvh, g, S]
        s = s.masked_fill((self.positions > pos).view(1, 1, 1, S), float("-inf"))
        p = torch.softmax(s, dim=-1).to(q.dtype)
        return torch.matmul(p, vc).reshape(B, qh, 1, hd)

    def forward(self, tokens, pos=None, all_logits=False, inputs_embeds=None, return_hidden=False):
        """tokens [B, T]. Prefill (T > 1): positions 0..T-1, cache written at 0..T-1.
        Decode (T == 1): pos is a 1-element long tensor on the device (CUDA-graph friendly).
        Returns the logits shards (one per local shard), [B, V/TP] of the last position, or
        [B, T, V/TP] with all_logits; with return_hidden, the final-normed hidden states of every
        position [B, T, H] instead (replicated). inputs_embeds [B, T, H] replaces the embedding of
        tokens (--perturb)."""
        cfg = self.cfg
        B, T = tokens.shape
        hd = cfg.head_dim
        decode = T == 1 and pos is not None
        x = F.embedding(tokens, self.rep["embed"]) if inputs_embeds is None else inputs_embeds  # [B, T, H]
        if decode:
            cos, sin = self.cos.index_select(0, pos), self.sin.index_select(0, pos)
        else:
            cos, sin = self.cos[:T], self.sin[:T]
        q_dim, kv_dim = self.qh * hd, self.kvh * hd
        for l in range(cfg.layers):
            h = rms_norm(x, self.rep["ln1"][l], cfg.eps)
            partials = []
            for si, sh in enumerate(self.shards):
                qkv = F.linear(h, sh.wqkv[l])
                q, k, v = qkv.split([q_dim, kv_dim, kv_dim], dim=-1)
                q = apply_rope(q.view(B, T, self.qh, hd).transpose(1, 2), cos, sin)
                k = apply_rope(k.view(B, T, self.kvh, hd).transpose(1, 2), cos, sin)
                v = v.view(B, T, self.kvh, hd).transpose(1, 2)
                kc, vc = self.caches[si][l]
                if decode:
                    kc.index_copy_(2, pos, k)
                    vc.index_copy_(2, pos, v)
                    a = self._attention_decode(q, kc, vc, pos)
                else:
                    kc[:, :, :T].copy_(k)
                    vc[:, :, :T].copy_(v)
                    a = self._attention_prefill(q, k, v)
                a = a.transpose(1, 2).reshape(B, T, q_dim)
                partials.append(F.linear(a, sh.wo[l]))
            x = x + self.comm.all_reduce(partials)  # row-parallel O
            h = rms_norm(x, self.rep["ln2"][l], cfg.eps)
            partials = []
            for sh in self.shards:
                gate, up = F.linear(h, sh.wgu[l]).chunk(2, dim=-1)
                partials.append(F.linear(F.silu(gate) * up, sh.wd[l]))
            x = x + self.comm.all_reduce(partials)  # row-parallel down
        if return_hidden:
            return rms_norm(x, self.rep["ln_f"], cfg.eps)
        if not all_logits:
            x = x[:, -1]
        x = rms_norm(x, self.rep["ln_f"], cfg.eps)
        return [F.linear(x, sh.lm_head) for sh in self.shards]


# ------------------------------------------------------------------------------------------
# Independent single-device reference (unsharded weights, no KV cache, plain attention)
# ------------------------------------------------------------------------------------------
def reference_logits(cfg, rep, full, tokens):
    """Logits [B, L, V] (float32) of every position of tokens [B, L], recomputed from scratch."""
    B, L = tokens.shape
    hd, nh, nkv = cfg.head_dim, cfg.heads, cfg.kv_heads
    dev = tokens.device
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2, device=dev, dtype=torch.float32) / hd))
    ang = torch.arange(L, device=dev, dtype=torch.float32)[:, None] * inv[None, :]  # [L, hd/2]
    c, s = ang.cos(), ang.sin()

    def rope(t):  # [B, h, L, hd]
        a, b = t[..., :hd // 2].float(), t[..., hd // 2:].float()
        return torch.cat([a * c - b * s, b * c + a * s], dim=-1).to(t.dtype)

    causal = torch.ones(L, L, dtype=torch.bool, device=dev).tril()
    x = rep["embed"][tokens]
    for l in range(cfg.layers):
        h = rms_norm(x, rep["ln1"][l], cfg.eps)
        q = rope((h @ full["wq"][l].t()).view(B, L, nh, hd).transpose(1, 2))
        k = rope((h @ full["wk"][l].t()).view(B, L, nkv, hd).transpose(1, 2))
        v = (h @ full["wv"][l].t()).view(B, L, nkv, hd).transpose(1, 2)
        k = k.repeat_interleave(nh // nkv, dim=1)
        v = v.repeat_interleave(nh // nkv, dim=1)
        sc = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(hd)
        p = torch.softmax(sc.masked_fill(~causal, float("-inf")), dim=-1)
        o = (p @ v.float()).to(x.dtype).transpose(1, 2).reshape(B, L, nh * hd)
        x = x + o @ full["wo"][l].t()
        h = rms_norm(x, rep["ln2"][l], cfg.eps)
        x = x + (F.silu(h @ full["wg"][l].t()) * (h @ full["wu"][l].t())) @ full["wd"][l].t()
    return (rms_norm(x, rep["ln_f"], cfg.eps) @ full["lm_head"].t()).float()


# ------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------
class Ctx:
    def __init__(self, args):
        self.distributed = dist is not None and "WORLD_SIZE" in os.environ and args.simulate_tp == 0
        if self.distributed:
            self.rank = int(os.environ["RANK"])
            self.world = int(os.environ["WORLD_SIZE"])
            local = int(os.environ.get("LOCAL_RANK", self.rank))
            if args.device == "cpu":  # gloo: only to test this script's distributed code paths
                self.device = torch.device("cpu")
                dist.init_process_group("gloo")
            else:
                self.device = torch.device("cuda", local)
                torch.cuda.set_device(self.device)
                # device_id makes the init eager (the communicator exists before the first call).
                dist.init_process_group("nccl", device_id=self.device)
            self.tp = self.world
            self.ranks = [self.rank]
        else:
            self.rank, self.world = 0, 1
            want = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
            self.device = torch.device(want)
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
            self.tp = max(args.simulate_tp, 1)
            self.ranks = list(range(self.tp))
        self.cuda = self.device.type == "cuda"

    def log(self, *a):
        if self.rank == 0:
            print(*a, flush=True)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def max_over_ranks(self, v):
        if not self.distributed or self.world == 1:
            return v
        t = torch.tensor([v], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    def barrier(self):
        self.sync()
        if self.distributed and self.world > 1:
            if self.cuda:
                dist.barrier(device_ids=[self.device.index])
            else:
                dist.barrier()
        self.sync()


class Timer:
    """CUDA events on the current stream (wall clock on the CPU)."""

    def __init__(self, cuda):
        self.cuda = cuda

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def ms(self, a, b):
        if self.cuda:
            return a.elapsed_time(b)
        return (b - a) * 1e3


def rcclx_route_stats():
    """{route: calls} when rcclx is loaded in this process (LD_PRELOAD), else None."""
    try:
        lib = ctypes.CDLL(None)
        if not hasattr(lib, "rcclxGetProcessRouteStats"):
            return None
        lib.rcclxRouteName.restype = ctypes.c_char_p
        count = ctypes.c_int(0)
        if lib.rcclxGetProcessRouteStats(None, 0, ctypes.byref(count)) != 0:
            return None
        arr = (ctypes.c_uint64 * (2 * count.value))()
        if lib.rcclxGetProcessRouteStats(arr, count.value, ctypes.byref(count)) != 0:
            return None
        return {lib.rcclxRouteName(i).decode(): arr[2 * i] for i in range(count.value) if arr[2 * i]}
    except (OSError, AttributeError):
        return None


def mapped_nccl_libs():
    """Paths of the NCCL-API libraries mapped in this process (stock libnccl, librcclx)."""
    found = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                name = os.path.basename(path)
                if ("libnccl" in name or "librcclx" in name or "librccl" in name) and path not in found:
                    found.append(path)
    except OSError:
        pass
    return ",".join(found) or "-"


def nccl_version():
    try:
        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v)
    except (RuntimeError, AttributeError):
        return "?"


def make_decode_step(model, tokens, pos, advance):
    """The decode step as a closure over static buffers (what a CUDA graph captures)."""
    def step():
        out = model.forward(tokens.view(-1, 1), pos=pos)
        if advance:
            pos.add_(1)
        return out
    return step


def capture(ctx, step, warmup=3):
    """Warm up on a side stream (NCCL, cuBLAS workspaces), then capture step() in a graph."""
    s = torch.cuda.Stream(device=ctx.device)
    s.wait_stream(torch.cuda.current_stream(ctx.device))
    with torch.cuda.stream(s):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream(ctx.device).wait_stream(s)
    ctx.sync()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step()
    ctx.sync()
    return g, out


# ------------------------------------------------------------------------------------------
# Benchmarks
# ------------------------------------------------------------------------------------------
def bench_decode(ctx, args, model, batch, results):
    ctx_len = args.context
    length = ctx_len + max(args.steps, args.warmup) + 8
    model.alloc_cache(batch, length, fill_random=True)
    gen_t = torch.Generator(device=ctx.device).manual_seed(7 + batch)
    tokens = torch.randint(0, model.cfg.vocab, (batch,), generator=gen_t, device=ctx.device)
    pos = torch.full((1,), ctx_len, dtype=torch.long, device=ctx.device)
    step = make_decode_step(model, tokens, pos, advance=True)
    graph = ctx.cuda and not args.no_graph
    if graph:
        g, _ = capture(ctx, step)
        run = g.replay
    else:
        run = step
    pos.fill_(ctx_len)
    for _ in range(args.warmup):
        run()
    pos.fill_(ctx_len)
    ctx.barrier()
    timer = Timer(ctx.cuda)
    marks = [timer.mark()]
    for _ in range(args.steps):
        run()
        marks.append(timer.mark())
    ctx.sync()
    per_step = [timer.ms(a, b) for a, b in zip(marks, marks[1:])]
    total = timer.ms(marks[0], marks[-1]) / args.steps
    ms = ctx.max_over_ranks(total)
    med = ctx.max_over_ranks(statistics.median(per_step))
    p90 = ctx.max_over_ranks(sorted(per_step)[int(0.9 * (len(per_step) - 1))])
    results.append(("decode", batch, ms))
    ctx.log(f"RESULT decode batch={batch} ms_per_token={ms:.4f} median_step_ms={med:.4f} p90_step_ms={p90:.4f} "
            f"tokens_per_s={batch * 1e3 / ms:.1f} layers={model.cfg.layers} tp={ctx.tp} context={ctx_len} "
            f"steps={args.steps} graph={int(graph)} allreduce_bytes={batch * model.cfg.hidden * 2}")
    if graph:
        del g
    model.caches = None


def prefill_input(ctx, model, T):
    """The prefill's tokens [1, T]: the same in every run (and in --save-output/--compare-output)."""
    gen_t = torch.Generator(device=ctx.device).manual_seed(11)
    return torch.randint(0, model.cfg.vocab, (1, T), generator=gen_t, device=ctx.device)


def lowp_env():
    """The low-precision settings rcclx reads at communicator creation, for the RESULT lines."""
    on = os.environ.get("RCCL_LOW_PRECISION_ENABLE", "0")
    codec = os.environ.get("RCCLX_LOW_PRECISION_CODEC", "fp8") if on not in ("", "0") else "-"
    return f"lowp={on} codec={codec}"


def bench_prefill(ctx, args, model, results):
    T = args.prefill_tokens
    model.alloc_cache(1, T)
    tokens = prefill_input(ctx, model, T)
    for _ in range(2):
        model.forward(tokens)
    ctx.barrier()
    timer = Timer(ctx.cuda)
    times = []
    for _ in range(args.prefill_iters):
        a = timer.mark()
        model.forward(tokens)
        b = timer.mark()
        ctx.sync()
        times.append(timer.ms(a, b))
    ms = ctx.max_over_ranks(statistics.mean(times))
    best = ctx.max_over_ranks(min(times))
    results.append(("prefill", T, ms))
    ctx.log(f"RESULT prefill tokens={T} batch=1 ms_per_prefill={ms:.3f} min_ms={best:.3f} "
            f"tokens_per_s={T * 1e3 / ms:.1f} layers={model.cfg.layers} tp={ctx.tp} iters={args.prefill_iters} "
            f"allreduce_bytes={T * model.cfg.hidden * 2} {lowp_env()}")
    model.caches = None


# ------------------------------------------------------------------------------------------
# --save-output / --compare-output / --perturb: the prefill's output, to measure the error of
# low-precision collectives against exact ones, and the model's own sensitivity as a scale
# ------------------------------------------------------------------------------------------
PERTURB_REL = 2.0 ** -8  # bf16 unit roundoff (8 significand bits)
PERTURB_SEED = 17


def perturb_bf16(x):
    """x * (1 + 2^-8 s), s = +-1 at random (fixed seed), rounded back to bf16: every element moves to
    a neighbouring bf16 value, one unit in the last place up or down (relative 2^-8 to 2^-7), the
    smallest change bf16 can represent. Random signs rather than a uniform factor in [-1, 1]: x is
    already bf16, so most uniform factors would round back to x and leave a sparse perturbation.
    Returns (perturbed x, relative L2 of the change)."""
    g = torch.Generator(device=x.device).manual_seed(PERTURB_SEED)
    s = torch.randint(0, 2, x.shape, generator=g, device=x.device).float().mul_(2).sub_(1)
    y = (x.float() * (1 + PERTURB_REL * s)).to(x.dtype)
    return y, ((y.float() - x.float()).norm() / x.float().norm()).item()


def prefill_output(model, tokens, inputs_embeds=None, chunk=512):
    """One prefill of tokens [1, T]: (final-normed hidden states [T, H], last-token logits [V],
    top-1 token of every position [T], whether every rank's hidden states have the same bits), on the
    CPU. The top-1 is taken per vocabulary shard, chunk positions at a time, and only the shards'
    maxima are gathered: the [T, V] logits never exist."""
    comm = model.comm

    def gather(parts):  # as bytes: low precision (float types only) must not touch them
        dt = parts[0].dtype
        return comm.gather_last_dim([p.contiguous().view(torch.uint8) for p in parts]).view(dt)

    model.alloc_cache(1, tokens.shape[1])
    h = model.forward(tokens, inputs_embeds=inputs_embeds, return_hidden=True)[0]  # [T, H], replicated
    # The ranks hold replicas of h: exact all-reduces leave the same bits on every rank; a codec
    # that decoded differently per rank would not. A position-weighted checksum of the bits says.
    bits = h.contiguous().view(torch.int16).to(torch.int64).flatten()
    w = torch.arange(bits.numel(), device=bits.device) % 65521 + 1
    sums = comm.gather_last_dim([torch.stack([bits.sum(), (bits * w).sum()])]).view(-1, 2)
    ranks_same = bool((sums == sums[0]).all())
    del bits, w
    last = gather([F.linear(h[-1], sh.lm_head) for sh in model.shards])  # [V]
    vals, idxs = [], []
    for sh in model.shards:
        v, i = [], []
        for c in range(0, h.shape[0], chunk):
            lg = F.linear(h[c:c + chunk], sh.lm_head)  # [chunk, V/TP]
            j = lg.argmax(-1, keepdim=True)
            v.append(lg.gather(-1, j))
            i.append(j)
        vals.append(torch.cat(v))
        idxs.append(torch.cat(i))
    vals, idxs = gather(vals), comm.gather_last_dim(idxs)  # [T, TP], in vocabulary order
    best = vals.argmax(-1, keepdim=True)  # ties -> lower shard, as argmax over the whole vocabulary
    top1 = idxs.gather(-1, best)[:, 0] + best[:, 0] * model.shards[0].lm_head.shape[0]
    model.caches = None
    return h.cpu(), last.cpu(), top1.cpu(), ranks_same


def accuracy_line(ref_kind, got, ref, input_rel):
    h, lg, t, same = got
    rh, rl, rt = ref[:3]

    def rel(a, b):
        return ((a.double() - b.double()).norm() / b.double().norm()).item()

    return (f"RESULT accuracy ref={ref_kind} perturb={int(input_rel > 0)} input_rel_l2={input_rel:.3e} "
            f"hidden_rel_l2={rel(h, rh):.3e} last_logits_rel_l2={rel(lg, rl):.3e} "
            f"argmax_agree={(t == rt).double().mean().item():.4f} last_argmax_same={int(t[-1] == rt[-1])} "
            f"positions={t.numel()} ranks_same={int(same)} {lowp_env()}")


DECODE_OUTPUT_STEPS = 8


def decode_output(ctx, model, tokens, steps=DECODE_OUTPUT_STEPS):
    """Decode logits as serving runs them: a prefill of tokens [1, T] fills the KV cache, then
    `steps` decode steps replayed from one CUDA graph (eagerly on the CPU), each fed the next
    token of a fixed sequence (teacher-forced, so runs compare position by position). Returns the
    gathered logits of every step [steps, V] in fp32, on the CPU."""
    T = tokens.shape[1]
    model.alloc_cache(1, T + steps + 8)
    model.forward(tokens)
    gen_t = torch.Generator(device=ctx.device).manual_seed(13)
    feed = torch.randint(0, model.cfg.vocab, (steps,), generator=gen_t, device=ctx.device)
    tok = feed[:1].clone()
    pos = torch.full((1,), T, dtype=torch.long, device=ctx.device)
    step = make_decode_step(model, tok, pos, advance=False)
    if ctx.cuda:
        # capture() runs the step 3 times to warm up: those write position T, which the first
        # replay writes again with the same token.
        g, out = capture(ctx, step)
        run = lambda: (g.replay(), out)[1]  # noqa: E731
    else:
        run = step
    logits = []
    for i in range(steps):
        tok.copy_(feed[i:i + 1])
        pos.fill_(T + i)
        logits.append(model.comm.gather_last_dim(run())[0].float().clone())
    model.caches = None
    return torch.stack(logits).cpu()


def decode_line(got, ref):
    rel = ((got.double() - ref.double()).norm() / ref.double().norm()).item()
    agree = (got.argmax(-1) == ref.argmax(-1)).double().mean().item()
    return f"RESULT decode-accuracy ref=saved steps={got.shape[0]} decode_logits_rel_l2={rel:.3e} decode_argmax_agree={agree:.4f}"


def run_output(ctx, args, model):
    """--save-output: rank 0 saves the prefill's output and the logits of decode steps replayed
    from a CUDA graph (`decode_output`), and compares a second identical prefill with the saved
    one (ref=repeat: the run-to-run noise of the exact path, 0 when deterministic).
    --compare-output: rank 0 compares this run's prefill output and decode logits with the saved
    ones (ref=saved); with --perturb the embedding output is perturbed first (perturb_bf16; the
    decode steps are not perturbed, and not compared)."""
    T = args.prefill_tokens
    tokens = prefill_input(ctx, model, T)
    embeds, input_rel = None, 0.0
    if args.perturb:
        embeds, input_rel = perturb_bf16(F.embedding(tokens, model.rep["embed"]))
    meta = {"tokens": T, "seed": args.seed, "config": dict(model.cfg.__dict__)}
    got = prefill_output(model, tokens, embeds)
    decoded = None if args.perturb else decode_output(ctx, model, tokens)
    if args.compare_output and ctx.rank == 0:
        ref = torch.load(args.compare_output, map_location="cpu")
        if ref["meta"] != meta:
            raise SystemExit(f"--compare-output {args.compare_output}: saved for {ref['meta']}, this run is {meta}")
        ctx.log(accuracy_line("saved", got, (ref["hidden"], ref["last_logits"], ref["top1"]), input_rel))
        if decoded is not None and "decode_logits" in ref:
            ctx.log(decode_line(decoded, ref["decode_logits"]))
    if args.save_output:
        again = prefill_output(model, tokens, embeds)
        if ctx.rank == 0:
            torch.save({"meta": meta, "hidden": got[0], "last_logits": got[1], "top1": got[2],
                        "decode_logits": decoded}, args.save_output)
            ctx.log(f"INFO output saved: {args.save_output} (hidden {tuple(got[0].shape)} {got[0].dtype}, "
                    f"last-token logits {tuple(got[1].shape)}, top-1 of {got[2].numel()} positions, "
                    f"logits of {DECODE_OUTPUT_STEPS} decode steps)")
            ctx.log(accuracy_line("repeat", again, got, input_rel))


# ------------------------------------------------------------------------------------------
# --check: TP model against the single-device reference
# ------------------------------------------------------------------------------------------
def run_check(ctx, args, cfg):
    B, T, steps = 2, 8, 4
    keep = ctx.rank == 0
    rep, shards, full = build_weights(cfg, ctx.tp, ctx.ranks, args.seed, ctx.device, keep_full=keep)
    comm = Comm(ctx.tp, ctx.distributed)
    model = TPModel(cfg, comm, rep, shards, ctx.device, T + steps + 8)
    gen_t = torch.Generator(device=ctx.device).manual_seed(5)
    seq = torch.randint(0, cfg.vocab, (B, T + steps), generator=gen_t, device=ctx.device)

    model.alloc_cache(B, T + steps + 8)
    got = [comm.gather_last_dim(model.forward(seq[:, :T], all_logits=True)).float()]  # [B, T, V]
    tok = torch.zeros(B, dtype=torch.long, device=ctx.device)
    pos = torch.zeros(1, dtype=torch.long, device=ctx.device)
    step = make_decode_step(model, tok, pos, advance=False)
    graph = None
    kinds = []
    for i in range(steps):
        tok.copy_(seq[:, T + i])
        pos.fill_(T + i)
        use_graph = ctx.cuda and not args.no_graph and i >= steps // 2
        if use_graph and graph is None:
            graph, out = capture(ctx, step)  # warm-up rewrites position T+i with the same values
            tok.copy_(seq[:, T + i])
            pos.fill_(T + i)
        if use_graph:
            graph.replay()
            logits = out
        else:
            logits = step()
        kinds.append("graph" if use_graph else "eager")
        got.append(comm.gather_last_dim(logits).float())
    ctx.sync()

    ok = True
    if keep:
        ref = reference_logits(cfg, rep, full, seq)  # [B, T + steps, V]
        names = ["prefill(all positions)"] + [f"decode step {i} ({kinds[i]})" for i in range(steps)]
        refs = [ref[:, :T]] + [ref[:, T + i] for i in range(steps)]
        for name, a, r in zip(names, got, refs):
            rel = ((a - r).norm() / r.norm()).item()
            maxabs = (a - r).abs().max().item() / r.abs().max().item()
            agree = (a.argmax(-1) == r.argmax(-1)).float().mean().item()
            good = rel <= args.check_tol and math.isfinite(rel)
            ok &= good
            print(f"CHECK {name}: rel_l2={rel:.3e} max_abs/max_ref={maxabs:.3e} argmax_agree={agree:.3f} "
                  f"{'PASS' if good else 'FAIL'}", flush=True)
        print(f"CHECK {'PASS' if ok else 'FAIL'}: TP={ctx.tp} ({'processes' if ctx.distributed else 'simulated'}) "
              f"vs single-device reference, {cfg.layers} layers, hidden {cfg.hidden}, heads {cfg.heads}/"
              f"{cfg.kv_heads}, tol {args.check_tol}, {comm.calls} all_reduce calls", flush=True)
    if ctx.distributed and ctx.world > 1:
        flag = torch.tensor([0 if ok else 1], device=ctx.device)
        dist.broadcast(flag, 0)
        ok = flag.item() == 0
    return ok


# ------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", default="decode,prefill", help="comma list: decode, prefill (default both)")
    ap.add_argument("--batches", default="1,8,64", help="decode batch sizes (default 1,8,64)")
    ap.add_argument("--steps", type=int, default=100, help="timed decode steps per batch size (100)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed decode steps before timing (10)")
    ap.add_argument("--context", type=int, default=1024, help="positions already in the KV cache for decode (1024)")
    ap.add_argument("--no-graph", action="store_true", help="decode eagerly instead of replaying a CUDA graph")
    ap.add_argument("--prefill-tokens", type=int, default=4096, help="prefill length, batch 1 (4096)")
    ap.add_argument("--prefill-iters", type=int, default=5, help="timed prefills (5)")
    ap.add_argument("--layers", type=int, default=32, help="decoder layers (32; fewer for a quicker run)")
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--intermediate", type=int, default=14336)
    ap.add_argument("--vocab", type=int, default=128256, help="vocabulary (128256; smaller saves memory and time)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--check", action="store_true",
                    help="compare TP logits with a single-device reference on a tiny config and exit")
    ap.add_argument("--check-tol", type=float, default=3e-2, help="max relative L2 error for --check (3e-2)")
    ap.add_argument("--simulate-tp", type=int, default=0,
                    help="one process holds N shards and sums their partials (no torch.distributed)")
    ap.add_argument("--save-output", metavar="PATH",
                    help="after the benchmarks, save (rank 0) the output of one prefill: final hidden states, "
                         "last-token logits, top-1 token of every position")
    ap.add_argument("--compare-output", metavar="PATH",
                    help="after the benchmarks, compare one prefill's output with one saved by --save-output "
                         "(RESULT accuracy line)")
    ap.add_argument("--perturb", action="store_true",
                    help="with --compare-output: move each element of the embedding output by one bf16 unit "
                         "in the last place (x * (1 +- 2^-8), random signs) before that prefill")
    ap.add_argument("--device", choices=("cuda", "cpu"),
                    help="default cuda (under torchrun: cuda:LOCAL_RANK with NCCL; cpu there uses gloo, to "
                         "test the script only); without torchrun: cuda if available")
    args = ap.parse_args()
    if args.perturb and not args.compare_output:
        ap.error("--perturb needs --compare-output")
    if args.compare_output and not os.path.exists(args.compare_output):
        ap.error(f"--compare-output {args.compare_output}: no such file")

    ctx = Ctx(args)
    if args.check:
        cfg = Config(**{**TINY.__dict__, "layers": min(args.layers, TINY.layers)})
    else:
        cfg = Config(hidden=args.hidden, heads=args.heads, kv_heads=args.kv_heads,
                     intermediate=args.intermediate, layers=args.layers, vocab=args.vocab)
    ctx.log(f"INFO torch {torch.__version__} device {ctx.device} "
            f"{torch.cuda.get_device_name(ctx.device) if ctx.cuda else 'cpu'} tp={ctx.tp} "
            f"{'torch.distributed' if ctx.distributed else ('simulated' if ctx.tp > 1 else 'single rank')} "
            f"nccl={nccl_version() if ctx.cuda else '-'} "
            f"rcclx={'loaded' if rcclx_route_stats() is not None else 'no'}")
    ctx.log(f"INFO config hidden={cfg.hidden} heads={cfg.heads} kv_heads={cfg.kv_heads} head_dim={cfg.head_dim} "
            f"intermediate={cfg.intermediate} layers={cfg.layers} vocab={cfg.vocab} dtype=bf16 "
            f"allreduces_per_step={2 * cfg.layers}")
    torch.manual_seed(args.seed)
    rc = 0
    with torch.inference_mode():
        if args.check:
            rc = 0 if run_check(ctx, args, cfg) else 1
        else:
            t0 = time.time()
            rep, shards, _ = build_weights(cfg, ctx.tp, ctx.ranks, args.seed, ctx.device)
            modes = [m.strip() for m in args.mode.split(",") if m.strip()]
            bad = [m for m in modes if m not in ("decode", "prefill")]
            if bad:
                ap.error(f"unknown --mode {bad}")
            batches = [int(b) for b in args.batches.split(",") if b.strip()]
            max_pos = max(args.prefill_tokens + DECODE_OUTPUT_STEPS + 8, args.context + max(args.steps, args.warmup) + 8)
            model = TPModel(cfg, Comm(ctx.tp, ctx.distributed), rep, shards, ctx.device, max_pos)
            ctx.sync()
            ctx.log(f"INFO weights built in {time.time() - t0:.1f} s "
                    f"({sum(w.numel() for s in shards for w in s.wqkv + s.wo + s.wgu + s.wd) / 1e9 / len(shards):.2f} "
                    f"G parallel parameters per rank)")
            results = []
            if "decode" in modes:
                for b in batches:
                    bench_decode(ctx, args, model, b, results)
            if "prefill" in modes:
                bench_prefill(ctx, args, model, results)
            if args.save_output or args.compare_output:
                run_output(ctx, args, model)
            ctx.log(f"SUMMARY tp={ctx.tp} layers={cfg.layers} hidden={cfg.hidden} {lowp_env()} "
                    f"rcclx={'yes' if rcclx_route_stats() is not None else 'no'}")
            for kind, n, ms in results:
                if kind == "decode":
                    ctx.log(f"SUMMARY   decode  batch {n:>4}: {ms:9.3f} ms/token  ({n * 1e3 / ms:9.1f} tokens/s)")
                else:
                    ctx.log(f"SUMMARY   prefill {n:>5} tokens: {ms:9.3f} ms/prefill ({n * 1e3 / ms:9.1f} tokens/s)")
    ctx.log(f"INFO libraries mapped (rank 0): {mapped_nccl_libs()}")
    stats = rcclx_route_stats()
    if stats is not None:
        ctx.log(f"INFO rcclx routes (rank 0, calls): {stats}")
    if ctx.distributed:
        ctx.barrier()
        dist.destroy_process_group()
    return rc


if __name__ == "__main__":
    sys.exit(main())
