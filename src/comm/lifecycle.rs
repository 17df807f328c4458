//! Communicator life cycle as rcclx sees it: created (maybe inside a group or non-blocking),
//! set up, used inside groups, finalized, revoked, destroyed or aborted.
//!
//! Setup (`clique`) exchanges records through the stock communicator, so it must run where
//! every rank runs it at the same point of the communicator's operation sequence and where no
//! thread waits for something it must itself do later:
//! * blocking creation outside a group: right after the stock call returns (every rank is in
//!   its creation call; no user operation can come first), waiting at most
//!   `RCCLX_SETUP_TIMEOUT_MS` for the peers (one that died after the stock call returned never
//!   answers: the creation then returns `ncclRemoteError`);
//! * blocking creation inside `ncclGroupStart/End` (nccl-tests, `ncclCommInitAll`): when this
//!   thread's outermost `ncclGroupEnd` returns, for all communicators it created in the group
//!   at once (one thread may own several ranks of one clique);
//! * non-blocking creation (`blocking = 0`: PyTorch, XLA): polled, never waited for. The
//!   communicators created together form one batch; once the stock library reports all of them
//!   ready, the batch's setup starts, and every `ncclCommGetAsyncError` (of any communicator,
//!   from any thread) advances every pending batch one step. A communicator reports
//!   `ncclInProgress` until its setup is done, so no user operation precedes the exchanges (an
//!   operation before that gets `ncclInvalidUsage`, as the stock library answers for a
//!   communicator that is not ready). A thread owning several ranks polls all of them forward.
//!   `ncclCommAbort` ends a pending setup at any time; it takes the lock of the pending batches,
//!   so no other thread's poll uses the handle once the stock library has freed it. Past
//!   `RCCLX_SETUP_TIMEOUT_MS` the communicators are in error (`ncclRemoteError`).
//!
//! Inside a group, rcclx's kernels wait for the outermost `ncclGroupEnd` (the stock library
//! launches nothing before it), and `ncclGroupSimulateEnd` drops them, as it drops the group.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::{Job, State};
use crate::clique::{self, Launch};
use crate::types::{ncclComm_t, ncclResult_t};
use crate::upstream;

thread_local! {
    static GROUP_DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Communicators this thread created inside the current group, set up at its end.
    static CREATED_IN_GROUP: RefCell<Vec<ncclComm_t>> = const { RefCell::new(Vec::new()) };
    /// rcclx launches of the current group, run at its end.
    static DEFERRED: RefCell<Vec<(Job, Launch)>> = const { RefCell::new(Vec::new()) };
}

/// A batch of non-blocking communicators created together, set up together.
struct Batch {
    states: Vec<Arc<State>>,
    /// Started once the stock library reported every communicator ready.
    setup: Option<clique::Setup>,
}

// SAFETY: a batch holds communicator handles and device resources, all usable from any thread;
// the mutex below serializes its use.
unsafe impl Send for Batch {}

static PENDING: Mutex<Vec<Batch>> = Mutex::new(Vec::new());

pub fn in_group() -> bool {
    GROUP_DEPTH.with(|d| d.get() > 0)
}

pub fn group_start() {
    GROUP_DEPTH.with(|d| d.set(d.get() + 1));
}

/// After the stock `ncclGroupEnd` returned `result` (or `ncclGroupSimulateEnd`, `simulated`):
/// what the call returns, `result` or the error of an rcclx launch of the group that failed.
pub fn group_end(result: ncclResult_t, simulated: bool) -> ncclResult_t {
    let outermost = GROUP_DEPTH.with(|d| {
        let v = d.get().saturating_sub(1);
        d.set(v);
        v == 0
    });
    if !outermost {
        return result;
    }
    let created = CREATED_IN_GROUP.with(|p| std::mem::take(&mut *p.borrow_mut()));
    let deferred = DEFERRED.with(|p| std::mem::take(&mut *p.borrow_mut()));
    let states: Vec<Arc<State>> = created.iter().filter_map(|&c| super::lookup(c)).collect();
    let mut first_failure = ncclResult_t::Success;
    match result {
        _ if simulated => states.iter().for_each(|s| s.finish_setup(None)),
        ncclResult_t::Success => first_failure = set_up_now(&states),
        ncclResult_t::InProgress => PENDING.lock().push(Batch { states, setup: None }),
        _ => states.iter().for_each(|s| s.finish_setup(None)),
    }
    // A simulated group launches nothing; a failed one neither (peers may lack its calls).
    if !simulated && result.is_ok_or_in_progress() {
        for (job, launch) in deferred {
            let code = job.run(launch);
            if !code.is_ok() && first_failure.is_ok() {
                first_failure = code;
            }
        }
    }
    if first_failure.is_ok() { result } else { first_failure }
}

