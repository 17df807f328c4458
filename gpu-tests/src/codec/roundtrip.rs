//! One quantize + dequantize of a range with either codec, blockwise from its start: `Q(v)` of
//! the codec module doc.

use super::block::{BLOCK, Codec};
use super::fp8::{dequantize_block, quantize_block};
use super::int8::{int8_dequantize_block, int8_quantize_block};
use super::io::Io;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::int8::LANES;
    use crate::codec::testing::element_of;

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
}
