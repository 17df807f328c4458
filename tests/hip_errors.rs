//! HIP's thread-local last error after rcclx's HIP calls (issue 36, ROCm 7's sticky errors).
//!
//! From ROCm 7.0 `hipGetLastError` reports the last failing call until it is read. rcclx
//! handles some HIP failures itself (an IPC handle it cannot open, an allocation or module
//! load that turns its kernels off, "peer access already enabled"); those must not surface in
//! the application's next `hipGetLastError`, and an error the application had not read yet must
//! still be reported after rcclx's calls.
//!
//! `tests/c/recording_hip.c` is a HIP runtime with ROCm 7's last-error rules that fails the
//! calls this test picks and records every call. The test runs this binary again with
//! `RCCLX_GPU_RUNTIME=hip RCCLX_HIP_LIB=<that library>`, so rcclx's real GPU layer
//! (`rcclx::gpu::runtime()`) loads it as the HIP runtime; the child then calls the runtime
//! layer's functions and reads the slot as the application would, through the same library.
//! The same runtime's two devices (a gfx942 and a gfx950) show `rcclxGetInfo`'s per-device FP8
//! format, and its captures (CUDA's and HIP's rule that no event crosses a capture boundary)
//! check how a communicator orders its operations across streams (`comm::Order`).

mod common;

use std::ffi::{CStr, c_char, c_int, c_void};
use std::process::Command;

use rcclx::gpu::{self, IpcHandle, MemKind};

const HIP_ERROR_INVALID_VALUE: c_int = 1;
const HIP_ERROR_OUT_OF_MEMORY: c_int = 2;
const HIP_ERROR_INVALID_IMAGE: c_int = 200;
const HIP_ERROR_INVALID_CONTEXT: c_int = 201;
const HIP_ERROR_INVALID_HANDLE: c_int = 400;
const HIP_ERROR_PEER_ACCESS_ALREADY_ENABLED: c_int = 704;

/// The recording library's functions, as the application (this test) calls them.
struct App {
    get_last_error: unsafe extern "C" fn() -> c_int,
    peek: unsafe extern "C" fn() -> c_int,
    fail: unsafe extern "C" fn(*const c_char, c_int),
    fail_nth: unsafe extern "C" fn(*const c_char, c_int, c_int),
    app_error: unsafe extern "C" fn(c_int),
    calls: unsafe extern "C" fn() -> *const c_char,
    clear: unsafe extern "C" fn(),
    capture: unsafe extern "C" fn(*mut c_void, u64),
    _lib: libloading::Library,
}

