//! The low-precision block codecs on the CPU, FP8 E4M3 and INT8: the reference the GPU kernels
//! (`hip_kernels/codec.cuh`, which states the definition too) implement bit for bit, reference models of the four low-precision
//! collectives, and their error bounds.
//!
//! Layer: leaf (pure arithmetic). Depends only on [`rcclx::kernels::Fp8Format`] and `half`.
//!
//! Both codecs cut a range into blocks of [`BLOCK`] = 128 consecutive elements from its start
//! (the last block may be shorter) and give each block one 32-bit word (FP8: an f32 scale;
//! INT8: a "meta" word), so both move 1 + 1/32 bytes per element. [`Codec`] names one; the
//! functions that take a codec also take the I/O type ([`Io`]), which decides INT8's lane
//! layout (FP8 ignores it).
//!
//! # The FP8 codec (normative: `hip_kernels/codec.cuh` states and implements exactly this)
//!
//! * **Element format.** FP8 E4M3, 1 sign, 4 exponent and 3 mantissa bits, no infinities:
//!
//!   | | [`Fp8Format::E4m3fn`] (OCP; NVIDIA, gfx950) | [`Fp8Format::E4m3fnuz`] (gfx942) |
//!   |---|---|---|
//!   | bias | 7 | 8 |
//!   | max finite | 448 = `0x7E` | 240 = `0x7F` |
//!   | smallest normal | 2^-6 = `0x08` | 2^-7 = `0x08` |
//!   | smallest subnormal | 2^-9 = `0x01` | 2^-10 = `0x01` |
//!   | NaN | `0x7F`, `0xFF` | `0x80` only |
//!   | -0 | `0x80` | none |
//!
//!   A code `s eeee mmm` with `e > 0` is `(-1)^s (1 + m/8) 2^(e - bias)`, with `e = 0` it is
//!   `(-1)^s (m/8) 2^(1 - bias)`.
//! * **[`encode`]**: round to nearest, ties to even; saturating (`|x| > max` gives `±max`, also
//!   for `±inf`); NaN gives the format's NaN (`0x7F` fn, `0x80` fnuz). fn keeps the sign of a
//!   result that rounds to zero (`0x80`); fnuz has no -0 and encodes it as `0x00`.
//! * **Blocks.** Each block has one f32 `scale`:
//!   * `amax` = max |x| over the block's *finite* elements (NaN and ±inf are ignored);
//!   * if `amax < 1e-30` ([`AMAX_FLOOR`]) or the block has no finite element: `scale = 0`,
//!     `inv = 0`, every finite element gets the code of `x * 0`, a zero of `x`'s sign
//!     (`0x80` for a negative `x` in fn, `0x00` in fnuz, which has no -0);
//!   * else `scale = amax / MAX` and `inv = MAX / amax` (each one IEEE f32 division,
//!     correctly rounded; `MAX` = 448 or 240);
//!   * code of a finite element = `encode(x * inv)` (one correctly rounded f32 multiply, no FMA);
//!     code of a NaN or ±inf element = the NaN code (so NaN/inf *inputs* come out as NaN, while
//!     the other elements of their block are unaffected, since `amax` ignores them);
//!   * decoded value = `decode(code) * scale` (one f32 multiply; a NaN code gives NaN).
//!
//! # The INT8 codec (normative: `hip_kernels/codec.cuh` states and implements exactly this)
//!
//! * **Lanes.** The kernels handle a block with 8 lanes ([`LANES`]) of 16 values each; which
//!   elements a lane holds depends on the I/O element size: with `N = 16 / io.size()` (f32: 4,
//!   bf16/f16: 8; [`lane_width`]) lane `L`'s value `c` (0..16) is element
//!   `(c / N) * 8N + L*N + c % N` of the block, i.e. element `j` is in lane `(j / N) % 8`
//!   ([`int8_lane`]). Elements at or beyond a short block's length are absent: they count as 0
//!   in the amaxes and are never output.
//! * **Block scale.** `amax_L` = max |x| over lane `L`'s finite elements (0 if none), `A` = max
//!   over the 8 lanes (the block's [`block_amax`]).
//!   * If `!(A >= 1e-30)` ([`AMAX_FLOOR`]): `meta = 0`, every finite element gets code 0, every
//!     NaN/±inf element the NaN code `0x80`.
//!   * Else `r = A / 127` (f32 division) rounded *up* to a bf16 value (8 significant bits):
//!     `b = r.to_bits(); if b & 0xffff != 0 { b = (b & 0xffff0000) + 0x10000 }`,
//!     `S = f32::from_bits(b)` ([`int8_scale_bits`]); `inv = 1 / S` (f32 division).
//! * **Lane shifts.** `t = amax_L * inv` (f32); `k_L` = 3 if `t*8 <= 127`, else 2 if
//!   `t*4 <= 127`, else 1 if `t*2 <= 127`, else 0 ([`int8_shift`]): a lane of small values
//!   keeps up to 3 more bits.
//! * **Codes.** A finite `x` of lane `L`: `y = (x * inv) * 2^k_L` (the first product rounded,
//!   the second exact), `q = clamp(rint(y), -127, 127)` (ties to even) as an i8. NaN/±inf: `0x80`
//!   (-128).
//! * **Meta word** = `(b & 0xffff0000) | sum_L k_L << 2L` (S's upper 16 bits; the shifts in the
//!   low 16).
//! * **Decode**: code `0x80` is NaN; else `q * (S * 2^-k_L)` with `S = f32::from_bits(meta &
//!   0xffff0000)`, `k_L = (meta >> 2L) & 3`; both products are exact (7 x 8 significant bits).
//!
//! # Collectives ([`allreduce_ref`], [`reduce_scatter_ref`], [`all_gather_ref`], [`all_to_all_ref`])
//!
//! `Q(v)` is a quantize + dequantize of a range `v` blockwise from its start ([`roundtrip()`]).
//! What never crosses a link is never quantized. Sums are f32, over ranks in order 0..n-1 (the
//! first term assigned, the others added). bf16/fp16 inputs are widened to f32 exactly; every
//! output is rounded to the I/O type once, at the very end ([`Io::round`], RNE).
//!
//! * **AllGather**: rank `r`'s output is the concatenation over `p` of `x_p` if `p == r`, else
//!   `Q(x_p)`. Ranks' outputs differ (each in its own chunk only).
//! * **AllToAll**: chunk `p` of rank `r`'s input lands at position `r` of rank `p`'s output as
//!   `Q(chunk)` (blocked from the chunk start), or exactly when `r == p`.
//! * **ReduceScatter**: rank `r`'s output = sum over `p` of `x_p[chunk r]` if `p == r`, else
//!   `Q(x_p[chunk r])` (blocked from the chunk start); not re-quantized.
//! * **AllReduce, 2 ranks** ("exchange": the kernel gathers both inputs' codes):
//!   `Q(x_0) + Q(x_1)`, blocked from the vector start, not re-quantized; the same on both ranks.
//! * **AllReduce, other rank counts** ("re-quantize"): element `i` has an owner `o(i)` (see
//!   [`AllReduceForm`]: with the kernel's window `W` and `Cb = ceil(ceil(min(count, W) / 128) /
//!   n)` blocks per chunk, `o(i) = ((i % W) / 128) / Cb`); `S_i` = sum over `p` of `x_p[i]` if
//!   `p == o(i)`, else `Q(x_p)[i]`; the output is `Q(S)`, blocked from the vector start (chunks
//!   are whole blocks and windows multiples of 512 elements, so block boundaries are global);
//!   the same on every rank.
//!
//! # Error bound of one quantize + dequantize ([`element_error_bound`], [`error_bounds`])
//!
//! `u = 2^-24` (f32 unit roundoff), `A` the block's amax (≥ 1e-30). A block under
//! [`AMAX_FLOOR`] flushes every element: the error is `|x|`. A NaN/±inf input has no bound.
//!
//! **FP8.** Let `M` be the format's max, `emin = 1 - bias` (exponent of the smallest normal).
//! The f32 steps are `inv = M/A (1+d1)`, `y = x inv (1+d2)`, `s = A/M (1+d3)`,
//! `out = decode(encode(y)) s (1+d4)` with `|di| <= u`. RNE to 3 mantissa bits errs by at most
//! half an ULP: for `|y| >= 2^emin` that is `2^(floor(log2|y|) - 4) <= 2^-4 |y|`; below, the
//! spacing is the subnormal one `2^(emin-3)` and the error at most `2^(emin-4) = 2^-(bias+3)`
//! (fn 2^-10, fnuz 2^-11). Saturation only clips `y <= M (1+u)^2`, an error of ≤ 2u M, inside
//! the relative term. Hence
//!
//! ```text
//! |out - x| <= (1+u)^4 max(2^-4 |x|, 2^-(bias+3) A / M) + ((1+u)^4 - 1) |x|
//!           <= (1 + 2^-21) max(2^-4 |x|, 2^-(bias+3) A / M) + 2^-21 |x|
//! ```
//!
//! i.e. 6.25 % relative for elements above `2^emin A / M` (fn `A/28672`, fnuz `A/30720`), and
//! an absolute floor of `2^-(bias+3) A / M` (fn `2.18e-6 A`, fnuz `2.03e-6 A`) below; elements
//! under that floor may flush to zero. The functions return this with the constants rounded up
//! (`2^-20`).
//!
//! **INT8.** The f32 steps are `inv = (1/S)(1+d1)` and `y = x inv (1+d2) 2^k` (`|di| <= u`; the
//! scaling by `2^k` is exact); `out = q S 2^-k` is exact. The shift test guarantees
//! `|y| <= t 2^k <= 127` for `k > 0`, and `|y| <= 127 (1+u)^2/(1-u)` for `k = 0` (`S >= A/127
//! (1-u)`), so clamping costs nothing beyond the rounding and `|q - y| <= 1/2`. Then
//! `out - x = (q - y) S 2^-k + x ((1+d1)(1+d2) - 1)`:
//!
//! ```text
//! |out - x| <= 0.5 S 2^-k_L + (2u + u^2) |x|  <=  0.5 S 2^-k_L + 2^-22 |x|     (per lane)
//! ```
//!
//! With `r = A/127 (1+d3)` and the round-up `S < r (1 + 2^-7)` (the bf16 spacing is at most
//! `2^-7 r`), and `k_L >= 0`, in terms of the block amax alone:
//!
//! ```text
//! |out - x| <= (A / 254) (1 + 2^-7) (1 + 2^-22) + 2^-22 |x|
//! ```
//!
//! i.e. at most `A / 252` absolute for every element of a lane holding the block's largest
//! values, 2^-k_L times less in a lane whose values are 2^k_L smaller. Elements below
//! `S 2^-(k_L+1)` flush to zero. [`error_bounds`] gives the per-lane form, [`element_error_bound`]
//! the amax-only form (used where the lane is not known).
//!
//! # Error bounds of the collectives
//!
//! Per element, `x_p` the inputs, `E_p` their one-step bounds (0 for a term that enters
//! exactly), `gamma_k = k u / (1 - k u)` the f32 recursive-summation factor:
//!
//! ```text
//! AllGather, AllToAll:  E_p                      (0 in a rank's own chunk)
//! ReduceScatter:        sum_{p != r} E_p + gamma_{n-1} sum_p (|x_p| + E_p)
//! AllReduce, 2 ranks:   E_0 + E_1 + gamma_1 (|x_0| + E_0 + |x_1| + E_1)
//! AllReduce, n ranks:   sum_{p != o} E_p + gamma_{n-1} sum_p (|x_p| + E_p) + E(S)
//! ```
//!
//! where `E(S)` is the one-step bound of the computed (f32) sum in its block of sums (the
//! output quantizes exactly that value). FP8: roughly 2^-4 relative per quantized term and
//! per re-quantization; INT8: `A/254` per quantized term, `2^-k_L` less in quiet lanes. For
//! random data the errors average out to a relative L2 error of about 2.5 % (FP8) and 0.6-0.8 %
//! (INT8) for a 2-rank AllReduce (see the `report_accuracy` test). [`allreduce_error_bounds_at`],
//! [`reduce_scatter_error_bounds`], [`all_gather_error_bounds`] and [`all_to_all_error_bounds`]
//! compute them (excluding the final rounding to the I/O type).
//!
//! # Files
//!
//! This file is the specification above and the public names; the code is in `codec/`, each
//! file using only the ones listed before it:
//!
//! * `io.rs`: the I/O element types ([`Io`]);
//! * `block.rs`: what both codecs share ([`BLOCK`], [`AMAX_FLOOR`], [`Codec`], [`block_amax`]);
//! * `synth.rs`: deterministic test data ([`synth::Dist`]);
//! * `testing.rs` (unit tests only): helpers the codec's tests share;
//! * `fp8.rs`, `int8.rs`: the two codecs, element and block;
//! * `roundtrip.rs`: `Q(v)` of either codec ([`roundtrip()`]);
//! * `collectives.rs`: the collective models ([`allreduce_ref`], [`AllReduceForm`], ...);
//! * `bounds.rs`: the error bounds, of one step and of the collectives;
//! * `accuracy.rs`: the error statistic ([`rel_l2`]) and the accuracy the models reach.

