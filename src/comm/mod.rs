//! Layer `comm`: the side table, upstream `ncclComm_t` -> rcclx [`State`].
//!
//! The caller's communicator handle is never wrapped: forwarded calls pass it through
//! untouched, and rcclx keeps its own state here, created when a communicator is created
//! (init, split, shrink, grow) and dropped on destroy / abort (finalize keeps it until destroy).
//! Depends on: `upstream`, `config`, `intercept` (types), and the algorithm layers.

use crate::dda::Buffers;
use crate::intercept::{CallDesc, CommFacts, Reason, Route, Thresholds};
use crate::types::{ncclComm_t, ncclResult_t};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

pub mod lifecycle;
pub mod stats;
pub use stats::Stats;

/// rcclx's state for one communicator.
pub struct State {
    pub stats: Stats,
    /// First late error (kernel timeout, failure in a drop), reported by
    /// `ncclCommGetAsyncError` (cudarc's `record_err`).
    async_error: AtomicU32,
    /// Non-blocking creation not yet reported complete.
    in_progress: AtomicBool,
    /// The thread that created the communicator: the only one that may run its deferred
    /// setup (an application's watchdog thread polling `ncclCommGetAsyncError` must not
    /// start a collective exchange beside the main thread's collectives).
    creator: std::thread::ThreadId,
    /// What every rank agreed at setup, and the algorithm resources; unset: forward all.
    setup: OnceLock<crate::dda::setup::Setup>,
}

impl State {
    pub fn new(how: lifecycle::Created) -> Self {
        Self {
            stats: Stats::default(),
            async_error: AtomicU32::new(0),
            in_progress: AtomicBool::new(how.in_progress),
            creator: std::thread::current().id(),
            setup: OnceLock::new(),
        }
    }

    /// Records a late error; the first one wins.
    pub fn record_error(&self, code: ncclResult_t) {
        let _ = self.async_error.compare_exchange(0, code.0, Relaxed, Relaxed);
    }

    /// The first late error: one recorded on the host, else one a kernel wrote (timeout).
    pub fn async_error(&self) -> ncclResult_t {
        let own = ncclResult_t(self.async_error.load(Relaxed));
        if !own.is_ok() {
            return own;
        }
        self.setup().map_or(ncclResult_t::Success, |s| s.kernel_error())
    }

    pub fn set_in_progress(&self) {
        self.in_progress.store(true, Relaxed);
    }

    /// True once: the first time a non-blocking communicator is seen complete, and only on
    /// the thread that created it.
    pub fn take_in_progress(&self) -> bool {
        std::thread::current().id() == self.creator && self.in_progress.swap(false, Relaxed)
    }

    pub fn setup(&self) -> Option<&crate::dda::setup::Setup> {
        self.setup.get()
    }

    pub fn set_setup(&self, s: crate::dda::setup::Setup) {
        let _ = self.setup.set(s);
    }

    /// Facts for `intercept::decide`; a communicator that was not set up forwards.
    pub fn facts(&self) -> Option<(&CommFacts, &Thresholds)> {
        self.setup.get().map(|s| (&s.facts, &s.thresholds))
    }

    pub fn count(&self, route: Route, bytes: u64) {
        self.stats.count(route, bytes);
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

pub fn insert(comm: ncclComm_t, state: State) -> Arc<State> {
    let s = Arc::new(state);
    table().write().insert(comm as usize, s.clone());
    s
}

/// Removes `comm`'s state; it is released when the last user lets go of it. Its counters
/// are added to the process totals ([`process_stats`]).
pub fn remove(comm: ncclComm_t) -> Option<Arc<State>> {
    let s = table().write().remove(&(comm as usize));
    if let Some(s) = &s {
        tracing::info!("comm {comm:p}: {}", s.stats.summary());
        RETIRED.add(&s.stats.snapshot());
    }
    s
}

/// Counters of destroyed communicators.
static RETIRED: stats::Totals = stats::Totals::new();

/// Statistics summed over every communicator of the process, live and destroyed.
pub fn process_stats() -> crate::abi::own::rcclxCommStats {
    let t = stats::Totals::new();
    t.add(&RETIRED.snapshot());
    for s in table().read().values() {
        t.add(&s.stats.snapshot());
    }
    t.snapshot()
}

/// Runs one intercepted collective: decides the route and runs rcclx's kernel, or calls
/// `forward` (the upstream function with the caller's arguments).
pub fn collective(
    comm: ncclComm_t,
    call: CallDesc,
    bufs: Buffers,
    forward: impl FnOnce() -> ncclResult_t,
) -> ncclResult_t {
    let Some(state) = lookup(comm) else { return forward() };
    if state.setup().is_none() {
        lifecycle::complete(comm);
    }
    let Some(setup) = state.setup() else {
        state.count(Route::Upstream(Reason::NotSetUp), 0);
        return forward();
    };
    let bytes = call.bytes(setup.facts.nranks).unwrap_or(0);
    let route = crate::intercept::decide(&call, &setup.facts, &setup.thresholds);
    tracing::trace!("{:?} count {} {:?} {:?} on comm {comm:p}: {route:?}", call.coll, call.count, call.dtype, call.op);
    // NULL buffers: the stock library reports the error code it always does.
    let route = if bufs.send.is_null() || bufs.recv.is_null() { Route::Upstream(Reason::NullBuffer) } else { route };
    if let Route::Upstream(_) = route {
        state.count(route, bytes);
        return forward();
    }
    let launched = match route {
        Route::Lowp => crate::lowp::launch::run(setup, &call, &bufs),
        _ => crate::dda::run(setup, route, &call, &bufs),
    };
    match launched {
        Ok(()) => {
            state.count(route, bytes);
            ncclResult_t::Success
        }
        Err(e) => {
            tracing::warn!("{:?} on comm {comm:p}: {e}", call.coll);
            state.count(Route::Upstream(Reason::Failed), bytes);
            state.record_error(e.code());
            e.code()
        }
    }
}