impl App {
    fn open(path: &str) -> App {
        // SAFETY: the recording library has no initialisers; rcclx has it open already, so this
        // is the same copy (same slot, same record).
        let lib = unsafe { libloading::Library::new(path) }.expect("the recording HIP library");
        // SAFETY: each symbol has the C signature given (tests/c/recording_hip.c).
        unsafe {
            App {
                get_last_error: *lib.get(b"hipGetLastError\0").unwrap(),
                peek: *lib.get(b"hipPeekAtLastError\0").unwrap(),
                fail: *lib.get(b"rec_fail\0").unwrap(),
                fail_nth: *lib.get(b"rec_fail_nth\0").unwrap(),
                app_error: *lib.get(b"rec_app_error\0").unwrap(),
                calls: *lib.get(b"rec_calls\0").unwrap(),
                clear: *lib.get(b"rec_clear\0").unwrap(),
                capture: *lib.get(b"rec_capture\0").unwrap(),
                _lib: lib,
            }
        }
    }
    /// The application's `hipGetLastError` (reads and resets the slot).
    fn last_error(&self) -> c_int {
        // SAFETY: no arguments.
        unsafe { (self.get_last_error)() }
    }
    fn peek(&self) -> c_int {
        // SAFETY: no arguments.
        unsafe { (self.peek)() }
    }
    /// Every later call of `name` returns `code` (`None`: no failures).
    fn fail(&self, what: Option<(&CStr, c_int)>) {
        let (name, code) = what.map_or((std::ptr::null(), 0), |(n, c)| (n.as_ptr(), c));
        // SAFETY: NULL or a NUL-terminated name, copied by the library.
        unsafe { (self.fail)(name, code) }
    }
    /// Only the `n`-th next call of `name` returns `code`.
    fn fail_nth(&self, name: &CStr, n: c_int, code: c_int) {
        // SAFETY: a NUL-terminated name, copied by the library.
        unsafe { (self.fail_nth)(name.as_ptr(), n, code) }
    }
    /// The slot as an application call that failed with `code` leaves it.
    fn app_error(&self, code: c_int) {
        // SAFETY: plain value.
        unsafe { (self.app_error)(code) }
    }
    /// Puts `stream` in capture `id` (0: ends its capture).
    fn capture(&self, stream: gpu::Stream, id: u64) {
        // SAFETY: plain values; the library only compares the pointer.
        unsafe { (self.capture)(stream.as_raw(), id) }
    }
    /// The calls recorded since the last `take`, and a fresh record.
    fn take(&self) -> Vec<String> {
        // SAFETY: a NUL-terminated string owned by the library; copied before `clear`.
        let text = unsafe { CStr::from_ptr((self.calls)()) }.to_string_lossy().into_owned();
        // SAFETY: no arguments.
        unsafe { (self.clear)() };
        text.lines().map(str::to_string).collect()
    }
}

/// The calls rcclx made after `call` (by name) and around it, as `[before, call, after]`.
fn around(calls: &[String], call: &str) -> Vec<String> {
    let i = calls.iter().position(|c| c == call).unwrap_or_else(|| panic!("no {call} in {calls:?}"));
    calls[i.saturating_sub(1)..(i + 2).min(calls.len())].to_vec()
}

/// Builds the recording HIP library and runs the test `child` of this binary in a process whose
/// HIP runtime it is; returns the child's output after checking that it passed.
fn run_child(child: &str) -> String {
    run_child_with(child, &[])
}

/// [`run_child`] with more variables in the child's environment.
fn run_child_with(child: &str, env: &[(&str, &std::ffi::OsStr)]) -> String {
    let dir = common::scratch(child);
    let lib = dir.join("librecording_hip.so");
    common::must(
        common::cc()
            .args(common::C_FLAGS)
            .args(["-Wno-unused-parameter", "-fPIC", "-shared"])
            .arg(common::repo().join("tests/c/recording_hip.c"))
            .arg("-o")
            .arg(&lib),
        "compiling tests/c/recording_hip.c",
    );
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args(["--exact", child, "--nocapture", "--test-threads=1"])
        .env("RCCLX_GPU_RUNTIME", "hip")
        .env("RCCLX_HIP_LIB", &lib)
        .env("RCCLX_TEST_RECORDING_HIP", "1")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child failed:\n{text}");
    assert!(text.contains("recording HIP: all checks passed"), "the child did not run its checks:\n{text}");
    text
}

#[test]
fn handled_hip_failures_leave_no_error_and_keep_the_applications() {
    run_child("in_a_process_whose_hip_runtime_records");
}

#[test]
fn info_reports_the_fp8_format_of_each_hip_device() {
    run_child("info_in_a_process_whose_hip_runtime_records");
}

