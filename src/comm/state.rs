//! The side table: each communicator's [`State`], keyed by the stock `ncclComm_t`, and the
//! statistics of the communicators it has dropped.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

use super::order;
use super::stats::{self, Snapshot, Stats};
use crate::clique::Clique;
use crate::intercept::Reason;
use crate::types::{ncclComm_t, ncclResult_t};

/// rcclx's state for one communicator.
pub struct State {
    pub(super) comm: usize,
    pub stats: Stats,
    /// Set once, when setup finished: the clique, or `None` (every call forwards).
    pub(super) clique: OnceLock<Option<Arc<Clique>>>,
    /// Finalized, revoked or aborted: rcclx launches nothing more on it, calls forward.
    pub(super) closed: AtomicBool,
    /// rcclx launches of this communicator under way ([`Job::run`](super::Job::run)): `lifecycle::ended` waits
    /// for them (microseconds) before it hands the clique's fence over, so no launch slips in
    /// after the fence (a deferred group's launches may run in another thread).
    pub(super) launching: std::sync::atomic::AtomicUsize,
    /// Finalized: operations get `ncclInvalidUsage` (see [`State::finalize`]).
    pub(super) finalized: AtomicBool,
    /// Setup never heard from a peer (`RCCLX_SETUP_TIMEOUT_MS`): every call is `ncclRemoteError`.
    pub(super) setup_failed: AtomicBool,
    /// A call's plan failed part-way (some of its steps enqueued): the communicator is in error.
    pub(super) broken: AtomicBool,
    /// Its asynchronous error was logged (once; `ncclGetLastError` has it at every call).
    pub(super) error_reported: AtomicBool,
    pub(crate) order: order::Order,
    /// NCCL's SM budget for this communicator (`maxCTAs`, `NCCL_MAX_CTAS`): most blocks of any
    /// rcclx grid; 0: none. Set at creation, read by its setup.
    pub(super) max_ctas: u32,
    /// The stock library made the handle (a test harness's own handles are not: `adopt`,
    /// `pend`): its asynchronous error can be asked for.
    pub(super) stock_made: AtomicBool,
}

impl State {
    pub(super) fn new(comm: ncclComm_t, max_ctas: u32) -> Self {
        Self {
            max_ctas,
            comm: comm as usize,
            stats: Stats::default(),
            clique: OnceLock::new(),
            closed: AtomicBool::new(false),
            launching: std::sync::atomic::AtomicUsize::new(0),
            finalized: AtomicBool::new(false),
            setup_failed: AtomicBool::new(false),
            broken: AtomicBool::new(false),
            error_reported: AtomicBool::new(false),
            order: order::Order::default(),
            stock_made: AtomicBool::new(true),
        }
    }

    /// The SM budget it was created with (0: none).
    pub fn max_ctas(&self) -> u32 {
        self.max_ctas
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

    pub(super) fn finish_setup(&self, clique: Option<Clique>) {
        if self.clique.set(clique.map(Arc::new)).is_err() {
            tracing::warn!("comm {:p}: set up twice", self.comm());
        }
    }

    /// rcclx's own asynchronous error: a kernel that timed out waiting for a peer, or a setup
    /// that did not hear from one (`RCCLX_SETUP_TIMEOUT_MS`). Later calls
    /// on the communicator return it, as the stock library returns its asynchronous error.
    /// (A call that fails before anything was enqueued returns its error and leaves the
    /// communicator usable, as the stock library's does: [`Job::failed`](super::Job::failed).)
    pub fn own_error(&self) -> ncclResult_t {
        if self.setup_failed.load(Relaxed) || self.broken.load(Relaxed) {
            return ncclResult_t::RemoteError;
        }
        self.clique().map_or(ncclResult_t::Success, |c| c.kernel_error())
    }

    /// A call's plan failed after some of its steps were enqueued: the communicator is in error.
    pub(super) fn break_off(&self) {
        self.broken.store(true, Relaxed);
    }

    /// Setup gave up on a silent peer: no clique, and the communicator is in error.
    pub(super) fn fail_setup(&self) {
        self.setup_failed.store(true, Relaxed);
        self.finish_setup(None);
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(SeqCst)
    }

    /// Waits until no rcclx launch of this communicator is under way; after [`State::close`],
    /// none starts any more.
    pub(crate) fn quiesce(&self) {
        while self.launching.load(SeqCst) > 0 {
            std::thread::yield_now();
        }
    }

    /// [`State::quiesce`] for at most `limit`: whether no launch is under way any more.
    pub(crate) fn quiesce_within(&self, limit: std::time::Duration) -> bool {
        let start = std::time::Instant::now();
        while self.launching.load(SeqCst) > 0 {
            if start.elapsed() > limit {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        true
    }

    /// `ncclCommFinalize`: from now on an operation on this communicator is invalid usage, which
    /// rcclx reports as such. why: the stock library (2.28) has stopped the communicator's proxy
    /// and launches the operation anyway; one whose connections were never set up (rcclx took
    /// the earlier calls) then faults on the device (seen on 2x H200: an illegal address that
    /// ends the process). Its documentation allows only destroy after finalize.
    pub fn finalize(&self) {
        self.finalized.store(true, Relaxed);
        self.close(false);
    }

    /// rcclx launches nothing more on this communicator; its kernels stop waiting.
    pub fn close(&self, stop_kernels: bool) {
        self.closed.store(true, SeqCst);
        if stop_kernels && let Some(c) = self.clique() {
            c.request_abort();
        }
    }
}

type Table = HashMap<usize, Arc<State>>;

pub(super) fn table() -> &'static RwLock<Table> {
    static TABLE: OnceLock<RwLock<Table>> = OnceLock::new();
    TABLE.get_or_init(|| RwLock::new(HashMap::new()))
}

/// The state of `comm`, if rcclx knows it.
pub fn lookup(comm: ncclComm_t) -> Option<Arc<State>> {
    table().read().get(&(comm as usize)).cloned()
}

pub(super) fn insert(comm: ncclComm_t, max_ctas: u32) -> Arc<State> {
    static AT_EXIT: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a plain `extern "C" fn` that catches every panic.
    AT_EXIT.call_once(|| unsafe {
        libc::atexit(log_at_exit);
    });
    let s = Arc::new(State::new(comm, max_ctas));
    table().write().insert(comm as usize, s.clone());
    s
}

/// Removes `comm`'s state; its counters are added to the process totals.
pub(super) fn remove(comm: ncclComm_t) -> Option<Arc<State>> {
    let s = table().write().remove(&(comm as usize));
    if let Some(s) = &s {
        let snap = s.stats.snapshot();
        tracing::info!(target: "rcclx::summary", "comm {comm:p}: {}", snap.summary());
        RETIRED.write().add(&snap);
    }
    s
}

/// At process exit (jobs often end without destroying their communicators), one INFO line per
/// live communicator with the routes its calls took.
extern "C" fn log_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(t) = table().try_read() {
            for s in t.values() {
                tracing::info!(target: "rcclx::summary", "comm {:p} at exit: {}", s.comm(), s.stats.snapshot().summary());
            }
        }
    });
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
