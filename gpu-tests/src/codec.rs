//! The FP8 block codec on the CPU: the reference the GPU kernels implement bit for bit, and
//! reference models of the four low-precision collectives.
//!
//! Layer: leaf (pure arithmetic). Depends only on [`rcclx::kernels::Fp8Format`] and `half`.
//!
//! # The codec (normative: `hip_kernels/` implements exactly this)
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
//! * **Blocks.** A range is cut into blocks of [`BLOCK`] = 128 consecutive elements from its
//!   start (the last block may be shorter); each block has one f32 `scale`:
//!   * `amax` = max |x| over the block's *finite* elements (NaN and ±inf are ignored);
//!   * if `amax < 1e-30` ([`AMAX_FLOOR`]) or the block has no finite element: `scale = 0`,
//!     `inv = 0`, every finite element gets code `0x00` (+0);
//!   * else `scale = amax / MAX` and `inv = MAX / amax` (each one IEEE f32 division,
//!     correctly rounded; `MAX` = 448 or 240);
//!   * code of a finite element = `encode(x * inv)` (one correctly rounded f32 multiply, no FMA);
//!     code of a NaN or ±inf element = the NaN code (so NaN/inf *inputs* come out as NaN, while
//!     the other elements of their block are unaffected, since `amax` ignores them);
//!   * decoded value = `decode(code) * scale` (one f32 multiply; a NaN code gives NaN).
//! * **Collectives** ([`allreduce_ref`], [`reduce_scatter_ref`], [`all_gather_ref`],
//!   [`all_to_all_ref`]): which ranges are blocked where, summation order (f32, ranks 0..n-1),
//!   where the result is re-quantized. bf16/fp16 inputs are widened to f32 exactly; the output is
//!   rounded to the I/O type once, at the very end ([`Io::round`], RNE).
//!
//! # Error bound of one quantize + dequantize ([`element_error_bound`])
//!
//! Let `M` be the format's max, `u = 2^-24` (f32 unit roundoff), `A` the block's amax (≥ 1e-30),
//! `emin = 1 - bias` (exponent of the smallest normal). The f32 steps are `inv = M/A (1+d1)`,
//! `y = x inv (1+d2)`, `s = A/M (1+d3)`, `out = decode(encode(y)) s (1+d4)` with `|di| <= u`.
//! RNE to 3 mantissa bits errs by at most half an ULP: for `|y| >= 2^emin` that is
//! `2^(floor(log2|y|) - 4) <= 2^-4 |y|`; below, the spacing is the subnormal one `2^(emin-3)` and
//! the error at most `2^(emin-4) = 2^-(bias+3)` (fn 2^-10, fnuz 2^-11). Saturation only clips
//! `y <= M (1+u)^2`, an error of ≤ 2u M, inside the relative term. Hence
//!
//! ```text
//! |out - x| <= (1+u)^4 max(2^-4 |x|, 2^-(bias+3) A / M) + ((1+u)^4 - 1) |x|
//!           <= (1 + 2^-21) max(2^-4 |x|, 2^-(bias+3) A / M) + 2^-21 |x|
//! ```
//!
//! i.e. 6.25 % relative for elements above `2^emin A / M` (fn `A/28672`, fnuz `A/30720`), and
//! an absolute floor of `2^-(bias+3) A / M` (fn `2.18e-6 A`, fnuz `2.03e-6 A`) below; elements
//! under that floor may flush to zero. [`element_error_bound`] returns this with the constants
//! rounded up (`2^-20`), and `|x|` for blocks under [`AMAX_FLOOR`] (everything flushes).
//!
//! **AllReduce of n ranks** (per element, `x_r` the inputs, `A_r` their block amaxes, `S'` the
//! f32 sum of the dequantized inputs, `A_o` the block amax of those sums):
//!
//! ```text
//! |out - sum x_r| <= sum_r E(x_r, A_r)  +  (n-1) u / (1 - (n-1) u) * sum_r |Q(x_r)|  +  E(S', A_o)
//! ```
//!
//! where `E` is the one-step bound above and the middle term is the f32 recursive-summation
//! bound. Roughly `2^-4 (sum |x_r| + |S|) + 2.2e-6 (sum A_r + A_o)`: relative 6.25 % per
//! quantization on |values|, which for random data averages out to a relative L2 error of a few
//! percent (see the `report_accuracy` test). [`allreduce_error_bound`] computes it.
//! ReduceScatter has no output quantization (drop the last term); AllGather and AllToAll are one
//! step (`E` alone; AllToAll's self chunk is exact).
#![forbid(unsafe_code)]

