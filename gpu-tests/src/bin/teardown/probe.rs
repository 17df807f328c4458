//! Two checks of issue 48 (audit N4, N3):
//! * `capture-probe`: each driver call rcclx makes outside the application's streams (setup,
//!   teardown, the reaper) is made on one thread while another captures in global mode
//!   (PyTorch's default): no capture may break. A control makes raw driver calls (no relaxed
//!   mode) the same way and must break one, so the probe can see a break.
//! * `abort-behind-launch` (streams): thread M calls rank 0's AllReduce until a launch blocks in
//!   a launch queue full behind another clique's stuck kernel (the stand-in for a stuck stock
//!   kernel, which rcclx's abort word does not stop); `ncclCommAbort`'s path, whose stock call
//!   (the stand-in) stops that kernel, must return within 5 s.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rcclx::clique::Buffers;
use rcclx::comm::{self, lifecycle};
use rcclx::gpu::{CaptureMode, MemKind, Runtime, Stream};
use rcclx::intercept::{CallDesc, Coll};
use rcclx::types::{ncclComm_t, ncclDataType_t, ncclResult_t};
use rcclx_gpu_tests::world::{FORWARDED, Layout, fresh_dir};
use rcclx_gpu_tests::{self as harness, Fail, Outcome, watchdog};

use super::{Bufs, COUNT, WAIT, call, join, placement, quarter_gpu};

type Probe<'a> = (&'static str, Box<dyn Fn() -> Called + Sync + 'a>);
/// What a probed call returned.
type Called = Result<(), String>;

/// Runs `f` on another thread while this one captures a memset in global mode; whether the
/// capture survived (and its replay wrote the bytes), and `f`'s own result.
fn during_capture(
    rt: &'static Runtime,
    stream: Stream,
    buf: &rcclx::gpu::DeviceBuffer,
    value: u8,
    f: &(dyn Fn() -> Called + Sync),
) -> Result<(Called, Called), Fail> {
    rt.begin_capture_in(stream, CaptureMode::Global)?;
    let called = std::thread::scope(|s| s.spawn(f).join().unwrap_or_else(|_| Err("panicked".into())));
    // SAFETY: `buf` is this check's; the memset is only captured here.
    let set = unsafe { rt.memset_async(buf.ptr(), value, buf.len(), stream) };
    let ended = rt.end_capture(stream);
    let capture = match (set, ended) {
        (Ok(()), Ok(graph)) => {
            let replayed = rt.launch_graph(graph, stream).and_then(|_| rt.wait_stream(stream, WAIT));
            // SAFETY: the replay completed (or failed); not used again.
            let _ = unsafe { rt.destroy_graph(graph) };
            let mut got = vec![0u8; buf.len()];
            buf.copy_to_host(&mut got)?;
            match replayed {
                Ok(true) if got.iter().all(|&b| b == value) => Ok(()),
                Ok(true) => Err("the replay wrote the wrong bytes".into()),
                Ok(false) => Err("the replay did not finish".into()),
                Err(e) => Err(format!("replay: {e}")),
            }
        }
        (Err(e), Ok(graph)) => {
            // SAFETY: never launched.
            let _ = unsafe { rt.destroy_graph(graph) };
            Err(format!("capture: {e}"))
        }
        (_, Err(e)) => Err(format!("end capture: {e}")),
    };
    Ok((capture, called))
}

/// The raw driver's `cuMemAlloc_v2`/`cuMemFree_v2` and `cuStreamSynchronize`, called without
/// relaxed mode (the control).
struct Raw {
    alloc: unsafe extern "C" fn(*mut u64, usize) -> i32,
    free: unsafe extern "C" fn(u64) -> i32,
    sync: unsafe extern "C" fn(*mut c_void) -> i32,
}

impl Raw {
    fn open() -> Option<Raw> {
        // SAFETY: dlopen of the CUDA driver (already loaded by rcclx: the same copy); the
        // symbols have the driver API's C signatures.
        unsafe {
            let lib = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
            if lib.is_null() {
                return None;
            }
            let sym = |name: &std::ffi::CStr| libc::dlsym(lib, name.as_ptr());
            let (a, f, s) = (sym(c"cuMemAlloc_v2"), sym(c"cuMemFree_v2"), sym(c"cuStreamSynchronize"));
            if a.is_null() || f.is_null() || s.is_null() {
                return None;
            }
            Some(Raw {
                alloc: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut u64, usize) -> i32>(a),
                free: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(u64) -> i32>(f),
                sync: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut c_void) -> i32>(s),
            })
        }
    }
}

