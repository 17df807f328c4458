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
//!   operation before that gets `ncclInvalidArgument`, as the stock library answers for a
//!   communicator that is not ready). A thread owning several ranks polls all of them forward.
//!   `ncclCommAbort` drops its communicator from a pending setup at any time (the rest of the
//!   batch goes on); it takes the batch out under the lock of the pending batches first, so no
//!   other thread's poll uses the handle once the stock library has freed it. Past
//!   `RCCLX_SETUP_TIMEOUT_MS` the communicators are in error (`ncclRemoteError`).
//!
//! Setup is decided by every rank together: after the first exchange a rank never forwards on
//! its own (its peers would pair its next collective with their pending exchange). A local
//! failure (allocation, lease, IPC) is reported through the remaining exchanges, so every rank
//! turns the kernels off; a failure of the exchange itself, or the time limit, puts the
//! communicators in error (`ncclRemoteError`) on this rank, and its peers time out into the same
//! error. Setup is never advanced from inside an open group (its exchange would join the user's
//! group and not run). An abort of one communicator of a pending batch drops only that one.
//!
//! Inside a group, rcclx's kernels wait for the outermost `ncclGroupEnd` (the stock library
//! launches nothing before it), and `ncclGroupSimulateEnd` drops them, as it drops the group.
//! When a non-blocking group's `ncclGroupEnd` returns `ncclInProgress`, the stock library is
//! still enqueuing it in the background: rcclx's launches of that group wait until
//! `ncclCommGetAsyncError` reports every communicator of the group ready (NCCL's rule: nothing
//! else on those streams before), then run in the group's order, so every rank's streams hold
//! the stock and the rcclx kernels of a group in the same order.
//!
//! A [`Job`] is one planned rcclx launch: it runs at once, or at the end of the caller's group.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use parking_lot::Mutex;

use super::state::{State, insert, lookup, remove};
use crate::clique::{self, Clique};
use crate::error::Error;
use crate::intercept::Reason;
use crate::plan::Plan;
use crate::types::{ncclComm_t, ncclResult_t};
use crate::upstream;

thread_local! {
    static GROUP_DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Communicators this thread created inside the current group, set up at its end.
    static CREATED_IN_GROUP: RefCell<Vec<ncclComm_t>> = const { RefCell::new(Vec::new()) };
    /// rcclx launches of the current group, run at its end.
    static DEFERRED: RefCell<Vec<(Job, Plan)>> = const { RefCell::new(Vec::new()) };
    /// Communicators with an operation in the current group.
    static TOUCHED: RefCell<Vec<ncclComm_t>> = const { RefCell::new(Vec::new()) };
}

/// The rcclx part of a non-blocking group the stock library is still enqueuing: run once every
/// communicator of the group is ready, groups in the order they ended.
struct Waiting {
    comms: Vec<ncclComm_t>,
    launches: Vec<(Job, Plan)>,
}

// SAFETY: communicator handles are keys usable from any thread; the jobs' states and cliques
// are shared, thread-safe objects; the mutex below serializes their use.
unsafe impl Send for Waiting {}

static WAITING: Mutex<Vec<Waiting>> = Mutex::new(Vec::new());
/// Held by the one thread running the waiting groups ([`flush_waiting`]).
static FLUSHING: Mutex<()> = Mutex::new(());