pub use rcclx::kernels::Fp8Format;

pub mod synth;

/// Elements per scaled block.
pub const BLOCK: usize = 128;

/// Blocks whose amax is below this (or that have no finite element) have scale 0 and encode
/// every finite element as +0.
pub const AMAX_FLOOR: f32 = 1e-30;

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

/// Max |x| over the finite elements (0 if none).
pub fn block_amax(xs: &[f32]) -> f32 {
    xs.iter().filter(|x| x.is_finite()).fold(0.0f32, |a, x| a.max(x.abs()))
}

/// `(scale, inv)` of a block with amax `amax`: `(amax / MAX, MAX / amax)`, or `(0, 0)` when
/// `amax < 1e-30`.
pub fn block_scale(fmt: Fp8Format, amax: f32) -> (f32, f32) {
    // A NaN amax (impossible from block_amax) is a zero block too.
    if amax.is_nan() || amax < AMAX_FLOOR {
        return (0.0, 0.0);
    }
    let m = fp8_max(fmt);
    (amax / m, m / amax)
}

/// Quantizes one block (`xs.len() <= BLOCK`) into `codes` (same length); returns its scale.
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

/// Decodes one block: `out[i] = decode(codes[i]) * scale`.
pub fn dequantize_block(fmt: Fp8Format, codes: &[u8], scale: f32, out: &mut [f32]) {
    assert_eq!(codes.len(), out.len(), "one output per code");
    for (o, &c) in out.iter_mut().zip(codes) {
        *o = decode(fmt, c) * scale;
    }
}

/// Quantizes and dequantizes `xs` in place of `out`, blockwise from `xs[0]`.
pub fn roundtrip_into(fmt: Fp8Format, xs: &[f32], out: &mut [f32]) {
    assert_eq!(xs.len(), out.len());
    let mut codes = [0u8; BLOCK];
    for (x, o) in xs.chunks(BLOCK).zip(out.chunks_mut(BLOCK)) {
        let c = &mut codes[..x.len()];
        let scale = quantize_block(fmt, x, c);
        dequantize_block(fmt, c, scale, o);
    }
}

/// Quantize + dequantize of any length, blockwise from `xs[0]`.
pub fn roundtrip(fmt: Fp8Format, xs: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0; xs.len()];
    roundtrip_into(fmt, xs, &mut out);
    out
}

/// The common length of every rank's buffer; panics on ragged or empty input.
fn common_len<V: AsRef<[f32]>>(inputs: &[V]) -> usize {
    assert!(!inputs.is_empty(), "at least one rank");
    let n = inputs[0].as_ref().len();
    assert!(inputs.iter().all(|v| v.as_ref().len() == n), "every rank has the same length");
    n
}

/// AllReduce (sum) as the FP8 kernels compute it, on f32 data; every rank's output.
///
/// Each rank's input is quantized + dequantized blockwise from its start; the dequantized
/// inputs are summed in f32 in rank order 0..n-1; the sum is quantized + dequantized again,
/// blockwise from the start of the vector (each owner re-quantizes its chunk, and chunks are
/// whole blocks, so block boundaries are global).
pub fn allreduce_ref<V: AsRef<[f32]>>(fmt: Fp8Format, inputs: &[V]) -> Vec<f32> {
    let n = common_len(inputs);
    let mut sum = roundtrip(fmt, inputs[0].as_ref());
    let mut q = vec![0.0f32; n];
    for v in &inputs[1..] {
        roundtrip_into(fmt, v.as_ref(), &mut q);
        for (s, x) in sum.iter_mut().zip(&q) {
            *s += *x;
        }
    }
    roundtrip(fmt, &sum)
}

