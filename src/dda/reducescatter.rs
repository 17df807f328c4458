//! DDA ReduceScatter (`hip_kernels/reducescatter.cuh`): count is the elements of each rank's
//! output block.

use super::grid::blocks_for;
use crate::clique::{Grid, Work};
use crate::intercept::Algo;

/// Window in elements per block: a staging half holds one window of every block, each a whole
/// number of 16-byte vectors.
pub fn window_grid(_: Algo, w: &Work) -> Grid {
    let Work { count, unit_bytes: elem_bytes, nranks, half_bytes, max_blocks } = *w;
    let vec = 16 / elem_bytes;
    let window = (half_bytes / nranks / elem_bytes / vec).max(1) * vec;
    let (blocks, threads) = blocks_for(count.min(window).div_ceil(vec), max_blocks);
    Grid { window, blocks, threads }
}