#![forbid(unsafe_code)]

pub use rcclx::kernels::Fp8Format;

mod accuracy;
mod block;
mod bounds;
mod collectives;
mod fp8;
mod int8;
mod io;
mod roundtrip;
pub mod synth;
#[cfg(test)]
mod testing;

pub use accuracy::rel_l2;
pub use block::{AMAX_FLOOR, BLOCK, Codec, block_amax};
pub use bounds::{
    all_gather_error_bounds, all_to_all_error_bounds, all_to_all_rank_error_bounds, allreduce_error_bounds_at,
    element_error_bound, error_bounds, error_bounds_into, int8_error_bound, reduce_scatter_error_bounds,
    reduce_scatter_rank_error_bounds, sum_error_bound,
};
pub use collectives::{
    AllReduceForm, all_gather_ref, all_to_all_rank_ref, all_to_all_ref, allreduce_ref, allreduce_ref_at,
    allreduce_sums_at, reduce_scatter_rank_ref, reduce_scatter_ref,
};
pub use fp8::{
    bias, block_scale, decode, dequantize_block, encode, fp8_max, is_nan_code, max_code, nan_code, quantize_block,
};
pub use int8::{
    INT8_MAX, INT8_NAN, LANES, int8_decode, int8_dequantize_block, int8_lane, int8_lane_element, int8_lane_scale,
    int8_quantize_block, int8_scale_bits, int8_shift, lane_width,
};
pub use io::Io;
pub use roundtrip::{roundtrip, roundtrip_into};
