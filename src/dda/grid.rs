//! Grids shared by the collectives' grid functions: the block count of a pass, and the stream
//! protocol's producer and consumer pairs.

use crate::clique::{Grid, THREADS, Work};

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