/// The child of `info_reports_the_fp8_format_of_each_hip_device`: the recording runtime has a
/// gfx942 (device 0) and a gfx950 (device 1); rcclxGetInfo names each one's arch, the kernels
/// rcclx runs there (none in a build without kernels) and their FP8 format.
#[test]
fn info_in_a_process_whose_hip_runtime_records() {
    if std::env::var_os("RCCLX_TEST_RECORDING_HIP").is_none() {
        return;
    }
    let p = rcclx::abi::own::rcclxGetInfo();
    assert!(!p.is_null());
    // SAFETY: rcclxGetInfo returns a NUL-terminated string that lives as long as the process.
    let info = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    let q = |s: Option<&str>| s.map_or("null".to_string(), |s| format!("\"{s}\""));
    for (d, arch, format) in [(0, "gfx942:sramecc+:xnack-", "e4m3fnuz"), (1, "gfx950:sramecc+:xnack-", "e4m3fn")] {
        let code = rcclx::kernels::for_arch(arch);
        assert_eq!(code.map(|c| c.fp8_format().name()).unwrap_or(format), format);
        let want = format!(
            "{{\"device\": {d}, \"arch\": \"{arch}\", \"kernels\": {}, \"fp8_format\": {}}}",
            q(code.map(|c| c.target)),
            q(code.map(|c| c.fp8_format().name()))
        );
        assert!(info.contains(&want), "{want} not in {info}");
    }
    assert!(info.contains("\"gpu_runtime\": {\"vendor\": \"hip\""), "{info}");
    println!("recording HIP: all checks passed");
}

