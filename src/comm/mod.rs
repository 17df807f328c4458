//! Layer `comm`: rcclx's state per communicator, in a side table keyed by the stock
//! `ncclComm_t`, and the route of every call that names a communicator.
//!
//! The caller's communicator handle is never wrapped: forwarded calls pass it through
//! untouched. A communicator's [`State`] is created when the stock library created it (init,
//! split, shrink, grow) and dropped on destroy / abort (`lifecycle`). It owns the clique (once
//! setup agreed on one), the statistics, the first late error and the cross-stream order.
//!
//! Layer: the top of the algorithm layers (`dda`, `lowp`, `clique`, `intercept`, `upstream`);
//! only `abi` calls it.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use crate::clique::{Buffers, Clique};
use crate::dda::alltoallv::AllToAllvCall;
use crate::error::Error;
use crate::intercept::{CallDesc, Kernel, Reason, Route};
use crate::plan::Plan;
use crate::types::{ncclComm_t, ncclResult_t};

pub mod lifecycle;
mod order;
mod state;
pub mod stats;

pub use lifecycle::Job;
pub use order::Order;
pub use state::{State, lookup, process_stats};
pub use stats::{Snapshot, Stats};

/// The state of `comm` ready for an operation: set up, not closed. `Err` carries the error an
/// operation must return: rcclx's own late error, or `ncclInvalidArgument` for a non-blocking
/// communicator whose setup has not finished (it still reports `ncclInProgress`; the stock
/// library's `ncclCommEnsureReady` turns that into `ncclInvalidArgument`), or `ncclInvalidUsage`
/// after `ncclCommFinalize`. `Ok(None)`: rcclx has
/// nothing to do with this call (unknown, closed, or forwarding everything).
type Usable = Result<Option<(Arc<State>, Arc<Clique>)>, (Arc<State>, ncclResult_t)>;

fn usable(comm: ncclComm_t) -> Usable {
    let Some(state) = lookup(comm) else { return Ok(None) };
    if !state.set_up() {
        lifecycle::progress();
        if !state.set_up() {
            crate::upstream::report_error(&format!(
                "rcclx: comm {comm:p} used before ncclCommGetAsyncError reported it ready (its setup is in \
                 progress): ncclInvalidArgument, as the stock library answers; poll ncclCommGetAsyncError until \
                 it returns ncclSuccess"
            ));
            return Err((state, ncclResult_t::InvalidArgument));
        }
    }
    if state.finalized.load(Relaxed) {
        crate::upstream::report_error(&format!(
            "rcclx: comm {comm:p} used after ncclCommFinalize: ncclInvalidUsage; a finalized communicator only \
             takes ncclCommDestroy"
        ));
        return Err((state, ncclResult_t::InvalidUsage));
    }
    if state.is_closed() {
        return Ok(None);
    }
    let own = state.own_error();
    if !own.is_ok() {
        let why = if state.setup_failed.load(Relaxed) {
            format!(
                "its setup heard from no peer within RCCLX_SETUP_TIMEOUT_MS={} ms",
                crate::config::get().setup_timeout_ms
            )
        } else if state.broken.load(Relaxed) {
            "a call across hosts failed after part of it was enqueued (its peers wait for the rest)".into()
        } else {
            format!(
                "an rcclx kernel waited longer than RCCLX_TIMEOUT_MS={} ms for a peer (it died, or stopped \
                 calling collectives)",
                crate::config::get().timeout_ms
            )
        };
        let text = format!("rcclx: comm {comm:p} is in error (ncclRemoteError): {why}; abort it with ncclCommAbort");
        if !state.error_reported.swap(true, Relaxed) {
            tracing::warn!("{text}");
        }
        crate::upstream::set_last_error(&text);
        return Err((state, own));
    }
    let Some(clique) = state.clique().cloned() else { return Ok(None) };
    // The stock library's own asynchronous error fails every operation of the communicator,
    // its route or rcclx's (its `ncclCommEnsureReady`).
    if !state.stock_made.load(Relaxed) {
        return Ok(Some((state, clique)));
    }
    match crate::upstream::async_error(comm) {
        ncclResult_t::Success | ncclResult_t::InProgress => Ok(Some((state, clique))),
        stock => Err((state, stock)),
    }
}