/// The tests that use the process's waiting groups take turns (`async_state` flushes them).
#[cfg(test)]
pub(super) static WAITING_TURN: Mutex<()> = Mutex::new(());

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
    let mut touched = TOUCHED.with(|p| std::mem::take(&mut *p.borrow_mut()));
    let states: Vec<Arc<State>> = created.iter().filter_map(|&c| lookup(c)).collect();
    let mut first_failure = ncclResult_t::Success;
    match result {
        _ if simulated => states.iter().for_each(|s| s.finish_setup(None)),
        ncclResult_t::Success => first_failure = set_up_now(&states),
        ncclResult_t::InProgress => PENDING.lock().push(Batch { states, setup: None }),
        _ => states.iter().for_each(|s| s.finish_setup(None)),
    }
    // A simulated group launches nothing; a failed one neither (peers may lack its calls).
    if simulated || !result.is_ok_or_in_progress() {
        return if first_failure.is_ok() { result } else { first_failure };
    }
    touched.sort_unstable();
    touched.dedup();
    // Only communicators rcclx knows (every live one the stock library made through rcclx):
    // `ended` removes them from waiting groups before their handles are freed.
    touched.retain(|&c| lookup(c).is_some());
    if result == ncclResult_t::InProgress {
        // The stock library enqueues the group in the background: rcclx's part waits for it.
        let with_clique = touched.iter().any(|&c| lookup(c).is_some_and(|s| s.clique().is_some()));
        if !deferred.is_empty() || with_clique {
            WAITING.lock().push(Waiting { comms: touched, launches: deferred });
        }
        return result;
    }
    let code = run_group(&touched, deferred);
    if first_failure.is_ok() && !code.is_ok() {
        first_failure = code;
    }
    if first_failure.is_ok() { result } else { first_failure }
}

/// The stock part of a group is on its streams: each communicator's forwarded operations get
/// their order event, then rcclx's launches run in the group's order. The first failure.
fn run_group(touched: &[ncclComm_t], launches: Vec<(Job, Plan)>) -> ncclResult_t {
    for s in touched.iter().filter_map(|&c| lookup(c)) {
        if let Some(c) = s.clique()
            && let Err(e) = s.order.after(c.device, true)
        {
            tracing::warn!("comm {:p}: ordering across streams: {e}", s.comm());
        }
    }
    let mut first_failure = ncclResult_t::Success;
    for (job, plan) in launches {
        let code = job.run(plan);
        if !code.is_ok() && first_failure.is_ok() {
            first_failure = code;
        }
    }
    first_failure
}

/// Runs the rcclx part of every waiting non-blocking group whose communicators the stock
/// library reports ready, in the order the groups ended (a group still in progress holds back
/// the later ones). A group whose communicator is in error launches nothing (its peers may
/// lack the group's calls, as for a failed blocking group).
fn flush_waiting(state_of: impl Fn(ncclComm_t) -> ncclResult_t) {
    flush_waiting_with(state_of, run_group)
}

/// [`flush_waiting`] with the group runner `run`. One thread flushes at a time (another returns
/// at once: the groups reach their streams in the order they ended), and a group stays in
/// `WAITING` until its launches have returned, so no other thread's `ncclCommGetAsyncError`
/// hears "done" while they are still being enqueued.
fn flush_waiting_with(
    state_of: impl Fn(ncclComm_t) -> ncclResult_t,
    run: impl Fn(&[ncclComm_t], Vec<(Job, Plan)>) -> ncclResult_t,
) {
    let Some(_flushing) = FLUSHING.try_lock() else { return };
    loop {
        let (comms, launches) = {
            let mut waiting = WAITING.lock();
            let Some(first) = waiting.first_mut() else { return };
            let states: Vec<ncclResult_t> = first.comms.iter().map(|&c| state_of(c)).collect();
            if states.contains(&ncclResult_t::InProgress) {
                return;
            }
            if states.iter().any(|r| !r.is_ok()) {
                waiting.remove(0);
                tracing::warn!(
                    "rcclx: a non-blocking group failed in the stock library; its rcclx launches are dropped"
                );
                continue;
            }
            (first.comms.clone(), std::mem::take(&mut first.launches))
        };
        let code = {
            // Then removed, even if a launch panics (the C boundary catches it), so it never waits
            // forever. Still the first: only the flushing thread removes groups, new ones go last.
            struct Ran;
            impl Drop for Ran {
                fn drop(&mut self) {
                    WAITING.lock().remove(0);
                }
            }
            let _ran = Ran;
            run(&comms, launches)
        };
        if !code.is_ok() {
            crate::upstream::report_error(&format!("rcclx: a launch of a non-blocking group failed ({})", code.0));
        }
    }
}

/// Whether an rcclx part of a non-blocking group with `comm` is still waiting.
fn waiting_for(comm: ncclComm_t) -> bool {
    WAITING.lock().iter().any(|g| g.comms.contains(&comm))
}

