//! GPU self-test: checks on real hardware what rcclx's algorithms rely on, through `rcclx::gpu`
//! and the kernels of `hip_kernels/selftest.cuh` (compiled by `build.rs` into this program only).
//!
//! ```text
//! selftest                 run every check; prints PASS/FAIL/SKIP <check> <detail> per check
//! selftest child-ipc ...   (internal) the child process of the `ipc` check
//! selftest child-pingpong  (internal) the child process of the `handshake-ipc` check
//! ```
//!
//! Exit status: 0 all checks passed or were skipped, 1 a check failed, 2 no GPU runtime/device,
//! 3 a stall. Checks: `module` (code object choice, load, fill kernel verified on the host),
//! `ipc` (handles both ways between two processes), `peer` (peer access, copy and kernel writes
//! across GPUs), `handshake-same-process` and `handshake-ipc` (flag ping-pong between two GPUs),
//! `timeout` (a bounded spin-wait reports to host-mapped memory). Checks needing two GPUs print
//! SKIP on one. Every host-side wait is bounded: streams by polling, child processes by line
//! timeouts; the watchdog catches a call that never returns.
//!
//! Parent and child talk over the child's stdin/stdout, one line per message:
//! `HANDLE <128 hex digits>`, `RESULT ...`, `ERROR <text>` from the child; `DONE`, `GO`, `EXIT`
//! from the parent.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use std::ffi::c_void;
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use rcclx::gpu::{self, DevicePtr, Function, IpcHandle, MemKind, Runtime, Stream};
use rcclx_gpu_tests::children::{Children, Lines, say};
use rcclx_gpu_tests::{self as harness, EXIT_FAILED, EXIT_NO_GPU, Fail, Outcome, Tally, hex, watchdog};

/// The self-test code objects built by `build.rs` (`CODE_OBJECTS`).
mod embedded {
    include!(concat!(env!("OUT_DIR"), "/selftest_kernels.rs"));
}