/// Queues an rcclx launch until the outermost `ncclGroupEnd` of this thread.
pub(super) fn defer(job: Job, launch: Launch) {
    DEFERRED.with(|d| d.borrow_mut().push((job, launch)));
}

/// After a stock creation call returned `result` with the new handles in `comms`: what the call
/// returns (`result`, or the error of rcclx's setup: [`set_up_now`]).
pub fn created(comms: &[ncclComm_t], result: ncclResult_t) -> ncclResult_t {
    if !result.is_ok_or_in_progress() {
        return result;
    }
    let comms: Vec<ncclComm_t> = comms.iter().copied().filter(|c| !c.is_null()).collect();
    let states: Vec<Arc<State>> = comms.iter().map(|&c| super::insert(c)).collect();
    if in_group() {
        CREATED_IN_GROUP.with(|p| p.borrow_mut().extend(comms));
    } else if result == ncclResult_t::InProgress {
        PENDING.lock().push(Batch { states, setup: None });
    } else {
        return set_up_now(&states);
    }
    result
}

/// Registers `comm`, a handle the stock library never made, with the clique its caller set up
/// (`clique::Setup::with`): how a test harness runs 3-8 ranks on one or two GPUs, which the
/// stock library refuses, through rcclx's own path (`super::collective`, statistics, `ended`
/// with a `forward` of its own). Nothing the stock library does is involved.
pub fn adopt(comm: ncclComm_t, clique: Option<clique::Clique>) {
    super::insert(comm).finish_setup(clique);
}

/// Blocking setup of `states`, all owned by this thread, in one batch: what the creation call
/// returns, `ncclSuccess` or, when a peer never answered within `RCCLX_SETUP_TIMEOUT_MS`,
/// `ncclRemoteError` (the peer died, or runs without rcclx: [`timed_out`]).
fn set_up_now(states: &[Arc<State>]) -> ncclResult_t {
    if states.is_empty() {
        return ncclResult_t::Success;
    }
    let comms: Vec<ncclComm_t> = states.iter().map(|s| s.comm()).collect();
    let setup = match clique::Setup::start(&comms) {
        Ok(s) => s,
        Err(e) => {
            give_up(states, e);
            return ncclResult_t::Success;
        }
    };
    match clique::establish(setup, || states.iter().any(|s| s.is_closed()), setup_limit()) {
        Ok(outcome) => {
            adopt_outcome(states, outcome);
            ncclResult_t::Success
        }
        Err(_) => {
            timed_out(states);
            ncclResult_t::RemoteError
        }
    }
}

/// A setup that failed: `states` forward every call.
fn give_up(states: &[Arc<State>], why: crate::error::Error) {
    tracing::warn!("rcclx setup failed ({why}); these communicators forward every call");
    states.iter().for_each(|s| s.finish_setup(None));
}

/// `RCCLX_SETUP_TIMEOUT_MS` (`None`: no bound).
fn setup_limit() -> Option<Duration> {
    let ms = crate::config::get().setup_timeout_ms;
    (ms > 0).then(|| Duration::from_millis(ms))
}

/// A setup whose peers did not answer in time: its communicators are in error
/// (`ncclRemoteError` from every call and from `ncclCommGetAsyncError`), as the stock library's
/// are after a peer failed; the application aborts them.
pub(super) fn timed_out(states: &[Arc<State>]) {
    let text = format!(
        "rcclx: setup: a peer did not answer within RCCLX_SETUP_TIMEOUT_MS={} (it died, or runs without rcclx); the communicator reports ncclRemoteError",
        crate::config::get().setup_timeout_ms
    );
    crate::upstream::report_error(&text);
    for s in states {
        s.fail_setup();
    }
}

/// Each communicator of a finished setup takes its clique (or forwards).
fn adopt_outcome(states: &[Arc<State>], outcome: clique::Outcome) {
    for (comm, clique) in outcome {
        if let Some(s) = states.iter().find(|s| s.comm() == comm) {
            s.finish_setup(clique);
        }
    }
}