/// An operation on `comm` inside a group (its stock part, if any, is enqueued at the group's
/// end).
pub(super) fn touch(comm: ncclComm_t) {
    if in_group() {
        TOUCHED.with(|t| t.borrow_mut().push(comm));
    }
}

/// Queues an rcclx plan until the outermost `ncclGroupEnd` of this thread (its stock steps on
/// the rails then run outside the caller's group).
pub(super) fn defer(job: Job, plan: Plan) {
    TOUCHED.with(|t| t.borrow_mut().push(job.state.comm()));
    DEFERRED.with(|d| d.borrow_mut().push((job, plan)));
}

/// The SM budget `comm` was created with (0: none, or not a communicator rcclx knows).
pub fn max_ctas(comm: ncclComm_t) -> u32 {
    lookup(comm).map_or(0, |s| s.max_ctas())
}

/// After a stock creation call returned `result` with the new handles in `comms`, each with the
/// SM budget `max_ctas` (0: none): what the call returns (`result`, or the error of rcclx's
/// setup: [`set_up_now`]).
pub fn created(comms: &[ncclComm_t], result: ncclResult_t, max_ctas: u32) -> ncclResult_t {
    if !result.is_ok_or_in_progress() {
        return result;
    }
    let comms: Vec<ncclComm_t> = comms.iter().copied().filter(|c| !c.is_null()).collect();
    let states: Vec<Arc<State>> = comms.iter().map(|&c| insert(c, max_ctas)).collect();
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
    let state = insert(comm, 0);
    state.stock_made.store(false, SeqCst);
    state.finish_setup(clique);
}

/// Registers `comm` with a setup its caller started (`clique::Setup::with`) as a pending
/// non-blocking batch, which [`progress`] advances and [`ended`] ends: how a test harness holds
/// a setup pending past its first exchange without the stock library (as [`adopt`] does for a
/// finished one).
pub fn pend(comm: ncclComm_t, setup: clique::Setup) {
    let state = insert(comm, 0);
    state.stock_made.store(false, SeqCst);
    PENDING.lock().push(Batch { states: vec![state], setup: Some(setup) });
}

/// Blocking setup of `states`, all owned by this thread, in one batch: what the creation call
/// returns, `ncclSuccess` or, when the setup failed after it posted an exchange or a peer never
/// answered within `RCCLX_SETUP_TIMEOUT_MS`, `ncclRemoteError` ([`failed`]).
fn set_up_now(states: &[Arc<State>]) -> ncclResult_t {
    if states.is_empty() {
        return ncclResult_t::Success;
    }
    let comms: Vec<(ncclComm_t, u32)> = states.iter().map(|s| (s.comm(), s.max_ctas)).collect();
    let setup = match clique::Setup::start(&comms) {
        Ok((setup, forward)) => {
            adopt_outcome(states, forward);
            match setup {
                Some(s) => s,
                None => return ncclResult_t::Success,
            }
        }
        Err(e) => return not_started(states, e),
    };
    let states: Vec<Arc<State>> = states.iter().filter(|s| !s.set_up()).cloned().collect();
    let states = &states[..];
    match clique::establish(setup, || states.iter().any(|s| s.is_closed()), setup_limit()) {
        Ok(outcome) => {
            adopt_outcome(states, outcome);
            ncclResult_t::Success
        }
        Err(e) => {
            failed(states, &e);
            ncclResult_t::RemoteError
        }
    }
}

/// A setup that could not post its first exchange. A stock library without the calls setup
/// needs is the same on every rank: every call forwards. Anything else (an exchange buffer that
/// could not be allocated, a stock error) may be this rank's alone, and its peers' exchange
/// would pair with its next collective: the communicators are in error, as after a timeout.
fn not_started(states: &[Arc<State>], e: crate::error::Error) -> ncclResult_t {
    if clique::lacks_stock_calls(&e) {
        tracing::warn!("rcclx setup failed ({e}); these communicators forward every call");
        states.iter().for_each(|s| s.finish_setup(None));
        ncclResult_t::Success
    } else {
        failed(states, &e);
        ncclResult_t::RemoteError
    }
}

/// `RCCLX_SETUP_TIMEOUT_MS` (`None`: no bound).
fn setup_limit() -> Option<Duration> {
    let ms = crate::config::get().setup_timeout_ms;
    (ms > 0).then(|| Duration::from_millis(ms))
}

