//! The low-precision block codecs on the CPU, FP8 E4M3 and INT8: the reference the GPU kernels
//! (`hip_kernels/lowp.cuh`) implement bit for bit, reference models of the four low-precision
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
//! # The FP8 codec (normative: `hip_kernels/` implements exactly this)
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
//!     `inv = 0`, every finite element gets code `0x00` (+0);
//!   * else `scale = amax / MAX` and `inv = MAX / amax` (each one IEEE f32 division,
//!     correctly rounded; `MAX` = 448 or 240);
//!   * code of a finite element = `encode(x * inv)` (one correctly rounded f32 multiply, no FMA);
//!     code of a NaN or ±inf element = the NaN code (so NaN/inf *inputs* come out as NaN, while
//!     the other elements of their block are unaffected, since `amax` ignores them);
//!   * decoded value = `decode(code) * scale` (one f32 multiply; a NaN code gives NaN).
//!
//! # The INT8 codec (normative: `hip_kernels/` implements exactly this)
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
//! `Q(v)` is a quantize + dequantize of a range `v` blockwise from its start ([`roundtrip`]).
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
#![forbid(unsafe_code)]

pub use rcclx::kernels::Fp8Format;

pub mod synth;

/// Elements per scaled block.
pub const BLOCK: usize = 128;

/// Blocks whose amax is below this (or that have no finite element) have scale 0 and encode
/// every finite element as +0.
pub const AMAX_FLOOR: f32 = 1e-30;

/// Lanes of 16 values per block (INT8's shifts are per lane).
pub const LANES: usize = 8;

/// INT8's largest code magnitude.
pub const INT8_MAX: f32 = 127.0;

/// INT8's NaN code (-128).
pub const INT8_NAN: u8 = 0x80;

/// The wire codec of a low-precision collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// Block-scaled FP8 E4M3 in the GPU's format.
    Fp8(Fp8Format),
    /// Block-scaled INT8 with per-lane shifts.
    Int8,
}

impl Codec {
    /// Every codec (both FP8 formats), in the order tests report them.
    pub const ALL: [Codec; 3] = [Codec::Fp8(Fp8Format::E4m3fn), Codec::Fp8(Fp8Format::E4m3fnuz), Codec::Int8];

    /// `"fp8-e4m3fn"`, `"fp8-e4m3fnuz"`, `"int8"`.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Fp8(Fp8Format::E4m3fn) => "fp8-e4m3fn",
            Codec::Fp8(Fp8Format::E4m3fnuz) => "fp8-e4m3fnuz",
            Codec::Int8 => "int8",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// FP8
// ---------------------------------------------------------------------------------------------
/// Largest finite value: 448 (fn) or 240 (fnuz).
pub const fn fp8_max(fmt: Fp8Format) -> f32 {
    match fmt {
        Fp8Format::E4m3fn => 448.0,
        Fp8Format::E4m3fnuz => 240.0,
    }
}

/// Exponent bias: 7 (fn) or 8 (fnuz).
pub const fn bias(fmt: Fp8Format) -> i32 {
    match fmt {
        Fp8Format::E4m3fn => 7,
        Fp8Format::E4m3fnuz => 8,
    }
}

/// The code `encode` gives NaN: `0x7F` (fn) or `0x80` (fnuz).
pub const fn nan_code(fmt: Fp8Format) -> u8 {
    match fmt {
        Fp8Format::E4m3fn => 0x7F,
        Fp8Format::E4m3fnuz => 0x80,
    }
}

/// The code of `+max`: `0x7E` (fn) or `0x7F` (fnuz).
pub const fn max_code(fmt: Fp8Format) -> u8 {
    match fmt {
        Fp8Format::E4m3fn => 0x7E,
        Fp8Format::E4m3fnuz => 0x7F,
    }
}

/// Whether `code` decodes to NaN.
pub const fn is_nan_code(fmt: Fp8Format, code: u8) -> bool {
    match fmt {
        Fp8Format::E4m3fn => code & 0x7F == 0x7F,
        Fp8Format::E4m3fnuz => code == 0x80,
    }
}

/// 2^k as f32, for k in the normal range.
fn pow2(k: i32) -> f32 {
    debug_assert!((-126..=127).contains(&k));
    f32::from_bits(((k + 127) as u32) << 23)
}

/// The value of an FP8 code (NaN for the NaN codes; fn `0x80` is -0.0).
pub fn decode(fmt: Fp8Format, code: u8) -> f32 {
    if is_nan_code(fmt, code) {
        return f32::NAN;
    }
    let e = i32::from((code >> 3) & 0xF);
    let m = u32::from(code & 7);
    let b = bias(fmt);
    let mag =
        if e == 0 { m as f32 * pow2(1 - b - 3) } else { f32::from_bits((((e - b + 127) as u32) << 23) | (m << 20)) };
    if code & 0x80 != 0 { -mag } else { mag }
}

/// The FP8 code of `x`: round to nearest, ties to even, saturating to `±max` (also for ±inf);
/// NaN gives [`nan_code`]; fnuz encodes -0 (and negatives rounding to zero) as `0x00`.
pub fn encode(fmt: Fp8Format, x: f32) -> u8 {
    if x.is_nan() {
        return nan_code(fmt);
    }
    let sign: u8 = if x.is_sign_negative() { 0x80 } else { 0 };
    let ax = x.abs();
    let mag = if ax > fp8_max(fmt) {
        max_code(fmt)
    } else {
        let b = bias(fmt);
        let emin = 1 - b;
        // floor(log2 ax) for a normal f32; f32 zero and subnormals (-127) land in the FP8
        // subnormal range, where the spacing is fixed.
        let e = (((ax.to_bits() >> 23) & 0xFF) as i32 - 127).max(emin);
        // ax / 2^(e-3) is exact (a power-of-two scaling to [0, 16)); round it to an integer.
        let r = (ax / pow2(e - 3)).round_ties_even() as u32;
        // r * 2^(e-3): r in [8, 16] for the normal binade e (16 carries into the next one),
        // r in [0, 8] in the subnormal range (8 is the smallest normal).
        let (e, r) = if r == 16 { (e + 1, 8) } else { (e, r) };
        if r < 8 {
            debug_assert_eq!(e, emin);
            r as u8
        } else {
            // ax <= max, and max is representable, so this never passes max_code.
            (((e + b) as u8) << 3) | (r - 8) as u8
        }
    };
    match (fmt, mag) {
        (Fp8Format::E4m3fnuz, 0) => 0,
        _ => sign | mag,
    }
}

/// `(scale, inv)` of an FP8 block with amax `amax`: `(amax / MAX, MAX / amax)`, or `(0, 0)`
/// when `amax < 1e-30`.
pub fn block_scale(fmt: Fp8Format, amax: f32) -> (f32, f32) {
    // A NaN amax (impossible from block_amax) is a zero block too.
    if amax.is_nan() || amax < AMAX_FLOOR {
        return (0.0, 0.0);
    }
    let m = fp8_max(fmt);
    (amax / m, m / amax)
}

/// Quantizes one FP8 block (`xs.len() <= BLOCK`) into `codes` (same length); returns its scale.
pub fn quantize_block(fmt: Fp8Format, xs: &[f32], codes: &mut [u8]) -> f32 {
    assert!(xs.len() <= BLOCK, "a block holds at most {BLOCK} elements, got {}", xs.len());
    assert_eq!(xs.len(), codes.len(), "one code per element");
    let (scale, inv) = block_scale(fmt, block_amax(xs));
    for (c, &x) in codes.iter_mut().zip(xs) {
        *c = if !x.is_finite() {
            nan_code(fmt)
        } else if inv == 0.0 {
            0
        } else {
            encode(fmt, x * inv)
        };
    }
    scale
}

/// Decodes one FP8 block: `out[i] = decode(codes[i]) * scale`.
pub fn dequantize_block(fmt: Fp8Format, codes: &[u8], scale: f32, out: &mut [f32]) {
    assert_eq!(codes.len(), out.len(), "one output per code");
    for (o, &c) in out.iter_mut().zip(codes) {
        *o = decode(fmt, c) * scale;
    }
}

// ---------------------------------------------------------------------------------------------
// INT8
// ---------------------------------------------------------------------------------------------

/// Consecutive elements a lane holds (`N`): 16 bytes of the I/O type (f32: 4, bf16/f16: 8).
pub fn lane_width(io: Io) -> usize {
    16 / io.size()
}

/// The lane (0..8) of element `j` of a block: `(j / N) % 8`.
pub fn int8_lane(io: Io, j: usize) -> usize {
    (j / lane_width(io)) % LANES
}

/// Element of a block that holds lane `lane`'s value `c` (0..16): `(c / N) * 8N + lane*N + c % N`.
pub fn int8_lane_element(io: Io, lane: usize, c: usize) -> usize {
    let n = lane_width(io);
    (c / n) * LANES * n + lane * n + c % n
}

/// Bits of the block scale `S` of a block with amax `amax` (≥ 1e-30): `amax / 127` rounded up
/// to a bf16 value (the low 16 bits are zero).
pub fn int8_scale_bits(amax: f32) -> u32 {
    let mut b = (amax / INT8_MAX).to_bits();
    if b & 0xffff != 0 {
        b = (b & 0xffff_0000) + 0x1_0000;
    }
    b
}

/// The shift of a lane whose amax times `1/S` is `t`: the largest `k` in 0..=3 with
/// `t * 2^k <= 127` (0 if none).
pub fn int8_shift(t: f32) -> u32 {
    if t * 8.0 <= INT8_MAX {
        3
    } else if t * 4.0 <= INT8_MAX {
        2
    } else if t * 2.0 <= INT8_MAX {
        1
    } else {
        0
    }
}

/// The scale a lane's codes are multiplied by: `S * 2^-k_L` from the block's meta word (0 for
/// a zero block).
pub fn int8_lane_scale(meta: u32, lane: usize) -> f32 {
    let k = (meta >> (2 * lane)) & 3;
    f32::from_bits(meta & 0xffff_0000) * pow2(-(k as i32))
}

/// The value of INT8 code `code` with lane scale `scale` (NaN for `0x80`).
pub fn int8_decode(code: u8, scale: f32) -> f32 {
    if code == INT8_NAN { f32::NAN } else { f32::from(code as i8) * scale }
}

/// Quantizes one INT8 block (`xs.len() <= BLOCK`) of I/O type `io` into `codes` (same length);
/// returns its meta word.
pub fn int8_quantize_block(io: Io, xs: &[f32], codes: &mut [u8]) -> u32 {
    assert!(xs.len() <= BLOCK, "a block holds at most {BLOCK} elements, got {}", xs.len());
    assert_eq!(xs.len(), codes.len(), "one code per element");
    let mut lane_amax = [0f32; LANES];
    for (j, &x) in xs.iter().enumerate() {
        if x.is_finite() {
            let l = int8_lane(io, j);
            lane_amax[l] = lane_amax[l].max(x.abs());
        }
    }
    let a = lane_amax.iter().fold(0f32, |m, &v| m.max(v));
    // `!(A >= 1e-30)` in the kernels; A is never NaN (the max of finite magnitudes, or 0).
    if a < AMAX_FLOOR {
        for (c, &x) in codes.iter_mut().zip(xs) {
            *c = if x.is_finite() { 0 } else { INT8_NAN };
        }
        return 0;
    }
    let sbits = int8_scale_bits(a);
    let inv = 1.0 / f32::from_bits(sbits);
    let mut meta = sbits & 0xffff_0000;
    let mut up = [0f32; LANES];
    for (l, &am) in lane_amax.iter().enumerate() {
        let k = int8_shift(am * inv);
        meta |= k << (2 * l);
        up[l] = pow2(k as i32);
    }
    for (j, (c, &x)) in codes.iter_mut().zip(xs).enumerate() {
        *c = if x.is_finite() {
            let y = (x * inv) * up[int8_lane(io, j)];
            y.round_ties_even().clamp(-INT8_MAX, INT8_MAX) as i8 as u8
        } else {
            INT8_NAN
        };
    }
    meta
}

/// Decodes one INT8 block of I/O type `io`: `out[j] = code * (S * 2^-k_L)`, NaN for `0x80`.
pub fn int8_dequantize_block(io: Io, codes: &[u8], meta: u32, out: &mut [f32]) {
    assert!(codes.len() <= BLOCK, "a block holds at most {BLOCK} elements, got {}", codes.len());
    assert_eq!(codes.len(), out.len(), "one output per code");
    let scales: [f32; LANES] = std::array::from_fn(|l| int8_lane_scale(meta, l));
    for (j, (o, &c)) in out.iter_mut().zip(codes).enumerate() {
        *o = int8_decode(c, scales[int8_lane(io, j)]);
    }
}

// ---------------------------------------------------------------------------------------------
// Either codec
// ---------------------------------------------------------------------------------------------

/// Max |x| over the finite elements (0 if none).
pub fn block_amax(xs: &[f32]) -> f32 {
    xs.iter().filter(|x| x.is_finite()).fold(0.0f32, |a, x| a.max(x.abs()))
}

/// Quantizes and dequantizes `xs` into `out`, blockwise from `xs[0]`.
pub fn roundtrip_into(codec: Codec, io: Io, xs: &[f32], out: &mut [f32]) {
    assert_eq!(xs.len(), out.len());
    let mut codes = [0u8; BLOCK];
    for (x, o) in xs.chunks(BLOCK).zip(out.chunks_mut(BLOCK)) {
        let c = &mut codes[..x.len()];
        match codec {
            Codec::Fp8(fmt) => {
                let scale = quantize_block(fmt, x, c);
                dequantize_block(fmt, c, scale, o);
            }
            Codec::Int8 => {
                let meta = int8_quantize_block(io, x, c);
                int8_dequantize_block(io, c, meta, o);
            }
        }
    }
}

/// Quantize + dequantize of any length, blockwise from `xs[0]`.
pub fn roundtrip(codec: Codec, io: Io, xs: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0; xs.len()];
    roundtrip_into(codec, io, xs, &mut out);
    out
}

