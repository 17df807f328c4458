//! Layer `lowp`: host side of the low-precision collectives (`hip_kernels/lowp.cuh`):
//! block-scaled FP8 or INT8 on the wire, FP32 arithmetic, for AllReduce, AllGather,
//! ReduceScatter and AllToAll. They share the clique's staging buffers, flags and window counters with DDA, so
//! the only per-call work is filling the argument struct. The codecs have three homes: their
//! definition and GPU code in `hip_kernels/codec.cuh`, the CPU model with the error bounds in
//! `gpu-tests/src/codec.rs`, and the Python package's model in `python/rcclx/_codec_model.py`.
//!
//! Layer: above `clique`, `intercept`, `error`; below `comm`.

use crate::clique::{Buffers, Clique, Grid, Launch, LaunchArgs, THREADS, Work};
use crate::config::LowpCodec;
use crate::error::Error;
use crate::intercept::{CallDesc, Coll, FamilyKey, Kernel, family};

/// Elements per block (one 32-bit scale word each, both codecs).
pub const BLOCK: u64 = 128;
/// Bytes on the wire per element: one code plus a 128th of a block's 4-byte scale word.
const WIRE_NUM: u64 = 33;
const WIRE_DEN: u64 = 32;

/// Windows a message is cut into at least (when that leaves windows of `MIN_WINDOW` or more):
/// the kernels overlap one window's link traffic with another's local work, which needs
/// several windows. But every window ends in a barrier: measured on H200 (2 ranks, all four
/// collectives, bf16 and f32), windows of 4 Mi elements did best at 8-64 MiB; 2 Mi elements
/// cost up to 10 % (AllReduce bf16 16 MiB: 1.75x against 1.86x), 1 Mi elements up to 40 %.
const PIPELINE_WINDOWS: u64 = 4;
const MIN_WINDOW: u64 = 4 << 20;

/// Window (elements per rank and window, as the kernel expects) and blocks of `THREADS`.
/// Depends only on the call and the agreed sizes, so it is identical on every rank. A staging half holds
/// `nranks` slots of a window (one per sending rank), or for AllReduce of more than 2 ranks two
/// regions of a window each (incoming chunks, then reduced chunks). The 2-rank AllReduce is a
/// gather of both ranks' codes (`rcclx_allreduce_pair_coded`): 2 slots.
pub fn grid(coll: Coll, w: &Work) -> Grid {
    let Work { count, nranks, half_bytes, max_blocks, .. } = *w;
    let two_phase = coll == Coll::AllReduce && nranks > 2;
    let slots = if two_phase { 2 } else { nranks };
    // Whole groups of 4 blocks per slot: the kernels store 4 scales at once.
    let unit = if two_phase { 4 * BLOCK * nranks } else { 4 * BLOCK };
    // Region B starts 256-byte aligned (`rcclx_lowp_region_b`).
    let usable = if two_phase { half_bytes.saturating_sub(256) } else { half_bytes };
    let per_slot = usable * WIRE_DEN / WIRE_NUM / slots;
    let largest = (per_slot / unit).max(1) * unit;
    let pipelined = count.div_ceil(PIPELINE_WINDOWS).max(MIN_WINDOW).next_multiple_of(unit);
    let window = largest.min(pipelined);
    // Blocks a phase of a window covers: one chunk in a two-phase AllReduce, else the window.
    let blocks_per_phase = match two_phase {
        true => count.min(window).div_ceil(BLOCK).div_ceil(nranks),
        false => count.min(window).div_ceil(BLOCK),
    };
    // Eight lanes per block of 128 elements, THREADS lanes per GPU block.
    let groups_per_block = THREADS as u64 / 8;
    let blocks = blocks_per_phase.div_ceil(groups_per_block).clamp(1, max_blocks as u64);
    Grid { window, blocks: blocks as u32, threads: THREADS }
}