pub(super) fn capture_probe(rt: &'static Runtime) -> Result<Outcome, Fail> {
    let _g = rt.device_guard(0)?;
    let stream = rt.create_stream(0)?;
    let other = rt.create_stream(0)?;
    let buf = rt.alloc(0, 4096, MemKind::Normal)?;
    let target = rt.alloc(0, 1 << 20, MemKind::Normal)?;
    let handle = target.ipc_handle()?;
    let host = vec![7u8; 1 << 20];
    let probes: Vec<Probe> = vec![
        ("alloc and free", Box::new(|| rt.alloc(0, 1 << 20, MemKind::Normal).map(drop).map_err(|e| e.to_string()))),
        (
            "alloc uncached and free",
            Box::new(|| rt.alloc(0, 1 << 20, MemKind::Uncached).map(drop).map_err(|e| e.to_string())),
        ),
        ("host-mapped alloc and free", Box::new(|| rt.alloc_host_mapped(0, 64).map(drop).map_err(|e| e.to_string()))),
        ("zero (memset, synchronize)", Box::new(|| target.zero().map_err(|e| e.to_string()))),
        ("copy from host", Box::new(|| target.copy_from_host(&host).map_err(|e| e.to_string()))),
        (
            "copy to host",
            Box::new(|| {
                let mut back = vec![0u8; 4096];
                target.copy_to_host(&mut back).map_err(|e| e.to_string())
            }),
        ),
        ("IPC handle", Box::new(|| target.ipc_handle().map(drop).map_err(|e| e.to_string()))),
        // Opening one's own handle fails (same process); the call is what counts here.
        ("IPC open", Box::new(|| rt.open_ipc(0, &handle).map(drop).map_err(|e| e.to_string()))),
        ("module load", Box::new(|| rt.load_rcclx_module(0).map(drop).map_err(|e| e.to_string()))),
        (
            "stream create and destroy",
            Box::new(|| {
                let s = rt.create_stream(0).map_err(|e| e.to_string())?;
                // SAFETY: made above, idle.
                unsafe { rt.destroy_stream(s) }.map_err(|e| e.to_string())
            }),
        ),
        (
            "event create, record, query, destroy",
            Box::new(|| {
                let e = rt.create_event(0).map_err(|e| e.to_string())?;
                rt.record_event(e, other).map_err(|e| e.to_string())?;
                rt.query_event(e).map_err(|e| e.to_string())?;
                // SAFETY: made above; nothing waits for it.
                unsafe { rt.destroy_event(e) }.map_err(|e| e.to_string())
            }),
        ),
        ("stream query", Box::new(|| rt.query_stream(other).map(drop).map_err(|e| e.to_string()))),
        ("memory info", Box::new(|| rt.memory_info(0).map(drop).map_err(|e| e.to_string()))),
    ];
    let (mut broken, mut errors) = (Vec::new(), Vec::new());
    for (i, (name, f)) in probes.iter().enumerate() {
        watchdog::progress(&format!("capture-probe: {name}"));
        let (capture, called) = during_capture(rt, stream, &buf, i as u8 + 1, f.as_ref())?;
        if let Err(e) = capture {
            broken.push(format!("{name}: {e}"));
        }
        if let Err(e) = called {
            errors.push(format!("{name}: {e}"));
        }
    }
    // The control: raw calls in the thread's own (global) mode must break the capture.
    let control = match Raw::open() {
        None => "no control (not the CUDA driver)".to_string(),
        Some(raw) => {
            let raw_calls = || -> Result<(), String> {
                let _g = rt.device_guard(0).map_err(|e| e.to_string())?; // the driver's context
                let mut p = 0u64;
                // SAFETY: out-pointer to a local; the block is freed right after; `other` is a
                // valid stream.
                let (a, f, s) = unsafe {
                    let a = (raw.alloc)(&mut p, 1 << 20);
                    let f = if a == 0 { (raw.free)(p) } else { 0 };
                    (a, f, (raw.sync)(other.as_raw()))
                };
                if (a, f, s) == (0, 0, 0) { Ok(()) } else { Err(format!("CUresult {a}, {f}, {s}")) }
            };
            match during_capture(rt, stream, &buf, 0xee, &raw_calls)? {
                (Err(e), called) => format!("raw cuMemAlloc/cuStreamSynchronize broke it ({e}; calls: {called:?})"),
                (Ok(()), _) => {
                    return Err(Fail(
                        "control: raw driver calls in global mode did not break the capture: the probe cannot see a break"
                            .into(),
                    ));
                }
            }
        }
    };
    // SAFETY: idle (every replay waited for); not used again.
    unsafe {
        let _ = rt.destroy_stream(stream);
        let _ = rt.destroy_stream(other);
    }
    if !broken.is_empty() {
        return Err(Fail(format!(
            "{} of {} calls broke a global capture: {}",
            broken.len(),
            probes.len(),
            broken.join("; ")
        )));
    }
    Ok(Outcome::Pass(format!(
        "{} kinds of rcclx driver call, each during another thread's global capture: 0 captures broken (calls that failed by themselves: {}); control: {control}",
        probes.len(),
        if errors.is_empty() { "none".to_string() } else { errors.join("; ") }
    )))
}

