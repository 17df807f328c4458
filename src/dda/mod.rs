//! Layer `dda`: host side of the Direct Data Access kernels (peers' staging buffers read or
//! written directly over NVLink / xGMI): the grid and window of a call, and its launch plan.
//! One file per collective; the kernels are in `hip_kernels/` (one family each in
//! `src/kernel_table.rs`).
//!
//! Layer: above `clique`, `intercept`, `error`; below `comm`.

use crate::clique::{Buffers, Clique, Launch, LaunchArgs, THREADS};
use crate::error::Error;
use crate::intercept::{Algo, CallDesc, Coll};

mod allgather;
mod allreduce;
mod alltoall;
pub mod alltoallv;
mod reducescatter;

/// The launch of `call` on `algo` (LL, flat or tree).
pub fn plan(clique: &Clique, algo: Algo, call: &CallDesc, bufs: &Buffers) -> Result<Launch, Error> {
    let family = crate::intercept::family(call.coll, algo)
        .ok_or_else(|| Error::internal(format!("no DDA kernels for {:?} {algo:?}", call.coll)))?;
    let func = clique
        .kernel(family, call.dtype.0, call.op.0)
        .ok_or_else(|| {
            Error::internal(format!("no kernel for {:?} {algo:?} {:?} {:?}", call.coll, call.dtype, call.op))
        })?
        .func;
    let elem = call.dtype.size().unwrap_or(1) as u64;
    let (count, n) = (call.count as u64, clique.nranks as u64);
    let mut args = clique.args();
    let (half, max) = (args.half_bytes, clique.max_blocks);
    // The data-movement kernels count bytes; the reducing ones, elements.
    let (count, (window, blocks, threads)) = match call.coll {
        Coll::AllReduce => (count, allreduce::grid(algo, count, elem, n, half, max)),
        Coll::ReduceScatter => (count, reducescatter::grid(algo, count, elem, n, half, max)),
        Coll::AllGather => (count * elem, allgather::grid(algo, count * elem, half, max)),
        Coll::AllToAll => (count * elem, alltoall::grid(algo, count * elem, n, half, max)),
    };
    args.send = bufs.send as u64;
    args.recv = bufs.recv as u64;
    args.count = count;
    args.window_elems = window;
    Ok(Launch { family, func, grid: (blocks, threads), args: LaunchArgs::Collective(args) })
}

/// Blocks and threads for `units` work items of one pass: full blocks of `THREADS`, at most
/// `max_blocks`, and a single smaller block (a multiple of 64 threads) for small passes.
pub(crate) fn blocks_for(units: u64, max_blocks: u32) -> (u32, u32) {
    let threads = THREADS as u64;
    let blocks = units.div_ceil(threads).clamp(1, max_blocks as u64);
    let block_threads = if blocks == 1 { units.next_multiple_of(64).clamp(64, threads) } else { threads };
    (blocks as u32, block_threads as u32)
}