/// A setup that timed out or failed after its first exchange: its communicators are in error
/// (`ncclRemoteError` from every call and from `ncclCommGetAsyncError`), as the stock
/// library's are after a peer failed; the application aborts them. Its peers end the same way
/// (their next exchange never completes).
pub(super) fn failed(states: &[Arc<State>], why: &crate::error::Error) {
    let text = if why.code == clique::TIMED_OUT {
        format!(
            "rcclx: setup: a peer did not answer within RCCLX_SETUP_TIMEOUT_MS={} (it died, or runs without rcclx); the communicator reports ncclRemoteError",
            crate::config::get().setup_timeout_ms
        )
    } else {
        format!("rcclx: setup failed after its peers joined ({why}); the communicator reports ncclRemoteError")
    };
    crate::upstream::report_error(&text);
    for s in states {
        s.fail_setup();
    }
}

/// [`failed`] with a timeout.
#[cfg(test)]
pub(super) fn timed_out(states: &[Arc<State>]) {
    failed(states, &crate::error::Error::new(clique::TIMED_OUT, "test"));
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
/// already doing so is left to it, and so is a call from inside an open group (the setup's
/// exchange would join the caller's group and not run).
pub fn progress() {
    if in_group() {
        return;
    }
    let Some(mut pending) = PENDING.try_lock() else { return };
    let mut done = Vec::new();
    let mut i = 0;
    while i < pending.len() {
        if step(&mut pending[i]) {
            done.push(pending.swap_remove(i));
        } else {
            i += 1;
        }
    }
    drop(pending);
    drop(done); // outside the lock: an ended setup buries its buffers
}

/// One step of a batch; `true` when it has finished.
fn step(b: &mut Batch) -> bool {
    step_with(b, upstream_state)
}

/// [`step`], with the stock library's state of each communicator from `state_of`.
fn step_with(b: &mut Batch, state_of: impl Fn(ncclComm_t) -> ncclResult_t) -> bool {
    // A finalized or revoked communicator leaves its batch (the others go on where they can).
    let (closed, open): (Vec<_>, Vec<_>) = std::mem::take(&mut b.states).into_iter().partition(|s| s.is_closed());
    b.states = open;
    for s in closed {
        s.finish_setup(None);
        if let Some(setup) = b.setup.as_mut()
            && !setup.drop_member(s.comm())
        {
            let e = crate::error::Error::new(ncclResult_t::RemoteError, "a communicator of its batch was closed");
            failed(&b.states, &e);
            return true;
        }
    }
    if b.states.is_empty() {
        return true;
    }
    if b.setup.is_none() {
        // A communicator whose stock initialisation failed leaves the batch (the stock library
        // answers its every call); the others go on, as their peers in other batches do.
        let mut in_progress = false;
        b.states.retain(|s| match state_of(s.comm()) {
            ncclResult_t::Success => true,
            ncclResult_t::InProgress => {
                in_progress = true;
                true
            }
            _ => {
                s.finish_setup(None);
                false
            }
        });
        if b.states.is_empty() {
            return true;
        }
        if in_progress {
            return false;
        }
        let comms: Vec<(ncclComm_t, u32)> = b.states.iter().map(|s| (s.comm(), s.max_ctas)).collect();
        match clique::Setup::start(&comms) {
            Ok((setup, forward)) => {
                adopt_outcome(&b.states, forward);
                b.states.retain(|s| !s.set_up());
                let Some(mut s) = setup else { return true };
                s.set_limit(setup_limit());
                b.setup = Some(s);
            }
            Err(e) => {
                not_started(&b.states, e);
                return true;
            }
        }
    }
    let Some(setup) = b.setup.as_mut() else { return true };
    match setup.poll() {
        Ok(None) => false,
        Ok(Some(outcome)) => {
            adopt_outcome(&b.states, outcome);
            true
        }
        Err(e) => {
            failed(&b.states, &e);
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
    if !in_group() {
        flush_waiting(upstream_state);
        if waiting_for(comm) {
            return ncclResult_t::InProgress;
        }
    }
    let Some(state) = lookup(comm) else { return ncclResult_t::Success };
    if !state.set_up() {
        progress();
        if !state.set_up() {
            return ncclResult_t::InProgress;
        }
    }
    if state.is_closed() {
        return ncclResult_t::Success;
    }
    match state.own_error() {
        // A peer that died mid-rail shows on the rail first.
        ncclResult_t::Success => state.clique().map_or(ncclResult_t::Success, |c| c.rail_error()),
        own => own,
    }
}

/// `ncclCommFinalize` (before forwarding): rcclx launches nothing more on `comm`, and
/// operations on it are invalid usage (`State::finalize`). Its rail ends first (a child
/// before its parent).
pub fn finalized(comm: ncclComm_t) {
    if let Some(s) = lookup(comm) {
        s.finalize();
        end_rail(&s, false);
    }
}

/// `ncclCommRevoke`, or `ncclCommShrink` with the abort flag, on `comm`; `forward` is the stock
/// call: rcclx's kernels stop waiting and nothing more is launched, the stock call is forwarded
/// (it stops the stock library's kernels, which an rcclx launch under way may be queued
/// behind, as for an abort), then the rail is aborted once no launch is under way.
pub fn revoked(comm: ncclComm_t, forward: impl FnOnce() -> ncclResult_t) -> ncclResult_t {
    let Some(s) = lookup(comm) else { return forward() };
    s.close(true);
    let r = forward();
    if s.quiesce_within(ABORT_QUIESCE) {
        end_rail(&s, true);
    } else {
        tracing::warn!(
            "comm {comm:p}: an rcclx launch was still under way {ABORT_QUIESCE:?} after the revoke; its rail is left"
        );
    }
    r
}

/// Ends the rail of a closed communicator once no launch of it is under way.
fn end_rail(state: &State, abort: bool) {
    if let Some(c) = state.clique() {
        state.quiesce();
        c.end_rail(abort);
    }
}

/// `ncclCommDestroy` / `ncclCommAbort` of `comm`: `forward` is the stock call. rcclx's part
/// never waits for the device: an abort first tells rcclx's kernels to stop and forwards the
/// stock abort before it waits (boundedly) for rcclx's launches under way, and the clique's
/// memory goes back to rcclx's pool once no kernel, no graph and no peer can touch it
/// (`clique::teardown`).
pub fn ended(comm: ncclComm_t, abort: bool, forward: impl FnOnce() -> ncclResult_t) -> ncclResult_t {
    // Launches of a waiting non-blocking group on `comm` never run, and its handle (freed by the
    // stock call) is not asked about again.
    WAITING.lock().iter_mut().for_each(|g| {
        g.launches.retain(|(job, _)| job.state.comm() != comm);
        g.comms.retain(|&c| c != comm);
    });
    let Some(state) = remove(comm) else { return forward() };
    state.close(abort);
    // An abort forwards first (below): an rcclx launch of `comm` may be blocked in a launch
    // queue full behind one of the stock library's kernels, which only the stock abort stops.
    if !abort {
        state.quiesce();
    }
    // A pending setup of `comm` loses it before the stock call frees the handle (another
    // thread's `progress` may be using it: the batch is taken out under the lock). The batch's
    // other communicators go on without it where the transport allows, else they fail.
    let batch = {
        let mut pending = PENDING.lock();
        let i = pending.iter().position(|b| b.states.iter().any(|s| Arc::ptr_eq(s, &state)));
        i.map(|i| pending.swap_remove(i))
    };
    if let Some(mut b) = batch {
        state.finish_setup(None);
        b.states.retain(|s| !Arc::ptr_eq(s, &state));
        let kept = match b.setup.as_mut() {
            None => true,
            Some(setup) => setup.drop_member(comm),
        };
        if !kept {
            let e = crate::error::Error::new(
                ncclResult_t::RemoteError,
                "another communicator of its non-blocking batch was aborted during setup",
            );
            failed(&b.states, &e);
        } else if !b.states.is_empty() {
            PENDING.lock().push(b);
        }
        // A batch dropped here (outside the lock) buries its published buffers.
    }
    let r = if abort {
        let r = forward();
        if !state.quiesce_within(ABORT_QUIESCE) {
            // Its clique is never released (memory kept: a launch may still be under way) and
            // its rail not ended (the launch may hold it).
            tracing::warn!(
                "comm {comm:p}: an rcclx launch was still under way {ABORT_QUIESCE:?} after the stock abort; its memory is kept"
            );
            return r;
        }
        end_rail(&state, true);
        r
    } else {
        // The rail before its parent (nothing runs on it any more: launches have quiesced).
        end_rail(&state, false);
        forward()
    };
    if let Some(c) = state.clique() {
        c.release(state.order.take_fence(c.device));
    }
    r
}

/// How long an abort waits, after the stock abort, for rcclx's launches under way to return.
const ABORT_QUIESCE: std::time::Duration = std::time::Duration::from_secs(10);

/// A planned rcclx call with what it needs to run and be counted.
pub struct Job {
    pub(super) state: Arc<State>,
    pub(super) clique: Arc<Clique>,
    /// The collective, for log lines.
    pub(super) what: &'static str,
    pub(super) bytes: u64,
    pub(super) stream: crate::gpu::Stream,
}

impl Job {
    /// Runs the plan now, or at the end of the caller's group.
    pub(super) fn start(self, planned: Result<Plan, Error>) -> ncclResult_t {
        match planned {
            Ok(plan) if in_group() => {
                defer(self, plan);
                ncclResult_t::Success
            }
            Ok(plan) => self.run(plan),
            Err(e) => self.failed(e),
        }
    }

    /// Orders and runs.
    fn run(self, plan: Plan) -> ncclResult_t {
        // Announced before the check (both SeqCst): `ended` either sees this launch under way
        // and waits for it, or this launch sees the communicator closed.
        struct Underway(Arc<State>);
        impl Drop for Underway {
            fn drop(&mut self) {
                self.0.launching.fetch_sub(1, SeqCst); // also when the launch panicked
            }
        }
        self.state.launching.fetch_add(1, SeqCst);
        let _underway = Underway(self.state.clone());
        self.run_open(plan)
    }

    fn run_open(self, plan: Plan) -> ncclResult_t {
        if self.state.is_closed() {
            return ncclResult_t::Success; // aborted meanwhile (a deferred launch): nothing runs
        }
        let captured = match self.state.order.before(self.clique.device, self.stream) {
            Ok(c) => c,
            Err(e) => return self.failed(e),
        };
        let family = plan.family;
        let mut enqueued = 0;
        let ran = plan.steps().try_for_each(|step| {
            step.enqueue(&self.clique, self.stream, captured)?;
            enqueued += 1;
            Ok::<_, Error>(())
        });
        match ran {
            Ok(()) => {
                let _ = self.state.order.after(self.clique.device, true);
                self.state.stats.count_family(family, self.bytes);
                ncclResult_t::Success
            }
            Err(e) if enqueued > 0 => {
                // Part of the plan is on the stream: its peers wait on this rank's missing steps,
                // and the rail's calls are out of step. The communicator is in error.
                let _ = self.state.order.after(self.clique.device, true);
                self.state.break_off();
                let code = self.failed(e);
                if code == ncclResult_t::RemoteError { code } else { ncclResult_t::RemoteError }
            }
            Err(e) => self.failed(e),
        }
    }

    /// A call that failed before anything was enqueued (its plan, the stream order, the launch
    /// itself: say, a stream of another device) returns the error, and the communicator stays
    /// usable, as the stock library's does. Nothing ran on this rank, and a peer that did run
    /// its part times out and reports `ncclRemoteError` (`State::own_error`).
    fn failed(self, e: Error) -> ncclResult_t {
        crate::upstream::report_error(&format!("rcclx: {} on comm {:p}: {e}", self.what, self.state.comm()));
        self.state.stats.count_forwarded(Reason::Failed, self.bytes);
        e.code
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clique::{Member, Setup, Sharing, Transport};
    use crate::error::Error;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn fake(n: usize) -> ncclComm_t {
        (0x7300_0000 + n * 64) as ncclComm_t
    }

    fn null() -> crate::gpu::Stream {
        // SAFETY: a null stream handle is the legacy default stream; nothing is launched here.
        unsafe { crate::gpu::Stream::from_raw(std::ptr::null_mut()) }
    }

    /// Counts polls; its peers never answer.
    struct Counting(Arc<AtomicUsize>);
    impl Transport for Counting {
        fn start(&mut self, _: Vec<Vec<u8>>) -> Result<(), Error> {
            Ok(())
        }
        fn poll(&mut self) -> Result<Option<Vec<Vec<u8>>>, Error> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Ok(None)
        }
    }

    /// Audit N3: an abort or revoke whose communicator has a launch under way that only the
    /// stock call can end (a launch queue full behind a stuck stock kernel) returns: the stock
    /// call comes before the wait for launches.
    #[test]
    fn an_abort_or_revoke_forwards_before_it_waits_for_launches() {
        for (n, what) in [(21, "abort"), (22, "revoke")] {
            let s = insert(fake(n), 0);
            s.launching.fetch_add(1, SeqCst); // a launch blocked behind a stuck stock kernel
            let (tx, rx) = std::sync::mpsc::channel();
            let state = s.clone();
            std::thread::spawn(move || {
                let stock = || {
                    state.launching.fetch_sub(1, SeqCst); // the stock call frees the queue
                    ncclResult_t::Success
                };
                let r = if n == 21 { ended(fake(n), true, stock) } else { revoked(fake(n), stock) };
                let _ = tx.send(r);
            });
            let r = rx.recv_timeout(std::time::Duration::from_secs(5));
            assert_eq!(r, Ok(ncclResult_t::Success), "{what} waited for a launch only its stock call ends");
            assert!(s.is_closed(), "{what}: nothing more may be launched");
            if n == 22 {
                let _ = ended(fake(n), false, || ncclResult_t::Success);
            }
        }
    }

    /// Item 10: a pending setup is never advanced from inside an open group (its exchange
    /// would join the caller's group and not run); outside the group it is.
    #[test]
    fn setup_is_not_polled_inside_an_open_group() {
        let _turn = WAITING_TURN.lock();
        let polls = Arc::new(AtomicUsize::new(0));
        let s = insert(fake(1), 0);
        let member = Member { comm: fake(1), rank: 0, nranks: 2, device: 0, max_ctas: 0 };
        let setup = Setup::with(vec![member], Box::new(Counting(polls.clone())), Sharing::default()).unwrap();
        PENDING.lock().push(Batch { states: vec![s.clone()], setup: Some(setup) });
        group_start();
        assert_eq!(async_state(fake(1)), ncclResult_t::InProgress);
        progress();
        assert_eq!(polls.load(Ordering::Relaxed), 0, "a setup was polled inside an open group");
        group_end(ncclResult_t::Success, false);
        assert_eq!(async_state(fake(1)), ncclResult_t::InProgress);
        assert!(polls.load(Ordering::Relaxed) > 0, "the setup was not polled outside the group");
        // An abort ends it (the batch loses its only communicator) and forwards.
        assert_eq!(ended(fake(1), true, || ncclResult_t::Success), ncclResult_t::Success);
        assert!(s.set_up() && s.clique().is_none());
        assert!(!PENDING.lock().iter().any(|b| b.states.iter().any(|t| Arc::ptr_eq(t, &s))));
    }

    /// Item 8: the rcclx part of a non-blocking group waits until the stock library reports
    /// every communicator of the group ready, groups in the order they ended; a failed one
    /// launches nothing; a destroyed communicator leaves the groups it was waiting in.
    #[test]
    fn a_non_blocking_groups_launches_wait_for_the_stock_group() {
        let _turn = WAITING_TURN.lock();
        let wait = |comms: Vec<ncclComm_t>| WAITING.lock().push(Waiting { comms, launches: Vec::new() });
        wait(vec![fake(2), fake(3)]);
        wait(vec![fake(4)]);
        assert!(waiting_for(fake(2)) && waiting_for(fake(3)) && waiting_for(fake(4)));
        // Communicator 3 is still in progress: neither group runs (the second waits its turn).
        let stock = |c: ncclComm_t| if c == fake(3) { ncclResult_t::InProgress } else { ncclResult_t::Success };
        flush_waiting(stock);
        assert!(waiting_for(fake(2)) && waiting_for(fake(4)));
        flush_waiting(|_| ncclResult_t::Success);
        assert!(!waiting_for(fake(2)) && !waiting_for(fake(3)) && !waiting_for(fake(4)));
        // A group whose stock part failed is dropped.
        wait(vec![fake(5)]);
        flush_waiting(|_| ncclResult_t::RemoteError);
        assert!(!waiting_for(fake(5)));
        // A communicator destroyed meanwhile is never asked about again.
        wait(vec![fake(6), fake(7)]);
        ended(fake(7), false, || ncclResult_t::Success);
        flush_waiting(|c| {
            assert_ne!(c, fake(7), "a destroyed communicator was queried");
            ncclResult_t::Success
        });
        assert!(!waiting_for(fake(6)));
        // A group without rcclx launches or communicators with kernels leaves nothing waiting,
        // blocking or not.
        let s = insert(fake(8), 0);
        s.finish_setup(None);
        for stock in [ncclResult_t::InProgress, ncclResult_t::Success] {
            group_start();
            super::super::ordered(fake(8), null(), || ncclResult_t::Success);
            assert_eq!(group_end(stock, false), stock);
            assert!(!waiting_for(fake(8)));
        }
        ended(fake(8), false, || ncclResult_t::Success);
    }

    /// Audit N6: one communicator whose stock initialisation failed leaves its batch; the others
    /// stay in it (their peers, in other batches, go on to set them up).
    #[test]
    fn a_failed_stock_init_forwards_only_its_own_communicator() {
        let _turn = WAITING_TURN.lock();
        let (failed, waiting) = (insert(fake(11), 0), insert(fake(12), 0));
        let mut b = Batch { states: vec![failed.clone(), waiting.clone()], setup: None };
        let stock = |c: ncclComm_t| if c == fake(11) { ncclResult_t::InternalError } else { ncclResult_t::InProgress };
        assert!(!step_with(&mut b, stock), "the batch ended with a communicator still initialising");
        assert!(failed.set_up() && failed.clique().is_none(), "the failed communicator does not forward");
        assert!(!waiting.set_up(), "the healthy communicator was made to forward");
        assert_eq!(b.states.len(), 1);
        remove(fake(11));
        remove(fake(12));
    }

    /// Audit N1: while one thread runs a waiting group, its communicators still read as in
    /// progress to every other thread, and another thread's flush runs nothing (the next group
    /// would otherwise reach its stream first).
    #[test]
    fn a_running_non_blocking_group_is_still_waiting_and_runs_before_the_next() {
        let _turn = WAITING_TURN.lock();
        let wait = |comms: Vec<ncclComm_t>| WAITING.lock().push(Waiting { comms, launches: Vec::new() });
        wait(vec![fake(9)]);
        wait(vec![fake(10)]);
        let done = Arc::new(Mutex::new(Vec::new()));
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let runner = {
            let done = done.clone();
            std::thread::spawn(move || {
                flush_waiting_with(
                    |_| ncclResult_t::Success,
                    |comms, _| {
                        if comms == [fake(9)] {
                            started_tx.send(()).unwrap();
                            std::thread::sleep(Duration::from_millis(100));
                        }
                        done.lock().push(comms[0] as usize);
                        ncclResult_t::Success
                    },
                )
            })
        };
        started_rx.recv().unwrap();
        assert!(waiting_for(fake(9)), "a group being launched read as done");
        flush_waiting_with(
            |_| ncclResult_t::Success,
            |comms, _| {
                done.lock().push(comms[0] as usize);
                ncclResult_t::Success
            },
        );
        runner.join().unwrap();
        assert_eq!(*done.lock(), [fake(9) as usize, fake(10) as usize], "the groups ran out of order");
        assert!(!waiting_for(fake(9)) && !waiting_for(fake(10)));
        // A launch that panics (the C boundary catches it) still ends its group's wait.
        wait(vec![fake(13)]);
        let ran = std::panic::catch_unwind(|| flush_waiting_with(|_| ncclResult_t::Success, |_, _| panic!("a launch")));
        assert!(ran.is_err());
        assert!(!waiting_for(fake(13)), "a group whose launch panicked waits forever");
    }
}
