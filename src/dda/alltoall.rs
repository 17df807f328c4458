//! DDA AllToAll (`hip_kernels/alltoall.cuh`): the kernels move bytes, so the count is the bytes
//! per (rank, peer) block.

use super::grid::blocks_for;
use crate::clique::{Grid, Work};
use crate::intercept::Algo;

/// The grid (window bytes per block, blocks, threads) for blocks of `bytes`; identical on every
/// rank.
/// A staging half holds one window of every block.
pub fn window_grid(_: Algo, w: &Work) -> Grid {
    let bytes = w.count;
    let window = (w.half_bytes / w.nranks / 16).max(1) * 16;
    let (blocks, threads) = blocks_for(bytes.min(window).div_ceil(16), w.max_blocks);
    Grid { window, blocks, threads }
}
