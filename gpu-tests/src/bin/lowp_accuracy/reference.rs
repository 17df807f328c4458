//! The host side of a case: its input data, the exact (f64) result, the codec model (what the
//! kernels must produce) and the documented per-element error bound; and the byte images that
//! go to and come from the GPU.

use std::ops::Range;
use std::time::Instant;

use rcclx::clique::MAX_RANKS;
use rcclx_gpu_tests::codec::{self, BLOCK, Fp8Format, Io};
use rcclx_gpu_tests::watchdog;

use crate::cases::{Case, Group, Op, expect_lowp, seed};
use crate::report::MODEL_TOL_ABS;

/// Inputs, exact result, codec model and error bound of one group.
pub struct Prepared {
    pub inputs: Vec<Vec<f32>>,
    /// Per output (one for allreduce/allgather, else one per rank).
    pub exact: Vec<Vec<f64>>,
    pub model: Vec<Vec<f32>>,
    pub bound: Vec<Vec<f32>>,
}

impl Prepared {
    /// Which output rank `r` receives.
    pub fn out(&self, r: usize) -> usize {
        if self.exact.len() == 1 { 0 } else { r }
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

fn e_bound(fmt: Fp8Format, x: f32, a: f32) -> f64 {
    f64::from(codec::element_error_bound(fmt, x, a))
}

/// f32 recursive-summation factor for n terms.
fn gamma(n: usize) -> f64 {
    let k = (n as f64 - 1.0) * 2f64.powi(-24);
    k / (1.0 - k)
}

/// Adds the output type's rounding (1 ulp) and converts a bound to f32, rounding up.
fn finish_bound(io: Io, b: f64, exact: f64) -> f32 {
    let total = b + f64::from(io.ulp((exact.abs() + b) as f32));
    let f = total as f32;
    if f64::from(f) < total { f.next_up() } else { f }
}

/// Per-block amaxes of `xs` (blocks from `xs[0]`).
fn amaxes(xs: &[f32]) -> Vec<f32> {
    xs.chunks(BLOCK).map(codec::block_amax).collect()
}

/// The host data of group `g` on `n` ranks; `lowp`: whether the FP8 path is expected (else the
/// model is the exact result rounded to the output type).
pub fn prepare(g: &Group, n: usize, fmt: Fp8Format, base_seed: u64, lowp: bool) -> Prepared {
    let in_len = g.op.in_len(g.count, n);
    let inputs: Vec<Vec<f32>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                s.spawn(move || {
                    let mut v = g.dist.generate(seed(g, r, base_seed), in_len);
                    g.io.round_all(&mut v);
                    v
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("generator panicked")).collect()
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
        Op::ReduceScatter => (0..n)
            .map(|r| (0..count).map(|i| ins.iter().map(|v| f64::from(v[r * count + i])).sum()).collect())
            .collect::<Vec<Vec<f64>>>()
            .concat(),
        Op::AllGather => ins.iter().flat_map(|v| v.iter().map(|&x| f64::from(x))).collect(),
        Op::AlltoAll | Op::AllToAllRccl => (0..n)
            .flat_map(|p| (0..n).flat_map(move |r| (0..count).map(move |i| (r, p * count + i))))
            .map(|(r, j)| f64::from(ins[r][j]))
            .collect(),
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
            let ex = &exact[0];
            let parts = par_segments(count, |rg| {
                let seg: Vec<&[f32]> = ins.iter().map(|v| &v[rg.clone()]).collect();
                let mut model = codec::allreduce_ref(fmt, &seg);
                io.round_all(&mut model);
                let mut bound = Vec::with_capacity(rg.len());
                let q: Vec<Vec<f32>> = seg.iter().map(|v| codec::roundtrip(fmt, v)).collect();
                for b0 in (0..rg.len()).step_by(BLOCK) {
                    let b1 = (b0 + BLOCK).min(rg.len());
                    let mut am = [0f32; MAX_RANKS];
                    for (r, v) in seg.iter().enumerate() {
                        am[r] = codec::block_amax(&v[b0..b1]);
                    }
                    let sums: Vec<f32> = (b0..b1)
                        .map(|i| {
                            let mut s = q[0][i];
                            q[1..].iter().for_each(|v| s += v[i]);
                            s
                        })
                        .collect();
                    let out_amax = codec::block_amax(&sums);
                    for i in b0..b1 {
                        let mut xs = [0f32; MAX_RANKS];
                        for (r, v) in seg.iter().enumerate() {
                            xs[r] = v[i];
                        }
                        let b = codec::allreduce_error_bound(fmt, &xs[..n], &am[..n], sums[i - b0], out_amax);
                        bound.push(finish_bound(io, f64::from(b), ex[rg.start + i]));
                    }
                }
                (model, bound)
            });
            let (m, b): (Vec<Vec<f32>>, Vec<Vec<f32>>) = parts.into_iter().unzip();
            (vec![m.concat()], vec![b.concat()])
        }
        Op::ReduceScatter => {
            let mut model = codec::reduce_scatter_ref(fmt, &ins);
            model.iter_mut().for_each(|m| io.round_all(m));
            let bound = (0..n)
                .map(|r| {
                    let chunk: Vec<&[f32]> = ins.iter().map(|v| &v[r * count..(r + 1) * count]).collect();
                    let am: Vec<Vec<f32>> = chunk.iter().map(|c| amaxes(c)).collect();
                    (0..count)
                        .map(|i| {
                            let (mut e, mut mags) = (0.0, 0.0);
                            for (p, c) in chunk.iter().enumerate() {
                                let ep = e_bound(fmt, c[i], am[p][i / BLOCK]);
                                e += ep;
                                mags += f64::from(c[i].abs()) + ep;
                            }
                            finish_bound(io, e + gamma(n) * mags, exact[r][i])
                        })
                        .collect()
                })
                .collect();
            (model, bound)
        }
        Op::AllGather => {
            let mut model = codec::all_gather_ref(fmt, &ins);
            io.round_all(&mut model);
            let bound = ins
                .iter()
                .flat_map(|v| {
                    let am = amaxes(v);
                    v.iter().enumerate().map(move |(i, &x)| (x, am[i / BLOCK])).collect::<Vec<_>>()
                })
                .zip(&exact[0])
                .map(|((x, a), &e)| finish_bound(io, e_bound(fmt, x, a), e))
                .collect();
            (vec![model], vec![bound])
        }
        Op::AlltoAll | Op::AllToAllRccl => {
            let mut model = codec::all_to_all_ref(fmt, &ins);
            model.iter_mut().for_each(|m| io.round_all(m));
            let bound = (0..n)
                .map(|p| {
                    let mut b = Vec::with_capacity(n * count);
                    for (r, v) in ins.iter().enumerate() {
                        let src = &v[p * count..(p + 1) * count];
                        let am = amaxes(src);
                        for (i, &x) in src.iter().enumerate() {
                            // The chunk a rank keeps is copied exactly.
                            let e = if r == p { 0.0 } else { e_bound(fmt, x, am[i / BLOCK]) };
                            b.push(finish_bound(io, e, exact[p][r * count + i]));
                        }
                    }
                    b
                })
                .collect();
            (model, bound)
        }
    };
    Prepared { inputs, exact, model, bound }
}

/// Walks `all` in order and calls `each(index, case, prepared, lowp, prepare_seconds)`; the
/// host data is prepared once per group (consecutive cases of one op, type, count and
/// distribution share it).
pub fn for_each_prepared(
    all: &[Case],
    n: usize,
    fmt: Fp8Format,
    seed: u64,
    mut each: impl FnMut(usize, &Case, &Prepared, bool, f64),
) {
    let mut i = 0;
    while i < all.len() {
        let g = all[i].g;
        let lowp = expect_lowp(g.op, g.io, g.count, n);
        watchdog::progress(&format!("prepare {} {} {} {}", g.op.name(), g.io.name(), g.count, g.dist.name()));
        let t = Instant::now();
        let p = prepare(&g, n, fmt, seed, lowp);
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
