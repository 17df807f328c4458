//! Bodies of the `hook` exports: translate C arguments, call the stock library, keep the
//! side table in step (`comm::lifecycle`), or route `ncclAllToAll`, RCCL's older name of an
//! intercepted collective (`comm::collective`). No logic beyond that.
#![allow(non_snake_case, clippy::missing_safety_doc)]

use super::forward::forward;
use crate::clique::Buffers;
use crate::comm::{self, lifecycle};
use crate::intercept::{CallDesc, Coll};
use crate::types::*;
use std::ffi::{c_char, c_int, c_void};

/// `ncclCommShrink` flag: abort the parent's operations first (`NCCL_SHRINK_ABORT`).
const NCCL_SHRINK_ABORT: c_int = 0x01;

/// Tells the side table about the handle a stock creation call wrote to `out`, with its SM
/// budget `max_ctas` ([`budget`]); what the call returns. The out-pointer is read only when the call
/// succeeded (or is in progress).
unsafe fn created(out: *const ncclComm_t, r: ncclResult_t, max_ctas: u32) -> ncclResult_t {
    if r.is_ok_or_in_progress() && !out.is_null() {
        // SAFETY: non-null out-pointer the caller gave the stock call, which wrote it.
        return lifecycle::created(&[unsafe { out.read() }], r, max_ctas);
    }
    r
}

/// The SM budget of a new communicator (NCCL's `maxCTAs`: most blocks of any grid; 0: none), as
/// the stock library decides it: `NCCL_MAX_CTAS` above 0 overrides the config's `maxCTAs` above
/// 0; a split or shrink without a config inherits its parent's (`parent`).
///
/// # Safety
/// `config` is NULL or the config the stock library just accepted (see [`max_ctas_of`]).
unsafe fn budget(config: *const ncclConfig_t, parent: Option<ncclComm_t>) -> u32 {
    if let Some(n) = crate::config::get().nccl_max_ctas.filter(|&n| n > 0) {
        return n.min(u64::from(u32::MAX)) as u32;
    }
    if config.is_null() {
        return parent.map_or(0, lifecycle::max_ctas);
    }
    // SAFETY: the caller's promise.
    unsafe { max_ctas_of(config) }.unwrap_or(0)
}

pub unsafe fn ncclGetErrorString(result: ncclResult_t) -> *const c_char {
    match crate::upstream::get().ok().and_then(|u| u.fns.ncclGetErrorString) {
        // SAFETY: resolved from the stock library with the header's signature.
        Some(f) => crate::upstream::guarded(|| unsafe { f(result) }),
        None => crate::upstream::own_error_string(result).as_ptr(),
    }
}

/// The last error: rcclx's own while the stock library has reported none since
/// (`upstream::last_error`), else the stock library's; when no stock library could be loaded,
/// rcclx's reason (what was tried, what to set). PyTorch shows this text to the user.
pub unsafe fn ncclGetLastError(comm: ncclComm_t) -> *const c_char {
    if let Some(why) = crate::upstream::load_error() {
        return why.as_ptr();
    }
    let stock = forward!(ncclGetLastError(comm));
    // SAFETY: the stock library's `ncclGetLastError` returns NULL or a NUL-terminated string.
    unsafe { crate::upstream::last_error(stock) }
}

/// NCCL re-reads its log variables at its next line; rcclx's logger does the same.
pub unsafe fn ncclResetDebugInit() {
    forward!(ncclResetDebugInit());
    crate::log::reset();
}

pub unsafe fn ncclResetDebugInitInternal() {
    forward!(ncclResetDebugInitInternal());
    crate::log::reset();
}

pub unsafe fn ncclCommInitRank(
    comm: *mut ncclComm_t,
    nranks: c_int,
    commId: ncclUniqueId,
    rank: c_int,
) -> ncclResult_t {
    let r = forward!(ncclCommInitRank(comm, nranks, commId, rank));
    // SAFETY: `comm` is the caller's out-pointer of this very call; no config.
    unsafe { created(comm, r, budget(std::ptr::null(), None)) }
}

pub unsafe fn ncclCommInitRankConfig(
    comm: *mut ncclComm_t,
    nranks: c_int,
    commId: ncclUniqueId,
    rank: c_int,
    config: *mut ncclConfig_t,
) -> ncclResult_t {
    let r = forward!(ncclCommInitRankConfig(comm, nranks, commId, rank, config));
    // SAFETY: as above; `config` is the one the stock call accepted.
    unsafe { created(comm, r, budget(config, None)) }
}

pub unsafe fn ncclCommInitAll(comm: *mut ncclComm_t, ndev: c_int, devlist: *const c_int) -> ncclResult_t {
    let r = forward!(ncclCommInitAll(comm, ndev, devlist));
    if r.is_ok() && !comm.is_null() && ndev > 0 {
        // SAFETY: on success upstream wrote `ndev` handles into the caller's array.
        let comms = unsafe { std::slice::from_raw_parts(comm, ndev as usize) };
        // SAFETY: no config.
        return lifecycle::created(comms, r, unsafe { budget(std::ptr::null(), None) });
    }
    r
}