/// A stock-library operation on `comm` and `stream` (everything but the intercepted
/// collectives): ordered after the communicator's earlier operations, then forwarded.
pub fn ordered(comm: ncclComm_t, stream: crate::gpu::Stream, forward: impl FnOnce() -> ncclResult_t) -> ncclResult_t {
    lifecycle::touch(comm);
    match usable(comm) {
        Ok(None) => forward(),
        Err((_, code)) => code,
        Ok(Some((state, clique))) => forward_in_order(&state, &clique, stream, forward),
    }
}

fn forward_in_order(
    state: &State,
    clique: &Clique,
    stream: crate::gpu::Stream,
    forward: impl FnOnce() -> ncclResult_t,
) -> ncclResult_t {
    if let Err(e) = state.order.before(clique.device, stream) {
        tracing::warn!("comm {:p}: ordering across streams: {e}", state.comm());
    }
    let r = forward();
    // Inside a group the stock library enqueues at the group's end (the event follows there);
    // `ncclInProgress` (a non-blocking communicator): in the background, so an event recorded
    // now would precede the operation (a stream switch records one later instead).
    let enqueued = !lifecycle::in_group() && r != ncclResult_t::InProgress;
    if let Err(e) = state.order.after(clique.device, enqueued) {
        tracing::warn!("comm {:p}: ordering across streams: {e}", state.comm());
    }
    r
}

/// Runs one intercepted collective: decides the route and runs rcclx's kernel (now, or at the
/// end of the caller's group), or calls `forward` (the stock function with the caller's
/// arguments).
pub fn collective(
    comm: ncclComm_t,
    call: CallDesc,
    bufs: Buffers,
    forward: impl FnOnce() -> ncclResult_t,
) -> ncclResult_t {
    lifecycle::touch(comm);
    let (state, clique) = match usable(comm) {
        Ok(Some(sc)) => sc,
        Ok(None) => {
            if let Some(s) = lookup(comm) {
                let why = if s.is_closed() { Reason::CommError } else { Reason::NotEligible };
                s.stats.count(call.coll, Route::Upstream(why), 0);
            }
            return forward();
        }
        Err((state, code)) => {
            state.stats.count(call.coll, Route::Upstream(Reason::CommError), 0);
            return code;
        }
    };
    crate::log::set_device(clique.device);
    let bytes = call.bytes(clique.span().comm_nranks).unwrap_or(0);
    let route = crate::intercept::decide(&call, &clique.facts);
    let is_root = call.root as usize == clique.span().comm_rank;
    let null =
        crate::intercept::null_buffer(call.coll.spec().root_only, is_root, bufs.send.is_null(), bufs.recv.is_null());
    let route = if null { Route::Upstream(Reason::NullBuffer) } else { route };
    tracing::info!(
        target: crate::log::COLL_TARGET,
        "{} count {} {} {}{} comm {comm:p}: {}",
        call.coll.spec().title,
        call.count,
        call.dtype.name(),
        call.op.name(),
        if call.coll.spec().rooted() { format!(" root {}", call.root) } else { String::new() },
        route.describe(call.coll)
    );
    if let Route::Upstream(_) = route {
        state.stats.count(call.coll, route, bytes);
        return forward_in_order(&state, &clique, bufs.stream, forward);
    }
    if crate::log::calls_on() {
        // NCCL's CALL line, which the stock library writes for the calls it runs.
        let op_name = if call.coll == crate::intercept::Coll::AllToAll { "AlltoAll" } else { call.coll.spec().title };
        let line = crate::log::call_line(
            op_name,
            bufs.send,
            bufs.recv,
            call.count,
            call.dtype.0,
            call.op.0,
            call.root,
            comm as *const std::ffi::c_void,
            bufs.stream.as_raw(),
        );
        tracing::trace!(target: crate::log::CALL_TARGET, "{line}");
    }
    // The stock library's NVTX range of this call, which it never sees (until the launch is in).
    let part_bytes = call.count.saturating_mul(call.dtype.size().unwrap_or(0));
    let payload = crate::nvtx::Payload::new(call.coll, part_bytes, call.op.0, call.root);
    let _range = crate::nvtx::range(call.coll, payload);
    let planned = match route {
        Route::Own(Kernel { codec: Some(codec), .. }) => crate::lowp::plan(&clique, &call, codec, &bufs).map(Plan::one),
        Route::Own(kernel) => crate::dda::plan(&clique, kernel, &call, &bufs).map(Plan::one),
        Route::AcrossHosts(codec) => crate::plan::across_hosts(&clique, &call, codec, &bufs),
        Route::Upstream(_) => unreachable!("forwarded above"),
    };
    let job = Job { state, clique, what: call.coll.name(), bytes, stream: bufs.stream };
    job.start(planned)
}