/// `e` rounded up into f32.
fn round_up(e: f64) -> f32 {
    let b = e as f32;
    if f64::from(b) < e { b.next_up() } else { b }
}

/// Bound on `|roundtrip(x) - x|` for a finite `x` in a block whose amax is `block_amax`, in
/// terms of the amax alone (see the module doc):
/// * FP8: `(1 + 2^-20) max(2^-4 |x|, 2^-(bias+3) A / MAX) + 2^-20 |x|`;
/// * INT8: `(A / 254) (1 + 2^-7) (1 + 2^-22) + 2^-22 |x|` (the lane of the block's amax; a
///   lane of smaller values does better, see [`int8_error_bound`]);
///
/// `|x|` when `A < 1e-30` (the block flushes); `inf` for a non-finite `x`.
pub fn element_error_bound(codec: Codec, x: f32, block_amax: f32) -> f32 {
    if !x.is_finite() {
        return f32::INFINITY;
    }
    let ax = f64::from(x.abs());
    if block_amax.is_nan() || block_amax < AMAX_FLOOR {
        return x.abs();
    }
    let a = f64::from(block_amax);
    round_up(match codec {
        Codec::Fp8(fmt) => {
            let floor = a / f64::from(fp8_max(fmt)) * 2f64.powi(-(bias(fmt) + 3));
            (1.0 + 2f64.powi(-20)) * (ax * 0.0625).max(floor) + 2f64.powi(-20) * ax
        }
        Codec::Int8 => a / 254.0 * (1.0 + 2f64.powi(-7)) * (1.0 + 2f64.powi(-22)) + 2f64.powi(-22) * ax,
    })
}

/// The per-lane INT8 bound for a finite `x` of lane `lane` of a block with meta word `meta`
/// (not a zero block): `0.5 * S * 2^-k_L + 2^-22 |x|`.
pub fn int8_error_bound(x: f32, meta: u32, lane: usize) -> f32 {
    if !x.is_finite() {
        return f32::INFINITY;
    }
    round_up(0.5 * f64::from(int8_lane_scale(meta, lane)) + 2f64.powi(-22) * f64::from(x.abs()))
}

/// The bound on `|roundtrip(x)[i] - x[i]|` of every element of `xs` (blocked from `xs[0]`),
/// into `out`: FP8 [`element_error_bound`]; INT8 the per-lane [`int8_error_bound`]; `|x|` in
/// blocks under the floor; `inf` for non-finite elements.
pub fn error_bounds_into(codec: Codec, io: Io, xs: &[f32], out: &mut [f32]) {
    assert_eq!(xs.len(), out.len());
    let mut codes = [0u8; BLOCK];
    for (x, o) in xs.chunks(BLOCK).zip(out.chunks_mut(BLOCK)) {
        match codec {
            Codec::Fp8(_) => {
                let a = block_amax(x);
                o.iter_mut().zip(x).for_each(|(o, &v)| *o = element_error_bound(codec, v, a));
            }
            Codec::Int8 => {
                let meta = int8_quantize_block(io, x, &mut codes[..x.len()]);
                for (j, (o, &v)) in o.iter_mut().zip(x).enumerate() {
                    *o = if !v.is_finite() {
                        f32::INFINITY
                    } else if meta == 0 {
                        v.abs()
                    } else {
                        int8_error_bound(v, meta, int8_lane(io, j))
                    };
                }
            }
        }
    }
}

/// [`error_bounds_into`] into a new vector.
pub fn error_bounds(codec: Codec, io: Io, xs: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0; xs.len()];
    error_bounds_into(codec, io, xs, &mut out);
    out
}

// ---------------------------------------------------------------------------------------------
// Collectives
// ---------------------------------------------------------------------------------------------

/// The common length of every rank's buffer; panics on ragged or empty input.
fn common_len<V: AsRef<[f32]>>(inputs: &[V]) -> usize {
    assert!(!inputs.is_empty(), "at least one rank");
    let n = inputs[0].as_ref().len();
    assert!(inputs.iter().all(|v| v.as_ref().len() == n), "every rank has the same length");
    n
}

/// `acc` = `t` for the first rank, `acc + t` after (the kernels' rank-order f32 sum).
fn accumulate(first: bool, acc: &mut [f32], t: &[f32]) {
    if first {
        acc.copy_from_slice(t);
    } else {
        acc.iter_mut().zip(t).for_each(|(a, x)| *a += *x);
    }
}

/// How the AllReduce kernels cut a vector of `count` elements per rank: the form (2 ranks:
/// exchange; otherwise re-quantize) and, for the re-quantizing form, which rank owns (sums and
/// re-quantizes) each element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllReduceForm {
    pub nranks: usize,
    /// Elements per window (`rcclx::lowp::grid(Coll::AllReduce, ..).0`), a multiple of [`BLOCK`].
    pub window: usize,
    /// Blocks per owner's chunk in every window: `ceil(ceil(min(count, W) / 128) / n)`.
    pub chunk_blocks: usize,
}

impl AllReduceForm {
    pub fn new(nranks: usize, count: usize, window: usize) -> Self {
        assert!(nranks >= 1, "at least one rank");
        assert!(window > 0 && window.is_multiple_of(BLOCK), "a window is whole blocks, got {window}");
        AllReduceForm { nranks, window, chunk_blocks: count.min(window).div_ceil(BLOCK).div_ceil(nranks) }
    }

    /// 2 ranks: each input quantized once, the sum not re-quantized.
    pub fn exchange(&self) -> bool {
        self.nranks == 2
    }

    /// The rank that owns element `i`: `((i % W) / 128) / Cb`.
    pub fn owner(&self, i: usize) -> usize {
        (i % self.window) / BLOCK / self.chunk_blocks.max(1)
    }
}

