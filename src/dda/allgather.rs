//! DDA AllGather (`hip_kernels/allgather.cuh`): the kernels move bytes, so the count is the
//! bytes per rank.

use super::blocks_for;
use crate::intercept::Algo;

/// (window bytes, blocks, threads) for `bytes` per rank; identical on every rank.
pub fn grid(algo: Algo, bytes: u64, half_bytes: u64, max_blocks: u32) -> (u64, u32, u32) {
    if algo == Algo::Ll {
        let (b, t) = blocks_for(bytes.div_ceil(8), max_blocks);
        return (bytes, b, t);
    }
    let window = (half_bytes / 16).max(1) * 16;
    let (b, t) = blocks_for(bytes.min(window).div_ceil(16), max_blocks);
    (window, b, t)
}
