//! Layer `dda`: host side of the Direct Data Access kernels (peers' staging buffers read or
//! written directly over NVLink / xGMI): the grid and window of a call, and its launch plan.
//! One grid function per collective ([`Work`] in, [`Grid`] out); the kernels are in
//! `hip_kernels/` (one family each in `src/kernel_table.rs`).
//!
//! Layer: above `clique`, `intercept`, `error`; below `comm`.

use crate::clique::{Buffers, Clique, Grid, Launch, LaunchArgs, THREADS, Work};
use crate::error::Error;
use crate::intercept::{Algo, CallDesc, Coll, FamilyKey};

mod allgather;
mod allreduce;
mod alltoall;
pub mod alltoallv;
mod reducescatter;

/// The grid function of each collective's DDA kernels. Broadcast moves one block of the
/// whole message through the root's staging buffer, as AllGather moves each rank's; Reduce
/// is AllReduce's one-shot with the reduction on the root only.
fn grid_fn(coll: Coll) -> fn(Algo, &Work) -> Grid {
    match coll {
        Coll::AllReduce | Coll::Reduce => allreduce::grid,
        Coll::ReduceScatter => reducescatter::grid,
        Coll::AllGather | Coll::Broadcast => allgather::grid,
        Coll::AllToAll => alltoall::grid,
    }
}

/// The launch of `call` on `algo` (LL, flat or two-shot).
pub fn plan(clique: &Clique, algo: Algo, call: &CallDesc, bufs: &Buffers) -> Result<Launch, Error> {
    let family = crate::intercept::family(FamilyKey::Coll(call.coll, algo))
        .ok_or_else(|| Error::internal(format!("no DDA kernels for {}.{}", call.coll.name(), algo.name())))?;
    let func = clique
        .kernel(family, call.dtype.0, call.op.0)
        .ok_or_else(|| {
            let (c, a, t, o) = (call.coll.name(), algo.name(), call.dtype.name(), call.op.name());
            Error::internal(format!("no kernel for {c}.{a} {t} {o}"))
        })?
        .func;
    let elem = call.dtype.size().unwrap_or(1) as u64;
    let mut args = clique.args();
    // The data-movement kernels count bytes; the reducing ones, elements.
    let (count, unit_bytes) =
        if call.coll.spec().reduces { (call.count as u64, elem) } else { (call.count as u64 * elem, 1) };
    let work = Work {
        count,
        unit_bytes,
        nranks: clique.nranks as u64,
        half_bytes: args.half_bytes,
        max_blocks: clique.max_blocks,
    };
    let grid = grid_fn(call.coll)(algo, &work);
    args.send = bufs.send as u64;
    args.recv = bufs.recv as u64;
    args.count = count;
    args.window_elems = grid.window;
    args.root = call.root;
    Ok(Launch { family, func, grid: (grid.blocks, grid.threads), args: LaunchArgs::Collective(args) })
}

/// Pairs (producer block, consumer block) of a stream call at most: 64 blocks, leaving most
/// multiprocessors to overlapped compute.
const STREAM_PAIRS: u64 = 32;
/// Slots of a pair's ring (`RCCLX_STREAM_SLOTS` of `hip_kernels/stream.cuh`).
const STREAM_SLOTS: u64 = 4;
/// Bytes of a slot at most (a step of one pair in steady state).
const STREAM_SLOT_MAX: u64 = 64 << 10;

/// The grid of a stream call (`hip_kernels/stream.cuh`): `pairs` producer and `pairs` consumer
/// blocks, the same for every call of the clique (the per-pair counters need that), and one part
/// of a slot in units (`window`): the parity half cut into `pairs * STREAM_SLOTS` slots of
/// `parts` parts (1: AllReduce, AllGather; the rank count: ReduceScatter, AllToAll, whose slot
/// holds a step of every rank's chunk).
pub(crate) fn stream_grid(w: &Work, parts: u64) -> Grid {
    let pairs = (u64::from(w.max_blocks) / 2).clamp(1, STREAM_PAIRS);
    let part_bytes = ((w.half_bytes / (pairs * STREAM_SLOTS)).min(STREAM_SLOT_MAX) / parts) & !15;
    Grid { window: part_bytes / w.unit_bytes, blocks: 2 * pairs as u32, threads: THREADS }
}

/// Blocks and threads for `units` work items of one pass: full blocks of `THREADS`, at most
/// `max_blocks`, and a single smaller block (a multiple of 64 threads) for small passes.
pub(crate) fn blocks_for(units: u64, max_blocks: u32) -> (u32, u32) {
    let threads = THREADS as u64;
    let blocks = units.div_ceil(threads).clamp(1, max_blocks as u64);
    let block_threads = if blocks == 1 { units.next_multiple_of(64).clamp(64, threads) } else { threads };
    (blocks as u32, block_threads as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stream grid of every collective with stream kernels: producer and consumer blocks in
    /// pairs (at most 64 blocks), whose rings of 4 slots of `parts` parts fit in one parity half;
    /// parts of whole 16-byte vectors, a slot at most 64 KiB.
    #[test]
    fn stream_rings_fit_the_half() {
        let colls = [
            (Coll::AllReduce, Algo::Stream, false),
            (Coll::AllReduce, Algo::StreamTree, true),
            (Coll::AllGather, Algo::Stream, false),
            (Coll::ReduceScatter, Algo::Stream, true),
            (Coll::AllToAll, Algo::Stream, true),
        ];
        for (coll, algo, chunked) in colls {
            for nranks in 2..=8u64 {
                for half_bytes in [32u64 << 10, 128 << 10, 512 << 10, 8 << 20, 16 << 20] {
                    for max_blocks in [1u32, 2, 3, 16, 33, 64, 128, 1024] {
                        for es in [1u64, 2, 4, 8] {
                            let w = Work { count: 1 << 30, unit_bytes: es, nranks, half_bytes, max_blocks };
                            let Grid { window, blocks, threads } = grid_fn(coll)(algo, &w);
                            let (pairs, parts) = (u64::from(blocks / 2), if chunked { nranks } else { 1 });
                            assert!(blocks % 2 == 0 && (2..=64).contains(&blocks) && threads == THREADS);
                            assert!(blocks <= max_blocks.max(2));
                            assert!(window > 0 && (window * es) % 16 == 0 && parts * window * es <= 64 << 10);
                            assert!(
                                pairs * 4 * parts * window * es <= half_bytes,
                                "{coll:?} {half_bytes} {max_blocks}"
                            );
                        }
                    }
                }
            }
        }
        let w = Work { count: 1 << 30, unit_bytes: 4, nranks: 2, half_bytes: 8 << 20, max_blocks: 128 };
        assert_eq!(grid_fn(Coll::AllReduce)(Algo::Stream, &w), Grid { window: 16 << 10, blocks: 64, threads: 512 });
    }
}
