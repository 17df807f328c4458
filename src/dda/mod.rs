//! Layer `dda`: host side of the Direct Data Access kernels (peers' staging buffers read or
//! written directly over NVLink / xGMI): the grid and window of a call, and its launch plan.
//! One grid function per collective ([`Work`] in, [`Grid`] out); the kernels are in
//! `hip_kernels/` (one family each in `src/kernel_table.rs`).
//!
//! Layer: above `clique`, `intercept`, `error`; below `comm`.

use crate::clique::{Buffers, Clique, Grid, Launch, LaunchArgs, THREADS, Work};
use crate::error::Error;
use crate::intercept::{Algo, CallDesc, Coll, FamilyKey};

mod allgather;
mod allreduce;
mod alltoall;
pub mod alltoallv;
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

/// The launch of `call` on `algo` (LL, flat or two-shot).
pub fn plan(clique: &Clique, algo: Algo, call: &CallDesc, bufs: &Buffers) -> Result<Launch, Error> {
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

/// Blocks and threads for `units` work items of one pass: full blocks of `THREADS`, at most
/// `max_blocks`, and a single smaller block (a multiple of 64 threads) for small passes.
pub(crate) fn blocks_for(units: u64, max_blocks: u32) -> (u32, u32) {
    let threads = THREADS as u64;
    let blocks = units.div_ceil(threads).clamp(1, max_blocks as u64);
    let block_threads = if blocks == 1 { units.next_multiple_of(64).clamp(64, threads) } else { threads };
    (blocks as u32, block_threads as u32)
}
