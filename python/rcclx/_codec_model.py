"""The wire codecs of ``all_to_all_v_dynamic(..., wire=...)`` written in torch: the model that
``tests/gpu/a2av_dynamic.py`` and ``bench/moe_a2av.py`` compare rcclx's output with. Not API.

It follows the CPU model of the codecs (``gpu-tests/src/codec``: ``fp8.rs``, ``int8.rs``) step by
step, in f32 and on whatever device the tensors are on:

* rows of ``R`` elements, blocks of 128 starting at each row's first element (the last one short
  when ``R % 128 != 0``; the padding here is zeros, which change no amax and are dropped);
* FP8 E4M3: ``amax`` over the finite ``|x|`` of a block, ``scale = amax / 448`` and
  ``inv = 448 / amax`` (f32 divisions; 240 for FNUZ), codes = ``x * inv`` rounded to nearest
  even (saturating), non-finite elements the NaN code; ``amax < 1e-30``: scale 0, inv 0, and
  every finite element the code of ``x * 0``, a zero of its sign (FNUZ: +0). Value = ``code * scale`` in f32, rounded to the I/O type;
* INT8: 8 lanes of 16 values per block (a lane holds 16 bytes of the I/O type, so 4 f32 or 8
  bf16/fp16 consecutive elements, every 8th group), block scale ``S`` = ``amax / 127`` rounded up
  to a bf16 value, ``inv = 1 / S``, per lane the largest shift ``k <= 3`` with
  ``lane_amax * inv * 2^k <= 127``, code = ``round_even((x * inv) * 2^k)`` clamped to +-127,
  value = ``code * (S * 2^-k)``; NaN code for non-finite elements, zeros under the floor.

Divisions are tensor by tensor: torch on CUDA divides by a Python scalar as a multiplication by
its reciprocal, which is not the same f32 result.
"""

import math

import torch

BLOCK = 128
AMAX_FLOOR = 1e-30
#: format name -> (torch dtype, largest finite value, NaN code)
FP8 = {
    "e4m3fn": (torch.float8_e4m3fn, 448.0, 0x7F),
    "e4m3fnuz": (torch.float8_e4m3fnuz, 240.0, 0x80),
}
INT8_MAX = 127.0


def fp8_format(device=None):
    """The FP8 format of the GPU's codes: ``"e4m3fnuz"`` on gfx942, else ``"e4m3fn"`` (NVIDIA,
    gfx950)."""
    if getattr(torch.version, "hip", None):
        arch = getattr(torch.cuda.get_device_properties(device), "gcnArchName", "")
        if arch.startswith("gfx942"):
            return "e4m3fnuz"
    return "e4m3fn"


