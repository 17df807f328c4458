//! DDA AllGather (`hip_kernels/allgather.cuh`): the kernels move bytes, so the count is the
//! bytes per rank.

use super::grid::blocks_for;
use crate::clique::{Grid, Work};
use crate::intercept::Algo;

/// Window in bytes of a rank's block (Broadcast: of the message), a staging half's worth.
pub fn window_grid(_: Algo, w: &Work) -> Grid {
    let bytes = w.count;
    let window = (w.half_bytes / 16).max(1) * 16;
    let (blocks, threads) = blocks_for(bytes.min(window).div_ceil(16), w.max_blocks);
    Grid { window, blocks, threads }
}
