//! The FP8 E4M3 codec (both formats): element encode/decode and the block quantization
//! (normative: `hip_kernels/codec.cuh` defines and implements exactly this; see the codec module doc).

use rcclx::kernels::Fp8Format;

use super::block::{AMAX_FLOOR, BLOCK, block_amax, pow2};

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
        // A zero block (inv 0) encodes x * 0 = +-0: fn keeps the sign (0x80), fnuz has no -0.
        *c = if !x.is_finite() { nan_code(fmt) } else { encode(fmt, x * inv) };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::testing::FORMATS;

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
}
