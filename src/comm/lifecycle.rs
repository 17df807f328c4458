//! Communicator life cycle as rcclx sees it: created (maybe inside a group or non-blocking),
//! set up when it is complete, destroyed.
//!
//! Setup (the record exchange through the upstream communicator) is collective, so it must
//! run at a point every rank reaches and where the upstream communicator is usable:
//! * blocking creation outside a group: right after the upstream call returns;
//! * creation inside `ncclGroupStart/End` (nccl-tests, `ncclCommInitAll`): when this thread's
//!   outermost `ncclGroupEnd` returns, for all communicators it created in the group at once
//!   (one thread may own several ranks of one clique, so their exchanges run in one group);
//! * non-blocking creation (`blocking = 0`, PyTorch's default): when `ncclCommGetAsyncError`
//!   first reports the communicator complete.

use super::State;
use crate::types::{ncclComm_t, ncclResult_t};
use std::cell::{Cell, RefCell};

thread_local! {
    static GROUP_DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Communicators this thread created inside the current group, set up at its end.
    static PENDING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// How a communicator came to be.
#[derive(Clone, Copy, Debug)]
pub struct Created {
    /// `ncclInProgress` came back: a non-blocking communicator still initialising.
    pub in_progress: bool,
}

pub fn in_group() -> bool {
    GROUP_DEPTH.with(|d| d.get() > 0)
}

pub fn group_start() {
    GROUP_DEPTH.with(|d| d.set(d.get() + 1));
}

/// After the upstream `ncclGroupEnd` returned `result`.
pub fn group_end(result: ncclResult_t) {
    let outermost = GROUP_DEPTH.with(|d| {
        let v = d.get().saturating_sub(1);
        d.set(v);
        v == 0
    });
    if outermost {
        let pending = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
        let comms: Vec<ncclComm_t> = pending.into_iter().map(|c| c as ncclComm_t).collect();
        match result {
            ncclResult_t::Success if !comms.is_empty() => setup(&comms),
            // Non-blocking communicators created in the group: set up once reported ready.
            ncclResult_t::InProgress => {
                comms.iter().filter_map(|&c| super::lookup(c)).for_each(|s| s.set_in_progress())
            }
            _ => {}
        }
    }
}

/// After an upstream creation call returned `result` with the new handles in `comms`.
pub fn created(comms: &[ncclComm_t], result: ncclResult_t) {
    let how = Created { in_progress: result == ncclResult_t::InProgress };
    if !result.is_ok_or_in_progress() {
        return;
    }
    let comms: Vec<ncclComm_t> = comms.iter().copied().filter(|c| !c.is_null()).collect();
    for &c in &comms {
        super::insert(c, State::new(how));
    }
    if how.in_progress {
        return; // set up when ncclCommGetAsyncError reports it complete
    }
    if in_group() {
        PENDING.with(|p| p.borrow_mut().extend(comms.iter().map(|&c| c as usize)));
    } else {
        setup(&comms);
    }
}

/// `comm` is usable: `ncclCommGetAsyncError` reported it complete, or the first intercepted
/// collective arrived (an application that never polled). A non-blocking communicator is set
/// up here, outside any group (inside one the exchange could not complete before its end) and
/// only on the thread that created it (PyTorch polls from the creating thread during init,
/// then from a watchdog thread; the exchange must not run beside the main thread's work).
pub fn complete(comm: ncclComm_t) {
    if in_group() {
        return;
    }
    if let Some(s) = super::lookup(comm)
        && s.take_in_progress()
    {
        setup(&[comm]);
    }
}

/// Before the upstream destroy/abort: drop rcclx's state (and with it its GPU resources;
/// freeing waits for kernels in flight). On abort, kernels still waiting for a peer are told
/// to stop first, so the abort returns promptly.
pub fn destroyed(comm: ncclComm_t, abort: bool) {
    if let Some(s) = super::remove(comm)
        && let (true, Some(setup)) = (abort, s.setup())
    {
        setup.request_abort();
    }
}

/// Collective setup of `comms` (all owned by this thread). Failures leave a communicator
/// forwarding everything; they never fail the user's call.
fn setup(comms: &[ncclComm_t]) {
    crate::dda::setup::run(comms);
}
