//! The INT8 codec: lanes, the bf16 block scale, per-lane shifts, and the block quantization
//! (normative: `hip_kernels/codec.cuh` defines and implements exactly this; see the codec module doc).

use super::block::{AMAX_FLOOR, BLOCK, pow2};
use super::io::Io;

/// Lanes of 16 values per block (INT8's shifts are per lane).
pub const LANES: usize = 8;

/// INT8's largest code magnitude.
pub const INT8_MAX: f32 = 127.0;

/// INT8's NaN code (-128).
pub const INT8_NAN: u8 = 0x80;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::synth::Rng;
    use crate::codec::testing::element_of;

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
}