/// Runs one GPU-resident AllToAllv (`rcclxAllToAllvDynamic` and its forms); `describe` turns
/// the C arguments into the call, given the communicator's rank count. It needs rcclx's kernels
/// on `comm`: anywhere else it is `ncclInvalidUsage` (the counts are on the device, so the stock
/// library, which wants them on the host, cannot stand in).
pub fn alltoallv_dynamic(
    comm: ncclComm_t,
    stream: crate::gpu::Stream,
    describe: impl FnOnce(usize) -> Result<AllToAllvCall, Error>,
) -> ncclResult_t {
    let (state, clique) = match usable(comm) {
        Ok(Some(sc)) => sc,
        Ok(None) => {
            let why = match lookup(comm) {
                None => "is not a communicator rcclx knows",
                Some(s) if s.is_closed() => "is finalized, revoked or aborted",
                Some(_) => "has no rcclx kernels (they need 2-8 ranks on one host with peer access)",
            };
            crate::upstream::report_error(&format!(
                "rcclx: rcclxAllToAllvDynamic: comm {comm:p} {why}: ncclInvalidUsage (the counts are in device \
                 memory, so the stock library cannot stand in)"
            ));
            return ncclResult_t::InvalidUsage;
        }
        Err((_, code)) => return code,
    };
    crate::log::set_device(clique.device);
    if clique.span().hosts > 1 {
        crate::upstream::report_error(&format!(
            "rcclx: rcclxAllToAllvDynamic: comm {comm:p} spans hosts: ncclInvalidUsage (the GPU-resident \
             AllToAllv runs on one host)"
        ));
        return ncclResult_t::InvalidUsage;
    }
    let planned = describe(clique.nranks).and_then(|call| crate::dda::alltoallv::plan(&clique, &call)).map(Plan::one);
    if let Err(e) = &planned
        && e.code == ncclResult_t::InvalidArgument
    {
        crate::upstream::report_error(&format!("rcclx: rcclxAllToAllvDynamic on comm {comm:p}: {e}"));
        return e.code; // the caller's mistake: the communicator stays usable
    }
    let job = Job { state, clique, what: "alltoallv", bytes: 0, stream };
    job.start(planned)
}

#[cfg(test)]
mod tests {
    use super::state::{insert, remove};
    use super::*;
    use crate::intercept::Coll;
    use crate::types::ncclDataType_t;

    /// A handle no stock library made: the side table only uses it as a key.
    fn fake(n: usize) -> ncclComm_t {
        (0x7000_0000 + n * 64) as ncclComm_t
    }

    fn call() -> CallDesc {
        CallDesc::new(Coll::AllReduce, 1024, ncclDataType_t::Float32)
    }

    fn bufs() -> Buffers {
        let p = 0x1000 as *mut std::ffi::c_void;
        // SAFETY: a null stream handle is the legacy default stream; nothing is launched here.
        Buffers { send: p, recv: p, stream: unsafe { crate::gpu::Stream::from_raw(std::ptr::null_mut()) } }
    }

    #[test]
    fn unknown_comm_forwards() {
        assert_eq!(collective(fake(1), call(), bufs(), || ncclResult_t(42)), ncclResult_t(42));
        assert_eq!(ordered(fake(1), bufs().stream, || ncclResult_t(43)), ncclResult_t(43));
    }

    /// The tests that read `ncclGetLastError`'s text (one per process) take turns.
    static LAST_ERROR: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

    /// What `ncclGetLastError` returns while the stock library reports `stock`.
    fn last(stock: &std::ffi::CStr) -> String {
        // SAFETY: a NUL-terminated literal in; a NUL-terminated string out.
        unsafe { std::ffi::CStr::from_ptr(crate::upstream::last_error(stock.as_ptr())) }.to_string_lossy().into_owned()
    }