def _blocks(x):
    """``x`` as f32 ``[rows, blocks, 128]`` (each row padded with zeros) and the row length."""
    rows, r = x.shape[0], math.prod(x.shape[1:])
    x2 = x.reshape(rows, r).float()
    nb = -(-r // BLOCK)
    if nb * BLOCK != r:
        x2 = torch.nn.functional.pad(x2, (0, nb * BLOCK - r))
    return x2.reshape(rows, nb, BLOCK), r


def _unblock(y, r, like):
    """``[rows, blocks, 128]`` back to ``like``'s shape (the padding dropped)."""
    return y.reshape(y.shape[0], y.shape[1] * y.shape[2])[:, :r].reshape(like.shape)


def _const(like, value):
    return torch.full_like(like, value)


def fp8_encode(x, fmt="e4m3fn"):
    """``(codes, scales)`` of the rows of ``x`` (``[rows, *rest]``, any float type): codes uint8
    with ``x``'s shape, scales f32 ``[rows, ceil(row / 128)]``."""
    dtype8, fmax, nan_code = FP8[fmt]
    xb, r = _blocks(x)
    fin = torch.isfinite(xb)
    amax = torch.where(fin, xb.abs(), _const(xb, 0.0)).amax(dim=-1)
    zero = ~(amax >= AMAX_FLOOR)
    m = _const(amax, fmax)
    scale = torch.where(zero, _const(amax, 0.0), amax / m)
    inv = torch.where(zero, _const(amax, 0.0), m / torch.where(zero, _const(amax, 1.0), amax))
    y = (xb * inv[..., None]).clamp(-fmax, fmax)
    codes = y.to(dtype8).view(torch.uint8)
    if fmt == "e4m3fnuz":  # no negative zero: 0x80 is NaN
        codes = torch.where(codes == 0x80, torch.zeros_like(codes), codes)
    codes = torch.where(fin, codes, torch.full_like(codes, nan_code))
    return _unblock(codes, r, x), scale


def fp8_decode(codes, scales, dtype, fmt="e4m3fn"):
    """``code * scale`` in f32, rounded to ``dtype`` (``codes``: uint8 or FP8, ``[rows, *rest]``)."""
    dtype8 = FP8[fmt][0]
    cb, r = _blocks(codes.view(torch.uint8).view(dtype8))
    return _unblock(cb * scales[..., None], r, codes).to(dtype)


def fp8_roundtrip(x, fmt="e4m3fn"):
    """What a peer's rows of ``x`` decode to: ``fp8_decode(fp8_encode(x))`` in ``x``'s type."""
    codes, scales = fp8_encode(x, fmt)
    return fp8_decode(codes, scales, x.dtype, fmt)


def int8_roundtrip(x):
    """What a peer's rows of ``x`` (float32, float16 or bfloat16: the lanes follow the type)
    decode to, in ``x``'s type."""
    n = 16 // x.element_size()  # consecutive elements of a lane
    xb, r = _blocks(x)
    rows, nb = xb.shape[0], xb.shape[1]
    xl = xb.reshape(rows, nb, BLOCK // (8 * n), 8, n)  # [.., group, lane, element of the lane]
    fin = torch.isfinite(xl)
    lane_amax = torch.where(fin, xl.abs(), _const(xl, 0.0)).amax(dim=4).amax(dim=2)  # [rows, nb, 8]
    amax = lane_amax.amax(dim=-1)
    zero = ~(amax >= AMAX_FLOOR)
    bits = (amax / _const(amax, INT8_MAX)).view(torch.int32)
    bits = torch.where((bits & 0xFFFF) != 0, (bits & -0x10000) + 0x10000, bits)  # up to a bf16 value
    s = torch.where(zero, _const(amax, 1.0), bits.view(torch.float32))
    inv = _const(s, 1.0) / s
    t = lane_amax * inv[..., None]
    k = torch.where(t * 8.0 <= INT8_MAX, 3, torch.where(t * 4.0 <= INT8_MAX, 2, torch.where(t * 2.0 <= INT8_MAX, 1, 0)))
    up = torch.tensor([1.0, 2.0, 4.0, 8.0], device=x.device)[k]
    down = torch.tensor([1.0, 0.5, 0.25, 0.125], device=x.device)[k]
    y = (xl * inv[:, :, None, None, None]) * up[:, :, None, :, None]
    code = y.round().clamp(-INT8_MAX, INT8_MAX).to(torch.int32).float()  # an integer: never -0
    val = code * (s[..., None] * down)[:, :, None, :, None]
    val = torch.where(zero[:, :, None, None, None], _const(val, 0.0), val)
    val = torch.where(fin, val, _const(val, float("nan")))
    return _unblock(val.reshape(rows, nb, BLOCK), r, x).to(x.dtype)


def roundtrip(wire, x, fmt="e4m3fn"):
    """``x``'s rows as a peer decodes them (``wire``: ``"fp8"`` or ``"int8"``)."""
    if wire == "fp8":
        return fp8_roundtrip(x, fmt)
    if wire == "int8":
        return int8_roundtrip(x)
    raise ValueError(f"unknown wire {wire!r}")


def received(wire, rows, counts, me, fmt="e4m3fn"):
    """Decoded delivery: the packed rows received (``rows``, the plain exchange's result, from
    source 0, 1, ... with ``counts[p]`` rows each) as rcclx delivers them: rows from another rank
    through the codec, rank ``me``'s own rows exact."""
    out = rows.clone()
    off = 0
    for p, c in enumerate(counts):
        if c > 0 and p != me:
            out[off:off + c] = roundtrip(wire, rows[off:off + c], fmt)
        off += max(c, 0)
    return out


def block_amax(x):
    """The amax (over finite ``|x|``) of each element's block, f32 with ``x``'s shape."""
    xb, r = _blocks(x)
    a = torch.where(torch.isfinite(xb), xb.abs(), _const(xb, 0.0)).amax(dim=-1, keepdim=True)
    return _unblock(a.expand(xb.shape), r, x)


def same_values(got, want):
    """``(mismatches, max |got - want|)``: elements whose bits differ (NaN matches any NaN);
    the largest difference over the elements finite in both."""
    g, w = got.reshape(-1), want.reshape(-1)
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[g.element_size()]
    eq = g.view(ints) == w.view(ints)
    if g.is_floating_point():
        eq |= torch.isnan(g.float()) & torch.isnan(w.float())
        both = torch.isfinite(g.float()) & torch.isfinite(w.float())
        diff = (g.float() - w.float()).abs()
        diff = torch.where(both, diff, torch.zeros_like(diff))
        worst = float(diff.max()) if diff.numel() else 0.0
    else:
        worst = 0.0
    return int((~eq).sum()), worst
