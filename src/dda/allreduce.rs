//! DDA AllReduce (`hip_kernels/allreduce.cuh`, `stream.cuh`): windows and grids of the LL, flat,
//! two-shot and stream kernels.

use super::grid::blocks_for;
use crate::clique::{Grid, Work};
use crate::intercept::Algo;

/// Window in elements (two-shot: a multiple of the rank count's vectors).
pub fn grid(algo: Algo, w: &Work) -> Grid {
    let Work { count, unit_bytes: elem_bytes, nranks, half_bytes, max_blocks } = *w;
    let vec = 16 / elem_bytes;
    if algo == Algo::Stream {
        return super::grid::stream_grid(w, 1);
    }
    if algo == Algo::StreamTree {
        // A slot part per chunk of the two-shot.
        return super::grid::stream_grid(w, w.nranks);
    }
    if algo == Algo::Ll128 {
        return super::grid::ll128_grid(count * elem_bytes, max_blocks);
    }
    if algo == Algo::Ll {
        // One pass of 8-byte units (the inbox holds the whole message).
        let (blocks, threads) = blocks_for((count * elem_bytes).div_ceil(8), max_blocks);
        return Grid { window: count, blocks, threads };
    }
    let two_shot = algo == Algo::TwoShot;
    let unit = if two_shot { vec * nranks } else { vec };
    let window = (half_bytes / elem_bytes / unit).max(1) * unit;
    let per_window = count.min(window);
    let vectors = if two_shot { per_window.div_ceil(nranks).div_ceil(vec) } else { per_window.div_ceil(vec) };
    let (blocks, threads) = blocks_for(vectors, max_blocks);
    Grid { window, blocks, threads }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_is_bounded_and_covers_the_message() {
        for algo in [Algo::Flat, Algo::TwoShot] {
            for n in [2u64, 3, 4, 7, 8] {
                for es in [1u64, 2, 4, 8] {
                    for count in [1u64, 7, 255, 1023, 4099, 1 << 20, (1 << 20) + 5, 3 << 22] {
                        let w = Work { count, unit_bytes: es, nranks: n, half_bytes: 8 << 20, max_blocks: 64 };
                        let Grid { window, blocks, threads } = grid(algo, &w);
                        assert!((1..=64).contains(&blocks));
                        assert!((64..=512).contains(&threads) && threads % 64 == 0);
                        assert!(
                            window * es <= 8 << 20 || window == 16 / es * if algo == Algo::TwoShot { n } else { 1 }
                        );
                        assert_eq!(window % (16 / es), 0);
                        if algo == Algo::TwoShot {
                            assert_eq!(window % (16 / es * n), 0);
                        }
                    }
                }
            }
        }
    }

    /// LL128: full blocks, at most 32 (the region's rings) and the cap, one per 7 KiB step.
    #[test]
    fn ll128_grid_stays_within_the_rings() {
        for max_blocks in [1u32, 2, 31, 32, 33, 128, 1024] {
            for es in [1u64, 2, 4, 8] {
                for count in [1u64, 7, 4099, 65_536, 1 << 20, (1 << 22) + 3] {
                    let w = Work { count, unit_bytes: es, nranks: 2, half_bytes: 8 << 20, max_blocks };
                    let Grid { blocks, threads, .. } = grid(Algo::Ll128, &w);
                    assert_eq!(threads, crate::clique::THREADS);
                    assert!(blocks >= 1 && blocks <= crate::clique::LL128_MAX_BLOCKS.min(max_blocks), "{w:?}");
                    assert_eq!(blocks as u64, (count * es).div_ceil(7168).clamp(1, 32.min(max_blocks) as u64));
                }
            }
        }
    }
}