    #[test]
    fn a_comm_whose_setup_heard_no_peer_is_in_error() {
        let _turn = LAST_ERROR.lock();
        let _waiting = lifecycle::WAITING_TURN.lock();
        let s = insert(fake(7), 0);
        lifecycle::timed_out(std::slice::from_ref(&s));
        // ncclGetLastError gives rcclx's text until the stock library reports a newer error.
        assert!(last(c"").contains("RCCLX_SETUP_TIMEOUT_MS"));
        assert_eq!(last(c"a newer stock error"), "a newer stock error");
        assert_eq!(last(c""), "", "rcclx's text came back");
        let never = || -> ncclResult_t { panic!("forwarded a call on a communicator in error") };
        assert_eq!(collective(fake(7), call(), bufs(), never), ncclResult_t::RemoteError);
        assert!(last(c"").contains("is in error (ncclRemoteError): its setup heard from no peer"), "{}", last(c""));
        assert_eq!(ordered(fake(7), bufs().stream, never), ncclResult_t::RemoteError);
        assert_eq!(lifecycle::async_state(fake(7)), ncclResult_t::RemoteError);
        assert_eq!(s.stats.snapshot().reasons[Reason::CommError as usize], 1);
        remove(fake(7));
    }

    #[test]
    fn a_closed_comm_forwards_to_the_stock_library() {
        let s = insert(fake(3), 0);
        s.finish_setup(None);
        s.close(true);
        // The stock library answers for a finalized / revoked communicator.
        assert_eq!(collective(fake(3), call(), bufs(), || ncclResult_t::InvalidUsage), ncclResult_t::InvalidUsage);
        assert_eq!(ordered(fake(3), bufs().stream, || ncclResult_t::Success), ncclResult_t::Success);
        remove(fake(3));
    }

    #[test]
    fn a_finalized_comm_answers_invalid_usage() {
        let _turn = LAST_ERROR.lock();
        let s = insert(fake(6), 0);
        s.finish_setup(None);
        s.finalize();
        let never = || -> ncclResult_t { panic!("forwarded an operation after ncclCommFinalize") };
        assert_eq!(collective(fake(6), call(), bufs(), never), ncclResult_t::InvalidUsage);
        assert!(last(c"").contains("used after ncclCommFinalize"), "{}", last(c""));
        assert_eq!(ordered(fake(6), bufs().stream, never), ncclResult_t::InvalidUsage);
        remove(fake(6));
    }

    #[test]
    fn a_comm_still_setting_up_answers_invalid_argument_as_stock() {
        let _turn = LAST_ERROR.lock();
        let s = insert(fake(4), 0);
        let never = || -> ncclResult_t { panic!("forwarded before setup ended") };
        assert_eq!(collective(fake(4), call(), bufs(), never), ncclResult_t::InvalidArgument);
        assert!(last(c"").contains("poll ncclCommGetAsyncError"), "{}", last(c""));
        assert!(!s.set_up());
        s.finish_setup(None);
        assert_eq!(collective(fake(4), call(), bufs(), || ncclResult_t(7)), ncclResult_t(7));
        remove(fake(4));
    }

    #[test]
    fn the_gpu_resident_alltoallv_without_kernels_says_why() {
        let _turn = LAST_ERROR.lock();
        let s = insert(fake(8), 0);
        s.finish_setup(None);
        let describe = |_| -> Result<AllToAllvCall, Error> { panic!("described a call rcclx cannot run") };
        assert_eq!(alltoallv_dynamic(fake(8), bufs().stream, describe), ncclResult_t::InvalidUsage);
        assert!(last(c"").contains("has no rcclx kernels"), "{}", last(c""));
        assert_eq!(alltoallv_dynamic(fake(9), bufs().stream, describe), ncclResult_t::InvalidUsage);
        assert!(last(c"").contains("is not a communicator rcclx knows"), "{}", last(c""));
        remove(fake(8));
    }

    #[test]
    fn a_comm_created_in_a_simulated_group_forwards() {
        lifecycle::group_start();
        lifecycle::created(&[fake(5)], ncclResult_t::Success, 0);
        let s = lookup(fake(5)).unwrap();
        assert!(!s.set_up(), "set up only when the group ends");
        lifecycle::group_end(ncclResult_t::Success, true);
        assert!(s.set_up() && s.clique().is_none());
        assert!(!lifecycle::in_group());
        remove(fake(5));
    }
}
