//! Layer `dda`: Direct Data Access collectives (flat = one-shot, tree = two-shot) and the
//! communicator setup they need. Host-side orchestration only; the kernels are in
//! `hip_kernels/dda.cuh`.

use crate::intercept::{CallDesc, Route};
use crate::types::{ncclResult_t, Stream};
use std::ffi::c_void;
use std::fmt;

pub mod setup;

/// The caller's buffers and stream for one call.
#[derive(Clone, Copy, Debug)]
pub struct Buffers {
    pub send: *const c_void,
    pub recv: *mut c_void,
    pub stream: Stream,
}

/// An error of an rcclx algorithm, with the `ncclResult_t` it maps to.
#[derive(Debug)]
pub struct Error {
    pub code: ncclResult_t,
    pub what: String,
}

impl Error {
    pub fn code(&self) -> ncclResult_t {
        self.code
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (nccl result {})", self.what, self.code.0)
    }
}

/// Runs `call` on rcclx's kernels along `route` (never `Route::Upstream`).
pub fn run(setup: &setup::Setup, route: Route, call: &CallDesc, bufs: &Buffers) -> Result<(), Error> {
    let _ = (setup, call, bufs);
    Err(Error { code: ncclResult_t::InternalError, what: format!("route {route:?} has no kernel in this build") })
}
