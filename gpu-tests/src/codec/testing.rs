//! Helpers shared by the codec modules' unit tests.

use rcclx::kernels::Fp8Format;

use super::io::Io;
use super::synth::Dist;

/// Both FP8 formats.
pub(super) const FORMATS: [Fp8Format; 2] = [Fp8Format::E4m3fn, Fp8Format::E4m3fnuz];

/// The I/O types most tests run on: one of each INT8 lane width (f32: 4, bf16: 8).
pub(super) const IOS: [Io; 2] = [Io::F32, Io::Bf16];

/// INT8's lane geometry, from the kernels' definition: lane L's value c is element
/// (c / N) * 8N + L*N + c % N, N = 16 / element size.
pub(super) fn element_of(io: Io, lane: usize, c: usize) -> usize {
    let n = 16 / io.size();
    (c / n) * 8 * n + lane * n + c % n
}

/// Rank `r`'s input of `d` (rounded to `io`).
pub(super) fn inputs(d: Dist, io: Io, seed: u64, nranks: usize, len: usize) -> Vec<Vec<f32>> {
    (0..nranks)
        .map(|r| {
            let mut v = d.generate(seed + r as u64, len);
            io.round_all(&mut v);
            v
        })
        .collect()
}