/// The child's half (does nothing unless `RCCLX_TEST_RECORDING_HIP` is set).
#[test]
fn in_a_process_whose_hip_runtime_records() {
    if std::env::var_os("RCCLX_TEST_RECORDING_HIP").is_none() {
        return;
    }
    let path = std::env::var("RCCLX_HIP_LIB").unwrap();
    let rt = gpu::runtime().expect("rcclx loads the recording HIP library as its runtime");
    assert_eq!(rt.vendor(), gpu::Vendor::Hip);
    assert_eq!(rt.library(), path);
    assert_eq!(rt.device_count(), 2);
    let app = App::open(&path);
    assert_eq!(app.last_error(), 0, "loading the runtime left an error");
    app.take();

    // (a) Each handled failure: rcclx peeks first, the call fails, rcclx reads the slot, and the
    // application's hipGetLastError then says hipSuccess.
    let handle = IpcHandle([7; 64]);
    let image = [0u8; 64];
    type Step<'a> = (&'a CStr, c_int, Box<dyn Fn() -> bool + 'a>);
    let steps: Vec<Step> = vec![
        (c"hipIpcOpenMemHandle", HIP_ERROR_INVALID_CONTEXT, Box::new(|| rt.open_ipc(0, &handle).is_err())),
        (
            c"hipIpcGetMemHandle",
            HIP_ERROR_INVALID_VALUE,
            Box::new(|| rt.ipc_handle(0, gpu::DevicePtr(0x1000)).is_err()),
        ),
        (c"hipMalloc", HIP_ERROR_OUT_OF_MEMORY, Box::new(|| rt.alloc(0, 1 << 20, MemKind::Normal).is_err())),
        (
            c"hipExtMallocWithFlags",
            HIP_ERROR_OUT_OF_MEMORY,
            Box::new(|| rt.alloc(0, 1 << 20, MemKind::Uncached).is_err()),
        ),
        // SAFETY: the recording library does not read the image.
        (c"hipModuleLoadData", HIP_ERROR_INVALID_IMAGE, Box::new(|| unsafe { rt.load_module(0, &image) }.is_err())),
        (
            c"hipModuleGetFunction",
            HIP_ERROR_INVALID_HANDLE,
            // SAFETY: as above.
            Box::new(|| unsafe { rt.load_module(0, &image) }.is_ok_and(|m| rt.function(m, "rcclx_x").is_err())),
        ),
        // "Already enabled" is success for rcclx, and must not linger either.
        (
            c"hipDeviceEnablePeerAccess",
            HIP_ERROR_PEER_ACCESS_ALREADY_ENABLED,
            Box::new(|| rt.enable_peer_access(0, 1).is_ok()),
        ),
    ];
    for (call, code, run) in &steps {
        let name = call.to_str().unwrap();
        app.fail(Some((call, *code)));
        app.take();
        assert!(run(), "{name} failing with {code}: rcclx's call did not end as expected");
        app.fail(None);
        let calls = app.take();
        assert_eq!(around(&calls, name), ["hipPeekAtLastError", name, "hipGetLastError"], "{calls:?}");
        assert_eq!(app.peek(), 0, "{name} failed with {code} inside rcclx and left it pending: {calls:?}");
        assert_eq!(app.last_error(), 0, "{name}");
        println!("recording HIP: {name} -> {code} handled, the application's hipGetLastError is hipSuccess");
    }

    // (b) An error the application has not read yet is still reported after rcclx's calls.
    // Calls that succeed leave it exactly as it was (ROCm 7 does not overwrite it with success)...
    app.app_error(HIP_ERROR_INVALID_VALUE);
    app.take(); // (the application's own calls above are recorded too)
    let buf = rt.alloc(0, 4096, MemKind::Normal).expect("hipMalloc");
    let mapped = rt.open_ipc(1, &handle).expect("hipIpcOpenMemHandle");
    rt.enable_peer_access(0, 1).expect("hipDeviceEnablePeerAccess");
    drop((buf, mapped));
    assert!(!app.take().iter().any(|c| c == "hipGetLastError"), "rcclx read the application's error");
    assert_eq!(app.last_error(), HIP_ERROR_INVALID_VALUE, "the application's pending error was lost");
    // ...and a failure rcclx handles meanwhile does not clear it: the slot still holds an error
    // (HIP has no call to restore the older code; ROCm 7 replaced it with the newer one).
    for (call, code, run) in &steps {
        let name = call.to_str().unwrap();
        app.app_error(HIP_ERROR_INVALID_VALUE);
        app.fail(Some((call, *code)));
        app.take();
        assert!(run(), "{name}");
        app.fail(None);
        let calls = app.take();
        assert!(!calls.iter().any(|c| c == "hipGetLastError"), "{name}: rcclx reset the slot: {calls:?}");
        assert_ne!(app.last_error(), 0, "{name}: the application's pending error was erased");
    }
    println!("recording HIP: an error pending before rcclx's calls is still reported after them");
    app.last_error();

    // (c) rcclx's own calls run in relaxed capture mode (2), so none invalidates another
    // thread's capture in global mode, and the thread's mode (here global, 0) comes back after.
    app.take();
    let buf = rt.alloc(0, 4096, MemKind::Normal).expect("hipMalloc");
    let mapped = rt.open_ipc(1, &handle).expect("hipIpcOpenMemHandle");
    // SAFETY: the recording library does not read the image.
    let module = unsafe { rt.load_module(0, &image) }.expect("hipModuleLoadData");
    let stream = rt.create_stream(0).expect("hipStreamCreateWithFlags");
    let event = rt.create_event(0).expect("hipEventCreateWithFlags");
    // SAFETY: made above, used by nothing else.
    unsafe { rt.destroy_event(event).expect("hipEventDestroy") };
    // SAFETY: as above.
    unsafe { rt.destroy_stream(stream).expect("hipStreamDestroy") };
    drop((buf, mapped, module));
    let calls = app.take();
    let mode =
        |c: &String| c.strip_prefix("hipThreadExchangeStreamCaptureMode(").map(|m| m.trim_end_matches(')').to_string());
    for name in [
        "hipMalloc",
        "hipIpcOpenMemHandle",
        "hipModuleLoadData",
        "hipStreamCreateWithFlags",
        "hipEventCreateWithFlags",
        "hipEventDestroy",
        "hipStreamDestroy",
        "hipFree",
        "hipIpcCloseMemHandle",
    ] {
        let i = calls.iter().position(|c| c == name).unwrap_or_else(|| panic!("no {name}: {calls:?}"));
        let before = calls[..i].iter().rev().find_map(mode);
        let after = calls[i..].iter().find_map(mode);
        assert_eq!(before.as_deref(), Some("2"), "{name} not in relaxed capture mode: {calls:?}");
        assert_eq!(after.as_deref(), Some("0"), "the thread's mode not restored after {name}: {calls:?}");
    }
    println!("recording HIP: rcclx's own calls run in relaxed capture mode, the thread's mode restored");
    println!("recording HIP: all checks passed");
}