/// The f32 sums the AllReduce kernels compute for elements `[start, start + len)` (before the
/// re-quantization of the re-quantizing form): `inputs[p]` holds rank `p`'s elements of that
/// range; `start` is a multiple of [`BLOCK`].
pub fn allreduce_sums_at<V: AsRef<[f32]>>(
    codec: Codec,
    io: Io,
    form: &AllReduceForm,
    inputs: &[V],
    start: usize,
) -> Vec<f32> {
    let len = common_len(inputs);
    assert_eq!(inputs.len(), form.nranks, "one input per rank");
    assert!(start.is_multiple_of(BLOCK), "a segment starts at a block boundary");
    let mut sum = vec![0.0f32; len];
    let mut q = vec![0.0f32; len];
    for (p, v) in inputs.iter().enumerate() {
        let v = v.as_ref();
        roundtrip_into(codec, io, v, &mut q);
        if !form.exchange() {
            // The owner's own input enters exactly.
            for (i, (t, &x)) in q.iter_mut().zip(v).enumerate() {
                if form.owner(start + i) == p {
                    *t = x;
                }
            }
        }
        accumulate(p == 0, &mut sum, &q);
    }
    sum
}

/// AllReduce (sum) as the kernels compute it for elements `[start, start + len)` of a vector
/// (see [`allreduce_sums_at`]); every rank's output (they are identical).
pub fn allreduce_ref_at<V: AsRef<[f32]>>(
    codec: Codec,
    io: Io,
    form: &AllReduceForm,
    inputs: &[V],
    start: usize,
) -> Vec<f32> {
    let sum = allreduce_sums_at(codec, io, form, inputs, start);
    if form.exchange() { sum } else { roundtrip(codec, io, &sum) }
}

/// AllReduce (sum) as the kernels compute it, on f32 data; every rank's output (identical).
/// `window`: the kernel's window in elements (matters only for more than 2 ranks and counts
/// above it). See the module doc.
pub fn allreduce_ref<V: AsRef<[f32]>>(codec: Codec, io: Io, inputs: &[V], window: usize) -> Vec<f32> {
    let form = AllReduceForm::new(inputs.len(), common_len(inputs), window);
    allreduce_ref_at(codec, io, &form, inputs, 0)
}

/// ReduceScatter (sum) as the kernels compute it: `inputs[r]` holds `n * count` elements,
/// chunk `c` = elements `[c*count, (c+1)*count)`. Rank `r`'s output is the f32 sum in rank
/// order of chunk `r` of every rank, its own exact and the others quantized + dequantized
/// blockwise from the chunk start; not re-quantized. Returns every rank's output.
pub fn reduce_scatter_ref<V: AsRef<[f32]>>(codec: Codec, io: Io, inputs: &[V]) -> Vec<Vec<f32>> {
    (0..inputs.len()).map(|r| reduce_scatter_rank_ref(codec, io, inputs, r)).collect()
}

/// Rank `r`'s output of [`reduce_scatter_ref`].
pub fn reduce_scatter_rank_ref<V: AsRef<[f32]>>(codec: Codec, io: Io, inputs: &[V], r: usize) -> Vec<f32> {
    let count = chunk_len(inputs);
    let chunk = r * count..(r + 1) * count;
    let mut q = vec![0.0f32; count];
    let mut sum = vec![0.0f32; count];
    for (p, v) in inputs.iter().enumerate() {
        let x = &v.as_ref()[chunk.clone()];
        if p == r {
            accumulate(p == 0, &mut sum, x);
        } else {
            roundtrip_into(codec, io, x, &mut q);
            accumulate(p == 0, &mut sum, &q);
        }
    }
    sum
}

/// Elements per chunk of inputs that hold one chunk per rank; panics otherwise.
fn chunk_len<V: AsRef<[f32]>>(inputs: &[V]) -> usize {
    let len = common_len(inputs);
    assert_eq!(len % inputs.len(), 0, "each rank's input is nranks chunks");
    len / inputs.len()
}

/// AllGather as the kernels compute it: rank `r`'s output is the concatenation of every rank's
/// input, quantized + dequantized blockwise from its start, except its own, which is exact.
/// Returns every rank's output.
pub fn all_gather_ref<V: AsRef<[f32]>>(codec: Codec, io: Io, inputs: &[V]) -> Vec<Vec<f32>> {
    common_len(inputs);
    let q: Vec<Vec<f32>> = inputs.iter().map(|v| roundtrip(codec, io, v.as_ref())).collect();
    (0..inputs.len())
        .map(|r| (0..inputs.len()).flat_map(|p| if p == r { inputs[p].as_ref() } else { &q[p][..] }).copied().collect())
        .collect()
}

/// AllToAll as the kernels compute it: chunk `p` of rank `r`'s input (`count` elements) lands
/// at position `r` of rank `p`'s output, quantized + dequantized blockwise from the chunk
/// start, except the chunk a rank sends to itself, which is copied exactly. Returns every
/// rank's output.
pub fn all_to_all_ref<V: AsRef<[f32]>>(codec: Codec, io: Io, inputs: &[V]) -> Vec<Vec<f32>> {
    (0..inputs.len()).map(|p| all_to_all_rank_ref(codec, io, inputs, p)).collect()
}

/// Rank `p`'s output of [`all_to_all_ref`].
pub fn all_to_all_rank_ref<V: AsRef<[f32]>>(codec: Codec, io: Io, inputs: &[V], p: usize) -> Vec<f32> {
    let count = chunk_len(inputs);
    let mut out = vec![0.0f32; count * inputs.len()];
    for (r, v) in inputs.iter().enumerate() {
        let src = &v.as_ref()[p * count..(p + 1) * count];
        let dst = &mut out[r * count..(r + 1) * count];
        if r == p {
            dst.copy_from_slice(src);
        } else {
            roundtrip_into(codec, io, src, dst);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Error bounds of the collectives
// ---------------------------------------------------------------------------------------------

/// f32 recursive-summation factor of `terms` terms: `gamma_{terms-1}`.
fn gamma(terms: usize) -> f64 {
    let k = terms.saturating_sub(1) as f64 * 2f64.powi(-24);
    k / (1.0 - k)
}

/// Bound on the error of a rank-order f32 sum of quantized-or-exact terms, re-quantized or
/// not, for one element: `xs[p]` the inputs, `e_in[p]` their one-step bounds (0 for a term that
/// enters exactly), `e_out` the one-step bound of the output quantization at the computed sum
/// (0 if none). `sum e_in + gamma_{n-1} sum (|x| + e_in) + e_out`, rounded up.
pub fn sum_error_bound(xs: &[f32], e_in: &[f32], e_out: f32) -> f32 {
    assert_eq!(xs.len(), e_in.len());
    let (mut e, mut mags) = (0.0f64, 0.0f64);
    for (&x, &ep) in xs.iter().zip(e_in) {
        e += f64::from(ep);
        mags += f64::from(x.abs()) + f64::from(ep);
    }
    round_up((e + gamma(xs.len()) * mags + f64::from(e_out)) * (1.0 + 2f64.powi(-20)))
}

/// Per-element bounds on `|allreduce_ref_at - sum x_p|` for the same arguments (module doc).
pub fn allreduce_error_bounds_at<V: AsRef<[f32]>>(
    codec: Codec,
    io: Io,
    form: &AllReduceForm,
    inputs: &[V],
    start: usize,
) -> Vec<f32> {
    let len = common_len(inputs);
    let n = inputs.len();
    let e: Vec<Vec<f32>> = inputs.iter().map(|v| error_bounds(codec, io, v.as_ref())).collect();
    let e_out = if form.exchange() {
        vec![0.0; len]
    } else {
        error_bounds(codec, io, &allreduce_sums_at(codec, io, form, inputs, start))
    };
    let (mut xs, mut es) = (vec![0.0f32; n], vec![0.0f32; n]);
    (0..len)
        .map(|i| {
            let o = if form.exchange() { usize::MAX } else { form.owner(start + i) };
            for p in 0..n {
                xs[p] = inputs[p].as_ref()[i];
                es[p] = if p == o { 0.0 } else { e[p][i] };
            }
            sum_error_bound(&xs, &es, e_out[i])
        })
        .collect()
}

/// Per-element bounds on `|reduce_scatter_ref - exact|`, every rank's output (module doc).
pub fn reduce_scatter_error_bounds<V: AsRef<[f32]>>(codec: Codec, io: Io, inputs: &[V]) -> Vec<Vec<f32>> {
    (0..inputs.len()).map(|r| reduce_scatter_rank_error_bounds(codec, io, inputs, r)).collect()
}

/// Rank `r`'s output of [`reduce_scatter_error_bounds`].
pub fn reduce_scatter_rank_error_bounds<V: AsRef<[f32]>>(codec: Codec, io: Io, inputs: &[V], r: usize) -> Vec<f32> {
    let count = chunk_len(inputs);
    let nranks = inputs.len();
    let chunk: Vec<&[f32]> = inputs.iter().map(|v| &v.as_ref()[r * count..(r + 1) * count]).collect();
    let e: Vec<Vec<f32>> = chunk.iter().map(|c| error_bounds(codec, io, c)).collect();
    let (mut xs, mut es) = (vec![0.0f32; nranks], vec![0.0f32; nranks]);
    (0..count)
        .map(|i| {
            for p in 0..nranks {
                xs[p] = chunk[p][i];
                es[p] = if p == r { 0.0 } else { e[p][i] };
            }
            sum_error_bound(&xs, &es, 0.0)
        })
        .collect()
}

/// Per-element bounds on `|all_gather_ref - exact|`, every rank's output (0 in its own chunk).
pub fn all_gather_error_bounds<V: AsRef<[f32]>>(codec: Codec, io: Io, inputs: &[V]) -> Vec<Vec<f32>> {
    let count = common_len(inputs);
    let e: Vec<Vec<f32>> = inputs.iter().map(|v| error_bounds(codec, io, v.as_ref())).collect();
    (0..inputs.len())
        .map(|r| {
            let mut b = e.concat();
            b[r * count..(r + 1) * count].fill(0.0);
            b
        })
        .collect()
}

/// Per-element bounds on `|all_to_all_ref - exact|`, every rank's output (0 in the chunk a rank
/// keeps).
pub fn all_to_all_error_bounds<V: AsRef<[f32]>>(codec: Codec, io: Io, inputs: &[V]) -> Vec<Vec<f32>> {
    (0..inputs.len()).map(|p| all_to_all_rank_error_bounds(codec, io, inputs, p)).collect()
}

/// Rank `p`'s output of [`all_to_all_error_bounds`].
pub fn all_to_all_rank_error_bounds<V: AsRef<[f32]>>(codec: Codec, io: Io, inputs: &[V], p: usize) -> Vec<f32> {
    let count = chunk_len(inputs);
    let mut out = vec![0.0f32; count * inputs.len()];
    for (r, v) in inputs.iter().enumerate() {
        if r != p {
            let src = &v.as_ref()[p * count..(p + 1) * count];
            error_bounds_into(codec, io, src, &mut out[r * count..(r + 1) * count]);
        }
    }
    out
}

/// The I/O element type of a low-precision collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Io {
    F32,
    Bf16,
    F16,
}

impl Io {
    /// Every I/O type, in the order tests report them.
    pub const ALL: [Io; 3] = [Io::F32, Io::Bf16, Io::F16];

    /// `"f32"`, `"bf16"`, `"f16"`.
    pub fn name(self) -> &'static str {
        match self {
            Io::F32 => "f32",
            Io::Bf16 => "bf16",
            Io::F16 => "f16",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Io::F32 => 4,
            Io::Bf16 | Io::F16 => 2,
        }
    }

    /// `x` rounded to this type (RNE, as `half` does it), back in f32 (exact).
    pub fn round(self, x: f32) -> f32 {
        match self {
            Io::F32 => x,
            Io::Bf16 => half::bf16::from_f32(x).to_f32(),
            Io::F16 => half::f16::from_f32(x).to_f32(),
        }
    }

    /// Rounds every element (the last step of every collective with bf16/fp16 output).
    pub fn round_all(self, xs: &mut [f32]) {
        if self != Io::F32 {
            xs.iter_mut().for_each(|x| *x = self.round(*x));
        }
    }

    /// The 16 bits of `x` rounded to this type (bf16/f16 only).
    pub fn to_bits16(self, x: f32) -> u16 {
        match self {
            Io::F32 => panic!("f32 has no 16-bit form"),
            Io::Bf16 => half::bf16::from_f32(x).to_bits(),
            Io::F16 => half::f16::from_f32(x).to_bits(),
        }
    }

    /// The value of 16 bits of this type (bf16/f16 only).
    pub fn from_bits16(self, b: u16) -> f32 {
        match self {
            Io::F32 => panic!("f32 has no 16-bit form"),
            Io::Bf16 => half::bf16::from_bits(b).to_f32(),
            Io::F16 => half::f16::from_bits(b).to_f32(),
        }
    }

    /// The spacing of this type's values at `|x|` (one ULP; the subnormal spacing near 0).
    pub fn ulp(self, x: f32) -> f32 {
        let (mant_bits, emin) = match self {
            Io::F32 => (23, -126),
            Io::Bf16 => (7, -126),
            Io::F16 => (10, -14),
        };
        let ax = x.abs();
        if !ax.is_finite() {
            return f32::INFINITY;
        }
        // floor(log2 ax) from the f32 exponent field (0 and subnormals give -127).
        let e = (((ax.to_bits() >> 23) & 0xFF) as i32 - 127).max(emin);
        let k = e - mant_bits; // >= -149: f32's smallest subnormal
        if k >= -126 { f32::from_bits(((k + 127) as u32) << 23) } else { f32::from_bits(1 << (k + 149)) }
    }
}

/// Relative L2 error `||got - want|| / ||want||` (f64), NaN if `want` is all zero.
pub fn rel_l2(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&g, &w) in got.iter().zip(want) {
        num += (f64::from(g) - w).powi(2);
        den += w * w;
    }
    (num / den).sqrt()
}
#[cfg(test)]
mod tests {
    use super::synth::{Dist, Rng};
    use super::*;

