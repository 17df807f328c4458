//! Layer `dda`: host side of the Direct Data Access kernels (peers' staging buffers read or
//! written directly over NVLink / xGMI): the grid and window of a call, and its launch plan.
//! One grid function per collective ([`Work`] in, [`Grid`] out); the kernels are in
//! `hip_kernels/` (one family each in `src/kernel_table.rs`).
//!
//! Layer: above `clique`, `intercept`, `error`; below `comm`.

use crate::clique::{Buffers, Clique, Grid, Launch, LaunchArgs, Work};
use crate::error::Error;
use crate::intercept::{Algo, CallDesc, Coll, FamilyKey};

mod allgather;
mod allreduce;
mod alltoall;
pub mod alltoallv;
mod grid;
mod reducescatter;

/// The grid function of each collective's DDA kernels. Broadcast moves one block of the
/// whole message through the root's staging buffer, as AllGather moves each rank's; Reduce
/// is AllReduce's one-shot with the reduction on the root only.
fn grid_fn(coll: Coll) -> fn(Algo, &Work) -> Grid {
    match coll {
        Coll::AllReduce | Coll::Reduce => allreduce::grid,
        Coll::ReduceScatter => reducescatter::grid,
        Coll::AllGather | Coll::Broadcast => allgather::grid,
        Coll::AllToAll => alltoall::grid,
    }
}

/// The launch of `call` on `algo` (one of the DDA algorithms of `call.coll`: LL, LL128, flat,
/// two-shot, stream).
pub fn plan(clique: &Clique, algo: Algo, call: &CallDesc, bufs: &Buffers) -> Result<Launch, Error> {
    // The LL128 region exists only where the agreed policies let LL128 run (`clique::local`).
    if algo == Algo::Ll128 && !clique.facts.policies.ll128_on() {
        return Err(Error::internal("LL128 on a clique without an LL128 region (RCCLX_LL128_MAX_BYTES=0)"));
    }
    let family = crate::intercept::family(FamilyKey::Coll(call.coll, algo))
        .ok_or_else(|| Error::internal(format!("no DDA kernels for {}.{}", call.coll.name(), algo.name())))?;
    let func = clique
        .kernel(family, call.dtype.0, call.op.0)
        .ok_or_else(|| {
            let (c, a, t, o) = (call.coll.name(), algo.name(), call.dtype.name(), call.op.name());
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
    let grid = grid_fn(call.coll)(algo, &work);
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
            (Coll::AllReduce, Algo::Stream, false),
            (Coll::AllReduce, Algo::StreamTree, true),
            (Coll::AllGather, Algo::Stream, false),
            (Coll::ReduceScatter, Algo::Stream, true),
            (Coll::AllToAll, Algo::Stream, true),
        ];
        for (coll, algo, chunked) in colls {
            for nranks in 2..=8u64 {
                for half_bytes in [32u64 << 10, 128 << 10, 512 << 10, 8 << 20, 16 << 20] {
                    for max_blocks in [1u32, 2, 3, 16, 33, 64, 128, 1024] {
                        for es in [1u64, 2, 4, 8] {
                            let w = Work { count: 1 << 30, unit_bytes: es, nranks, half_bytes, max_blocks };
                            let Grid { window, blocks, threads } = grid_fn(coll)(algo, &w);
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
        assert_eq!(grid_fn(Coll::AllReduce)(Algo::Stream, &w), Grid { window: 16 << 10, blocks: 64, threads: 512 });
    }
}