/// ReduceScatter (sum) as the FP8 kernels compute it: `inputs[r]` holds `n * count` elements,
/// chunk `c` = elements `[c*count, (c+1)*count)`. Each chunk of each rank is quantized +
/// dequantized blockwise from the chunk start, the chunks are summed in f32 in rank order, and
/// the sum is not re-quantized. Returns every rank's output (`out[r]` = sum of chunks `r`).
pub fn reduce_scatter_ref<V: AsRef<[f32]>>(fmt: Fp8Format, inputs: &[V]) -> Vec<Vec<f32>> {
    let nranks = inputs.len();
    let len = common_len(inputs);
    assert_eq!(len % nranks, 0, "each rank's input is nranks chunks");
    let count = len / nranks;
    let mut q = vec![0.0f32; count];
    (0..nranks)
        .map(|c| {
            let chunk = c * count..(c + 1) * count;
            let mut sum = roundtrip(fmt, &inputs[0].as_ref()[chunk.clone()]);
            for v in &inputs[1..] {
                roundtrip_into(fmt, &v.as_ref()[chunk.clone()], &mut q);
                for (s, x) in sum.iter_mut().zip(&q) {
                    *s += *x;
                }
            }
            sum
        })
        .collect()
}

/// AllGather as the FP8 kernels compute it: each rank's input quantized + dequantized blockwise
/// from its start (the rank's own part too); every rank's output is the concatenation.
pub fn all_gather_ref<V: AsRef<[f32]>>(fmt: Fp8Format, inputs: &[V]) -> Vec<f32> {
    common_len(inputs);
    inputs.iter().flat_map(|v| roundtrip(fmt, v.as_ref())).collect()
}

/// AllToAll as the FP8 kernels compute it: chunk `p` of rank `r`'s input (`count` elements)
/// lands at position `r` of rank `p`'s output, quantized + dequantized blockwise from the chunk
/// start, except the chunk a rank sends to itself, which is copied exactly. Returns every
/// rank's output.
pub fn all_to_all_ref<V: AsRef<[f32]>>(fmt: Fp8Format, inputs: &[V]) -> Vec<Vec<f32>> {
    let nranks = inputs.len();
    let len = common_len(inputs);
    assert_eq!(len % nranks, 0, "each rank's input is nranks chunks");
    let count = len / nranks;
    (0..nranks)
        .map(|p| {
            let mut out = vec![0.0f32; len];
            for (r, v) in inputs.iter().enumerate() {
                let src = &v.as_ref()[p * count..(p + 1) * count];
                let dst = &mut out[r * count..(r + 1) * count];
                if r == p {
                    dst.copy_from_slice(src);
                } else {
                    roundtrip_into(fmt, src, dst);
                }
            }
            out
        })
        .collect()
}

/// Bound on `|roundtrip(x) - x|` for a finite `x` in a block whose amax is `block_amax` (see the
/// module doc for the derivation): `(1 + 2^-20) max(2^-4 |x|, 2^-(bias+3) A / MAX) + 2^-20 |x|`;
/// `|x|` when `A < 1e-30` (the block flushes); `inf` for a non-finite `x`.
pub fn element_error_bound(fmt: Fp8Format, x: f32, block_amax: f32) -> f32 {
    if !x.is_finite() {
        return f32::INFINITY;
    }
    let ax = f64::from(x.abs());
    if block_amax.is_nan() || block_amax < AMAX_FLOOR {
        return x.abs();
    }
    let floor = f64::from(block_amax) / f64::from(fp8_max(fmt)) * 2f64.powi(-(bias(fmt) + 3));
    let e = (1.0 + 2f64.powi(-20)) * (ax * 0.0625).max(floor) + 2f64.powi(-20) * ax;
    // Round up into f32.
    let b = e as f32;
    if f64::from(b) < e { b.next_up() } else { b }
}