    const FORMATS: [Fp8Format; 2] = [Fp8Format::E4m3fn, Fp8Format::E4m3fnuz];

    /// The format definition, written independently of `decode`: f64 arithmetic with powi.
    fn reference_value(fmt: Fp8Format, code: u8) -> Option<f64> {
        let (b, nan) = match fmt {
            Fp8Format::E4m3fn => (7, code & 0x7F == 0x7F),
            Fp8Format::E4m3fnuz => (8, code == 0x80),
        };
        if nan {
            return None;
        }
        let s = if code >> 7 == 1 { -1.0 } else { 1.0 };
        let e = i32::from((code >> 3) & 15);
        let m = f64::from(code & 7);
        Some(if e == 0 { s * m / 8.0 * 2f64.powi(1 - b) } else { s * (1.0 + m / 8.0) * 2f64.powi(e - b) })
    }

    #[test]
    fn decode_all_codes() {
        for fmt in FORMATS {
            let mut nans = 0;
            for c in 0..=255u8 {
                let d = decode(fmt, c);
                match reference_value(fmt, c) {
                    None => {
                        assert!(d.is_nan(), "{fmt:?} {c:#04x}");
                        assert!(is_nan_code(fmt, c));
                        nans += 1;
                    }
                    Some(v) => {
                        assert_eq!(f64::from(d), v, "{fmt:?} {c:#04x}");
                        assert_eq!(d.is_sign_negative(), c & 0x80 != 0, "{fmt:?} {c:#04x} sign");
                    }
                }
            }
            assert_eq!(nans, if fmt == Fp8Format::E4m3fn { 2 } else { 1 });
        }
    }

    #[test]
    fn decode_spot_values() {
        use Fp8Format::*;
        assert_eq!(decode(E4m3fn, 0x7E), 448.0);
        assert_eq!(decode(E4m3fn, 0xFE), -448.0);
        assert_eq!(decode(E4m3fn, 0x38), 1.0);
        assert_eq!(decode(E4m3fn, 0x08), 2f32.powi(-6));
        assert_eq!(decode(E4m3fn, 0x07), 7.0 * 2f32.powi(-9));
        assert_eq!(decode(E4m3fn, 0x01), 2f32.powi(-9));
        assert_eq!(decode(E4m3fn, 0x00).to_bits(), 0.0f32.to_bits());
        assert_eq!(decode(E4m3fn, 0x80).to_bits(), (-0.0f32).to_bits());
        assert!(decode(E4m3fn, 0x7F).is_nan() && decode(E4m3fn, 0xFF).is_nan());
        assert_eq!(decode(E4m3fn, 0x77), 240.0); // fn's 240 is 1.875 * 2^7
        assert_eq!(decode(E4m3fnuz, 0x7F), 240.0);
        assert_eq!(decode(E4m3fnuz, 0xFF), -240.0);
        assert_eq!(decode(E4m3fnuz, 0x40), 1.0);
        assert_eq!(decode(E4m3fnuz, 0x08), 2f32.powi(-7));
        assert_eq!(decode(E4m3fnuz, 0x01), 2f32.powi(-10));
        assert_eq!(decode(E4m3fnuz, 0x81), -(2f32.powi(-10)));
        assert!(decode(E4m3fnuz, 0x80).is_nan());
        assert_eq!(decode(E4m3fnuz, 0x00), 0.0);
        assert_eq!(fp8_max(E4m3fn), decode(E4m3fn, max_code(E4m3fn)));
        assert_eq!(fp8_max(E4m3fnuz), decode(E4m3fnuz, max_code(E4m3fnuz)));
    }

    #[test]
    fn encode_inverts_decode() {
        for fmt in FORMATS {
            for c in 0..=255u8 {
                if !is_nan_code(fmt, c) {
                    assert_eq!(encode(fmt, decode(fmt, c)), c, "{fmt:?} {c:#04x}");
                }
            }
        }
        // fn: 0x80 is -0 and round-trips; fnuz: -0 is +0.
        assert_eq!(encode(Fp8Format::E4m3fn, -0.0), 0x80);
        assert_eq!(encode(Fp8Format::E4m3fnuz, -0.0), 0x00);
    }

    /// For each pair of adjacent non-negative codes: the midpoint goes to the even code, one f32
    /// ULP either side to the nearer one; the same mirrored for negatives.
    #[test]
    fn encode_rounds_to_nearest_even() {
        for fmt in FORMATS {
            let top = max_code(fmt);
            let mut pairs = 0;
            for lo in 0..top {
                let hi = lo + 1;
                let (a, b) = (decode(fmt, lo), decode(fmt, hi));
                assert!(a < b);
                let mid = (a + b) / 2.0;
                assert_eq!(f64::from(mid), (f64::from(a) + f64::from(b)) / 2.0, "midpoint exact");
                let even = if lo.is_multiple_of(2) { lo } else { hi };
                for (x, want) in [(mid, even), (mid.next_up(), hi), (mid.next_down(), lo), (a, lo), (b, hi)] {
                    assert_eq!(encode(fmt, x), want, "{fmt:?} {x:e} between {lo:#04x} and {hi:#04x}");
                    let neg = if want == 0 && fmt == Fp8Format::E4m3fnuz { 0 } else { want | 0x80 };
                    assert_eq!(encode(fmt, -x), neg, "{fmt:?} {:e}", -x);
                }
                pairs += 1;
            }
            assert_eq!(pairs, top as usize);
        }
    }

    #[test]
    fn encode_saturates_and_handles_specials() {
        use Fp8Format::*;
        for x in [448.0f32, 448.0f32.next_up(), 449.0, 464.0, 465.0, 480.0, 1e30, f32::MAX, f32::INFINITY] {
            assert_eq!(encode(E4m3fn, x), 0x7E, "{x}");
            assert_eq!(encode(E4m3fn, -x), 0xFE, "{x}");
        }
        for x in [240.0f32, 240.0f32.next_up(), 241.0, 248.0, 256.0, 1e30, f32::MAX, f32::INFINITY] {
            assert_eq!(encode(E4m3fnuz, x), 0x7F, "{x}");
            assert_eq!(encode(E4m3fnuz, -x), 0xFF, "{x}");
        }
        for nan in [f32::NAN, -f32::NAN, f32::from_bits(0x7F80_0001)] {
            assert_eq!(encode(E4m3fn, nan), 0x7F);
            assert_eq!(encode(E4m3fnuz, nan), 0x80);
        }
        // Below half the smallest subnormal: zero (signed for fn), f32 subnormals included.
        for x in [1e-45f32, f32::MIN_POSITIVE, 1e-20, 2f32.powi(-10)] {
            assert_eq!(encode(E4m3fn, x), 0x00, "{x:e}");
            assert_eq!(encode(E4m3fn, -x), 0x80, "{x:e}");
        }
        assert_eq!(encode(E4m3fn, 2f32.powi(-10).next_up()), 0x01);
        for x in [1e-45f32, 1e-20, 2f32.powi(-11)] {
            assert_eq!(encode(E4m3fnuz, x), 0x00, "{x:e}");
            assert_eq!(encode(E4m3fnuz, -x), 0x00, "{x:e}");
        }
        assert_eq!(encode(E4m3fnuz, -(2f32.powi(-11).next_up())), 0x81);
    }