pub unsafe fn ncclCommInitRankScalable(
    newcomm: *mut ncclComm_t,
    nranks: c_int,
    myrank: c_int,
    nId: c_int,
    commIds: *mut ncclUniqueId,
    config: *mut ncclConfig_t,
) -> ncclResult_t {
    let r = forward!(ncclCommInitRankScalable(newcomm, nranks, myrank, nId, commIds, config));
    // SAFETY: as above.
    unsafe { created(newcomm, r, budget(config, None)) }
}

pub unsafe fn ncclCommSplit(
    comm: ncclComm_t,
    color: c_int,
    key: c_int,
    newcomm: *mut ncclComm_t,
    config: *mut ncclConfig_t,
) -> ncclResult_t {
    let r = forward!(ncclCommSplit(comm, color, key, newcomm, config));
    // SAFETY: as above; NCCL_SPLIT_NOCOLOR leaves NULL there, which `created` skips.
    unsafe { created(newcomm, r, budget(config, Some(comm))) }
}

pub unsafe fn ncclCommShrink(
    comm: ncclComm_t,
    excludeRanksList: *mut c_int,
    excludeRanksCount: c_int,
    newcomm: *mut ncclComm_t,
    config: *mut ncclConfig_t,
    shrinkFlags: c_int,
) -> ncclResult_t {
    let shrink = || forward!(ncclCommShrink(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags));
    let r = if shrinkFlags & NCCL_SHRINK_ABORT != 0 { lifecycle::revoked(comm, shrink) } else { shrink() };
    // SAFETY: as above.
    unsafe { created(newcomm, r, budget(config, Some(comm))) }
}

pub unsafe fn ncclCommGrow(
    comm: ncclComm_t,
    nRanks: c_int,
    uniqueId: *const ncclUniqueId,
    rank: c_int,
    newcomm: *mut ncclComm_t,
    config: *mut ncclConfig_t,
) -> ncclResult_t {
    let r = forward!(ncclCommGrow(comm, nRanks, uniqueId, rank, newcomm, config));
    // SAFETY: as above.
    unsafe { created(newcomm, r, budget(config, (!comm.is_null()).then_some(comm))) }
}

pub unsafe fn ncclCommFinalize(comm: ncclComm_t) -> ncclResult_t {
    lifecycle::finalized(comm);
    forward!(ncclCommFinalize(comm))
}

pub unsafe fn ncclCommRevoke(comm: ncclComm_t, revokeFlags: c_int) -> ncclResult_t {
    lifecycle::revoked(comm, || forward!(ncclCommRevoke(comm, revokeFlags)))
}

pub unsafe fn ncclCommDestroy(comm: ncclComm_t) -> ncclResult_t {
    lifecycle::ended(comm, false, || forward!(ncclCommDestroy(comm)))
}

pub unsafe fn ncclCommAbort(comm: ncclComm_t) -> ncclResult_t {
    lifecycle::ended(comm, true, || forward!(ncclCommAbort(comm)))
}

/// Adds rcclx's view to a communicator the stock library reports ready: `ncclInProgress` while
/// rcclx's setup runs (this call advances it), rcclx's own late error (a kernel timeout) after.
pub unsafe fn ncclCommGetAsyncError(comm: ncclComm_t, asyncError: *mut ncclResult_t) -> ncclResult_t {
    let r = forward!(ncclCommGetAsyncError(comm, asyncError));
    if r.is_ok() && !asyncError.is_null() {
        // SAFETY: non-null out-pointer, written by upstream on success.
        let upstream_state = unsafe { asyncError.read() };
        if upstream_state == ncclResult_t::Success {
            let own = lifecycle::async_state(comm);
            if !own.is_ok() {
                // SAFETY: as above.
                unsafe { asyncError.write(own) };
            }
        }
    }
    r
}

pub unsafe fn ncclGroupStart() -> ncclResult_t {
    lifecycle::group_start();
    forward!(ncclGroupStart())
}

pub unsafe fn ncclGroupEnd() -> ncclResult_t {
    let r = forward!(ncclGroupEnd());
    lifecycle::group_end(r, false)
}

/// Ends the group like `ncclGroupEnd` but runs nothing, as the stock library does.
pub unsafe fn ncclGroupSimulateEnd(simInfo: *mut ncclSimInfo_t) -> ncclResult_t {
    let r = forward!(ncclGroupSimulateEnd(simInfo));
    lifecycle::group_end(r, true)
}

/// RCCL's older name of `ncclAlltoAll`. Forwards to whichever of the two the stock library
/// has (NCCL only has `ncclAlltoAll`, old RCCL only `ncclAllToAll`).
pub unsafe fn ncclAllToAll(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: Stream,
) -> ncclResult_t {
    let call = CallDesc::new(Coll::AllToAll, count, datatype);
    // SAFETY: the application's `cudaStream_t` / `hipStream_t` for this call (NCCL's contract).
    let bufs = Buffers { send: sendbuff, recv: recvbuff, stream: unsafe { crate::gpu::Stream::from_raw(stream) } };
    comm::collective(comm, call, bufs, || {
        let has_old = crate::upstream::get().map(|u| u.fns.ncclAllToAll.is_some()).unwrap_or(false);
        if has_old {
            forward!(ncclAllToAll(sendbuff, recvbuff, count, datatype, comm, stream))
        } else {
            forward!(ncclAlltoAll(sendbuff, recvbuff, count, datatype, comm, stream))
        }
    })
}
