//! DDA AllReduce (`hip_kernels/allreduce.cuh`): windows and grids of the LL, flat and tree
//! kernels.

use super::blocks_for;
use crate::intercept::Algo;

/// (window elements, blocks, threads) of one call: identical on every rank, since it depends
/// only on the count, the type, the rank count and the agreed sizes (the per-block barriers
/// rely on that).
pub fn grid(algo: Algo, count: u64, elem_bytes: u64, nranks: u64, half_bytes: u64, max_blocks: u32) -> (u64, u32, u32) {
    let vec = 16 / elem_bytes;
    if algo == Algo::Ll {
        // One pass of 8-byte units (the inbox holds the whole message).
        let (b, t) = blocks_for((count * elem_bytes).div_ceil(8), max_blocks);
        return (count, b, t);
    }
    let unit = if algo == Algo::Tree { vec * nranks } else { vec };
    let window = (half_bytes / elem_bytes / unit).max(1) * unit;
    let per_window = count.min(window);
    let vectors = if algo == Algo::Tree { per_window.div_ceil(nranks).div_ceil(vec) } else { per_window.div_ceil(vec) };
    let (b, t) = blocks_for(vectors, max_blocks);
    (window, b, t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_is_bounded_and_covers_the_message() {
        for algo in [Algo::Flat, Algo::Tree] {
            for n in [2u64, 3, 4, 7, 8] {
                for es in [1u64, 2, 4, 8] {
                    for count in [1u64, 7, 255, 1023, 4099, 1 << 20, (1 << 20) + 5, 3 << 22] {
                        let (window, blocks, threads) = grid(algo, count, es, n, 8 << 20, 64);
                        assert!((1..=64).contains(&blocks));
                        assert!((64..=512).contains(&threads) && threads % 64 == 0);
                        assert!(window * es <= 8 << 20 || window == 16 / es * if algo == Algo::Tree { n } else { 1 });
                        assert_eq!(window % (16 / es), 0);
                        if algo == Algo::Tree {
                            assert_eq!(window % (16 / es * n), 0);
                        }
                    }
                }
            }
        }
    }
}
