//! Error bounds: of one quantize + dequantize (per element, from the block amax or per lane),
//! and of each collective model against the exact sum (see the codec module doc).

use super::block::{AMAX_FLOOR, BLOCK, Codec, block_amax};
use super::collectives::{AllReduceForm, allreduce_sums_at, chunk_len, common_len};
use super::fp8::{bias, fp8_max};
use super::int8::{int8_lane, int8_lane_scale, int8_quantize_block};
use super::io::Io;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::collectives::{all_gather_ref, all_to_all_ref, allreduce_ref, reduce_scatter_ref};
    use crate::codec::fp8::{decode, dequantize_block, max_code, nan_code, quantize_block};
    use crate::codec::int8::{INT8_NAN, LANES, int8_dequantize_block};
    use crate::codec::roundtrip::roundtrip;
    use crate::codec::synth::{Dist, Rng};
    use crate::codec::testing::{FORMATS, IOS, element_of, inputs};
    use rcclx::kernels::Fp8Format;

    /// Quantize + dequantize with FP8 (the I/O type does not matter to FP8).
    fn fp8_roundtrip(fmt: Fp8Format, xs: &[f32]) -> Vec<f32> {
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
            // All zero, and all below the floor: scale 0, codes of x * 0 (zeros of x's sign in
            // fn, +0 in fnuz), zero outputs of the same sign (what the kernels compute).
            for xs in [vec![0.0f32; 77], vec![-1e-31f32; 128], vec![1e-38f32, -3e-31, 0.0, -0.0]] {
                let mut codes = vec![0xAAu8; xs.len()];
                assert_eq!(quantize_block(fmt, &xs, &mut codes), 0.0);
                let signed = fmt == Fp8Format::E4m3fn;
                for (&x, &c) in xs.iter().zip(&codes) {
                    assert_eq!(c, if signed && x.is_sign_negative() { 0x80 } else { 0 }, "{fmt:?} {x:e}");
                }
                for (&x, &o) in xs.iter().zip(&fp8_roundtrip(fmt, &xs)) {
                    assert!(o == 0.0 && o.is_sign_negative() == (signed && x.is_sign_negative()), "{fmt:?} {x:e}");
                }
            }
            // NaN / inf elements: NaN there, the rest scaled by the finite amax.
            let mut xs: Vec<f32> = (0..BLOCK).map(|i| (i as f32 - 64.0) / 8.0).collect();
            xs[3] = f32::NAN;
            xs[10] = f32::INFINITY;
            xs[11] = f32::NEG_INFINITY;
            let out = fp8_roundtrip(fmt, &xs);
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
                let out = fp8_roundtrip(fmt, &xs);
                for (&x, &o) in xs.iter().zip(&out) {
                    assert!(o.is_finite(), "{amax:e}: {x:e} -> {o:e}");
                    assert!((o - x).abs() <= element_error_bound(codec, x, amax), "{amax:e}: {x:e} -> {o:e}");
                }
            }
        }
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
}