/// Advances every pending non-blocking setup by one step, without blocking. Another thread
/// already doing so is left to it.
pub fn progress() {
    let Some(mut pending) = PENDING.try_lock() else { return };
    pending.retain_mut(|b| !step(b));
}

/// One step of a batch; `true` when it has finished.
fn step(b: &mut Batch) -> bool {
    if b.states.iter().any(|s| s.is_closed()) {
        b.states.iter().for_each(|s| s.finish_setup(None));
        return true;
    }
    if b.setup.is_none() {
        match b.states.iter().map(|s| upstream_state(s.comm())).find(|r| *r != ncclResult_t::Success) {
            Some(ncclResult_t::InProgress) => return false,
            Some(_) => {
                b.states.iter().for_each(|s| s.finish_setup(None));
                return true;
            }
            None => {}
        }
        let comms: Vec<ncclComm_t> = b.states.iter().map(|s| s.comm()).collect();
        match clique::Setup::start(&comms) {
            Ok(s) => b.setup = Some(s),
            Err(e) => {
                give_up(&b.states, e);
                return true;
            }
        }
    }
    let Some(setup) = b.setup.as_mut() else { return true };
    match setup.poll() {
        Ok(None) if setup_limit().is_some_and(|l| setup.elapsed() > l) => {
            timed_out(&b.states);
            true
        }
        Ok(None) => false,
        Ok(Some(outcome)) => {
            adopt_outcome(&b.states, outcome);
            true
        }
        Err(e) => {
            give_up(&b.states, e);
            true
        }
    }
}

/// The stock library's view of `comm`: `ncclSuccess` once ready, `ncclInProgress` before.
fn upstream_state(comm: ncclComm_t) -> ncclResult_t {
    let Some(get) = upstream::get().ok().and_then(|u| u.fns.ncclCommGetAsyncError) else {
        return ncclResult_t::InternalError;
    };
    let mut state = ncclResult_t::InProgress;
    // SAFETY: a communicator handle the stock library created, and an out-pointer to a local.
    let r = upstream::guarded(|| unsafe { get(comm, &mut state) });
    if r.is_ok() { state } else { r }
}

/// `ncclCommGetAsyncError` reported `ncclSuccess` for `comm`: what rcclx adds. A communicator
/// whose setup is still running reports `ncclInProgress`; one with a late rcclx error, that error.
pub fn async_state(comm: ncclComm_t) -> ncclResult_t {
    let Some(state) = super::lookup(comm) else { return ncclResult_t::Success };
    if !state.set_up() {
        progress();
        if !state.set_up() {
            return ncclResult_t::InProgress;
        }
    }
    if state.is_closed() { ncclResult_t::Success } else { state.own_error() }
}

/// `ncclCommFinalize` (before forwarding): rcclx launches nothing more on `comm`, and
/// operations on it are invalid usage (`State::finalize`).
pub fn finalized(comm: ncclComm_t) {
    if let Some(s) = super::lookup(comm) {
        s.finalize();
    }
}

/// `ncclCommRevoke`, or `ncclCommShrink` with the abort flag, on `comm` (before forwarding):
/// rcclx's kernels stop waiting and nothing more is launched.
pub fn revoked(comm: ncclComm_t) {
    if let Some(s) = super::lookup(comm) {
        s.close(true);
    }
}

/// `ncclCommDestroy` / `ncclCommAbort` of `comm`: `forward` is the stock call. rcclx's part
/// never waits: an abort first tells rcclx's kernels to stop, and the clique's memory goes back
/// to rcclx's pool once no kernel and no peer can touch it (`clique::teardown`).
pub fn ended(comm: ncclComm_t, abort: bool, forward: impl FnOnce() -> ncclResult_t) -> ncclResult_t {
    let Some(state) = super::remove(comm) else { return forward() };
    state.close(abort);
    // A pending setup of `comm` ends here (its batch's other communicators then forward), under
    // the lock: another thread's `progress` may be using the handle, which the stock call frees.
    PENDING.lock().retain_mut(|b| !(b.states.iter().any(|s| Arc::ptr_eq(s, &state)) && step(b)));
    let r = forward();
    if let Some(c) = state.clique() {
        c.release(state.order.take_fence(c.device));
    }
    r
}
