//! Reference models of the four low-precision collectives (AllReduce in both forms,
//! ReduceScatter, AllGather, AllToAll): what the kernels compute, composed of the codecs'
//! [`roundtrip`] and rank-order f32 sums.

use super::block::{BLOCK, Codec};
use super::io::Io;
use super::roundtrip::{roundtrip, roundtrip_into};

/// The common length of every rank's buffer; panics on ragged or empty input.
pub(super) fn common_len<V: AsRef<[f32]>>(inputs: &[V]) -> usize {
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
pub(super) fn chunk_len<V: AsRef<[f32]>>(inputs: &[V]) -> usize {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::fp8::{decode, fp8_max};
    use crate::codec::int8::INT8_MAX;
    use crate::codec::synth::{Dist, Rng};
    use crate::codec::testing::IOS;

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
}