#[test]
fn streams_are_ordered_apart_from_captures() {
    run_child("order_in_a_process_whose_hip_runtime_records");
}

/// The child of `streams_are_ordered_apart_from_captures` (audit N2): a communicator's eager
/// operations wait for the previous eager one across a captured one; captured ones wait only
/// within their own capture; no wait crosses a capture boundary (which the recording runtime
/// fails, as CUDA and HIP do).
#[test]
fn order_in_a_process_whose_hip_runtime_records() {
    if std::env::var_os("RCCLX_TEST_RECORDING_HIP").is_none() {
        return;
    }
    let app = App::open(&std::env::var("RCCLX_HIP_LIB").unwrap());
    // SAFETY: the recording runtime takes any value as a stream and only compares it.
    let stream = |v: usize| unsafe { gpu::Stream::from_raw(v as *mut c_void) };
    let (a, b, c, x, y) = (stream(11), stream(12), stream(13), stream(21), stream(22));
    let order = rcclx::comm::Order::default();
    let op = |s: gpu::Stream| -> Result<bool, String> {
        let captured = order.before(0, s).map_err(|e| e.to_string())?;
        order.after(0, true).map_err(|e| e.to_string())?;
        Ok(captured)
    };
    // The event of the last record of stream `s` before the end, and whether `s2` waits for it.
    let recorded_on = |calls: &[String], s: usize| -> Option<String> {
        let prefix = "hipEventRecord(";
        calls.iter().rev().find_map(|c| {
            let (e, st) = c.strip_prefix(prefix)?.trim_end_matches(')').split_once(',')?;
            (st == format!("s{s}")).then(|| e.to_string())
        })
    };
    let waits =
        |calls: &[String], s: usize, e: &str| calls.iter().any(|c| *c == format!("hipStreamWaitEvent(s{s},{e})"));
    app.take();

    // (a) Eager on A, captured on B, eager on C: C waits for the event recorded after A's.
    assert_eq!(op(a), Ok(false));
    app.capture(b, 7);
    assert_eq!(op(b), Ok(true), "a captured operation after an eager one");
    let after_a = app.take();
    let e = recorded_on(&after_a, 11).unwrap_or_else(|| panic!("no event recorded after A's operation: {after_a:?}"));
    assert!(!waits(&after_a, 12, &e), "the capture on B waits for eager work: {after_a:?}");
    assert_eq!(op(c), Ok(false), "an eager operation after a captured one");
    let calls = app.take();
    assert!(waits(&calls, 13, &e), "C does not wait for A's operation: {calls:?}");
    let after_c = recorded_on(&calls, 13).unwrap_or_else(|| panic!("no event recorded after C's operation: {calls:?}"));
    println!("recording HIP: eager A, captured B, eager C: C waits for A");

    // (b) A capture on X, ended; then one on Y: no wait across the two captures.
    app.capture(b, 0);
    app.capture(x, 8);
    assert_eq!(op(x), Ok(true));
    app.capture(x, 0);
    app.capture(y, 9);
    assert_eq!(op(y), Ok(true), "a capture on Y after one on X (ended)");
    println!("recording HIP: captures on X then Y: no dependency across them");

    // (c) One capture over two streams: Y waits for X's operation inside it.
    app.capture(x, 10);
    app.capture(y, 10);
    app.take();
    assert_eq!(op(x), Ok(true));
    assert_eq!(op(y), Ok(true));
    let calls = app.take();
    let e =
        recorded_on(&calls, 21).unwrap_or_else(|| panic!("nothing recorded after X's captured operation: {calls:?}"));
    assert!(waits(&calls, 22, &e), "Y does not wait for X inside their capture: {calls:?}");
    app.capture(x, 0);
    app.capture(y, 0);
    println!("recording HIP: one capture over X and Y: Y waits for X inside it");

    // (d) Eager again on A, after the captures: it waits for C's operation, the last eager one.
    assert_eq!(op(a), Ok(false));
    let calls = app.take();
    assert!(waits(&calls, 11, &after_c), "A does not wait for C's operation: {calls:?}");
    println!("recording HIP: eager work after captures waits for the last eager operation");

    // (e) An operation deferred to the end of a stock group gets its event there (`after` again,
    // launched); the next operation on another stream waits for it.
    order.before(0, c).unwrap();
    order.after(0, false).unwrap();
    let calls = app.take();
    assert!(recorded_on(&calls, 13).is_none(), "an event recorded before the group's end: {calls:?}");
    order.after(0, true).unwrap();
    let calls = app.take();
    let e = recorded_on(&calls, 13).unwrap_or_else(|| panic!("nothing recorded at the group's end: {calls:?}"));
    assert_eq!(op(a), Ok(false));
    let calls = app.take();
    assert!(waits(&calls, 11, &e), "A does not wait for the group's operation on C: {calls:?}");
    println!("recording HIP: an operation deferred to a group's end is marked there");
    println!("recording HIP: all checks passed");
}