    /// Quantize + dequantize with FP8 (the I/O type does not matter to FP8).
    fn rt8(fmt: Fp8Format, xs: &[f32]) -> Vec<f32> {
        roundtrip(Codec::Fp8(fmt), Io::F32, xs)
    }

    #[test]
    fn block_spanning_1e_minus6_to_1e4() {
        for fmt in FORMATS {
            let codec = Codec::Fp8(fmt);
            let xs: Vec<f32> = (0..BLOCK).map(|i| 10f32.powf(-6.0 + 10.0 * i as f32 / (BLOCK - 1) as f32)).collect();
            let mut codes = [0u8; BLOCK];
            let scale = quantize_block(fmt, &xs, &mut codes);
            assert_eq!(scale, xs[BLOCK - 1] / fp8_max(fmt));
            assert_eq!(codes[BLOCK - 1], max_code(fmt), "amax maps to max");
            let mut out = [0f32; BLOCK];
            dequantize_block(fmt, &codes, scale, &mut out);
            for (i, (&x, &o)) in xs.iter().zip(&out).enumerate() {
                assert!(o.is_finite(), "{fmt:?} {i}");
                assert!((o - x).abs() <= element_error_bound(codec, x, xs[BLOCK - 1]), "{fmt:?} {i} {x:e} -> {o:e}");
                // Above the FP8 normal range's bottom (2^(1-bias) amax / MAX: fn amax/28672,
                // fnuz amax/30720) every value keeps 6.25 % relative accuracy.
                if x >= xs[BLOCK - 1] * 2f32.powi(1 - bias(fmt)) / fp8_max(fmt) {
                    assert!((o / x - 1.0).abs() <= 0.0625, "big values keep 3 bits: {x:e} -> {o:e}");
                }
            }
            assert!((out[BLOCK - 1] - 1e4).abs() <= 1e4 * 2e-7, "the largest value survives: {}", out[BLOCK - 1]);
            // Elements below 2^-(bias+3) * amax / MAX flush to zero (documented); 1e-6 is one.
            assert_eq!(out[0], 0.0);
        }
    }

