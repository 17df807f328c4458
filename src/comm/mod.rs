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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

use crate::clique::{Buffers, Clique, Launch};
use crate::error::Error;
use crate::intercept::{Algo, CallDesc, Reason, Route};
use crate::types::{ncclComm_t, ncclResult_t};

pub mod lifecycle;
mod order;
pub mod stats;

pub use stats::{Snapshot, Stats};

/// rcclx's state for one communicator.
pub struct State {
    comm: usize,
    pub stats: Stats,
    /// Set once, when setup finished: the clique, or `None` (every call forwards).
    clique: OnceLock<Option<Arc<Clique>>>,
    /// First late error of rcclx's own (a kernel timeout, a failed launch); later calls on the
    /// communicator return it, as the stock library returns its asynchronous error.
    error: AtomicU32,
    /// Finalized, revoked or aborted: rcclx launches nothing more on it, calls forward.
    closed: AtomicBool,
    order: order::Order,
}

impl State {
    fn new(comm: ncclComm_t) -> Self {
        Self {
            comm: comm as usize,
            stats: Stats::default(),
            clique: OnceLock::new(),
            error: AtomicU32::new(0),
            closed: AtomicBool::new(false),
            order: order::Order::default(),
        }
    }

    pub fn comm(&self) -> ncclComm_t {
        self.comm as ncclComm_t
    }

    /// Whether setup has finished (with or without a clique).
    pub fn set_up(&self) -> bool {
        self.clique.get().is_some()
    }

    /// The clique, when setup agreed on one.
    pub fn clique(&self) -> Option<&Arc<Clique>> {
        self.clique.get().and_then(|c| c.as_ref())
    }

    fn finish_setup(&self, clique: Option<Clique>) {
        if self.clique.set(clique.map(Arc::new)).is_err() {
            tracing::warn!("comm {:p}: set up twice", self.comm());
        }
    }

    /// Records a late error; the first one wins.
    pub fn record_error(&self, code: ncclResult_t) {
        let _ = self.error.compare_exchange(0, code.0, Relaxed, Relaxed);
    }

    /// The first late error of rcclx's own: recorded on the host, or a kernel timeout.
    pub fn own_error(&self) -> ncclResult_t {
        let own = ncclResult_t(self.error.load(Relaxed));
        if !own.is_ok() {
            return own;
        }
        self.clique().map_or(ncclResult_t::Success, |c| c.kernel_error())
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Relaxed)
    }

    /// rcclx launches nothing more on this communicator; its kernels stop waiting.
    pub fn close(&self, stop_kernels: bool) {
        self.closed.store(true, Relaxed);
        if stop_kernels && let Some(c) = self.clique() {
            c.request_abort();
        }
    }
}

type Table = HashMap<usize, Arc<State>>;

fn table() -> &'static RwLock<Table> {
    static TABLE: OnceLock<RwLock<Table>> = OnceLock::new();
    TABLE.get_or_init(|| RwLock::new(HashMap::new()))
}

/// The state of `comm`, if rcclx knows it.
pub fn lookup(comm: ncclComm_t) -> Option<Arc<State>> {
    table().read().get(&(comm as usize)).cloned()
}

fn insert(comm: ncclComm_t) -> Arc<State> {
    let s = Arc::new(State::new(comm));
    table().write().insert(comm as usize, s.clone());
    s
}

/// Removes `comm`'s state; its counters are added to the process totals.
fn remove(comm: ncclComm_t) -> Option<Arc<State>> {
    let s = table().write().remove(&(comm as usize));
    if let Some(s) = &s {
        let snap = s.stats.snapshot();
        tracing::info!("comm {comm:p}: {}", snap.summary());
        RETIRED.write().add(&snap);
    }
    s
}

/// Counters of destroyed communicators.
static RETIRED: RwLock<Snapshot> = RwLock::new(Snapshot {
    routes: [stats::Counter { calls: 0, bytes: 0 }; stats::ROUTES],
    reasons: [0; Reason::ALL.len()],
});

/// Statistics summed over every communicator of the process, live and destroyed.
pub fn process_stats() -> Snapshot {
    let mut t = *RETIRED.read();
    for s in table().read().values() {
        t.add(&s.stats.snapshot());
    }
    t
}

/// The state of `comm` ready for an operation: setup finished (waiting for it if needed), not
/// closed. `Err` carries the error an operation must return (rcclx's own late error); `Ok(None)`:
/// rcclx has nothing to do with this call (unknown, closed, or forwarding everything).
type Usable = Result<Option<(Arc<State>, Arc<Clique>)>, (Arc<State>, ncclResult_t)>;

