//! DDA AllReduce (`hip_kernels/allreduce.cuh`): the windowed kernels' windows and grids, one-shot
//! (flat) and two-shot.

use super::grid::blocks_for;
use crate::clique::{Grid, Work};
use crate::intercept::Algo;

/// The windowed grid: window in elements (two-shot: a multiple of the rank count's vectors).
pub fn window_grid(algo: Algo, w: &Work) -> Grid {
    let Work { count, unit_bytes: elem_bytes, nranks, half_bytes, max_blocks } = *w;
    let vec = 16 / elem_bytes;
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
        for algo in [Algo::OneShot, Algo::TwoShot] {
            for n in [2u64, 3, 4, 7, 8] {
                for es in [1u64, 2, 4, 8] {
                    for count in [1u64, 7, 255, 1023, 4099, 1 << 20, (1 << 20) + 5, 3 << 22] {
                        let w = Work { count, unit_bytes: es, nranks: n, half_bytes: 8 << 20, max_blocks: 64 };
                        let Grid { window, blocks, threads } = window_grid(algo, &w);
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
}
