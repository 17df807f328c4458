//! DDA ReduceScatter (`hip_kernels/reducescatter.cuh`): count is the elements of each rank's
//! output block.

use super::blocks_for;
use crate::intercept::Algo;

/// (window elements per block, blocks, threads); identical on every rank. A staging half holds
/// one window of every block, each a whole number of 16-byte vectors.
pub fn grid(algo: Algo, count: u64, elem_bytes: u64, nranks: u64, half_bytes: u64, max_blocks: u32) -> (u64, u32, u32) {
    if algo == Algo::Ll {
        let (b, t) = blocks_for((count * elem_bytes).div_ceil(8), max_blocks);
        return (count, b, t);
    }
    let vec = 16 / elem_bytes;
    let window = (half_bytes / nranks / elem_bytes / vec).max(1) * vec;
    let (b, t) = blocks_for(count.min(window).div_ceil(vec), max_blocks);
    (window, b, t)
}