/// The launch of `call` on the low-precision kernel of its collective, type and codec.
pub fn plan(clique: &Clique, call: &CallDesc, codec: LowpCodec, bufs: &Buffers) -> Result<Launch, Error> {
    // AllReduce of 2 ranks has a kernel of its own: a gather of codes, nothing re-quantized.
    let family = match (call.coll, clique.nranks) {
        (Coll::AllReduce, 2) => family(FamilyKey::AllReducePair(codec)),
        _ => family(FamilyKey::Coll(call.coll, Kernel::coded(call.coll, codec))),
    }
    .ok_or_else(|| Error::internal(format!("no low-precision kernels for {}", call.coll.spec().title)))?;
    let kernel = clique.kernel(family, call.dtype.0, call.op.0).ok_or_else(|| {
        Error::internal(format!("no low-precision kernel for {} {}", call.coll.spec().title, call.dtype.name()))
    })?;
    let mut args = clique.args();
    // As many blocks as the GPU runs at once (2 per multiprocessor for kernels of 64 registers
    // or fewer): more stores in flight on the link. Measured on H200: the 2-rank AllReduce
    // takes 6-9 % less time at 16-256 MiB with 2 blocks per SM than with 1.
    let cap = clique.resident_blocks(kernel);
    let elem = call.dtype.size().unwrap_or(1) as u64;
    let work = Work {
        count: call.count as u64,
        unit_bytes: elem,
        nranks: clique.nranks as u64,
        half_bytes: args.half_bytes,
        max_blocks: cap,
    };
    let grid = grid(call.coll, &work);
    args.send = bufs.send as u64;
    args.recv = bufs.recv as u64;
    args.count = call.count as u64;
    args.window_elems = grid.window;
    Ok(Launch { family, func: kernel.func, grid: (grid.blocks, grid.threads), args: LaunchArgs::Collective(args) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ncclDataType_t;

    #[test]
    fn window_fits_the_staging_half() {
        for coll in Coll::ALL.into_iter().filter(|c| c.spec().lowp_var.is_some()) {
            for n in 2..=8u64 {
                let half = 16u64 << 20; // the default staging (32 MiB) halved
                let work = |count| Work { count, unit_bytes: 2, nranks: n, half_bytes: half, max_blocks: 64 };
                let Grid { window: w, blocks: b, .. } = grid(coll, &work(1 << 30));
                let small = grid(coll, &work(1 << 24)).window;
                assert!(small <= w && small * PIPELINE_WINDOWS >= (1 << 24).min(w), "{coll:?} n={n}: pipelined");
                assert!(n > 2 || small < w, "{coll:?} n={n}: 16 Mi elements are cut into more windows");
                let two_phase = coll == Coll::AllReduce && n > 2;
                let region = w + w / BLOCK * 4;
                let used = if two_phase { region.next_multiple_of(256) + region } else { n * region };
                assert!(used <= half, "{coll:?} n={n} w={w}");
                assert_eq!(w % (4 * BLOCK), 0);
                if two_phase {
                    assert_eq!(w % (4 * BLOCK * n), 0);
                }
                assert!((1..=64).contains(&b));
            }
        }
    }

    #[test]
    fn every_collective_has_kernels_for_the_float_types() {
        use crate::kernel_table::{kernel_index, kernel_names};
        let names: Vec<String> = kernel_names().collect();
        for coll in Coll::ALL.into_iter().filter(|c| c.spec().lowp_var.is_some()) {
            let f = family(FamilyKey::Coll(coll, Kernel::coded(coll, LowpCodec::Fp8))).unwrap();
            for t in [ncclDataType_t::Float32, ncclDataType_t::Bfloat16, ncclDataType_t::Float16] {
                assert!(kernel_index(f, t.0, 0).is_some(), "{coll:?} {t:?}");
            }
            assert!(kernel_index(f, ncclDataType_t::Int32.0, 0).is_none());
        }
        let f = family(FamilyKey::Coll(Coll::AllToAll, Kernel::coded(Coll::AllToAll, LowpCodec::Fp8))).unwrap();
        assert_eq!(names[kernel_index(f, ncclDataType_t::Float16.0, 0).unwrap()], "ncclKernel_rcclx_alltoall_lowp_f16");
    }
}
