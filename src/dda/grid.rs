//! The grids of the protocols that are the same for every collective (LL, LL128, stream; the
//! windowed protocol's are per collective: `allreduce.rs`, `allgather.rs`, ...), and the block
//! count of a pass.

use crate::clique::{Grid, THREADS, Work};
use crate::collective::Coll;
use crate::intercept::Algo;

/// The LL grid: one pass of 8-byte units (4 data bytes each: the inbox holds the whole
/// message); the window is the count.
pub(crate) fn ll_grid(w: &Work) -> Grid {
    let (blocks, threads) = blocks_for((w.count * w.unit_bytes).div_ceil(8), w.max_blocks);
    Grid { window: w.count, blocks, threads }
}

/// Parts of a stream slot: a step of every rank's chunk where the kernel moves one chunk per
/// rank (a two-shot's reduce-scatter, ReduceScatter, AllToAll), else one.
pub(crate) fn stream_parts(coll: Coll, algo: Algo, nranks: u64) -> u64 {
    if algo == Algo::TwoShot || matches!(coll, Coll::ReduceScatter | Coll::AllToAll) { nranks } else { 1 }
}

/// Blocks and threads for `units` work items of one pass: full blocks of `THREADS`, at most
/// `max_blocks`, and a single smaller block (a multiple of 64 threads) for small passes.
pub(crate) fn blocks_for(units: u64, max_blocks: u32) -> (u32, u32) {
    let threads = THREADS as u64;
    let blocks = units.div_ceil(threads).clamp(1, max_blocks as u64);
    let block_threads = if blocks == 1 { units.next_multiple_of(64).clamp(64, threads) } else { threads };
    (blocks as u32, block_threads as u32)
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

/// The grid of an LL128 call (`hip_kernels/ll128.cuh`) moving `bytes` per rank: one block per
/// step of the message (a step is one 16-byte lane per thread: 7168 payload bytes with AMD's
/// 64-byte lines, 7680 with NVIDIA's 128), at most `LL128_MAX_BLOCKS` (the rings of the region)
/// and the clique's cap; full blocks (a step is one slot). The window is unused.
pub(crate) fn ll128_grid(bytes: u64, max_blocks: u32) -> Grid {
    use crate::clique::{LL128_MAX_BLOCKS, LL128_MIN_PAYLOAD};
    let step_bytes = u64::from(THREADS) / 4 * LL128_MIN_PAYLOAD;
    let blocks = bytes.div_ceil(step_bytes).clamp(1, u64::from(LL128_MAX_BLOCKS.min(max_blocks).max(1)));
    Grid { window: 0, blocks: blocks as u32, threads: THREADS }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LL128: full blocks, at most 32 (the region's rings) and the cap, one per 7 KiB step.
    #[test]
    fn ll128_grid_stays_within_the_rings() {
        for max_blocks in [1u32, 2, 31, 32, 33, 128, 1024] {
            for es in [1u64, 2, 4, 8] {
                for count in [1u64, 7, 4099, 65_536, 1 << 20, (1 << 22) + 3] {
                    let w = Work { count, unit_bytes: es, nranks: 2, half_bytes: 8 << 20, max_blocks };
                    let Grid { blocks, threads, .. } = ll128_grid(w.count * w.unit_bytes, w.max_blocks);
                    assert_eq!(threads, crate::clique::THREADS);
                    assert!(blocks >= 1 && blocks <= crate::clique::LL128_MAX_BLOCKS.min(max_blocks), "{w:?}");
                    assert_eq!(blocks as u64, (count * es).div_ceil(7168).clamp(1, 32.min(max_blocks) as u64));
                }
            }
        }
    }
}
