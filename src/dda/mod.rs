//! Layer `dda`: host side of the Direct Data Access kernels (peers' staging buffers read or
//! written directly over NVLink / xGMI): the grid and window of a call, and its launch plan.
//! One grid per protocol ([`Work`] in, [`Grid`] out: [`grid`]), the windowed protocol's per
//! collective; the kernels are in `hip_kernels/` (one family each in `src/kernel_table.rs`).
//!
//! Layer: above `clique`, `intercept`, `error`; below `comm`.

use crate::clique::{Buffers, Clique, Grid, Launch, LaunchArgs, Work};
use crate::collective::{Coll, Proto};
use crate::error::Error;
use crate::intercept::{Algo, CallDesc, FamilyKey, Kernel};

mod allgather;
mod allreduce;
mod alltoall;
pub mod alltoallv;
mod grid;
mod reducescatter;

/// The grid of an exact call of `coll` on `kernel`: the protocol's, or for the windowed protocol
/// the collective's own (its window unit differs).
pub(crate) fn grid(coll: Coll, kernel: Kernel, w: &Work) -> Grid {
    match kernel.proto {
        Proto::Ll => grid::ll_grid(w),
        Proto::Ll128 => grid::ll128_grid(w.count * w.unit_bytes, w.max_blocks),
        Proto::Stream => grid::stream_grid(w, grid::stream_parts(coll, kernel.algo, w.nranks)),
        Proto::Window => window_grid(coll)(kernel.algo, w),
    }
}

/// The windowed grid function of each collective. Broadcast moves one block of the whole
/// message through the root's staging buffer, as AllGather moves each rank's; Reduce is
/// AllReduce's one-shot with the reduction on the root only.
fn window_grid(coll: Coll) -> fn(Algo, &Work) -> Grid {
    match coll {
        Coll::AllReduce | Coll::Reduce => allreduce::window_grid,
        Coll::ReduceScatter => reducescatter::window_grid,
        Coll::AllGather | Coll::Broadcast => allgather::window_grid,
        Coll::AllToAll => alltoall::window_grid,
    }
}

/// The launch of `call` on `kernel` (an exact one of `call.coll`'s: `decide`).
pub fn plan(clique: &Clique, kernel: Kernel, call: &CallDesc, bufs: &Buffers) -> Result<Launch, Error> {
    // The LL128 region exists only where the agreed policies let LL128 run (`clique::local`).
    if kernel.proto == Proto::Ll128 && !clique.facts.policies.ll128_on() {
        return Err(Error::internal("LL128 on a clique without an LL128 region (RCCLX_LL128_MAX_BYTES=0)"));
    }
    let family = crate::intercept::family(FamilyKey::Coll(call.coll, kernel))
        .ok_or_else(|| Error::internal(format!("no DDA kernels for {}.{}", call.coll.name(), kernel.name())))?;
    let func = clique
        .kernel(family, call.dtype.0, call.op.0)
        .ok_or_else(|| {
            let (c, a, t, o) = (call.coll.name(), kernel.name(), call.dtype.name(), call.op.name());
            Error::internal(format!("no kernel for {c}.{a} {t} {o}"))
        })?
        .func;
    let elem = call.dtype.size().unwrap_or(1) as u64;
    let mut args = clique.args();
    // The data-movement kernels count bytes; the reducing ones, elements.
    let (count, unit_bytes) =
        if call.coll.spec().reduces { (call.count as u64, elem) } else { (call.count as u64 * elem, 1) };
    let work = Work {
        count,
        unit_bytes,
        nranks: clique.nranks as u64,
        half_bytes: args.half_bytes,
        max_blocks: clique.max_blocks,
    };
    let grid = grid(call.coll, kernel, &work);
    args.send = bufs.send as u64;
    args.recv = bufs.recv as u64;
    args.count = count;
    args.window_elems = grid.window;
    args.root = call.root;
    Ok(Launch { family, func, grid: (grid.blocks, grid.threads), args: LaunchArgs::Collective(args) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clique::THREADS;

    /// The stream grid of every collective with stream kernels: producer and consumer blocks in
    /// pairs (at most 64 blocks), whose rings of 4 slots of `parts` parts fit in one parity half;
    /// parts of whole 16-byte vectors, a slot at most 64 KiB.
    #[test]
    fn stream_rings_fit_the_half() {
        let colls = [
            (Coll::AllReduce, Kernel::STREAM, false),
            (Coll::AllReduce, Kernel::STREAM_TWO_SHOT, true),
            (Coll::AllGather, Kernel::STREAM, false),
            (Coll::ReduceScatter, Kernel::STREAM, true),
            (Coll::AllToAll, Kernel::STREAM, true),
        ];
        for (coll, algo, chunked) in colls {
            for nranks in 2..=8u64 {
                for half_bytes in [32u64 << 10, 128 << 10, 512 << 10, 8 << 20, 16 << 20] {
                    for max_blocks in [1u32, 2, 3, 16, 33, 64, 128, 1024] {
                        for es in [1u64, 2, 4, 8] {
                            let w = Work { count: 1 << 30, unit_bytes: es, nranks, half_bytes, max_blocks };
                            let Grid { window, blocks, threads } = grid(coll, algo, &w);
                            let (pairs, parts) = (u64::from(blocks / 2), if chunked { nranks } else { 1 });
                            assert!(blocks % 2 == 0 && (2..=64).contains(&blocks) && threads == THREADS);
                            assert!(blocks <= max_blocks.max(2));
                            assert!(window > 0 && (window * es) % 16 == 0 && parts * window * es <= 64 << 10);
                            assert!(
                                pairs * 4 * parts * window * es <= half_bytes,
                                "{coll:?} {half_bytes} {max_blocks}"
                            );
                        }
                    }
                }
            }
        }
        let w = Work { count: 1 << 30, unit_bytes: 4, nranks: 2, half_bytes: 8 << 20, max_blocks: 128 };
        assert_eq!(grid(Coll::AllReduce, Kernel::STREAM, &w), Grid { window: 16 << 10, blocks: 64, threads: 512 });
    }
}