fn usable(comm: ncclComm_t) -> Usable {
    let Some(state) = lookup(comm) else { return Ok(None) };
    lifecycle::wait_set_up(&state);
    if state.is_closed() {
        return Ok(None);
    }
    let own = state.own_error();
    if !own.is_ok() {
        return Err((state, own));
    }
    Ok(state.clique().cloned().map(|c| (state, c)))
}

/// A stock-library operation on `comm` and `stream` (everything but the four intercepted
/// collectives): ordered after the communicator's earlier operations, then forwarded.
pub fn ordered(comm: ncclComm_t, stream: crate::gpu::Stream, forward: impl FnOnce() -> ncclResult_t) -> ncclResult_t {
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
    if let Err(e) = state.order.after(clique.device, !lifecycle::in_group()) {
        tracing::warn!("comm {:p}: ordering across streams: {e}", state.comm());
    }
    r
}

/// Runs one intercepted collective: decides the route and runs rcclx's kernel (now, or at the
/// end of the caller's group), or calls `forward` (the stock function with the caller's
/// arguments).
pub fn collective(comm: ncclComm_t, call: CallDesc, bufs: Buffers, forward: impl FnOnce() -> ncclResult_t) -> ncclResult_t {
    let (state, clique) = match usable(comm) {
        Ok(Some(sc)) => sc,
        Ok(None) => {
            if let Some(s) = lookup(comm) {
                let why = if s.is_closed() { Reason::CommError } else { Reason::NotSetUp };
                s.stats.count(call.coll, Route::Upstream(why), 0);
            }
            return forward();
        }
        Err((state, code)) => {
            state.stats.count(call.coll, Route::Upstream(Reason::CommError), 0);
            return code;
        }
    };
    let bytes = call.bytes(clique.nranks).unwrap_or(0);
    let route = crate::intercept::decide(&call, &clique.facts, &clique.thresholds);
    tracing::trace!("{:?} count {} {:?} {:?} on comm {comm:p}: {route:?}", call.coll, call.count, call.dtype, call.op);
    // NULL buffers: the stock library reports the error code it always does.
    let route = if bufs.send.is_null() || bufs.recv.is_null() { Route::Upstream(Reason::NullBuffer) } else { route };
    let algo = match route {
        Route::Own(algo) => algo,
        Route::Upstream(_) => {
            state.stats.count(call.coll, route, bytes);
            return forward_in_order(&state, &clique, bufs.stream, forward);
        }
    };
    let planned = match algo {
        Algo::Lowp => crate::lowp::plan(&clique, &call, &bufs),
        _ => crate::dda::plan(&clique, algo, &call, &bufs),
    };
    let job = Job { state, clique, coll: call.coll, route, bytes, stream: bufs.stream };
    match planned {
        Ok(launch) if lifecycle::in_group() => {
            lifecycle::defer(job, launch);
            ncclResult_t::Success
        }
        Ok(launch) => job.run(launch),
        Err(e) => job.failed(e),
    }
}

/// A planned rcclx launch with what it needs to run and be counted.
pub struct Job {
    state: Arc<State>,
    clique: Arc<Clique>,
    coll: crate::intercept::Coll,
    route: Route,
    bytes: u64,
    stream: crate::gpu::Stream,
}

impl Job {
    /// Orders and launches; a failure puts the communicator in error.
    fn run(self, launch: Launch) -> ncclResult_t {
        if self.state.is_closed() {
            return ncclResult_t::Success; // aborted meanwhile (a deferred launch): nothing runs
        }
        if let Err(e) = self.state.order.before(self.clique.device, self.stream) {
            return self.failed(e);
        }
        match self.clique.launch(launch.func, launch.grid, launch.args, self.stream) {
            Ok(()) => {
                let _ = self.state.order.after(self.clique.device, true);
                self.state.stats.count(self.coll, self.route, self.bytes);
                ncclResult_t::Success
            }
            Err(e) => self.failed(e),
        }
    }

    fn failed(self, e: Error) -> ncclResult_t {
        tracing::warn!("{:?} on comm {:p}: {e}", self.coll, self.state.comm());
        self.state.stats.count(self.coll, Route::Upstream(Reason::Failed), self.bytes);
        self.state.record_error(e.code);
        e.code
    }
}