/// Bound on `|allreduce_ref - sum x_r|` for one element: `xs[r]` the inputs, `amaxes[r]` their
/// block amaxes, `sum` the f32 sum of the dequantized inputs (or the exact sum: the difference is
/// inside the slack), `out_amax` the block amax of those sums. See the module doc.
pub fn allreduce_error_bound(fmt: Fp8Format, xs: &[f32], amaxes: &[f32], sum: f32, out_amax: f32) -> f32 {
    assert_eq!(xs.len(), amaxes.len());
    let n = xs.len() as f64;
    let u = 2f64.powi(-24);
    let gamma = (n - 1.0) * u / (1.0 - (n - 1.0) * u);
    let mut inputs = 0.0f64;
    let mut mags = 0.0f64;
    for (&x, &a) in xs.iter().zip(amaxes) {
        let e = f64::from(element_error_bound(fmt, x, a));
        inputs += e;
        mags += f64::from(x.abs()) + e;
    }
    // The output bound is evaluated at the exact-or-computed sum; widen it by the slack between
    // them (at most `inputs + gamma * mags`, times 2^-4 for the relative term).
    let out = f64::from(element_error_bound(fmt, sum, out_amax)) + 0.0625 * (inputs + gamma * mags);
    let e = (inputs + gamma * mags + out) * (1.0 + 2f64.powi(-20));
    let b = e as f32;
    if f64::from(b) < e { b.next_up() } else { b }
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

    #[test]
    fn block_spanning_1e_minus6_to_1e4() {
        for fmt in FORMATS {
            let xs: Vec<f32> = (0..BLOCK).map(|i| 10f32.powf(-6.0 + 10.0 * i as f32 / (BLOCK - 1) as f32)).collect();
            let mut codes = [0u8; BLOCK];
            let scale = quantize_block(fmt, &xs, &mut codes);
            assert_eq!(scale, xs[BLOCK - 1] / fp8_max(fmt));
            assert_eq!(codes[BLOCK - 1], max_code(fmt), "amax maps to max");
            let mut out = [0f32; BLOCK];
            dequantize_block(fmt, &codes, scale, &mut out);
            for (i, (&x, &o)) in xs.iter().zip(&out).enumerate() {
                assert!(o.is_finite(), "{fmt:?} {i}");
                assert!((o - x).abs() <= element_error_bound(fmt, x, xs[BLOCK - 1]), "{fmt:?} {i} {x:e} -> {o:e}");
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
            // All zero, and all below the floor: scale 0, +0 codes, zero outputs.
            for xs in [vec![0.0f32; 77], vec![-1e-31f32; 128], vec![1e-38f32, -3e-31, 0.0, -0.0]] {
                let mut codes = vec![0xAAu8; xs.len()];
                assert_eq!(quantize_block(fmt, &xs, &mut codes), 0.0);
                assert!(codes.iter().all(|&c| c == 0), "{fmt:?} {codes:?}");
                assert!(roundtrip(fmt, &xs).iter().all(|&o| o == 0.0 && o.is_sign_positive()));
            }
            // NaN / inf elements: NaN there, the rest scaled by the finite amax.
            let mut xs: Vec<f32> = (0..BLOCK).map(|i| (i as f32 - 64.0) / 8.0).collect();
            xs[3] = f32::NAN;
            xs[10] = f32::INFINITY;
            xs[11] = f32::NEG_INFINITY;
            let out = roundtrip(fmt, &xs);
            let amax = block_amax(&xs);
            assert_eq!(amax, 8.0);
            for (i, (&x, &o)) in xs.iter().zip(&out).enumerate() {
                if [3, 10, 11].contains(&i) {
                    assert!(o.is_nan(), "{i}");
                } else {
                    assert!((o - x).abs() <= element_error_bound(fmt, x, amax), "{i}: {x} -> {o}");
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
                let out = roundtrip(fmt, &xs);
                for (&x, &o) in xs.iter().zip(&out) {
                    assert!(o.is_finite(), "{amax:e}: {x:e} -> {o:e}");
                    assert!((o - x).abs() <= element_error_bound(fmt, x, amax), "{amax:e}: {x:e} -> {o:e}");
                }
            }
        }
    }

    /// Exact cases: a block whose amax is MAX * 2^k holds only FP8 values times 2^k, so the
    /// roundtrip is the identity. Used to check the collectives' layouts exactly.
    fn exact_data(fmt: Fp8Format, seed: u64, n: usize) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        let mut v: Vec<f32> = (0..n)
            .map(|_| {
                let c = (rng.next_u64() % 256) as u8;
                let d = decode(fmt, c);
                if d.is_nan() { 1.0 } else { d }
            })
            .collect();
        for (b, blk) in v.chunks_mut(BLOCK).enumerate() {
            blk[0] = fp8_max(fmt); // amax = MAX
            let k = (b % 7) as i32 - 3;
            blk.iter_mut().for_each(|x| *x *= 2f32.powi(k));
        }
        v
    }

    #[test]
    fn exact_values_roundtrip_exactly() {
        for fmt in FORMATS {
            let v = exact_data(fmt, 7, 1000);
            assert_eq!(roundtrip(fmt, &v), v);
        }
    }

    #[test]
    fn collective_layouts() {
        let fmt = Fp8Format::E4m3fn;
        for nranks in [2usize, 3, 8] {
            // Chunks of whole blocks of exact data: every model reduces to the exact collective.
            let count = 2 * BLOCK;
            let ins: Vec<Vec<f32>> = (0..nranks).map(|r| exact_data(fmt, r as u64, nranks * count)).collect();
            let ag = all_gather_ref(fmt, &ins);
            assert_eq!(ag, ins.concat());
            let a2a = all_to_all_ref(fmt, &ins);
            for p in 0..nranks {
                for r in 0..nranks {
                    assert_eq!(a2a[p][r * count..(r + 1) * count], ins[r][p * count..(p + 1) * count]);
                }
            }
            let rs = reduce_scatter_ref(fmt, &ins);
            for r in 0..nranks {
                for i in 0..count {
                    let mut s = 0.0f32;
                    (0..nranks).for_each(|p| s += ins[p][r * count + i]);
                    assert_eq!(rs[r][i], s);
                }
            }
        }
        // Block alignment: reduce-scatter and all-to-all block each chunk from its start;
        // allreduce blocks the whole vector from index 0.
        let count = 129;
        let ins: Vec<Vec<f32>> = (0..2).map(|r| Dist::MixedScale.generate(r, 2 * count)).collect();
        let rs = reduce_scatter_ref(fmt, &ins);
        let chunk1 = |v: &Vec<f32>| roundtrip(fmt, &v[count..]);
        let want: Vec<f32> = chunk1(&ins[0]).iter().zip(chunk1(&ins[1])).map(|(a, b)| a + b).collect();
        assert_eq!(rs[1], want);
        let a2a = all_to_all_ref(fmt, &ins);
        assert_eq!(a2a[0][count..], roundtrip(fmt, &ins[1][..count])[..]);
        assert_eq!(a2a[0][..count], ins[0][..count], "self chunk copied exactly");
        assert_eq!(a2a[1][..count], chunk1(&ins[0])[..]);
        let ar = allreduce_ref(fmt, &ins);
        let s: Vec<f32> = roundtrip(fmt, &ins[0]).iter().zip(roundtrip(fmt, &ins[1])).map(|(a, b)| a + b).collect();
        assert_eq!(ar, roundtrip(fmt, &s));
    }

    /// Edge values: powers of two, codes' midpoints scaled, values just around the flush
    /// threshold, in blocks with various amaxes.
    fn edge_values(fmt: Fp8Format) -> Vec<f32> {
        let mut v = Vec::new();
        for k in -40..=40 {
            let p = 2f32.powi(k);
            v.extend([p, p.next_up(), p.next_down(), -p * 1.5, p * 1.0625, p * 1.9375]);
        }
        for c in 0..max_code(fmt) {
            let mid = (decode(fmt, c) + decode(fmt, c + 1)) / 2.0;
            v.extend([mid, mid.next_up(), mid.next_down()]);
        }
        v
    }

    fn check_bound(fmt: Fp8Format, xs: &[f32]) -> f64 {
        let out = roundtrip(fmt, xs);
        let mut worst = 0.0f64;
        for (blk, oblk) in xs.chunks(BLOCK).zip(out.chunks(BLOCK)) {
            let amax = block_amax(blk);
            for (&x, &o) in blk.iter().zip(oblk) {
                let err = (f64::from(o) - f64::from(x)).abs();
                let bound = f64::from(element_error_bound(fmt, x, amax));
                assert!(err <= bound, "{fmt:?}: {x:e} -> {o:e} (err {err:e} > bound {bound:e}, amax {amax:e})");
                if bound > 0.0 {
                    worst = worst.max(err / bound);
                }
            }
        }
        worst
    }

    #[test]
    fn roundtrip_obeys_the_bound() {
        for fmt in FORMATS {
            let mut worst = 0.0f64;
            for (i, d) in Dist::ALL.into_iter().enumerate() {
                worst = worst.max(check_bound(fmt, &d.generate(100 + i as u64, 64 * 1024 + 77)));
            }
            let edge = edge_values(fmt);
            worst = worst.max(check_bound(fmt, &edge));
            // Every edge value alone in a block (amax = itself), and beside a large one.
            for &x in &edge {
                check_bound(fmt, &[x]);
                check_bound(fmt, &[x, 1e4]);
                check_bound(fmt, &[x, x * 1e6]);
            }
            // The bound is attained within a few percent (it is not loose).
            assert!(worst > 0.9, "{fmt:?}: worst err/bound {worst}");
        }
    }

    #[test]
    fn allreduce_obeys_the_bound() {
        for fmt in FORMATS {
            for nranks in [2usize, 8] {
                for d in Dist::ALL {
                    let n = 8 * 1024 + 5;
                    let ins: Vec<Vec<f32>> =
                        (0..nranks).map(|r| d.generate(1000 * nranks as u64 + r as u64, n)).collect();
                    let out = allreduce_ref(fmt, &ins);
                    let q: Vec<Vec<f32>> = ins.iter().map(|v| roundtrip(fmt, v)).collect();
                    let mut sums = vec![0.0f32; n];
                    for v in &q {
                        sums.iter_mut().zip(v).for_each(|(s, x)| *s += *x);
                    }
                    for b in (0..n).step_by(BLOCK) {
                        let e = (b + BLOCK).min(n);
                        let out_amax = block_amax(&sums[b..e]);
                        let amaxes: Vec<f32> = ins.iter().map(|v| block_amax(&v[b..e])).collect();
                        for i in b..e {
                            let xs: Vec<f32> = ins.iter().map(|v| v[i]).collect();
                            let exact: f64 = xs.iter().map(|&x| f64::from(x)).sum();
                            let err = (f64::from(out[i]) - exact).abs();
                            let bound = f64::from(allreduce_error_bound(fmt, &xs, &amaxes, sums[i], out_amax));
                            assert!(err <= bound, "{fmt:?} {d:?} n={nranks} i={i}: err {err:e} > {bound:e}");
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

    /// The numbers quoted in the README: relative L2 error of one roundtrip and of the
    /// AllReduce model (2 and 8 ranks) vs the exact f64 result, per distribution. Run with
    /// `cargo test --release -p rcclx-gpu-tests --lib codec::tests::report_accuracy -- --nocapture`.
    #[test]
    fn report_accuracy() {
        let n = 256 * 1024;
        println!("relative L2 error vs f64 (n = {n} elements per rank, block {BLOCK})");
        println!(
            "{:<8} {:<14} {:>10} {:>10} {:>10} {:>10}",
            "format", "distribution", "roundtrip", "AR 2 ranks", "AR 8 ranks", "flushed"
        );
        for fmt in FORMATS {
            for d in Dist::ALL {
                let x = d.generate(42, n);
                let q = roundtrip(fmt, &x);
                let exact: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
                let rt = rel_l2(&q, &exact);
                let flushed = q.iter().zip(&x).filter(|(o, x)| **o == 0.0 && **x != 0.0).count();
                let mut ar = [0.0; 2];
                for (k, nranks) in [2usize, 8].into_iter().enumerate() {
                    let ins: Vec<Vec<f32>> = (0..nranks).map(|r| d.generate(7 + r as u64, n)).collect();
                    let out = allreduce_ref(fmt, &ins);
                    let exact: Vec<f64> = (0..n).map(|i| ins.iter().map(|v| f64::from(v[i])).sum()).collect();
                    ar[k] = rel_l2(&out, &exact);
                    assert!(ar[k] < 0.05, "{fmt:?} {d:?} {nranks}: {}", ar[k]);
                }
                assert!(rt < 0.05);
                let f = if fmt == Fp8Format::E4m3fn { "e4m3fn" } else { "e4m3fnuz" };
                println!(
                    "{f:<8} {:<14} {:>10.5} {:>10.5} {:>10.5} {:>10}",
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