#[test]
fn a_setup_exchange_that_fails_frees_nothing() {
    // The stock library is loaded (its `ncclAllGather` is looked up) but never called: every
    // exchange below fails before it.
    let Some(nccl) = common::nccl_2_28() else { return };
    run_child_with("exchange_in_a_process_whose_hip_runtime_records", &[("RCCLX_UPSTREAM_LIB", nccl.lib.as_os_str())]);
}

/// The child of `a_setup_exchange_that_fails_frees_nothing` (audit N7): a setup exchange whose
/// second buffer cannot be allocated keeps the first (a free waits for the whole device, under
/// the lock every destroy and abort takes), and one whose copy fails gives its slot back to the
/// pool, where the next exchange finds it.
#[test]
fn exchange_in_a_process_whose_hip_runtime_records() {
    if std::env::var_os("RCCLX_TEST_RECORDING_HIP").is_none() {
        return;
    }
    use rcclx::clique::{Member, StockTransport, Transport};
    let app = App::open(&std::env::var("RCCLX_HIP_LIB").unwrap());
    let member = Member { comm: 0x7300_0000 as _, rank: 0, nranks: 2, device: 0, max_ctas: 0 };
    let exchange = || StockTransport::new(&[member]).start(vec![vec![7u8; 64]]);
    let count = |calls: &[String], name: &str| calls.iter().filter(|c| *c == name).count();
    app.take();
    app.fail_nth(c"hipMalloc", 2, HIP_ERROR_OUT_OF_MEMORY);
    assert!(exchange().is_err(), "an exchange whose second buffer failed went on");
    let calls = app.take();
    assert_eq!(count(&calls, "hipMalloc"), 2, "{calls:?}");
    assert_eq!(count(&calls, "hipFree"), 0, "a failed exchange freed memory: {calls:?}");
    println!("recording HIP: an exchange whose second allocation failed freed nothing");

    app.fail(Some((c"hipMemcpyAsync", HIP_ERROR_INVALID_VALUE)));
    assert!(exchange().is_err(), "an exchange whose copy failed went on");
    let calls = app.take();
    assert_eq!((count(&calls, "hipMalloc"), count(&calls, "hipFree")), (2, 0), "{calls:?}");
    assert!(exchange().is_err());
    let calls = app.take();
    app.fail(None);
    assert_eq!(count(&calls, "hipMalloc"), 0, "the slot of the failed copy was not pooled: {calls:?}");
    assert_eq!(count(&calls, "hipFree"), 0, "{calls:?}");
    println!("recording HIP: an exchange whose copy failed pooled its slot; the next one reused it");
    app.last_error();
    println!("recording HIP: all checks passed");
}
