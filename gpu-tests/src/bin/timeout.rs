//! GPU test of the "a dead peer never hangs a process" rules of DDA (needs 2 GPUs):
//!
//! * `timeout`: rank 0 of a 2-rank communicator calls AllReduce, rank 1 never does. The kernel
//!   must give up after `RCCLX_TIMEOUT_MS` (opt-in, default none; set to 2000 here), the stream
//!   must complete, and `ncclCommGetAsyncError` must report an error (not `ncclSuccess`, not
//!   `ncclInProgress`).
//! * `abort`: the same on a second communicator pair, but `ncclCommAbort` is called 200 ms
//!   after the launch: the abort must return, and the kernel end, within 1 s of it, well before
//!   the 2 s timeout could end it. So it is the abort that stops the kernel, and the check
//!   passes the same without any timeout set.
//!
//! One process, `ncclCommInitAll` on devices 0 and 1; the stock library comes from
//! `RCCLX_UPSTREAM_LIB`. Prints `PASS|FAIL name detail`, then `N passed, M failed`; exit 0 only
//! if both pass, 2 without 2 GPUs, 3 a stall.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use rcclx::abi::table as api;
use rcclx::gpu::{DeviceBuffer, MemKind, Runtime, Stream};
use rcclx::types::{ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t};
use rcclx_gpu_tests::{self as harness, Fail, Outcome, Tally, nccl, watchdog};

const TIMEOUT_MS: u64 = 2000;
const COUNT: usize = 1024;
/// How long the `timeout` check waits for the kernel to give up.
const TIMEOUT_WAIT: Duration = Duration::from_millis(TIMEOUT_MS * 5);
/// How long the lone rank runs before the `abort` check aborts it.
const ABORT_AFTER: Duration = Duration::from_millis(200);
/// Bound on `ncclCommAbort`, and on the kernel ending after it: ABORT_AFTER + ABORT_LIMIT is
/// below the kernel timeout, so only the abort can end the kernel in time.
const ABORT_LIMIT: Duration = Duration::from_millis(1000);
const _: () = assert!(ABORT_AFTER.as_millis() + ABORT_LIMIT.as_millis() < TIMEOUT_MS as u128);
/// No progress for this long ends the process (communicator setup that never completes).
const STALL_LIMIT: Duration = Duration::from_secs(60);

fn main() -> ExitCode {
    // SAFETY: before any other thread exists and before rcclx reads its configuration.
    unsafe {
        std::env::set_var("RCCLX_TIMEOUT_MS", TIMEOUT_MS.to_string());
        std::env::set_var("NCCL_NVLS_ENABLE", "0");
    }
    let rt = match harness::gpu::runtime_or_exit("timeout", 2) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    watchdog::start(STALL_LIMIT);
    let mut tally = Tally::new();
    tally.check("timeout", || check_timeout(rt));
    tally.check("abort", || check_abort(rt));
    tally.finish()
}

fn check_timeout(rt: &'static Runtime) -> Result<Outcome, Fail> {
    watchdog::progress("timeout: ncclCommInitAll");
    let comms = nccl::init_all(2)?;
    let start = Instant::now();
    let (stream, _buf) = lone_allreduce(rt, comms[0])?;
    watchdog::progress("timeout: waiting for the kernel to give up");
    let done = rt.wait_stream(stream, TIMEOUT_WAIT)?;
    let waited = start.elapsed();
    if !done {
        return Err(Fail(format!("kernel still running after {waited:?} (timeout {TIMEOUT_MS} ms)")));
    }
    // SAFETY: comms[0] is live until abort_all below.
    let e = unsafe { nccl::async_error(comms[0]) };
    if e == ncclResult_t::Success || e == ncclResult_t::InProgress {
        return Err(Fail(format!("ncclCommGetAsyncError reported {} after the timeout", e.0)));
    }
    abort_all(&comms);
    Ok(Outcome::Pass(format!("kernel gave up after {waited:?}; ncclCommGetAsyncError = {}", e.0)))
}

fn check_abort(rt: &'static Runtime) -> Result<Outcome, Fail> {
    watchdog::progress("abort: ncclCommInitAll");
    let comms = nccl::init_all(2)?;
    let (stream, _buf) = lone_allreduce(rt, comms[0])?;
    std::thread::sleep(ABORT_AFTER);
    watchdog::progress("abort: ncclCommAbort");
    let start = Instant::now();
    // SAFETY: communicator from init_all, not used afterwards.
    let r = unsafe { api::ncclCommAbort(comms[0]) };
    let took = start.elapsed();
    let done = rt.wait_stream(stream, ABORT_LIMIT)?;
    let ended = start.elapsed();
    abort_all(&comms[1..]);
    if !done {
        return Err(Fail(format!("kernel still running {ended:?} after the abort")));
    }
    if took >= ABORT_LIMIT {
        return Err(Fail(format!("ncclCommAbort took {took:?}, not less than {ABORT_LIMIT:?}")));
    }
    Ok(Outcome::Pass(format!("ncclCommAbort returned {} after {took:?}", r.0)))
}

/// Launches a lone AllReduce on `comm` (rank 0 of a pair whose rank 1 never calls); returns
/// the stream it runs on and its buffer.
fn lone_allreduce(rt: &'static Runtime, comm: ncclComm_t) -> Result<(Stream, DeviceBuffer), Fail> {
    let buf = rt.alloc(0, COUNT * 4, MemKind::Normal)?;
    let stream = rt.create_stream(0)?;
    let p = buf.ptr().as_raw();
    // SAFETY: device buffer of COUNT floats, in place, on a stream of device 0.
    let r =
        unsafe { api::ncclAllReduce(p, p, COUNT, ncclDataType_t::Float32, ncclRedOp_t::Sum, comm, stream.as_raw()) };
    if r != ncclResult_t::Success {
        return Err(Fail(format!("ncclAllReduce returned {}", r.0)));
    }
    Ok((stream, buf))
}

/// Aborts `comms` (the checks' communicators are not used afterwards).
fn abort_all(comms: &[ncclComm_t]) {
    for &c in comms {
        // SAFETY: communicators from init_all, not used afterwards.
        unsafe { api::ncclCommAbort(c) };
    }
}