    #[test]
    fn zero_tiny_and_special_blocks() {
        for fmt in FORMATS {
            let codec = Codec::Fp8(fmt);
            // All zero, and all below the floor: scale 0, +0 codes, zero outputs.
            for xs in [vec![0.0f32; 77], vec![-1e-31f32; 128], vec![1e-38f32, -3e-31, 0.0, -0.0]] {
                let mut codes = vec![0xAAu8; xs.len()];
                assert_eq!(quantize_block(fmt, &xs, &mut codes), 0.0);
                assert!(codes.iter().all(|&c| c == 0), "{fmt:?} {codes:?}");
                assert!(rt8(fmt, &xs).iter().all(|&o| o == 0.0 && o.is_sign_positive()));
            }
            // NaN / inf elements: NaN there, the rest scaled by the finite amax.
            let mut xs: Vec<f32> = (0..BLOCK).map(|i| (i as f32 - 64.0) / 8.0).collect();
            xs[3] = f32::NAN;
            xs[10] = f32::INFINITY;
            xs[11] = f32::NEG_INFINITY;
            let out = rt8(fmt, &xs);
            let amax = block_amax(&xs);
            assert_eq!(amax, 8.0);
            for (i, (&x, &o)) in xs.iter().zip(&out).enumerate() {
                if [3, 10, 11].contains(&i) {
                    assert!(o.is_nan(), "{i}");
                } else {
                    assert!((o - x).abs() <= element_error_bound(codec, x, amax), "{i}: {x} -> {o}");
                }
            }
            // A block of only NaN/inf: scale 0, NaN codes.
            let xs = [f32::NAN, f32::INFINITY, 0.5e-30];
            let mut codes = [0u8; 3];
            assert_eq!(quantize_block(fmt, &xs, &mut codes), 0.0);
            assert_eq!(codes, [nan_code(fmt), nan_code(fmt), 0]);
            // Extremes of f32: amax near f32::MAX and just above the floor stay finite.
            for amax in [f32::MAX, 3e38, 1e-30, 2e-30, 1e-29] {
                let xs = [amax, -amax / 3.0, amax / 1000.0, 0.0];
                let out = rt8(fmt, &xs);
                for (&x, &o) in xs.iter().zip(&out) {
                    assert!(o.is_finite(), "{amax:e}: {x:e} -> {o:e}");
                    assert!((o - x).abs() <= element_error_bound(codec, x, amax), "{amax:e}: {x:e} -> {o:e}");
                }
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // INT8
    // -----------------------------------------------------------------------------------------

    /// INT8's lane geometry, from the kernels' definition: lane L's value c is element
    /// (c / N) * 8N + L*N + c % N, N = 16 / element size.
    fn element_of(io: Io, lane: usize, c: usize) -> usize {
        let n = 16 / io.size();
        (c / n) * 8 * n + lane * n + c % n
    }

    #[test]
    fn int8_lane_layout() {
        for (io, n) in [(Io::F32, 4), (Io::Bf16, 8), (Io::F16, 8)] {
            assert_eq!(lane_width(io), n);
            let mut seen = [false; BLOCK];
            for lane in 0..LANES {
                for c in 0..16 {
                    let j = element_of(io, lane, c);
                    assert_eq!(int8_lane_element(io, lane, c), j);
                    assert_eq!(int8_lane(io, j), lane, "{io:?} lane {lane} value {c}");
                    assert!(!seen[j]);
                    seen[j] = true;
                }
            }
            assert!(seen.iter().all(|&s| s));
        }
        // Spot checks: f32 lane 1 holds elements 4..8, 36..40, 68..72, 100..104; bf16 lane 1
        // holds 8..16 and 72..80.
        assert_eq!(
            (0..BLOCK).filter(|&j| int8_lane(Io::F32, j) == 1).collect::<Vec<_>>(),
            [4, 5, 6, 7, 36, 37, 38, 39, 68, 69, 70, 71, 100, 101, 102, 103]
        );
        assert_eq!(
            (0..BLOCK).filter(|&j| int8_lane(Io::Bf16, j) == 1).collect::<Vec<_>>(),
            [8, 9, 10, 11, 12, 13, 14, 15, 72, 73, 74, 75, 76, 77, 78, 79]
        );
    }

    #[test]
    fn int8_scale_is_amax_over_127_rounded_up_to_bf16() {
        assert_eq!(int8_scale_bits(127.0), 1f32.to_bits());
        assert_eq!(int8_scale_bits(254.0), 2f32.to_bits());
        // 127.5 / 127 = 1.0039..: up to 1 + 2^-7.
        assert_eq!(f32::from_bits(int8_scale_bits(127.5)), 1.0 + 2f32.powi(-7));
        // Just above a bf16 value: one bf16 step up.
        assert_eq!(f32::from_bits(int8_scale_bits((127.0f32).next_up())), 1.0 + 2f32.powi(-7));
        let mut rng = Rng::new(3);
        for _ in 0..100_000 {
            let a = (10f64.powf(-30.0 + 68.5 * rng.uniform())) as f32;
            if a < AMAX_FLOOR {
                continue;
            }
            let b = int8_scale_bits(a);
            let (s, r) = (f32::from_bits(b), a / 127.0);
            assert_eq!(b & 0xffff, 0, "{a:e}");
            assert!(s >= r && f64::from(s) < f64::from(r) * (1.0 + 2f64.powi(-7)), "{a:e}: {s:e} vs {r:e}");
            assert!(s.is_normal());
            // The largest value of the block never needs more than 127.
            assert!(a * (1.0 / s) <= 127.0 * (1.0 + 2f32.powi(-22)), "{a:e}");
        }
    }

    #[test]
    fn int8_shift_thresholds() {
        assert_eq!(int8_shift(0.0), 3);
        assert_eq!(int8_shift(127.0 / 8.0), 3);
        assert_eq!(int8_shift((127.0f32 / 8.0).next_up()), 2);
        assert_eq!(int8_shift(127.0 / 4.0), 2);
        assert_eq!(int8_shift((127.0f32 / 4.0).next_up()), 1);
        assert_eq!(int8_shift(63.5), 1);
        assert_eq!(int8_shift(63.5f32.next_up()), 0);
        assert_eq!(int8_shift(127.0), 0);
        assert_eq!(int8_shift(200.0), 0);
    }

    #[test]
    fn int8_decode_is_exact() {
        let mut rng = Rng::new(4);
        for _ in 0..1000 {
            let a = (10f64.powf(-30.0 + 68.0 * rng.uniform())) as f32;
            let meta = int8_scale_bits(a.max(AMAX_FLOOR)) | (rng.next_u64() as u32 & 0xffff);
            for lane in 0..LANES {
                let k = (meta >> (2 * lane)) & 3;
                let s = f64::from(f32::from_bits(meta & 0xffff_0000)) * 2f64.powi(-(k as i32));
                assert_eq!(f64::from(int8_lane_scale(meta, lane)), s);
                for code in 0..=255u8 {
                    let d = int8_decode(code, int8_lane_scale(meta, lane));
                    if code == INT8_NAN {
                        assert!(d.is_nan());
                    } else {
                        assert_eq!(f64::from(d), f64::from(code as i8) * s, "{meta:#x} {lane} {code:#x}");
                    }
                }
            }
        }
    }

    /// A block of `io` whose lanes have the amaxes `lane_amax` (lane L's value 0 is its amax,
    /// the others `fill(L, c)`).
    fn lane_block(io: Io, lane_amax: [f32; LANES], fill: impl Fn(usize, usize) -> f32) -> Vec<f32> {
        let mut xs = vec![0f32; BLOCK];
        for (lane, &a) in lane_amax.iter().enumerate() {
            for c in 0..16 {
                xs[element_of(io, lane, c)] = if c == 0 { a } else { fill(lane, c) };
            }
        }
        xs
    }

    #[test]
    fn int8_edge_codes_and_lane_shifts() {
        for io in [Io::F32, Io::Bf16] {
            // Amax 127: S = 1, inv = 1. Lane 0 holds 127 and the rounding cases; the other
            // lanes' amaxes select every shift (63.5 is the last k = 1, 63.5+ a k = 0).
            let amaxes = [127.0, 63.5, 63.5f32.next_up(), 31.75, 15.875, 1e-20, 0.0, 100.0];
            let lane0 =
                [0.5f32, 1.5, 2.5, -2.5, -0.5, 126.5, -127.0, 126.49, 0.49, -0.0, 3.0, 1e-30, -1e-45, 64.0, 7.5];
            let xs = lane_block(io, amaxes, |lane, c| if lane == 0 { lane0[c - 1] } else { amaxes[lane] / c as f32 });
            let mut codes = [0u8; BLOCK];
            let meta = int8_quantize_block(io, &xs, &mut codes);
            let ks = [0u32, 1, 0, 2, 3, 3, 3, 0];
            let shifts: u32 = ks.iter().enumerate().map(|(l, &k)| k << (2 * l)).sum();
            assert_eq!(meta, 1f32.to_bits() | shifts, "{io:?} {meta:#x}");
            let want0: [i8; 16] = [127, 0, 2, 2, -2, 0, 126, -127, 126, 0, 0, 3, 0, 0, 64, 8];
            for (c, &w) in want0.iter().enumerate() {
                assert_eq!(codes[element_of(io, 0, c)] as i8, w, "{io:?} lane 0 value {c}");
            }
            // Each lane's amax maps to its largest code: 63.5 * 2 = 127, 31.75 * 4 = 127, ...
            for (lane, want) in [(1, 127i8), (2, 64), (3, 127), (4, 127), (5, 0), (6, 0), (7, 100)] {
                assert_eq!(codes[element_of(io, lane, 0)] as i8, want, "{io:?} lane {lane}");
            }
            let mut out = [0f32; BLOCK];
            int8_dequantize_block(io, &codes, meta, &mut out);
            assert_eq!(out[element_of(io, 1, 0)], 63.5);
            assert_eq!(out[element_of(io, 3, 0)], 31.75);
            assert_eq!(out[element_of(io, 4, 0)], 15.875);
            assert_eq!(out[element_of(io, 0, 7)], -127.0);
            // -0 and values rounding to zero come out +0.
            assert!(out[element_of(io, 0, 10)] == 0.0 && out[element_of(io, 0, 10)].is_sign_positive());
            assert_eq!(out, &roundtrip(Codec::Int8, io, &xs)[..]);
            // A lane of small values keeps 2^k more resolution: lane 4 (k = 3) quantizes in
            // steps of 1/8.
            for c in 1..16 {
                let (x, o) = (xs[element_of(io, 4, c)], out[element_of(io, 4, c)]);
                assert!((o - x).abs() <= 0.0625 + 1e-6, "{x} -> {o}");
            }
        }
        // The same values give different shifts under the two layouts: element 8 is in lane 2
        // for f32 and lane 1 for bf16.
        let mut xs = vec![0.25f32; BLOCK];
        xs[0] = 127.0;
        xs[8] = 100.0; // f32 lane 2, bf16 lane 1
        let mut codes = [0u8; BLOCK];
        let m32 = int8_quantize_block(Io::F32, &xs, &mut codes);
        let m16 = int8_quantize_block(Io::Bf16, &xs, &mut codes);
        assert_eq!(m32 & 3, 0, "f32 lane 0 holds 127");
        assert_eq!((m32 >> 2) & 3, 3, "f32 lane 1 holds only 0.25");
        assert_eq!((m16 >> 2) & 3, 0, "bf16 lane 1 holds 100");
        assert_eq!((m32 >> 4) & 3, 0, "f32 lane 2 holds 100");
        assert_eq!((m16 >> 4) & 3, 3, "bf16 lane 2 holds only 0.25");
        assert_ne!(roundtrip(Codec::Int8, Io::F32, &xs), roundtrip(Codec::Int8, Io::Bf16, &xs));
    }

    #[test]
    fn int8_zero_tiny_nan_and_short_blocks() {
        for io in [Io::F32, Io::Bf16] {
            // All zero, all below the floor, NaN/inf only: meta 0, codes 0 (finite) / 0x80.
            for xs in [
                vec![0.0f32; 77],
                vec![-1e-31f32; 128],
                vec![1e-38f32, -3e-31, 0.0, -0.0],
                vec![f32::NAN, f32::INFINITY, 0.5e-30, f32::NEG_INFINITY],
                vec![1e-30f32.next_down(); 5],
            ] {
                let mut codes = vec![0xAAu8; xs.len()];
                assert_eq!(int8_quantize_block(io, &xs, &mut codes), 0);
                for (&x, &c) in xs.iter().zip(&codes) {
                    assert_eq!(c, if x.is_finite() { 0 } else { INT8_NAN }, "{x:e}");
                }
                for (&x, o) in xs.iter().zip(roundtrip(Codec::Int8, io, &xs)) {
                    assert!(
                        if x.is_finite() { o == 0.0 && o.is_sign_positive() } else { o.is_nan() },
                        "{x:e} -> {o:e}"
                    );
                }
            }
            // NaN / inf elements: NaN there, the rest scaled by the finite amax.
            let mut xs: Vec<f32> = (0..BLOCK).map(|i| (i as f32 - 64.0) / 8.0).collect();
            xs[3] = f32::NAN;
            xs[10] = f32::INFINITY;
            xs[11] = f32::NEG_INFINITY;
            let out = roundtrip(Codec::Int8, io, &xs);
            let bounds = error_bounds(Codec::Int8, io, &xs);
            let amax = block_amax(&xs);
            for (i, (&x, &o)) in xs.iter().zip(&out).enumerate() {
                if [3, 10, 11].contains(&i) {
                    assert!(o.is_nan(), "{i}");
                    assert_eq!(bounds[i], f32::INFINITY);
                } else {
                    assert!((o - x).abs() <= bounds[i], "{i}: {x} -> {o}");
                    assert!(bounds[i] <= element_error_bound(Codec::Int8, x, amax));
                }
            }
            // Short blocks: the missing elements count as 0 (a tail of 77 = one whole lane of
            // f32 and part of another).
            let xs: Vec<f32> = (0..BLOCK + 77).map(|i| (i as f32 * 0.37).sin() * 50.0).collect();
            let out = roundtrip(Codec::Int8, io, &xs);
            let mut codes = [0u8; 77];
            let meta = int8_quantize_block(io, &xs[BLOCK..], &mut codes);
            let mut tail = [0f32; 77];
            int8_dequantize_block(io, &codes, meta, &mut tail);
            assert_eq!(out[BLOCK..], tail);
            // The absent lanes of a short block have amax 0: shift 3.
            let lanes_present: Vec<usize> = (0..77).map(|j| int8_lane(io, j)).collect();
            for lane in 0..LANES {
                if !lanes_present.contains(&lane) {
                    assert_eq!((meta >> (2 * lane)) & 3, 3);
                }
            }
        }
    }

    #[test]
    fn int8_f32_extremes() {
        for io in [Io::F32, Io::Bf16] {
            let mut checked = 0;
            for amax in [f32::MAX, f32::MAX.next_down(), 3.3e38, 3e38, 1.7e38, 1e-30, 1e-30f32.next_up(), 2e-30, 1e-29]
            {
                // Every element of lane 0 at or near the amax (the largest codes), the other
                // lanes smaller.
                let mut rng = Rng::new(amax.to_bits() as u64);
                let mut xs: Vec<f32> = (0..BLOCK).map(|_| (amax as f64 * (2.0 * rng.uniform() - 1.0)) as f32).collect();
                for c in 0..16 {
                    xs[element_of(io, 0, c)] = amax * (1.0 - c as f32 * 1e-3);
                }
                xs[element_of(io, 0, 15)] = -amax;
                let out = roundtrip(Codec::Int8, io, &xs);
                let bounds = error_bounds(Codec::Int8, io, &xs);
                for (i, (&x, &o)) in xs.iter().zip(&out).enumerate() {
                    assert!(o.is_finite(), "{amax:e} {i}: {x:e} -> {o:e}");
                    assert!((o - x).abs() <= bounds[i], "{amax:e} {i}: {x:e} -> {o:e}");
                    assert!(bounds[i] <= element_error_bound(Codec::Int8, x, amax), "{amax:e} {i}");
                    checked += 1;
                }
            }
            assert_eq!(checked, 9 * BLOCK);
        }
    }

    // -----------------------------------------------------------------------------------------
    // Both codecs
    // -----------------------------------------------------------------------------------------

    /// Exact cases: data the codec represents exactly, so the roundtrip is the identity. FP8: a
    /// block whose amax is MAX * 2^k holds only FP8 values times 2^k; INT8: integers in
    /// [-127, 127] with amax 127, times 2^k (S = 2^k, and every lane's shift keeps integers).
    /// Used to check the collectives' layouts exactly.
    fn exact_data(codec: Codec, seed: u64, n: usize) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        let mut v: Vec<f32> = (0..n)
            .map(|_| match codec {
                Codec::Fp8(fmt) => {
                    let d = decode(fmt, (rng.next_u64() % 256) as u8);
                    if d.is_nan() { 1.0 } else { d }
                }
                Codec::Int8 => ((rng.next_u64() % 255) as i32 - 127) as f32,
            })
            .collect();
        for (b, blk) in v.chunks_mut(BLOCK).enumerate() {
            blk[0] = match codec {
                Codec::Fp8(fmt) => fp8_max(fmt),
                Codec::Int8 => INT8_MAX,
            };
            let k = (b % 7) as i32 - 3;
            blk.iter_mut().for_each(|x| *x *= 2f32.powi(k));
        }
        v
    }

    const IOS: [Io; 2] = [Io::F32, Io::Bf16];

    #[test]
    fn exact_values_roundtrip_exactly() {
        for codec in Codec::ALL {
            for io in IOS {
                let v = exact_data(codec, 7, 1000);
                assert_eq!(roundtrip(codec, io, &v), v, "{codec:?} {io:?}");
            }
        }
    }

    /// Rank-order f32 sum of element i's terms (the first assigned).
    fn rank_sum(terms: impl Iterator<Item = f32>) -> f32 {
        let mut it = terms;
        let first = it.next().expect("a term");
        it.fold(first, |s, x| s + x)
    }

    #[test]
    fn collective_layouts() {
        for codec in Codec::ALL {
            for io in IOS {
                for nranks in [2usize, 3, 8] {
                    // Chunks of whole blocks of exact data: every model but the re-quantizing
                    // AllReduce reduces to the exact collective.
                    let count = 2 * BLOCK;
                    let ins: Vec<Vec<f32>> = (0..nranks).map(|r| exact_data(codec, r as u64, nranks * count)).collect();
                    let ag = all_gather_ref(codec, io, &ins);
                    assert!(ag.iter().all(|o| *o == ins.concat()));
                    let a2a = all_to_all_ref(codec, io, &ins);
                    for p in 0..nranks {
                        for r in 0..nranks {
                            assert_eq!(a2a[p][r * count..(r + 1) * count], ins[r][p * count..(p + 1) * count]);
                        }
                    }
                    let rs = reduce_scatter_ref(codec, io, &ins);
                    for r in 0..nranks {
                        for i in 0..count {
                            assert_eq!(rs[r][i], rank_sum((0..nranks).map(|p| ins[p][r * count + i])));
                        }
                    }
                    let ar = allreduce_ref(codec, io, &ins, 4 * BLOCK * nranks);
                    let sums: Vec<f32> = (0..nranks * count).map(|i| rank_sum(ins.iter().map(|v| v[i]))).collect();
                    if nranks == 2 {
                        assert_eq!(ar, sums, "{codec:?} exchange: exact inputs, no re-quantization");
                    } else {
                        assert_eq!(ar, roundtrip(codec, io, &sums), "{codec:?} re-quantized once");
                    }
                }
                // Block alignment and what is quantized (not exact data, chunks not whole
                // blocks): reduce-scatter and all-to-all block each chunk from its start, and a
                // rank's own contribution is exact.
                let count = 129;
                let ins: Vec<Vec<f32>> = (0..2).map(|r| Dist::MixedScale.generate(r, 2 * count)).collect();
                let q = |v: &[f32]| roundtrip(codec, io, v);
                let rs = reduce_scatter_ref(codec, io, &ins);
                let want: Vec<f32> = q(&ins[0][count..]).iter().zip(&ins[1][count..]).map(|(a, b)| a + b).collect();
                assert_eq!(rs[1], want, "rank 1: rank 0's chunk 1 quantized, its own exact");
                let want: Vec<f32> = ins[0][..count].iter().zip(q(&ins[1][..count])).map(|(a, b)| a + b).collect();
                assert_eq!(rs[0], want);
                let a2a = all_to_all_ref(codec, io, &ins);
                assert_eq!(a2a[0][count..], q(&ins[1][..count])[..]);
                assert_eq!(a2a[0][..count], ins[0][..count], "self chunk copied exactly");
                assert_eq!(a2a[1][..count], q(&ins[0][count..])[..]);
                let ag = all_gather_ref(codec, io, &ins);
                assert_eq!(ag[0], [&ins[0][..], &q(&ins[1])].concat(), "own chunk exact");
                assert_eq!(ag[1], [&q(&ins[0]), &ins[1][..]].concat());
                assert_ne!(ag[0], ag[1]);
                let ar = allreduce_ref(codec, io, &ins, 1024);
                let s: Vec<f32> = q(&ins[0]).iter().zip(q(&ins[1])).map(|(a, b)| a + b).collect();
                assert_eq!(ar, s, "2 ranks: both inputs quantized, the sum not re-quantized");
            }
        }
    }

    /// The re-quantizing AllReduce (3 ranks): owners by window and chunk, written out by hand.
    #[test]
    fn allreduce_owners() {
        // One window: 1000 elements = 8 blocks, 3 blocks per chunk: blocks 0-2 rank 0, 3-5
        // rank 1, 6-7 rank 2.
        let f = AllReduceForm::new(3, 1000, 3 * 512);
        assert_eq!(f.chunk_blocks, 3);
        let blocks = [0, 0, 0, 1, 1, 1, 2, 2];
        assert!((0..1000).all(|i| f.owner(i) == blocks[i / BLOCK]));
        // Windows of 1536 = 12 blocks, 4 per chunk: each rank owns 512 elements per window.
        let f = AllReduceForm::new(3, 5000, 1536);
        assert_eq!(f.chunk_blocks, 4);
        assert!((0..5000).all(|i| f.owner(i) == (i % 1536) / 512));
        // Owners are always ranks.
        for n in [1usize, 3, 5, 8] {
            for count in [1usize, 127, 129, 1000, 4095, 4096, 4097, 100_000] {
                for w in [512 * n, 2048 * n, 4096 * n * 3] {
                    let f = AllReduceForm::new(n, count, w);
                    assert!((0..count).all(|i| f.owner(i) < n), "{n} {count} {w}");
                }
            }
        }
        for codec in Codec::ALL {
            for io in IOS {
                for (count, window, owner) in [
                    (1000, 1536, &(|i: usize| blocks[i / BLOCK]) as &dyn Fn(usize) -> usize),
                    (5000, 1536, &|i| (i % 1536) / 512),
                ] {
                    let ins: Vec<Vec<f32>> = (0..3).map(|r| Dist::StudentT3.generate(10 + r, count)).collect();
                    let q: Vec<Vec<f32>> = ins.iter().map(|v| roundtrip(codec, io, v)).collect();
                    let s: Vec<f32> = (0..count)
                        .map(|i| rank_sum((0..3).map(|p| if p == owner(i) { ins[p][i] } else { q[p][i] })))
                        .collect();
                    let form = AllReduceForm::new(3, count, window);
                    assert_eq!(allreduce_sums_at(codec, io, &form, &ins, 0), s);
                    let want = roundtrip(codec, io, &s);
                    assert_eq!(allreduce_ref(codec, io, &ins, window), want, "{codec:?} {io:?} {count}");
                    // Block-aligned segments give the same as the whole.
                    let (a, b) = (3 * BLOCK, 7 * BLOCK);
                    let seg: Vec<&[f32]> = ins.iter().map(|v| &v[a..b]).collect();
                    assert_eq!(allreduce_ref_at(codec, io, &form, &seg, a), want[a..b]);
                }
            }
        }
    }

    /// Edge values: powers of two, FP8 codes' midpoints scaled, INT8 half-integers, values
    /// just around the flush threshold, in blocks with various amaxes.
    fn edge_values(codec: Codec) -> Vec<f32> {
        let mut v = Vec::new();
        for k in -40..=40 {
            let p = 2f32.powi(k);
            v.extend([p, p.next_up(), p.next_down(), -p * 1.5, p * 1.0625, p * 1.9375]);
        }
        match codec {
            Codec::Fp8(fmt) => {
                for c in 0..max_code(fmt) {
                    let mid = (decode(fmt, c) + decode(fmt, c + 1)) / 2.0;
                    v.extend([mid, mid.next_up(), mid.next_down()]);
                }
            }
            Codec::Int8 => {
                for c in -127..127 {
                    let mid = c as f32 + 0.5;
                    v.extend([mid, mid.next_up(), mid.next_down(), mid / 8.0, mid / 4.0, mid / 2.0]);
                }
            }
        }
        v
    }

    /// Checks every element against both bounds; returns the worst err/bound of the per-element
    /// form ([`error_bounds`]) and of the amax form ([`element_error_bound`]).
    fn check_bound(codec: Codec, io: Io, xs: &[f32]) -> (f64, f64) {
        let out = roundtrip(codec, io, xs);
        let bounds = error_bounds(codec, io, xs);
        let (mut worst, mut worst_a) = (0.0f64, 0.0f64);
        for (b, (blk, oblk)) in xs.chunks(BLOCK).zip(out.chunks(BLOCK)).enumerate() {
            let amax = block_amax(blk);
            for (j, (&x, &o)) in blk.iter().zip(oblk).enumerate() {
                let err = (f64::from(o) - f64::from(x)).abs();
                let bound = f64::from(bounds[b * BLOCK + j]);
                let bound_a = f64::from(element_error_bound(codec, x, amax));
                assert!(err <= bound, "{codec:?}: {x:e} -> {o:e} (err {err:e} > bound {bound:e}, amax {amax:e})");
                assert!(bound <= bound_a, "{codec:?}: {x:e}: per-element bound {bound:e} > amax bound {bound_a:e}");
                if bound > 0.0 {
                    worst = worst.max(err / bound);
                    worst_a = worst_a.max(err / bound_a);
                }
            }
        }
        (worst, worst_a)
    }

    #[test]
    fn roundtrip_obeys_the_bound() {
        for codec in Codec::ALL {
            for io in IOS {
                let (mut worst, mut worst_a) = (0.0f64, 0.0f64);
                let mut note = |(w, a): (f64, f64)| {
                    worst = worst.max(w);
                    worst_a = worst_a.max(a);
                };
                for (i, d) in Dist::ALL.into_iter().enumerate() {
                    note(check_bound(codec, io, &d.generate(100 + i as u64, 64 * 1024 + 77)));
                }
                let edge = edge_values(codec);
                note(check_bound(codec, io, &edge));
                // Every edge value alone in a block (amax = itself), and beside a large one.
                for &x in &edge {
                    check_bound(codec, io, &[x]);
                    check_bound(codec, io, &[x, 1e4]);
                    check_bound(codec, io, &[x, x * 1e6]);
                    check_bound(codec, io, &[x, 0.0, 0.0, 0.0, 0.0, x * 100.0]);
                }
                // Both bounds are attained within a few percent (they are not loose).
                assert!(worst > 0.95, "{codec:?} {io:?}: worst err/bound {worst}");
                assert!(worst_a > 0.95, "{codec:?} {io:?}: worst err/amax bound {worst_a}");
            }
        }
    }

    /// Rank `r`'s input of `d` (rounded to `io`).
    fn inputs(d: Dist, io: Io, seed: u64, nranks: usize, len: usize) -> Vec<Vec<f32>> {
        (0..nranks)
            .map(|r| {
                let mut v = d.generate(seed + r as u64, len);
                io.round_all(&mut v);
                v
            })
            .collect()
    }

    fn check_collective(what: &str, out: &[f32], exact: &[f64], bound: &[f32]) -> f64 {
        let mut worst = 0.0f64;
        for (i, ((&o, &e), &b)) in out.iter().zip(exact).zip(bound).enumerate() {
            let err = (f64::from(o) - e).abs();
            assert!(err <= f64::from(b), "{what} i={i}: {o:e} vs {e:e}: err {err:e} > {b:e}");
            if b > 0.0 {
                worst = worst.max(err / f64::from(b));
            }
        }
        worst
    }

    #[test]
    fn collectives_obey_their_bounds() {
        for codec in Codec::ALL {
            for io in IOS {
                for nranks in [2usize, 3, 8] {
                    for d in Dist::ALL {
                        let what = format!("{codec:?} {io:?} {d:?} n={nranks}");
                        let n = 8 * 1024 + 5;
                        let ins = inputs(d, io, 1000 * nranks as u64, nranks, n);
                        // Windows of 4 KiB elements per rank: several windows.
                        let window = 512 * nranks * 2;
                        let form = AllReduceForm::new(nranks, n, window);
                        let out = allreduce_ref(codec, io, &ins, window);
                        let exact: Vec<f64> = (0..n).map(|i| ins.iter().map(|v| f64::from(v[i])).sum()).collect();
                        let bound = allreduce_error_bounds_at(codec, io, &form, &ins, 0);
                        check_collective(&format!("allreduce {what}"), &out, &exact, &bound);
                        // The others, on nranks chunks of 1000 (not whole blocks).
                        let count = 1000;
                        let ins = inputs(d, io, 2000 * nranks as u64, nranks, nranks * count);
                        let rs = reduce_scatter_ref(codec, io, &ins);
                        let rsb = reduce_scatter_error_bounds(codec, io, &ins);
                        let ag = all_gather_ref(codec, io, &ins);
                        let agb = all_gather_error_bounds(codec, io, &ins);
                        let a2a = all_to_all_ref(codec, io, &ins);
                        let a2ab = all_to_all_error_bounds(codec, io, &ins);
                        for r in 0..nranks {
                            let exact: Vec<f64> =
                                (0..count).map(|i| ins.iter().map(|v| f64::from(v[r * count + i])).sum()).collect();
                            check_collective(&format!("reducescatter {what} rank {r}"), &rs[r], &exact, &rsb[r]);
                            let exact: Vec<f64> =
                                ins[..nranks].iter().flat_map(|v| v.iter().map(|&x| f64::from(x))).collect();
                            let w = check_collective(&format!("allgather {what} rank {r}"), &ag[r], &exact, &agb[r]);
                            assert!(w > 0.5, "{what}: the allgather bound is the roundtrip's");
                            let len = nranks * count;
                            assert!(agb[r][r * len..(r + 1) * len].iter().all(|&b| b == 0.0));
                            let exact: Vec<f64> = (0..nranks)
                                .flat_map(|p| ins[p][r * count..(r + 1) * count].iter().map(|&x| f64::from(x)))
                                .collect();
                            check_collective(&format!("alltoall {what} rank {r}"), &a2a[r], &exact, &a2ab[r]);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn io_rounding_and_ulp() {
        assert_eq!(Io::Bf16.round(1.0 + 2f32.powi(-8)), 1.0); // tie to even
        assert_eq!(Io::Bf16.round(1.0 + 3.0 * 2f32.powi(-8)), 1.0 + 2f32.powi(-6));
        assert_eq!(Io::F16.round(1.0 + 2f32.powi(-11)), 1.0);
        assert_eq!(Io::F32.ulp(1.0), 2f32.powi(-23));
        assert_eq!(Io::Bf16.ulp(1.5), 2f32.powi(-7));
        assert_eq!(Io::F16.ulp(1e-7), 2f32.powi(-24));
        assert_eq!(Io::F16.ulp(65504.0), 32.0);
        assert_eq!(Io::F32.ulp(0.0), f32::from_bits(1));
        assert_eq!(Io::F32.ulp(f32::MIN_POSITIVE * 1.5), f32::from_bits(1));
        assert_eq!(Io::Bf16.ulp(0.0), f32::from_bits(1 << 16));
        assert_eq!(Io::F32.ulp(-3.0), 2f32.powi(-22));
        for x in [1e-30f32, 0.1, 1.0, 7.5, 1e30] {
            for io in Io::ALL {
                let x = io.round(x);
                let u = io.ulp(x);
                assert_eq!(io.round(x + u * 0.25), x, "{io:?} {x}");
                assert_eq!(io.round(x + u * 0.75), x + u, "{io:?} {x}");
                assert!(u > 0.0);
            }
        }
        assert_eq!(Io::F16.from_bits16(Io::F16.to_bits16(0.5)), 0.5);
        assert_eq!(Io::Bf16.from_bits16(Io::Bf16.to_bits16(-3.0)), -3.0);
    }

    #[test]
    fn synth_is_deterministic_and_sane() {
        let a = Dist::Gaussian.generate(5, 100_000);
        assert_eq!(a, Dist::Gaussian.generate(5, 100_000));
        let mean = a.iter().map(|&x| f64::from(x)).sum::<f64>() / a.len() as f64;
        let var = a.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / a.len() as f64;
        assert!(mean.abs() < 0.02 && (var - 1.0).abs() < 0.02, "{mean} {var}");
        let t = Dist::StudentT3.generate(6, 100_000);
        assert!(t.iter().any(|x| x.abs() > 20.0), "heavy tails");
        let b = Dist::BigAndSmall.generate(7, 100_000);
        assert!(b.iter().all(|x| (1e-6..=1e4).contains(&x.abs())));
        let m = Dist::MixedScale.generate(8, 128 * 1000);
        let amaxes: Vec<f32> = m.chunks(BLOCK).map(block_amax).collect();
        let (lo, hi) = amaxes.iter().fold((f32::MAX, 0f32), |(l, h), &a| (l.min(a), h.max(a)));
        assert!(hi / lo > 1e5, "blocks span ~1e6: {lo:e}..{hi:e}");
    }

    /// Relative L2 error of an AllReduce of `nranks` ranks of `d` (inputs rounded to `io`, the
    /// output too) vs the exact f64 sum, and its count of non-finite outputs. One window.
    fn allreduce_accuracy(codec: Codec, io: Io, d: Dist, nranks: usize, n: usize) -> (f64, usize) {
        let ins = inputs(d, io, 7, nranks, n);
        let mut out = allreduce_ref(codec, io, &ins, n.next_multiple_of(512 * nranks));
        io.round_all(&mut out);
        let exact: Vec<f64> = (0..n).map(|i| ins.iter().map(|v| f64::from(v[i])).sum()).collect();
        (rel_l2(&out, &exact), out.iter().filter(|x| !x.is_finite()).count())
    }

    /// The targets: a 2-rank AllReduce within 2.8 % (FP8) and 1.0 % (INT8) relative L2 of the
    /// exact result on every distribution, f32 and bf16 I/O, and no non-finite output.
    #[test]
    fn allreduce_accuracy_targets() {
        for codec in Codec::ALL {
            let target = if codec == Codec::Int8 { 0.010 } else { 0.028 };
            for io in IOS {
                for d in Dist::ALL {
                    let (l2, nonfinite) = allreduce_accuracy(codec, io, d, 2, 128 * 1024);
                    assert!(l2 <= target, "{codec:?} {io:?} {d:?}: relative L2 {l2:.5} > {target}");
                    assert_eq!(nonfinite, 0, "{codec:?} {io:?} {d:?}");
                }
            }
        }
    }

    /// The numbers quoted in the README: relative L2 error of one roundtrip and of the
    /// AllReduce model (2 ranks: exchange; 8 ranks: re-quantize) vs the exact f64 result, per
    /// codec, I/O type and distribution. Run with
    /// `cargo test --release -p rcclx-gpu-tests --lib codec::tests::report_accuracy -- --nocapture`.
    #[test]
    fn report_accuracy() {
        let n = 256 * 1024;
        println!("relative L2 error vs f64 (n = {n} elements per rank, block {BLOCK})");
        println!(
            "{:<13} {:<5} {:<14} {:>10} {:>10} {:>10} {:>8}",
            "codec", "io", "distribution", "roundtrip", "AR 2 ranks", "AR 8 ranks", "flushed"
        );
        for codec in Codec::ALL {
            for io in IOS {
                for d in Dist::ALL {
                    let mut x = d.generate(42, n);
                    io.round_all(&mut x);
                    let q = roundtrip(codec, io, &x);
                    let exact: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
                    let rt = rel_l2(&q, &exact);
                    let flushed = q.iter().zip(&x).filter(|(o, x)| **o == 0.0 && **x != 0.0).count();
                    let mut ar = [0.0; 2];
                    for (k, nranks) in [2usize, 8].into_iter().enumerate() {
                        let (l2, nonfinite) = allreduce_accuracy(codec, io, d, nranks, n);
                        ar[k] = l2;
                        assert!(l2 < 0.05, "{codec:?} {io:?} {d:?} {nranks}: {l2}");
                        assert_eq!(nonfinite, 0);
                    }
                    assert!(rt < 0.05);
                    println!(
                        "{:<13} {:<5} {:<14} {:>10.5} {:>10.5} {:>10.5} {:>8}",
                        codec.name(),
                        io.name(),
                        d.name(),
                        rt,
                        ar[0],
                        ar[1],
                        format!("{:.3}%", 100.0 * flushed as f64 / n as f64)
                    );
                }
            }
        }
    }
}