/// Words written by the `module` check's fill kernel (odd, not a multiple of the block size).
const FILL_N: u32 = 1_000_003;
/// Words exchanged in the `ipc` and `peer` checks.
const XFER_N: u32 = 1 << 20;
/// Ping-pong iterations and data words per slot.
const PP_ITERS: u32 = 100_000;
const PP_N: u32 = 4096;
/// Bound on each wait inside the ping-pong kernel.
const PP_KERNEL_TIMEOUT_NS: u64 = 10_000_000_000;
/// Word offset of the data slots in a ping-pong buffer (`RCCLX_SELFTEST_DATA_OFFSET`).
const PP_DATA_OFFSET: u32 = 16;
/// Bound on each host-side stream wait and on each message from the other process.
const HOST_WAIT: Duration = Duration::from_secs(60);
/// The `timeout` check's kernel timeout, and the limit on how long the kernel may take in all.
const WAIT_KERNEL_TIMEOUT: Duration = Duration::from_millis(200);
const WAIT_KERNEL_LIMIT: Duration = Duration::from_secs(2);
/// No progress for this long ends the process (several HOST_WAITs of one failing check fit).
const STALL_LIMIT: Duration = Duration::from_secs(300);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        None => run_all(),
        Some("child-ipc") => child_main(|| child_ipc(&args[1..])),
        Some("child-pingpong") => child_main(|| child_pingpong(&args[1..])),
        Some(other) => {
            eprintln!("usage: selftest (no arguments); unknown argument {other:?}");
            ExitCode::from(EXIT_NO_GPU)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parent: the checks
// ---------------------------------------------------------------------------------------------

type CheckFn = fn(&'static Runtime) -> Result<Outcome, Fail>;

fn run_all() -> ExitCode {
    let rt = match harness::gpu::runtime_or_exit("selftest", 1) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    watchdog::start(STALL_LIMIT);
    println!(
        "INFO runtime {} ({}, driver {}), {} device(s), host id {:016x}",
        rt.vendor().name(),
        rt.library(),
        rt.driver_version(),
        rt.device_count(),
        rcclx::clique::host::host_id()
    );
    for d in 0..rt.device_count() {
        match rt.device_info(d) {
            Ok(i) => println!(
                "INFO device {d}: {} arch {} cc {}.{} {} SMs pci {}",
                i.name, i.arch, i.compute_capability.0, i.compute_capability.1, i.multiprocessors, i.pci_bus_id
            ),
            Err(e) => println!("INFO device {d}: {e}"),
        }
    }

    let checks: [(&str, CheckFn); 6] = [
        ("module", check_module),
        ("ipc", check_ipc),
        ("peer", check_peer),
        ("handshake-same-process", check_handshake_same_process),
        ("handshake-ipc", check_handshake_ipc),
        ("timeout", check_timeout),
    ];
    let mut tally = Tally::timed();
    for (name, check) in checks {
        watchdog::progress(name);
        tally.check(name, || check(rt));
    }
    // The summary line of earlier logs, then the suite's.
    println!(
        "SUMMARY {} of {} checks failed, {} release failure(s)",
        tally.failed(),
        checks.len(),
        gpu::release_failures()
    );
    tally.finish()
}

/// Check 1: The device's code object: which one, that it loads, and a fill kernel over an odd size.
fn check_module(rt: &'static Runtime) -> Result<Outcome, Fail> {
    let info = rt.device_info(0)?;
    let embedded: Vec<&str> = embedded::CODE_OBJECTS.iter().map(|c| c.target).collect();
    let chosen = code_object(&info.arch).map_or("none", |c| c.target);
    let what = format!("device 0 arch {} -> code object {chosen} (embedded: {})", info.arch, embedded.join(","));
    let k = Kernels::load(rt, 0).map_err(|Fail(e)| Fail(format!("{what}: {e}")))?;
    let stream = OwnedStream::new(rt, 0)?;
    let buf = rt.alloc(0, FILL_N as usize * 4, MemKind::Normal)?;
    let seed = 0x1234_5678;
    {
        let _g = rt.device_guard(0)?;
        // SAFETY: `buf` holds FILL_N words on device 0.
        unsafe { launch_fill(rt, &k, buf.ptr(), FILL_N, seed, stream.0) }?;
    }
    wait(rt, stream.0, "fill kernel")?;
    let mut words = vec![0u32; FILL_N as usize];
    buf.copy_to_host(&mut words)?;
    verify_fill(&words, seed).map_err(|e| Fail(format!("{what}: {e}")))?;
    Ok(Outcome::Pass(format!("{what}; fill of {FILL_N} words verified")))
}

/// Check 2: IPC both ways between two processes: the child maps the parent's buffer (on GPU 1,
/// or GPU 0 with one GPU), checks it and writes it; the parent maps the child's buffer and
/// checks it.
fn check_ipc(rt: &'static Runtime) -> Result<Outcome, Fail> {
    let child_dev = if rt.device_count() >= 2 { 1 } else { 0 };
    let (s_parent, s_child_write, s_child_own) = (11u32, 22u32, 33u32);
    let k = Kernels::load(rt, 0)?;
    let stream = OwnedStream::new(rt, 0)?;
    let buf = rt.alloc(0, XFER_N as usize * 4, MemKind::Normal)?;
    {
        let _g = rt.device_guard(0)?;
        // SAFETY: `buf` holds XFER_N words on device 0.
        unsafe { launch_fill(rt, &k, buf.ptr(), XFER_N, s_parent, stream.0) }?;
    }
    wait(rt, stream.0, "parent fill")?;
    let handle = buf.ipc_handle()?;

    let mut child = Children::spawn([[
        "child-ipc".to_string(),
        child_dev.to_string(),
        hex::encode(&handle.0),
        XFER_N.to_string(),
        s_parent.to_string(),
        s_child_write.to_string(),
        s_child_own.to_string(),
    ]])?;
    // The child answers after it checked our data, wrote its own pattern through the mapping
    // and synchronized, and filled a buffer of its own.
    let child_handle = ipc_handle(&child.lines().expect("HANDLE", "child", HOST_WAIT)?)?;
    let mut words = vec![0u32; XFER_N as usize];
    buf.copy_to_host(&mut words)?;
    verify_fill(&words, s_child_write).map_err(|e| Fail(format!("parent does not see the child's write: {e}")))?;
    {
        let mapping = rt.open_ipc(0, &child_handle)?;
        // SAFETY: the child's buffer holds XFER_N words and lives until we send DONE.
        let words = unsafe { read_words(rt, 0, mapping.ptr(), XFER_N) }?;
        verify_fill(&words, s_child_own).map_err(|e| Fail(format!("parent read of the child's buffer: {e}")))?;
    }
    child.send(0, "DONE")?;
    child.finish(HOST_WAIT)?;
    Ok(Outcome::Pass(format!(
        "parent (device 0) <-> child (device {child_dev}): child read and wrote the parent's \
         buffer, parent read the child's buffer ({XFER_N} words each)"
    )))
}

/// Check 3: Peer access in one process: GPU 1 copies from GPU 0's memory, and a kernel on
/// GPU 1 writes it.
fn check_peer(rt: &'static Runtime) -> Result<Outcome, Fail> {
    if rt.device_count() < 2 {
        return Ok(Outcome::Skip("needs 2 GPUs".into()));
    }
    enable_peer_both_ways(rt)?;
    // Enabling again must be harmless ("already enabled" is tolerated).
    enable_peer_both_ways(rt)?;
    let (k0, k1) = (Kernels::load(rt, 0)?, Kernels::load(rt, 1)?);
    let (s0, s1) = (OwnedStream::new(rt, 0)?, OwnedStream::new(rt, 1)?);
    let bytes = XFER_N as usize * 4;
    let (buf0, buf1) = (rt.alloc(0, bytes, MemKind::Normal)?, rt.alloc(1, bytes, MemKind::Normal)?);
    let (seed_a, seed_b) = (0xA5A5u32, 0x5A5Au32);
    {
        let _g = rt.device_guard(0)?;
        // SAFETY: `buf0` holds XFER_N words on device 0.
        unsafe { launch_fill(rt, &k0, buf0.ptr(), XFER_N, seed_a, s0.0) }?;
    }
    wait(rt, s0.0, "fill on GPU 0")?;
    {
        let _g = rt.device_guard(1)?;
        // SAFETY: both buffers hold `bytes` bytes; peer access 1 -> 0 is enabled.
        unsafe { rt.memcpy_async(buf1.ptr(), buf0.ptr(), bytes, s1.0) }?;
    }
    wait(rt, s1.0, "peer copy GPU 0 -> GPU 1")?;
    let mut words = vec![0u32; XFER_N as usize];
    buf1.copy_to_host(&mut words)?;
    verify_fill(&words, seed_a).map_err(|e| Fail(format!("GPU 1's copy of GPU 0's buffer: {e}")))?;
    {
        let _g = rt.device_guard(1)?;
        // SAFETY: `buf0` holds XFER_N words and device 1 has peer access to it.
        unsafe { launch_fill(rt, &k1, buf0.ptr(), XFER_N, seed_b, s1.0) }?;
    }
    wait(rt, s1.0, "fill on GPU 1 into GPU 0's memory")?;
    buf0.copy_to_host(&mut words)?;
    verify_fill(&words, seed_b).map_err(|e| Fail(format!("GPU 1's kernel writes into GPU 0's buffer: {e}")))?;
    Ok(Outcome::Pass(format!(
        "peer access 0<->1 enabled (twice); GPU 1 copied and a GPU 1 kernel wrote GPU 0's \
         memory ({XFER_N} words)"
    )))
}

/// Check 4: Ping-pong between GPU 0 and GPU 1 from one process.
fn check_handshake_same_process(rt: &'static Runtime) -> Result<Outcome, Fail> {
    if rt.device_count() < 2 {
        return Ok(Outcome::Skip("needs 2 GPUs".into()));
    }
    enable_peer_both_ways(rt)?;
    let (k0, k1) = (Kernels::load(rt, 0)?, Kernels::load(rt, 1)?);
    let (s0, s1) = (OwnedStream::new(rt, 0)?, OwnedStream::new(rt, 1)?);
    let bytes = pingpong_bytes(PP_N);
    let (buf0, buf1) = (rt.alloc(0, bytes, MemKind::Uncached)?, rt.alloc(1, bytes, MemKind::Uncached)?);
    let (res0, res1) = (rt.alloc(0, 8, MemKind::Normal)?, rt.alloc(1, 8, MemKind::Normal)?);
    for b in [&buf0, &buf1, &res0, &res1] {
        b.zero()?;
    }
    let started = Instant::now();
    {
        let _g = rt.device_guard(0)?;
        // SAFETY: both buffers are ping-pong buffers of PP_N, zeroed; peer access is enabled.
        unsafe { launch_pingpong(rt, &k0, buf0.ptr(), buf1.ptr(), res0.ptr(), s0.0) }?;
    }
    {
        let _g = rt.device_guard(1)?;
        // SAFETY: as above, the roles swapped.
        unsafe { launch_pingpong(rt, &k1, buf1.ptr(), buf0.ptr(), res1.ptr(), s1.0) }?;
    }
    let wait0 = wait(rt, s0.0, "ping-pong on GPU 0");
    let wait1 = wait(rt, s1.0, "ping-pong on GPU 1");
    let elapsed = started.elapsed();
    wait0?;
    wait1?;
    let (mut r0, mut r1) = ([0u32; 2], [0u32; 2]);
    res0.copy_to_host(&mut r0)?;
    res1.copy_to_host(&mut r1)?;
    judge_pingpong(&[("GPU 0", r0), ("GPU 1", r1)], elapsed)
}

/// Check 5: Ping-pong between GPU 0 (this process) and GPU 1 (a child process) through IPC
/// mappings.
fn check_handshake_ipc(rt: &'static Runtime) -> Result<Outcome, Fail> {
    if rt.device_count() < 2 {
        return Ok(Outcome::Skip("needs 2 GPUs".into()));
    }
    let k = Kernels::load(rt, 0)?;
    let stream = OwnedStream::new(rt, 0)?;
    let buf = rt.alloc(0, pingpong_bytes(PP_N), MemKind::Uncached)?;
    let res = rt.alloc(0, 8, MemKind::Normal)?;
    buf.zero()?;
    res.zero()?;
    let mut child = Children::spawn([[
        "child-pingpong".to_string(),
        "1".to_string(),
        hex::encode(&buf.ipc_handle()?.0),
        PP_ITERS.to_string(),
        PP_N.to_string(),
    ]])?;
    // The child has zeroed its buffer and mapped ours before it sends its handle.
    let peer = rt.open_ipc(0, &ipc_handle(&child.lines().expect("HANDLE", "child", HOST_WAIT)?)?)?;
    child.send(0, "GO")?;
    let started = Instant::now();
    {
        let _g = rt.device_guard(0)?;
        // SAFETY: `buf` and the child's buffer are zeroed ping-pong buffers of PP_N; the child's
        // lives until we send EXIT.
        unsafe { launch_pingpong(rt, &k, buf.ptr(), peer.ptr(), res.ptr(), stream.0) }?;
    }
    wait(rt, stream.0, "ping-pong on GPU 0")?;
    let elapsed = started.elapsed();
    let mut r0 = [0u32; 2];
    res.copy_to_host(&mut r0)?;
    let line = child.lines().expect("RESULT", "child", HOST_WAIT)?;
    let fields: Vec<u32> = line.split_whitespace().filter_map(|f| f.parse().ok()).collect();
    let [mismatches, timed_out, child_us] = fields[..] else {
        return Err(Fail(format!("child sent a malformed result {line:?}")));
    };
    drop(peer);
    child.send(0, "EXIT")?;
    child.finish(HOST_WAIT)?;
    let outcome = judge_pingpong(&[("parent GPU 0", r0), ("child GPU 1", [mismatches, timed_out])], elapsed)?;
    Ok(match outcome {
        Outcome::Pass(d) => Outcome::Pass(format!("{d}; child kernel {:.1} ms", f64::from(child_us) / 1e3)),
        skip => skip,
    })
}

/// Check 6: A spin-wait nobody satisfies ends on its own and reports to host-mapped memory.
fn check_timeout(rt: &'static Runtime) -> Result<Outcome, Fail> {
    let k = Kernels::load(rt, 0)?;
    let stream = OwnedStream::new(rt, 0)?;
    let error_word = rt.alloc_host_mapped(0, 4096)?;
    let flag = rt.alloc(0, 4, MemKind::Normal)?;
    flag.zero()?;
    let (mut flag_ptr, mut target, mut timeout_ns, mut err_ptr) =
        (flag.ptr().0, 1u32, WAIT_KERNEL_TIMEOUT.as_nanos() as u64, error_word.device_ptr().0);
    let args = [arg(&mut flag_ptr), arg(&mut target), arg(&mut timeout_ns), arg(&mut err_ptr)];
    let started = Instant::now();
    {
        let _g = rt.device_guard(0)?;
        // SAFETY: the arguments match rcclx_selftest_wait_timeout(const uint32_t* flag,
        // uint32_t target, uint64_t timeout_ns, uint32_t* error_out): a device word and a
        // host-mapped word, both alive until the stream is done (or the process exits).
        unsafe { rt.launch(k.wait_timeout, (1, 1, 1), (32, 1, 1), 0, stream.0, &args) }?;
    }
    let finished = rt.wait_stream(stream.0, Duration::from_secs(10))?;
    let elapsed = started.elapsed();
    let word = error_word.words()[0].load(Ordering::Acquire);
    let ms = elapsed.as_secs_f64() * 1e3;
    if !finished {
        return Err(Fail(format!("kernel still running after {ms:.0} ms (error word {word})")));
    }
    if word != 1 {
        return Err(Fail(format!("kernel ended after {ms:.1} ms but the error word is {word}, not 1")));
    }
    if elapsed > WAIT_KERNEL_LIMIT || elapsed < WAIT_KERNEL_TIMEOUT * 3 / 4 {
        return Err(Fail(format!(
            "error word is 1 but the kernel took {ms:.1} ms for a {} ms timeout",
            WAIT_KERNEL_TIMEOUT.as_millis()
        )));
    }
    Ok(Outcome::Pass(format!(
        "error word = 1 in host-mapped memory; kernel ended after {ms:.1} ms (timeout {} ms)",
        WAIT_KERNEL_TIMEOUT.as_millis()
    )))
}

// ---------------------------------------------------------------------------------------------
// Children
// ---------------------------------------------------------------------------------------------

/// Runs a child role; its failure goes to the parent as `ERROR <text>`.
fn child_main(role: impl FnOnce() -> Result<(), Fail>) -> ExitCode {
    match role() {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail(e)) => {
            say(&format!("ERROR {e}"));
            ExitCode::from(EXIT_FAILED)
        }
    }
}

/// `child-ipc <device> <handle> <n> <seed expected> <seed to write> <seed of own buffer>`
fn child_ipc(args: &[String]) -> Result<(), Fail> {
    let rt = gpu::runtime()?;
    let device: i32 = parse_arg(args, 0, "device")?;
    let handle = ipc_handle(args.get(1).map_or("", String::as_str))?;
    let n: u32 = parse_arg(args, 2, "n")?;
    let (expect_seed, write_seed, own_seed): (u32, u32, u32) =
        (parse_arg(args, 3, "seed")?, parse_arg(args, 4, "seed")?, parse_arg(args, 5, "seed")?);
    let parent = Lines::stdin();
    let k = Kernels::load(rt, device)?;
    let stream = OwnedStream::new(rt, device)?;
    let mapping = rt.open_ipc(device, &handle)?;
    // SAFETY: the parent's buffer holds n words and lives until we exit.
    let words = unsafe { read_words(rt, device, mapping.ptr(), n) }?;
    verify_fill(&words, expect_seed).map_err(|e| Fail(format!("child read of the parent's buffer: {e}")))?;
    let own = rt.alloc(device, n as usize * 4, MemKind::Normal)?;
    {
        let _g = rt.device_guard(device)?;
        // SAFETY: the mapping and `own` each hold n words, reachable from `device`.
        unsafe { launch_fill(rt, &k, mapping.ptr(), n, write_seed, stream.0) }?;
        // SAFETY: as above.
        unsafe { launch_fill(rt, &k, own.ptr(), n, own_seed, stream.0) }?;
    }
    wait(rt, stream.0, "child fills")?;
    say(&format!("HANDLE {}", hex::encode(&own.ipc_handle()?.0)));
    parent.expect("DONE", "parent", HOST_WAIT)?;
    Ok(())
}

/// `child-pingpong <device> <parent's handle> <iters> <n>`: the second side of `handshake-ipc`.
fn child_pingpong(args: &[String]) -> Result<(), Fail> {
    let rt = gpu::runtime()?;
    let device: i32 = parse_arg(args, 0, "device")?;
    let handle = ipc_handle(args.get(1).map_or("", String::as_str))?;
    let (iters, n): (u32, u32) = (parse_arg(args, 2, "iters")?, parse_arg(args, 3, "n")?);
    if (iters, n) != (PP_ITERS, PP_N) {
        return Err(Fail(format!("parent and child disagree on iters/n: {iters}/{n}")));
    }
    let parent = Lines::stdin();
    let k = Kernels::load(rt, device)?;
    let stream = OwnedStream::new(rt, device)?;
    let buf = rt.alloc(device, pingpong_bytes(n), MemKind::Uncached)?;
    let res = rt.alloc(device, 8, MemKind::Normal)?;
    buf.zero()?;
    res.zero()?;
    let peer = rt.open_ipc(device, &handle)?;
    say(&format!("HANDLE {}", hex::encode(&buf.ipc_handle()?.0)));
    parent.expect("GO", "parent", HOST_WAIT)?;
    let started = Instant::now();
    {
        let _g = rt.device_guard(device)?;
        // SAFETY: `buf` and the parent's buffer are zeroed ping-pong buffers of PP_N; the
        // parent's lives until it has our RESULT.
        unsafe { launch_pingpong(rt, &k, buf.ptr(), peer.ptr(), res.ptr(), stream.0) }?;
    }
    wait(rt, stream.0, "child ping-pong")?;
    let us = started.elapsed().as_micros();
    let mut r = [0u32; 2];
    res.copy_to_host(&mut r)?;
    say(&format!("RESULT {} {} {us}", r[0], r[1]));
    parent.expect("EXIT", "parent", HOST_WAIT)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// The embedded code object for a device's `arch`: the one of the target rcclx itself picks for
/// it (`rcclx::kernels::for_arch`; the library and this program are built for the same targets).
fn code_object(arch: &str) -> Option<&'static embedded::CodeObject> {
    let target = rcclx::kernels::for_arch(arch)?.target;
    embedded::CODE_OBJECTS.iter().find(|c| c.target == target)
}

/// The self-test kernels on one device.
#[derive(Clone, Copy)]
struct Kernels {
    fill: Function,
    pingpong: Function,
    wait_timeout: Function,
}

impl Kernels {
    /// The kernels on `device`, its code object loaded on first use (a module stays loaded for
    /// the life of the process, so every check shares one per device).
    fn load(rt: &Runtime, device: i32) -> Result<Kernels, Fail> {
        static LOADED: Mutex<Vec<(i32, Kernels)>> = Mutex::new(Vec::new());
        let mut loaded = LOADED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(&(_, kernels)) = loaded.iter().find(|(d, _)| *d == device) {
            return Ok(kernels);
        }
        let arch = rt.device_info(device)?.arch;
        let Some(code) = code_object(&arch) else {
            return Err(Fail(format!("no self-test code object for arch {arch} on device {device}")));
        };
        // SAFETY: build.rs embeds complete code objects made by the kernel compiler for
        // `code.target`, the target rcclx picks for this device's arch.
        let module = unsafe { rt.load_module(device, code.image) }?;
        let kernels = Kernels {
            fill: rt.function(module, "rcclx_selftest_fill")?,
            pingpong: rt.function(module, "rcclx_selftest_pingpong")?,
            wait_timeout: rt.function(module, "rcclx_selftest_wait_timeout")?,
        };
        loaded.push((device, kernels));
        Ok(kernels)
    }
}

/// A stream of ours, destroyed when dropped.
struct OwnedStream(Stream, &'static Runtime);

impl OwnedStream {
    fn new(rt: &'static Runtime, device: i32) -> Result<OwnedStream, Fail> {
        Ok(OwnedStream(rt.create_stream(device)?, rt))
    }
}

impl Drop for OwnedStream {
    fn drop(&mut self) {
        // SAFETY: the stream was created by `new` and this owner is its only user.
        let _ = unsafe { self.1.destroy_stream(self.0) };
    }
}

/// A kernel argument slot: a pointer to the value.
fn arg<T>(value: &mut T) -> *mut c_void {
    (value as *mut T).cast()
}

/// Launches `rcclx_selftest_fill(out, n, seed)`, one thread per word.
///
/// # Safety
/// `out` holds `n` words writable from the stream's device.
unsafe fn launch_fill(
    rt: &Runtime,
    k: &Kernels,
    out: DevicePtr,
    n: u32,
    seed: u32,
    stream: Stream,
) -> Result<(), Fail> {
    let (mut out, mut n_arg, mut seed) = (out.0, n, seed);
    let args = [arg(&mut out), arg(&mut n_arg), arg(&mut seed)];
    // SAFETY: the arguments match rcclx_selftest_fill(uint32_t* out, uint32_t n, uint32_t seed);
    // `out` is valid per the caller.
    unsafe { rt.launch(k.fill, (n.div_ceil(256).max(1), 1, 1), (256, 1, 1), 0, stream, &args) }?;
    Ok(())
}

/// Launches one side of `rcclx_selftest_pingpong` with PP_ITERS iterations of PP_N words.
///
/// # Safety
/// `mine` and `peer` are zeroed ping-pong buffers of `pingpong_bytes(PP_N)` reachable from the
/// stream's device, `result` two zeroed words; all stay alive until the kernel ends.
unsafe fn launch_pingpong(
    rt: &Runtime,
    k: &Kernels,
    mine: DevicePtr,
    peer: DevicePtr,
    result: DevicePtr,
    stream: Stream,
) -> Result<(), Fail> {
    let (mut mine, mut peer, mut iters, mut n, mut timeout, mut result) =
        (mine.0, peer.0, PP_ITERS, PP_N, PP_KERNEL_TIMEOUT_NS, result.0);
    let args = [arg(&mut mine), arg(&mut peer), arg(&mut iters), arg(&mut n), arg(&mut timeout), arg(&mut result)];
    // SAFETY: the arguments match rcclx_selftest_pingpong(uint32_t* my_buf, uint32_t* peer_buf,
    // uint32_t iters, uint32_t n, uint64_t timeout_ns, uint32_t* result); buffers per the caller.
    // One block: the kernel's protocol is per block.
    unsafe { rt.launch(k.pingpong, (1, 1, 1), (256, 1, 1), 0, stream, &args) }?;
    Ok(())
}

fn pingpong_bytes(n: u32) -> usize {
    (PP_DATA_OFFSET as usize + 2 * n as usize) * 4
}

/// Both ranks: no mismatch, no timeout; the detail reports the time per round trip.
fn judge_pingpong(results: &[(&str, [u32; 2])], elapsed: Duration) -> Result<Outcome, Fail> {
    let bad: Vec<String> = results
        .iter()
        .filter(|(_, r)| *r != [0, 0])
        .map(|(who, r)| format!("{who}: {} mismatching words, timed out: {}", r[0], r[1] != 0))
        .collect();
    if !bad.is_empty() {
        return Err(Fail(bad.join("; ")));
    }
    let us = elapsed.as_secs_f64() * 1e6 / f64::from(PP_ITERS);
    Ok(Outcome::Pass(format!(
        "{PP_ITERS} round trips of {PP_N} words, 0 mismatches, no timeout: {us:.2} us per \
         round trip ({:.1} ms in all, launch included)",
        elapsed.as_secs_f64() * 1e3
    )))
}

fn enable_peer_both_ways(rt: &Runtime) -> Result<(), Fail> {
    for (a, b) in [(0, 1), (1, 0)] {
        if !rt.can_access_peer(a, b)? {
            return Err(Fail(format!("device {a} cannot access device {b}'s memory")));
        }
        rt.enable_peer_access(a, b)?;
    }
    Ok(())
}

/// Waits for `stream` with the host-side bound.
fn wait(rt: &Runtime, stream: Stream, what: &str) -> Result<(), Fail> {
    harness::gpu::wait_stream(rt, stream, HOST_WAIT, what)
}

/// Copies `n` words from `ptr` (on or mapped into `device`) to the host.
///
/// # Safety
/// `ptr` holds `n` readable words.
unsafe fn read_words(rt: &Runtime, device: i32, ptr: DevicePtr, n: u32) -> Result<Vec<u32>, Fail> {
    let _g = rt.device_guard(device)?;
    let mut words = vec![0u32; n as usize];
    // SAFETY: per the caller.
    unsafe { rt.memcpy_dtoh(&mut words, ptr) }?;
    Ok(words)
}

/// `out[i] == seed * 2654435761 + i` for every word, or a description of the first mismatches.
fn verify_fill(words: &[u32], seed: u32) -> Result<(), String> {
    let expected = |i: usize| seed.wrapping_mul(2_654_435_761).wrapping_add(i as u32);
    let mut bad = words.iter().enumerate().filter(|&(i, &w)| w != expected(i));
    let Some((first, &got)) = bad.next() else {
        return Ok(());
    };
    let count = 1 + bad.count();
    Err(format!(
        "{count} of {} words wrong; first at {first}: got {got:#010x}, expected {:#010x}",
        words.len(),
        expected(first)
    ))
}

/// An IPC handle from its hex form in a message.
fn ipc_handle(text: &str) -> Result<IpcHandle, Fail> {
    let bytes = hex::decode(text, 64).map_err(|e| Fail(format!("IPC handle: {e}")))?;
    Ok(IpcHandle(bytes.try_into().expect("decode returns 64 bytes")))
}

fn parse_arg<T: FromStr>(args: &[String], index: usize, what: &str) -> Result<T, Fail> {
    args.get(index)
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| Fail(format!("argument {index} ({what}) missing or malformed: {args:?}")))
}
