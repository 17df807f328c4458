//! The host side of a case: which codec model the kernels must match (device 0's FP8 format),
//! the input data, the exact (f64) result, the codec model (what the kernels must produce) and
//! the documented per-element error bound; and the byte images that go to and come from the GPU.

use std::ops::Range;
use std::time::Instant;

use rcclx::config::LowpCodec;
use rcclx::gpu::Runtime;
use rcclx_gpu_tests::codec::{self, AllReduceForm, BLOCK, Codec, Fp8Format, Io};
use rcclx_gpu_tests::watchdog;

use crate::cases::{Case, Group, Op, expect_lowp, seed, window_for};

/// The absolute part of the tolerance against the model (`report.rs`: 1 ulp of the output type
/// + this), and the floor of the control run's bound.
pub const MODEL_TOL_ABS: f32 = f32::MIN_POSITIVE;

/// The FP8 format of device 0's code object, and a description of the choice.
pub fn fp8_format(rt: &Runtime) -> (Fp8Format, String) {
    let arch = rt.device_info(0).map(|i| i.arch).unwrap_or_default();
    match rcclx::kernels::for_arch(&arch) {
        Some(co) => (co.fp8_format(), format!("arch {arch} -> code object {} ({:?})", co.target, co.fp8_format())),
        None => (
            Fp8Format::E4m3fn,
            format!("arch {arch}: NO rcclx code object (rcclx will only forward); model assumes E4m3fn"),
        ),
    }
}

/// The model of the kernels with the low-precision codec `lowp`: INT8, or FP8 in device 0's
/// format; and a description of the choice.
pub fn model_codec(rt: &Runtime, lowp: LowpCodec) -> (Codec, String) {
    let (fmt, what) = fp8_format(rt);
    match lowp {
        LowpCodec::Fp8 => (Codec::Fp8(fmt), what),
        LowpCodec::Int8 => (Codec::Int8, format!("{what}; the INT8 codec does not depend on it")),
    }
}

/// Inputs, exact result, codec model and error bound of one group. Each of `exact`, `model`
/// and `bound` holds one output shared by every rank, or one per rank.
pub struct Prepared {
    pub inputs: Vec<Vec<f32>>,
    /// One for allreduce/allgather (every rank's exact result is the same), else one per rank.
    pub exact: Vec<Vec<f64>>,
    /// One for allreduce (and the control run of allgather), else one per rank.
    pub model: Vec<Vec<f32>>,
    pub bound: Vec<Vec<f32>>,
}

/// Rank `r`'s entry of a list that is either shared (one entry) or per rank.
fn of_rank<T>(v: &[Vec<T>], r: usize) -> &[T] {
    if v.len() == 1 { &v[0] } else { &v[r] }
}

impl Prepared {
    /// The exact result rank `r` should receive.
    pub fn exact(&self, r: usize) -> &[f64] {
        of_rank(&self.exact, r)
    }
    /// The codec model of rank `r`'s output (rounded to the output type).
    pub fn model(&self, r: usize) -> &[f32] {
        of_rank(&self.model, r)
    }
    /// The bound on `|output - exact|` of rank `r`'s output.
    pub fn bound(&self, r: usize) -> &[f32] {
        of_rank(&self.bound, r)
    }
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(4, |n| n.get()).clamp(1, 32)
}

/// Runs `f` on block-aligned segments of `[0, len)` in parallel; results in order.
fn par_segments<T: Send>(len: usize, f: impl Fn(Range<usize>) -> T + Sync) -> Vec<T> {
    let t = threads().min(len.div_ceil(64 * BLOCK)).max(1);
    let seg = len.div_ceil(t).div_ceil(BLOCK) * BLOCK;
    let f = &f;
    std::thread::scope(|s| {
        let hs: Vec<_> =
            (0..len.div_ceil(seg.max(1))).map(|i| s.spawn(move || f(i * seg..((i + 1) * seg).min(len)))).collect();
        hs.into_iter().map(|h| h.join().expect("worker panicked")).collect()
    })
}

/// Runs `f(r)` for every rank in parallel; results in rank order.
fn par_ranks<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let f = &f;
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n).map(|r| s.spawn(move || f(r))).collect();
        hs.into_iter().map(|h| h.join().expect("worker panicked")).collect()
    })
}

/// Adds the output type's rounding (1 ulp) and converts a bound to f32, rounding up.
fn finish_bound(io: Io, b: f64, exact: f64) -> f32 {
    let total = b + f64::from(io.ulp((exact.abs() + b) as f32));
    let f = total as f32;
    if f64::from(f) < total { f.next_up() } else { f }
}

/// Codec bounds (`codec::*_error_bounds`) plus the output rounding, against `exact`.
fn finish_bounds(io: Io, b: &[f32], exact: &[f64]) -> Vec<f32> {
    b.iter().zip(exact).map(|(&b, &e)| finish_bound(io, f64::from(b), e)).collect()
}