pub(super) fn abort_behind_launch(rt: &'static Runtime) -> Result<Outcome, Fail> {
    let dir = fresh_dir("teardown-behind")?;
    let p = placement(Layout::Streams, 2);
    let sharing = quarter_gpu(rt)?;
    let w = join(rt, p, &[0, 1], &dir.join("w"), Some(sharing))?;
    let stuck = join(rt, p, &[0, 1], &dir.join("stuck"), Some(sharing))?;
    let bufs = Bufs::new(rt, 2)?;
    bufs.upload(rt, 31)?;
    // The stand-in for a stuck stock kernel: rank 0 of another clique's AllReduce, on w's rank 0
    // stream, whose rank 1 is not launched; w's abort word does not stop it.
    call(&stuck, &bufs, 0, w.streams[0])?;
    let (calls, in_call_since, stop) = (AtomicUsize::new(0), AtomicU64::new(0), AtomicBool::new(false));
    let epoch = Instant::now();
    // Plain values for the threads (the world's handles are not `Sync`).
    let comm = w.comms[0] as usize;
    let stream0 = w.streams[0].as_raw() as usize;
    let (send0, recv0) = (bufs.send[0].ptr().as_raw() as usize, bufs.recv[0].ptr().as_raw() as usize);
    let (stuck_cliques, w_cliques) = (stuck.cliques.clone(), w.cliques.clone());
    let abort_all = |cliques: &[std::sync::Arc<rcclx::clique::Clique>]| cliques.iter().for_each(|c| c.request_abort());
    let outcome = std::thread::scope(|s| -> Result<Outcome, Fail> {
        let caller = s.spawn(|| {
            // Rank 0's AllReduce of w, over and over, until one blocks in a full launch queue or
            // the communicator is gone (a call then forwards or fails).
            let c = CallDesc::new(Coll::AllReduce, COUNT, ncclDataType_t::Float32);
            // SAFETY: the raw value of w's rank 0 stream, alive until the end of the check.
            let stream = unsafe { Stream::from_raw(stream0 as *mut c_void) };
            let b = Buffers { send: send0 as *const c_void, recv: recv0 as *mut c_void, stream };
            while !stop.load(Ordering::Acquire) {
                in_call_since.store(epoch.elapsed().as_micros() as u64 + 1, Ordering::Release);
                let r = comm::collective(comm as ncclComm_t, c, b, || FORWARDED);
                in_call_since.store(0, Ordering::Release);
                if r != ncclResult_t::Success {
                    break;
                }
                calls.fetch_add(1, Ordering::Relaxed);
            }
        });
        let blocked = loop {
            watchdog::progress("abort-behind-launch: filling the launch queue");
            std::thread::sleep(Duration::from_millis(50));
            let since = in_call_since.load(Ordering::Acquire);
            if since > 0 && epoch.elapsed().as_micros() as u64 + 1 - since > 1_000_000 {
                break true;
            }
            if epoch.elapsed() > Duration::from_secs(60) || caller.is_finished() {
                break false;
            }
        };
        if !blocked {
            stop.store(true, Ordering::Release);
            abort_all(&stuck_cliques);
            abort_all(&w_cliques);
            let _ = caller.join();
            return Ok(Outcome::Skip(format!(
                "no launch blocked after {} calls: the launch queue never filled",
                calls.load(Ordering::Relaxed)
            )));
        }
        let queued = calls.load(Ordering::Relaxed);
        let (tx, rx) = std::sync::mpsc::channel();
        let started = Instant::now();
        let stuck_cliques = &stuck_cliques;
        let aborter = s.spawn(move || {
            let r = lifecycle::ended(comm as ncclComm_t, true, || {
                abort_all(stuck_cliques); // the stock abort stops the stock library's kernels
                ncclResult_t::Success
            });
            let _ = tx.send(r);
        });
        let returned = rx.recv_timeout(Duration::from_secs(5));
        let took = started.elapsed();
        stop.store(true, Ordering::Release);
        if returned.is_err() {
            abort_all(stuck_cliques);
            abort_all(&w_cliques);
            let _ = rx.recv_timeout(WAIT);
            let _ = (aborter.join(), caller.join());
            return Err(Fail(format!(
                "ncclCommAbort did not return within 5 s with a launch of its communicator blocked behind a stuck kernel ({queued} calls queued)"
            )));
        }
        let _ = (aborter.join(), caller.join());
        Ok(Outcome::Pass(format!(
            "abort returned in {:.1} ms with a launch blocked behind a stuck kernel ({queued} calls queued before it)",
            took.as_secs_f64() * 1e3
        )))
    })?;
    // Everything aborted drains; then the memory goes back to the pool.
    harness::gpu::wait_stream(rt, w.streams[0], WAIT, "rank 0's stream after the abort")?;
    stuck.end_as(rt, true);
    w.end_as(rt, true);
    super::pooled("abort-behind-launch")?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(outcome)
}
