//! GPU test of the "a dead peer never hangs a process" rules of DDA (needs 2 GPUs):
//!
//! * `timeout`: rank 0 of a 2-rank communicator calls AllReduce, rank 1 never does. The kernel
//!   must give up after `RCCLX_TIMEOUT_MS` (set to 2000 here), the stream must complete, and
//!   `ncclCommGetAsyncError` must report an error (not `ncclSuccess`, not `ncclInProgress`).
//! * `abort`: the same on a second communicator pair, but `ncclCommAbort` is called 200 ms
//!   after the launch: the kernel must stop (abort request) and the abort return well before
//!   the 2 s timeout.
//!
//! One process, `ncclCommInitAll` on devices 0 and 1; the stock library comes from
//! `RCCLX_UPSTREAM_LIB`. Prints `PASS|FAIL name detail`, then `N passed, M failed`; exit 0 only
//! if both pass, 2 without GPUs.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use rcclx::abi::table as nccl;
use rcclx::gpu::{self, MemKind, Stream};
use rcclx::types::{ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t};
use std::ffi::c_int;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const TIMEOUT_MS: u64 = 2000;
const COUNT: usize = 1024;

fn init_pair() -> Result<[ncclComm_t; 2], String> {
    let mut comms = [std::ptr::null_mut(); 2];
    let devs: [c_int; 2] = [0, 1];
    // SAFETY: out-array of two handles and a device list of two entries.
    let r = unsafe { nccl::ncclCommInitAll(comms.as_mut_ptr(), 2, devs.as_ptr()) };
    if r != ncclResult_t::Success {
        return Err(format!("ncclCommInitAll returned {}", r.0));
    }
    Ok(comms)
}

fn async_error(comm: ncclComm_t) -> ncclResult_t {
    let mut e = ncclResult_t::Success;
    // SAFETY: valid communicator and out-pointer.
    let r = unsafe { nccl::ncclCommGetAsyncError(comm, &mut e) };
    if r != ncclResult_t::Success { r } else { e }
}

/// Launches a lone AllReduce on rank 0 of `comms`; returns the stream it runs on.
fn lone_allreduce(rt: &'static gpu::Runtime, comm: ncclComm_t) -> Result<(Stream, gpu::DeviceBuffer), String> {
    let buf = rt.alloc(0, COUNT * 4, MemKind::Normal).map_err(|e| e.to_string())?;
    let stream = rt.create_stream(0).map_err(|e| e.to_string())?;
    let p = buf.ptr().as_raw();
    // SAFETY: device buffer of COUNT floats, in place, on a stream of device 0.
    let r =
        unsafe { nccl::ncclAllReduce(p, p, COUNT, ncclDataType_t::Float32, ncclRedOp_t::Sum, comm, stream.as_raw()) };
    if r != ncclResult_t::Success {
        return Err(format!("ncclAllReduce returned {}", r.0));
    }
    Ok((stream, buf))
}

fn check_timeout(rt: &'static gpu::Runtime) -> Result<String, String> {
    let comms = init_pair()?;
    let start = Instant::now();
    let (stream, _buf) = lone_allreduce(rt, comms[0])?;
    let done = rt.wait_stream(stream, Duration::from_millis(TIMEOUT_MS * 5)).map_err(|e| e.to_string())?;
    let waited = start.elapsed();
    if !done {
        return Err(format!("kernel still running after {waited:?} (timeout {TIMEOUT_MS} ms)"));
    }
    let e = async_error(comms[0]);
    if e == ncclResult_t::Success || e == ncclResult_t::InProgress {
        return Err(format!("ncclCommGetAsyncError reported {} after the timeout", e.0));
    }
    for c in comms {
        // SAFETY: communicators from init_pair, not used afterwards.
        unsafe { nccl::ncclCommAbort(c) };
    }
    Ok(format!("kernel gave up after {waited:?}; ncclCommGetAsyncError = {}", e.0))
}

fn check_abort(rt: &'static gpu::Runtime) -> Result<String, String> {
    let comms = init_pair()?;
    let (stream, _buf) = lone_allreduce(rt, comms[0])?;
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    // SAFETY: communicator from init_pair, not used afterwards.
    let r = unsafe { nccl::ncclCommAbort(comms[0]) };
    let took = start.elapsed();
    let done = rt.wait_stream(stream, Duration::from_millis(TIMEOUT_MS * 5)).map_err(|e| e.to_string())?;
    // SAFETY: as above.
    unsafe { nccl::ncclCommAbort(comms[1]) };
    if !done {
        return Err("kernel still running after the abort".into());
    }
    if took >= Duration::from_millis(TIMEOUT_MS) {
        return Err(format!("ncclCommAbort took {took:?}, not less than the {TIMEOUT_MS} ms timeout"));
    }
    Ok(format!("ncclCommAbort returned {} after {took:?}", r.0))
}

fn main() -> ExitCode {
    // SAFETY: before any other thread exists and before rcclx reads its configuration.
    unsafe {
        std::env::set_var("RCCLX_TIMEOUT_MS", TIMEOUT_MS.to_string());
        std::env::set_var("NCCL_NVLS_ENABLE", "0");
    }
    let rt = match gpu::runtime() {
        Ok(rt) if rt.device_count() >= 2 => rt,
        Ok(_) => {
            println!("dda_timeout: needs 2 GPUs");
            return ExitCode::from(2);
        }
        Err(e) => {
            println!("dda_timeout: no GPU: {e}");
            return ExitCode::from(2);
        }
    };
    let mut failed = 0;
    for (name, check) in
        [("timeout", check_timeout as fn(&'static gpu::Runtime) -> Result<String, String>), ("abort", check_abort)]
    {
        match check(rt) {
            Ok(detail) => println!("PASS {name} {detail}"),
            Err(detail) => {
                failed += 1;
                println!("FAIL {name} {detail}");
            }
        }
    }
    println!("{} passed, {failed} failed", 2 - failed);
    if failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) }
}