/// The host data of group `g` on `n` ranks with `codec`; `lowp`: whether the low-precision
/// path is expected (else the model is the exact result rounded to the output type).
pub fn prepare(g: &Group, n: usize, codec: Codec, base_seed: u64, lowp: bool) -> Prepared {
    let in_len = g.op.in_len(g.count, n);
    let inputs: Vec<Vec<f32>> = par_ranks(n, |r| {
        let mut v = g.dist.generate(seed(g, r, base_seed), in_len);
        g.io.round_all(&mut v);
        v
    });
    let io = g.io;
    let count = g.count;
    let ins: Vec<&[f32]> = inputs.iter().map(|v| v.as_slice()).collect();

    // Exact results (f64), per output.
    let exact: Vec<Vec<f64>> = match g.op {
        Op::AllReduce => {
            par_segments(count, |rg| rg.map(|i| ins.iter().map(|v| f64::from(v[i])).sum()).collect::<Vec<f64>>())
                .concat()
        }
        Op::ReduceScatter => par_ranks(n, |r| {
            (0..count).map(|i| ins.iter().map(|v| f64::from(v[r * count + i])).sum()).collect::<Vec<f64>>()
        })
        .concat(),
        Op::AllGather => ins.iter().flat_map(|v| v.iter().map(|&x| f64::from(x))).collect(),
        Op::AlltoAll | Op::AllToAllRccl => par_ranks(n, |p| {
            (0..n).flat_map(|r| ins[r][p * count..(p + 1) * count].iter().map(|&x| f64::from(x))).collect::<Vec<f64>>()
        })
        .concat(),
    }
    .chunks(g.op.out_len(count, n))
    .map(|c| c.to_vec())
    .collect();

    if !lowp {
        // Control: the stock path rounds the exact result to the output type (sums of n terms
        // in the output type: up to n-1 roundings).
        let k = (n - 1).max(1) as f32;
        let model = exact.iter().map(|e| e.iter().map(|&x| io.round(x as f32)).collect()).collect();
        let bound = exact.iter().map(|e| e.iter().map(|&x| k * io.ulp(x as f32) + MODEL_TOL_ABS).collect()).collect();
        return Prepared { inputs, exact, model, bound };
    }

    let (model, bound): (Vec<Vec<f32>>, Vec<Vec<f32>>) = match g.op {
        Op::AllReduce => {
            // 2 ranks: exchange; more: re-quantized by each element's owner (the kernel's
            // window decides the owners).
            let form = AllReduceForm::new(n, count, window_for(g.op, count, n));
            let ex = &exact[0];
            let parts = par_segments(count, |rg| {
                let seg: Vec<&[f32]> = ins.iter().map(|v| &v[rg.clone()]).collect();
                let mut model = codec::allreduce_ref_at(codec, io, &form, &seg, rg.start);
                io.round_all(&mut model);
                let b = codec::allreduce_error_bounds_at(codec, io, &form, &seg, rg.start);
                (model, finish_bounds(io, &b, &ex[rg]))
            });
            let (m, b): (Vec<Vec<f32>>, Vec<Vec<f32>>) = parts.into_iter().unzip();
            (vec![m.concat()], vec![b.concat()])
        }
        Op::ReduceScatter => par_ranks(n, |r| {
            let mut model = codec::reduce_scatter_rank_ref(codec, io, &ins, r);
            io.round_all(&mut model);
            let b = codec::reduce_scatter_rank_error_bounds(codec, io, &ins, r);
            (model, finish_bounds(io, &b, &exact[r]))
        })
        .into_iter()
        .unzip(),
        Op::AllGather => {
            let mut model = codec::all_gather_ref(codec, io, &ins);
            let b = codec::all_gather_error_bounds(codec, io, &ins);
            let bound = par_ranks(n, |r| finish_bounds(io, &b[r], &exact[0]));
            model.iter_mut().for_each(|m| io.round_all(m));
            (model, bound)
        }
        Op::AlltoAll | Op::AllToAllRccl => par_ranks(n, |p| {
            let mut model = codec::all_to_all_rank_ref(codec, io, &ins, p);
            io.round_all(&mut model);
            let b = codec::all_to_all_rank_error_bounds(codec, io, &ins, p);
            (model, finish_bounds(io, &b, &exact[p]))
        })
        .into_iter()
        .unzip(),
    };
    Prepared { inputs, exact, model, bound }
}

/// Walks `all` in order and calls `each(index, case, prepared, lowp, prepare_seconds)`; the
/// host data is prepared once per group (consecutive cases of one op, type, count and
/// distribution share it).
pub fn for_each_prepared(
    all: &[Case],
    n: usize,
    codec: Codec,
    seed: u64,
    mut each: impl FnMut(usize, &Case, &Prepared, bool, f64),
) {
    let mut i = 0;
    while i < all.len() {
        let g = all[i].g;
        let lowp = expect_lowp(g.op, g.io, g.count, n);
        watchdog::progress(&format!("prepare {} {} {} {}", g.op.name(), g.io.name(), g.count, g.dist.name()));
        let t = Instant::now();
        let p = prepare(&g, n, codec, seed, lowp);
        let prep = t.elapsed().as_secs_f64();
        while i < all.len() && all[i].g == g {
            each(i, &all[i], &p, lowp, prep);
            i += 1;
        }
    }
}

/// The bytes of `xs` in the I/O type (little endian, bf16/f16 rounded RNE).
pub fn to_bytes(io: Io, xs: &[f32]) -> Vec<u8> {
    match io {
        Io::F32 => xs.iter().flat_map(|x| x.to_le_bytes()).collect(),
        _ => xs.iter().flat_map(|&x| io.to_bits16(x).to_le_bytes()).collect(),
    }
}

/// The values of bytes in the I/O type.
pub fn from_bytes(io: Io, b: &[u8]) -> Vec<f32> {
    match io {
        Io::F32 => b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        _ => b.chunks_exact(2).map(|c| io.from_bits16(u16::from_le_bytes([c[0], c[1]]))).collect(),
    }
}

/// The raw bits of element `i` (for mismatch notes).
pub fn raw_bits(io: Io, bytes: &[u8], i: usize) -> u32 {
    let s = io.size();
    bytes[i * s..(i + 1) * s].iter().rev().fold(0u32, |a, &b| (a << 8) | u32::from(b))
}
