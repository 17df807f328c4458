//! NCCL calls the programs share, through rcclx's own exports (`rcclx::abi::table`), i.e. the
//! way an application reaches rcclx.

use std::ffi::{CStr, c_int};

use rcclx::abi::table as api;
use rcclx::types::{ncclComm_t, ncclResult_t};

/// `nccl error <code> (<ncclGetErrorString text>)`.
pub fn error_string(r: ncclResult_t) -> String {
    // SAFETY: ncclGetErrorString accepts any value and returns a static string or NULL.
    let p = unsafe { api::ncclGetErrorString(r) };
    let text = if p.is_null() {
        String::new()
    } else {
        // SAFETY: non-NULL: a static NUL-terminated string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    };
    format!("nccl error {} ({text})", r.0)
}

/// The communicator's asynchronous error, or the error of asking for it.
///
/// # Safety
/// `comm` is a live communicator (not destroyed or aborted).
pub unsafe fn async_error(comm: ncclComm_t) -> ncclResult_t {
    let mut e = ncclResult_t::Success;
    // SAFETY: `comm` is live per the caller; `e` is a writable result.
    let r = unsafe { api::ncclCommGetAsyncError(comm, &mut e) };
    if r.is_ok() { e } else { r }
}

/// One communicator per device `0..n`, by `ncclCommInitAll` (rank r on device r).
pub fn init_all(n: usize) -> Result<Vec<ncclComm_t>, String> {
    let mut comms: Vec<ncclComm_t> = vec![std::ptr::null_mut(); n];
    let devices: Vec<c_int> = (0..n as c_int).collect();
    // SAFETY: `comms` has room for n handles, `devices` lists n devices.
    let r = unsafe { api::ncclCommInitAll(comms.as_mut_ptr(), n as c_int, devices.as_ptr()) };
    if r.is_ok() { Ok(comms) } else { Err(format!("ncclCommInitAll: {}", error_string(r))) }
}
