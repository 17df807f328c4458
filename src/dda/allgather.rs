//! DDA AllGather (`hip_kernels/allgather.cuh`): the kernels move bytes, so the count is the
//! bytes per rank.

use super::grid::blocks_for;
use crate::clique::{Grid, Work};
use crate::intercept::Algo;

/// Window in bytes of a rank's block (Broadcast: of the message), a staging half's worth.
pub fn grid(algo: Algo, w: &Work) -> Grid {
    let bytes = w.count;
    if algo == Algo::Stream {
        return super::grid::stream_grid(w, 1);
    }
    if algo == Algo::Ll128 {
        return super::grid::ll128_grid(bytes, w.max_blocks);
    }
    if algo == Algo::Ll {
        let (blocks, threads) = blocks_for(bytes.div_ceil(8), w.max_blocks);
        return Grid { window: bytes, blocks, threads };
    }
    let window = (w.half_bytes / 16).max(1) * 16;
    let (blocks, threads) = blocks_for(bytes.min(window).div_ceil(16), w.max_blocks);
    Grid { window, blocks, threads }
}
