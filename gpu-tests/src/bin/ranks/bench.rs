//! The `bench` suite: the one-GPU timing proxy of issue 39. Every rank is a stream of one
//! process on one GPU, so the link's bandwidth and latency do not transfer to NVLink / xGMI;
//! instruction counts, HBM passes, serialized phases and the cost of synchronization against
//! the same traffic do. Parts (`--parts`, comma-separated; default `families,micro`):
//!
//! * `families`: every DDA kernel family of the library (each collective x each algorithm of
//!   `rcclx::intercept::Kernel` with a family in the kernel table, low precision aside), at every
//!   size of the list, forced: the call is planned by `rcclx::dda::plan` with that algorithm
//!   and launched by `Clique::launch`, whatever the crossovers say (an LL family only up to the
//!   inbox's size). Per (family, size): back-to-back calls (`eager`) and replays of a captured
//!   graph of calls (`graph`), per-call time = the slowest rank's (end - start) / calls; then
//!   the family's traffic twin (`hip_kernels/bench.cu`: the same kernel without barriers or
//!   flag waits, launched with the same grid and arguments) in both modes, and
//!   `kernel_over_twin`. The real kernel's output is checked bit-exact against the CPU model
//!   after each mode (an `R` line per case, as every suite), so a broken kernel cannot report
//!   a time.
//! * `sweep`: AllReduce flat and two-shot, AllGather and AllToAll flat at 16 and 64 MiB, with
//!   this process's staging size (`RCCL_DDA_SENDBUF_BYTES`): run once per staging size, the
//!   slope of time against windows is the cost of a window (`bench/proxy_report.py`).
//! * `micro`: the flag round trip (two one-block kernels on two streams ping-pong a
//!   system-scope release/acquire, flags in device memory and in host-mapped memory) and the
//!   fence under load (a release store repeated by one lane while the other warps of the same
//!   block, or other blocks, stream 16-byte stores or loads; HBM, and host-mapped memory over
//!   PCIe as a stand-in for slow remote acknowledgements).
//!
//! Output: one `BENCH <csv row>` line per measurement, the first being the header
//! ([`COLUMNS`]); `scripts/gpu-tests.sh` (step `bench1`) gathers them into one CSV per run.
//! `RCCLX_BENCH_TAG` (if set) fills the `tag` column, for runs with other settings.
//!
//! Adding a family: a new `Kernel` with its kernel family is picked up by [`families`]; its twin
//! is one `RCCLX_KERNEL` line in `hip_kernels/bench.cu` and one entry of [`TWINS`].

use std::ffi::c_void;

use rcclx::clique::{Buffers, Launch, LaunchArgs};
use rcclx::gpu::{DevicePtr, Event, Function, GraphExec, MemKind};
use rcclx::intercept::{CallDesc, Coll, Kernel};
use rcclx_gpu_tests::children::say;
use rcclx_gpu_tests::reduce::{self, Op, Ty};
use rcclx_gpu_tests::{Fail, watchdog};

use crate::cases::{self, Case, Image};
use crate::device::{self, Ranks, report};
use crate::opts::Opts;

/// The proxy's code objects built by `build.rs` (`CODE_OBJECTS`).
mod objects {
    include!(concat!(env!("OUT_DIR"), "/bench_kernels.rs"));
}

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// The table's columns. `us_per_call`: the measurement in microseconds (for `fence` rows, one
/// release; for `flag` rows, one round trip); `extra`: `key=value` pairs separated by `;`.
pub const COLUMNS: &str = "part,family,coll,algo,bytes,nranks,staging_half,window,windows,blocks,threads,mode,\
                           us_per_call,calls,twin_us,kernel_over_twin,check,extra,tag";

/// The twin of each family (`coll.algo`) in `hip_kernels/bench.cu`, for the bench's types (f32
/// sum; bytes for data movement). A family without one gets empty twin columns.
const TWINS: &[(&str, &str)] = &[
    ("allreduce.ll", "rcclx_twin_allreduce_ll_f32_sum"),
    ("allreduce.flat", "rcclx_twin_allreduce_flat_f32_sum"),
    ("allreduce.tree", "rcclx_twin_allreduce_tree_f32_sum"),
    ("reducescatter.ll", "rcclx_twin_reducescatter_ll_f32_sum"),
    ("reducescatter.flat", "rcclx_twin_reducescatter_flat_f32_sum"),
    ("allgather.ll", "rcclx_twin_allgather_ll_bytes"),
    ("allgather.flat", "rcclx_twin_allgather_flat_bytes"),
    ("alltoall.ll", "rcclx_twin_alltoall_ll_bytes"),
    ("alltoall.flat", "rcclx_twin_alltoall_flat_bytes"),
    ("broadcast.ll", "rcclx_twin_broadcast_ll_bytes"),
    ("broadcast.flat", "rcclx_twin_broadcast_flat_bytes"),
    ("allreduce.stream", "rcclx_twin_allreduce_stream_f32_sum"),
    ("allreduce.stream_tree", "rcclx_twin_allreduce_stream_tree_f32_sum"),
    ("reducescatter.stream", "rcclx_twin_reducescatter_stream_f32_sum"),
    ("allgather.stream", "rcclx_twin_allgather_stream_bytes"),
    ("alltoall.stream", "rcclx_twin_alltoall_stream_bytes"),
    ("allreduce.ll128", "rcclx_twin_allreduce_ll128_f32_sum"),
    ("allgather.ll128", "rcclx_twin_allgather_ll128_bytes"),
];

/// Message sizes of the `families` part (bytes as `CallDesc::bytes` counts them: the whole
/// buffer); `quick`: fewer.
fn sizes(quick: bool) -> &'static [u64] {
    if quick { &[64 * KIB, MIB, 16 * MIB] } else { &[KIB, 64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB] }
}

/// Every DDA family the library has: (collective, algorithm) with a kernel family, low
/// precision aside (its own suite, `time-lowp`).
pub fn families() -> Vec<(Coll, Kernel)> {
    let mut v = Vec::new();
    for coll in Coll::ALL {
        for algo in Kernel::ALL {
            if !algo.is_low_precision()
                && rcclx::intercept::family(rcclx::intercept::FamilyKey::Coll(coll, algo)).is_some()
            {
                v.push((coll, algo));
            }
        }
    }
    v
}

/// The f32 (sum) call of `coll` whose buffer is `bytes` (the whole buffer), or none if a rank's
/// part would be empty.
fn case_for(coll: Coll, bytes: u64, n: usize) -> Option<Case> {
    let per = 4 * if coll.spec().shape == rcclx::collective::Shape::Whole { 1 } else { n as u64 };
    let count = (bytes / per) as usize;
    (count > 0).then_some(Case {
        coll,
        ty: Ty::F32,
        op: Op::Sum,
        count,
        inplace: false,
        shift: 0,
        root: 0,
        null_off_root: false,
    })
}

/// Whether `algo` can run this call on a clique of `policies`: LL within the inbox (`ll_max`
/// bytes per source), LL128 only where the clique has its region (`--ll128-max` above 0).
fn fits(algo: Kernel, call: &CallDesc, policies: &rcclx::intercept::Policies) -> bool {
    match algo {
        Kernel::LL => (call.count as u64).saturating_mul(call.dtype.size().unwrap_or(0) as u64) <= policies.ll_max,
        Kernel::LL128 => policies.ll128_on(),
        _ => true,
    }
}

/// Timed calls and warm-up calls for a message of `bytes`.
fn calls_for(bytes: u64, quick: bool) -> (usize, usize) {
    let timed = match bytes {
        b if b <= MIB => 200,
        b if b <= 16 * MIB => 50,
        _ => 20,
    };
    if quick { (2, timed / 4) } else { (5, timed) }
}

/// `--list`: the families and sizes (no GPU).
pub fn list(opts: &Opts) {
    let n = opts.placement.nranks;
    let p = rcclx::intercept::Policies::for_comm(rcclx::config::get(), n, rcclx::clique::local_fabric());
    for (coll, algo) in families() {
        for &b in sizes(opts.quick) {
            if let Some(c) = case_for(coll, b, n).filter(|c| fits(algo, &c.call(), &p)) {
                let twin = twin_name(coll, algo).unwrap_or("-");
                println!("{}.{} {} bytes, twin {twin}", coll.name(), algo.name(), c.call().bytes(n).unwrap_or(0));
            }
        }
    }
}

fn twin_name(coll: Coll, algo: Kernel) -> Option<&'static str> {
    let key = format!("{}.{}", coll.name(), algo.name());
    TWINS.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

/// The proxy's kernels on one device: the twins by name, and the microbenchmarks.
struct Kernels {
    module: rcclx::gpu::Module,
    pingpong: Function,
    fence: Function,
}

impl Kernels {
    fn load(dev: &Ranks, device: i32) -> Result<Kernels, Fail> {
        let arch = dev.rt.device_info(device)?.arch;
        let target = rcclx::kernels::for_arch(&arch).map(|k| k.target);
        let Some(code) = objects::CODE_OBJECTS.iter().find(|c| Some(c.target) == target) else {
            return Err(Fail(format!("no bench code object for arch {arch} (built without kernels?)")));
        };
        // SAFETY: build.rs embeds complete code objects made by the kernel compiler for
        // `code.target`, the target rcclx picks for this device's arch.
        let module = unsafe { dev.rt.load_module(device, code.image) }?;
        Ok(Kernels {
            module,
            pingpong: dev.rt.function(module, "rcclx_bench_flag_pingpong")?,
            fence: dev.rt.function(module, "rcclx_bench_fence")?,
        })
    }
}

/// One CSV row; empty strings for columns that do not apply.
#[derive(Default)]
struct Row {
    part: &'static str,
    family: String,
    coll: String,
    algo: String,
    bytes: u64,
    staging_half: u64,
    window: u64,
    windows: u64,
    blocks: u32,
    threads: u32,
    mode: &'static str,
    us: Option<f64>,
    calls: usize,
    twin_us: Option<f64>,
    check: &'static str,
    extra: String,
}

fn emit(n: usize, r: &Row) {
    let f = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.3}"));
    let ratio = match (r.us, r.twin_us) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.3}", a / b),
        _ => String::new(),
    };
    let tag = std::env::var("RCCLX_BENCH_TAG").unwrap_or_default().replace([',', '\n'], ";");
    say(&format!(
        "BENCH {},{},{},{},{},{n},{},{},{},{},{},{},{},{},{},{ratio},{},{},{tag}",
        r.part,
        r.family,
        r.coll,
        r.algo,
        r.bytes,
        r.staging_half,
        r.window,
        r.windows,
        r.blocks,
        r.threads,
        r.mode,
        f(r.us),
        r.calls,
        f(r.twin_us),
        r.check,
        r.extra.replace(',', ";")
    ));
}

/// Events on every local rank's stream, for timing.
struct Timer {
    starts: Vec<Event>,
    ends: Vec<Event>,
}

impl Timer {
    fn new(dev: &Ranks) -> Result<Timer, Fail> {
        let ev = |k: usize| dev.rt.create_timed_event(dev.world.devices[k]);
        Ok(Timer {
            starts: (0..dev.local()).map(ev).collect::<Result<_, _>>()?,
            ends: (0..dev.local()).map(ev).collect::<Result<_, _>>()?,
        })
    }

    fn start(&self, dev: &Ranks) -> Result<(), Fail> {
        for (k, &e) in self.starts.iter().enumerate() {
            dev.rt.record_event(e, dev.stream(k))?;
        }
        Ok(())
    }

    /// Records the ends, waits for every stream, and returns the slowest rank's milliseconds.
    fn stop(&self, dev: &Ranks, what: &str) -> Result<f64, Fail> {
        for (k, &e) in self.ends.iter().enumerate() {
            dev.rt.record_event(e, dev.stream(k))?;
        }
        dev.wait_all(&|_| what.to_string())?;
        let mut ms = 0f64;
        for k in 0..dev.local() {
            ms = ms.max(dev.rt.elapsed_ms(self.starts[k], self.ends[k])? as f64);
        }
        Ok(ms)
    }

    fn destroy(self, dev: &Ranks) {
        for (i, e) in self.starts.into_iter().chain(self.ends).enumerate() {
            let _g = dev.rt.device_guard(dev.world.devices[i % dev.local()]);
            // SAFETY: our own events; every stream they were recorded on has finished.
            let _ = unsafe { dev.rt.destroy_event(e) };
        }
    }
}

/// Launches every local rank's planned call once (`funcs[k]`: a twin instead of the kernel).
fn launch_all(dev: &Ranks, launches: &[Launch], funcs: Option<&[Function]>, captured: bool) -> Result<(), Fail> {
    for (k, l) in launches.iter().enumerate() {
        let mut l = *l;
        if let Some(f) = funcs {
            l.func = f[k];
        }
        dev.world.cliques[k].launch(l, dev.stream(k), captured).map_err(lib)?;
    }
    Ok(())
}

/// Microseconds per call of `calls` back-to-back launches on every rank after `warm` more.
fn time_eager(
    dev: &Ranks,
    t: &Timer,
    launches: &[Launch],
    funcs: Option<&[Function]>,
    (warm, calls): (usize, usize),
    what: &str,
) -> Result<f64, Fail> {
    for _ in 0..warm {
        launch_all(dev, launches, funcs, false)?;
    }
    t.start(dev)?;
    for _ in 0..calls {
        launch_all(dev, launches, funcs, false)?;
    }
    Ok(t.stop(dev, what)? * 1e3 / calls as f64)
}

/// Microseconds per call of graphs of `per_graph` calls (one per rank), replayed so that about
/// `calls` calls run (after one warm-up replay).
fn time_graph(
    dev: &Ranks,
    t: &Timer,
    launches: &[Launch],
    funcs: Option<&[Function]>,
    calls: usize,
    what: &str,
) -> Result<f64, Fail> {
    let per_graph = calls.clamp(1, 10);
    let replays = (calls / per_graph).max(2);
    let mut graphs: Vec<GraphExec> = Vec::new();
    let mut result = Ok(());
    for k in 0..dev.local() {
        let _g = dev.rt.device_guard(dev.world.devices[k])?;
        dev.rt.begin_capture(dev.stream(k))?;
        let mut issued = Ok(());
        for _ in 0..per_graph {
            let mut l = launches[k];
            if let Some(f) = funcs {
                l.func = f[k];
            }
            issued = dev.world.cliques[k].launch(l, dev.stream(k), true).map_err(lib);
            if issued.is_err() {
                break;
            }
        }
        let graph = dev.rt.end_capture(dev.stream(k));
        match (issued, graph) {
            (Ok(()), Ok(g)) => graphs.push(g),
            (Err(e), Ok(g)) => {
                graphs.push(g);
                result = Err(e);
                break;
            }
            (_, Err(e)) => {
                result = Err(Fail(e.to_string()));
                break;
            }
        }
    }
    let timed = result.and_then(|()| {
        for (k, &g) in graphs.iter().enumerate() {
            dev.rt.launch_graph(g, dev.stream(k))?;
        }
        t.start(dev)?;
        for _ in 0..replays {
            for (k, &g) in graphs.iter().enumerate() {
                dev.rt.launch_graph(g, dev.stream(k))?;
            }
        }
        Ok(t.stop(dev, what)? * 1e3 / (per_graph * replays) as f64)
    });
    dev.wait_all(&|_| what.to_string())?;
    for (k, g) in graphs.into_iter().enumerate() {
        let _g = dev.rt.device_guard(dev.world.devices[k]);
        // SAFETY: our own graph; its replays have finished (waited above).
        let _ = unsafe { dev.rt.destroy_graph(g) };
    }
    timed
}

/// What a family case needs on every local rank.
struct Placed {
    images: Vec<(Image, DevicePtr)>,
    inputs: Vec<Vec<u8>>,
    /// Every local rank's expected output (computed once: several families check against it).
    want: Vec<Vec<u8>>,
}

/// Uploads every rank's input of `case` (poison in the output).
fn place(dev: &mut Ranks, case: &Case, seed: u64) -> Result<Placed, Fail> {
    let n = dev.nranks();
    let inputs = cases::inputs(case, n, seed);
    let images = cases::upload_images(dev, case, &inputs, 0xEE)?;
    let want = dev.world.ranks.iter().map(|&r| cases::expected(case, n, r, &inputs)).collect();
    Ok(Placed { images, inputs, want })
}

/// One rank's check of a case: exact, the output's hash, what was found.
type Verdict = (bool, String, String);

/// Every rank's output against the model: (all exact, each local rank's verdict).
fn check(dev: &Ranks, case: &Case, placed: &Placed) -> Result<(bool, Vec<Verdict>), Fail> {
    let n = dev.nranks();
    let mut all = true;
    let mut per = Vec::new();
    for (k, (img, _)) in placed.images.iter().enumerate() {
        let r = dev.world.ranks[k];
        let got = dev.download(k, 0, img.total)?;
        let (ok, h, detail) = match img.check(&got, &placed.inputs[r]) {
            Err(e) => (false, "-".to_string(), e),
            Ok(out) => match reduce::mismatches(case.compare_as(), out, &placed.want[k]) {
                (0, _) => (true, device::hash(out), format!("{} elements exact", case.out_len(n, r))),
                (bad, _) => (false, device::hash(out), format!("{bad} elements differ from the model")),
            },
        };
        all &= ok;
        per.push((ok, h, detail));
    }
    Ok((all, per))
}

/// Poisons every rank's output (so that a check never passes on an earlier call's output).
fn poison(dev: &Ranks, placed: &Placed) -> Result<(), Fail> {
    for (k, (img, base)) in placed.images.iter().enumerate() {
        dev.memset(k, base.offset(img.out.start), 0xEE, img.out.len())?;
    }
    Ok(())
}

/// Times one family at one size (both modes, kernel and twin) and reports the case.
#[allow(clippy::too_many_arguments)]
fn time_family(
    dev: &Ranks,
    t: &Timer,
    twins: &[Twin],
    index: usize,
    part: &'static str,
    (coll, algo): (Coll, Kernel),
    case: &Case,
    placed: &Placed,
    quick: bool,
) -> Result<(), Fail> {
    let n = dev.nranks();
    let call = case.call();
    let bytes = call.bytes(n).unwrap_or(0);
    let family = format!("{}.{}", coll.name(), algo.name());
    let name = format!("bench {part} {family} {bytes} bytes");
    if dev.announcer {
        say(&format!("CASE {index} {name}"));
    }
    watchdog::progress(&name);
    let mut launches = Vec::new();
    for (k, (img, base)) in placed.images.iter().enumerate() {
        let bufs = Buffers {
            send: base.offset(img.send).as_raw() as *const c_void,
            recv: base.offset(img.recv).as_raw(),
            stream: dev.stream(k),
        };
        match rcclx::dda::plan(&dev.world.cliques[k], algo, &call, &bufs) {
            Ok(l) => launches.push(l),
            Err(e) => {
                // A family that cannot plan this call: a failed case, the other families still run.
                let r = dev.world.ranks[k];
                emit(
                    n,
                    &Row {
                        part,
                        family: family.clone(),
                        bytes,
                        check: "NO-PLAN",
                        extra: e.to_string(),
                        ..Row::default()
                    },
                );
                for (kk, &rr) in dev.world.ranks.iter().enumerate() {
                    let why =
                        if kk == k { format!("planning failed: {e}") } else { format!("rank {r} could not plan") };
                    report(index, rr, false, case.group(rr), "-", &family, &why);
                }
                return Ok(());
            }
        }
    }
    // Window bookkeeping of the windowed kernels' argument struct (none for other kinds).
    let (half, window_elems, count) = match launches[0].args {
        LaunchArgs::Collective(a) => (a.half_bytes, a.window_elems, a.count),
        LaunchArgs::AllToAllv(_) => (0, 0, 0),
    };
    let elem = if coll.spec().reduces { call.dtype.size().unwrap_or(1) as u64 } else { 1 };
    let windows = if algo == Kernel::LL || window_elems == 0 { 1 } else { count.div_ceil(window_elems) };
    let twin_fns = twins.iter().find(|(f, _)| *f == (coll, algo)).map(|(_, fns)| fns.as_slice());
    let counts = calls_for(bytes, quick);
    let mut verdicts: Vec<Verdict> = vec![(true, String::new(), String::new()); dev.local()];
    for mode in ["eager", "graph"] {
        poison(dev, placed)?;
        let what = format!("{name} {mode}");
        let us = if mode == "eager" {
            time_eager(dev, t, &launches, None, counts, &what)?
        } else {
            time_graph(dev, t, &launches, None, counts.1, &what)?
        };
        let (ok, per) = check(dev, case, placed)?;
        for (v, p) in verdicts.iter_mut().zip(per) {
            if v.0 {
                *v = (p.0, p.1, format!("{mode}: {}", p.2));
            }
        }
        let twin_us = match &twin_fns {
            Some(f) if mode == "eager" => {
                Some(time_eager(dev, t, &launches, Some(f), counts, &format!("{what} twin"))?)
            }
            Some(f) => Some(time_graph(dev, t, &launches, Some(f), counts.1, &format!("{what} twin"))?),
            None => None,
        };
        emit(
            n,
            &Row {
                part,
                family: family.clone(),
                coll: coll.name().into(),
                algo: algo.name().into(),
                bytes,
                staging_half: half,
                window: window_elems * elem,
                windows,
                blocks: launches[0].grid.0,
                threads: launches[0].grid.1,
                mode,
                us: Some(us),
                calls: counts.1,
                twin_us,
                check: if ok { "exact" } else { "FAILED" },
                extra: format!("route_by_default={}", device::kernel_for(&dev.world.cliques[0], &call).0),
            },
        );
    }
    for (k, (ok, h, detail)) in verdicts.into_iter().enumerate() {
        let r = dev.world.ranks[k];
        report(index, r, ok, case.group(r), &h, &family, &detail);
    }
    Ok(())
}

/// A family's twin kernel on every local rank's device.
type Twin = ((Coll, Kernel), Vec<Function>);

/// The twins of every family that has one ([`TWINS`]).
fn twin_functions(dev: &Ranks, kernels: &[(i32, Kernels)]) -> Result<Vec<Twin>, Fail> {
    let mut out = Vec::new();
    for (coll, algo) in families() {
        let Some(name) = twin_name(coll, algo) else { continue };
        let mut per = Vec::new();
        for k in 0..dev.local() {
            let d = dev.world.devices[k];
            let m = kernels.iter().find(|(dd, _)| *dd == d).ok_or("no bench module for a device")?.1.module;
            per.push(dev.rt.function(m, name)?);
        }
        out.push(((coll, algo), per));
    }
    Ok(out)
}

pub fn run(dev: &mut Ranks, opts: &Opts) -> Result<(), Fail> {
    let n = dev.nranks();
    let parts: Vec<&str> = if opts.parts.is_empty() {
        crate::opts::DEFAULT_PARTS.to_vec()
    } else {
        crate::opts::PARTS.iter().copied().filter(|p| opts.parts.iter().any(|q| q == p)).collect()
    };
    say(&format!("BENCH {COLUMNS}"));
    let mut kernels: Vec<(i32, Kernels)> = Vec::new();
    for &d in &dev.world.devices {
        if !kernels.iter().any(|(dd, _)| *dd == d) {
            kernels.push((d, Kernels::load(dev, d)?));
        }
    }
    let twins = twin_functions(dev, &kernels)?;
    let t = Timer::new(dev)?;
    let policies = dev.world.cliques[0].facts.policies;
    let mut index = 0;
    for part in parts {
        match part {
            "families" | "sweep" => {
                let plan: Vec<((Coll, Kernel), u64)> = if part == "families" {
                    families().into_iter().flat_map(|f| sizes(opts.quick).iter().map(move |&b| (f, b))).collect()
                } else {
                    let f = [
                        (Coll::AllReduce, Kernel::FLAT),
                        (Coll::AllReduce, Kernel::TWO_SHOT),
                        (Coll::AllGather, Kernel::FLAT),
                        (Coll::AllToAll, Kernel::FLAT),
                    ];
                    f.into_iter().flat_map(|f| [16 * MIB, 64 * MIB].map(move |b| (f, b))).collect()
                };
                // One upload per (collective, size): the families of a collective share it.
                let mut current: Option<(Case, Placed)> = None;
                for ((coll, algo), bytes) in plan {
                    let Some(case) = case_for(coll, bytes, n) else { continue };
                    if !fits(algo, &case.call(), &policies) {
                        continue;
                    }
                    if current.as_ref().is_none_or(|(c, _)| *c != case) {
                        watchdog::progress(&format!("bench {part}: inputs of {} {bytes} bytes", coll.name()));
                        let placed = place(dev, &case, opts.seed)?;
                        current = Some((case.clone(), placed));
                    }
                    let (case, placed) = current.as_ref().expect("placed above");
                    time_family(dev, &t, &twins, index, part, (coll, algo), case, placed, opts.quick)?;
                    index += 1;
                }
            }
            "micro" => {
                let k = &kernels.iter().find(|(d, _)| *d == dev.world.devices[0]).expect("loaded above").1;
                flag_round_trip(dev, &t, k, n)?;
                fence_under_load(dev, &t, k, n)?;
            }
            _ => {}
        }
    }
    t.destroy(dev);
    Ok(())
}

/// A library error as a test failure.
fn lib(e: rcclx::error::Error) -> Fail {
    Fail(e.to_string())
}

/// A kernel argument slot: a pointer to the value.
fn arg<T>(value: &mut T) -> *mut c_void {
    (value as *mut T).cast()
}

/// Bound on every wait inside a microbenchmark kernel.
const MICRO_TIMEOUT_NS: u64 = 5_000_000_000;

/// P1: round trips of a release/acquire flag pair between two one-block kernels on the streams
/// of local ranks 0 and 1, flags in device memory and in host-mapped memory.
fn flag_round_trip(dev: &Ranks, t: &Timer, k: &Kernels, n: usize) -> Result<(), Fail> {
    if dev.local() < 2 {
        return Ok(());
    }
    let (d0, d1) = (dev.world.devices[0], dev.world.devices[1]);
    for place in ["device", "host-mapped"] {
        watchdog::progress(&format!("bench micro: flag round trip, {place}"));
        // Two flag lines 128 bytes apart, then the two results (2 words each).
        let dbuf = dev.rt.alloc(d0, 4096, MemKind::Normal)?;
        let hbuf = if place == "host-mapped" { Some(dev.rt.alloc_host_mapped(d0, 4096)?) } else { None };
        dbuf.zero()?;
        let flags = hbuf.as_ref().map_or(dbuf.ptr(), |h| h.device_ptr());
        let (warmup, iters) = if place == "device" { (1000u32, 20_000u32) } else { (100, 2_000) };
        for (side, (stream_k, dvc)) in [(0usize, d0), (1, d1)].into_iter().enumerate() {
            let _g = dev.rt.device_guard(dvc)?;
            let (mut mine, mut peer) = if side == 0 { (flags.0, flags.0 + 128) } else { (flags.0 + 128, flags.0) };
            let (mut w, mut it, mut starter, mut to, mut res) =
                (warmup, iters, (side == 0) as u32, MICRO_TIMEOUT_NS, dbuf.ptr().0 + 1024 + 16 * side as u64);
            let args = [
                arg(&mut mine),
                arg(&mut peer),
                arg(&mut w),
                arg(&mut it),
                arg(&mut starter),
                arg(&mut to),
                arg(&mut res),
            ];
            if side == 0 {
                dev.rt.record_event(t.starts[0], dev.stream(stream_k))?;
            }
            // SAFETY: the arguments match rcclx_bench_flag_pingpong(uint32_t*, uint32_t*, uint32_t,
            // uint32_t, uint32_t, uint64_t, uint64_t*); the flags and results lie in buffers that
            // outlive the kernels (waited for below), reachable from both devices.
            unsafe { dev.rt.launch(k.pingpong, (1, 1, 1), (32, 1, 1), 0, dev.stream(stream_k), &args) }?;
            if side == 0 {
                dev.rt.record_event(t.ends[0], dev.stream(stream_k))?;
            }
        }
        dev.wait_all(&|_| format!("flag round trip ({place})"))?;
        let mut res = [0u64; 4];
        {
            let _g = dev.rt.device_guard(d0)?;
            // SAFETY: the results lie in our buffer; the kernels finished.
            unsafe { dev.rt.memcpy_dtoh(&mut res, dbuf.ptr().offset(1024)) }?;
        }
        let host_ms = dev.rt.elapsed_ms(t.starts[0], t.ends[0])? as f64;
        let ok = res[1] == 0 && res[3] == 0;
        emit(
            n,
            &Row {
                part: "flag",
                family: format!("round-trip-{place}"),
                mode: "kernel",
                us: ok.then(|| res[0] as f64 / 1e3 / iters as f64),
                calls: iters as usize,
                check: if ok { "ok" } else { "TIMEOUT" },
                extra: format!("kernel_ms={host_ms:.3} (includes {warmup} warm-up rounds and the launch)"),
                ..Row::default()
            },
        );
    }
    Ok(())
}

/// P2: a system-scope release repeated by lane 0 of warp 0 while the other warps of the block
/// (or only other blocks) stream 16-byte stores or loads, into HBM and into host-mapped memory.
fn fence_under_load(dev: &Ranks, t: &Timer, k: &Kernels, n: usize) -> Result<(), Fail> {
    let d = dev.world.devices[0];
    let sms = dev.rt.device_info(d)?.multiprocessors.max(1);
    const APART_BLOCKS: u32 = 4;
    let grid_max = sms + APART_BLOCKS;
    let side = dev.rt.alloc(d, (grid_max as usize * 3 * 8 + 4096).next_multiple_of(4096), MemKind::Normal)?;
    let flags = dev.rt.alloc(d, grid_max as usize * 128, MemKind::Normal)?;
    for place in ["hbm", "host-mapped"] {
        let bytes: usize = if place == "hbm" { 256 << 20 } else { 32 << 20 };
        let reps: u32 = if place == "hbm" { 4 } else { 1 };
        let hbm = if place == "hbm" { Some(dev.rt.alloc(d, bytes, MemKind::Normal)?) } else { None };
        let host = if place == "hbm" { None } else { Some(dev.rt.alloc_host_mapped(d, bytes)?) };
        let data = hbm.as_ref().map_or_else(|| host.as_ref().expect("one of them").device_ptr(), |b| b.ptr());
        // (name, op, where, streaming blocks, grid)
        let modes: [(&str, u32, u32, u32, u32); 7] = [
            ("fence-alone", 0, 1, sms, sms),
            ("store-alone", 1, 0, sms, sms),
            ("store+fence-same-block", 1, 1, sms, sms),
            ("store+fence-other-blocks", 1, 2, sms, grid_max),
            ("load-alone", 2, 0, sms, sms),
            ("load+fence-same-block", 2, 1, sms, sms),
            ("load+fence-other-blocks", 2, 2, sms, grid_max),
        ];
        for (name, op, place_fence, stream_blocks, grid) in modes {
            watchdog::progress(&format!("bench micro: fence under load, {place} {name}"));
            side.zero()?;
            let vecs = (bytes / 16 / stream_blocks as usize) as u64;
            let _g = dev.rt.device_guard(d)?;
            let (mut p_data, mut p_vecs, mut p_reps, mut p_op, mut p_where) = (data.0, vecs, reps, op, place_fence);
            let (mut p_sb, mut p_min, mut p_to, mut p_flags) =
                (stream_blocks, 2000u32, MICRO_TIMEOUT_NS, flags.ptr().0);
            let (mut p_done, mut p_out) = (side.ptr().0, side.ptr().0 + 64);
            let args = [
                arg(&mut p_data),
                arg(&mut p_vecs),
                arg(&mut p_reps),
                arg(&mut p_op),
                arg(&mut p_where),
                arg(&mut p_sb),
                arg(&mut p_min),
                arg(&mut p_to),
                arg(&mut p_flags),
                arg(&mut p_done),
                arg(&mut p_out),
            ];
            dev.rt.record_event(t.starts[0], dev.stream(0))?;
            // SAFETY: the arguments match rcclx_bench_fence (hip_kernels/bench.cu); `data` holds
            // stream_blocks * vecs vectors, `flags` a line per block, `side` the done word and
            // 3 words per block; all outlive the kernel (waited for below).
            unsafe { dev.rt.launch(k.fence, (grid, 1, 1), (512, 1, 1), 0, dev.stream(0), &args) }?;
            dev.rt.record_event(t.ends[0], dev.stream(0))?;
            dev.wait_all(&|_| format!("fence under load ({place} {name})"))?;
            let kernel_ms = dev.rt.elapsed_ms(t.starts[0], t.ends[0])? as f64;
            let mut out = vec![0u64; grid as usize * 3];
            // SAFETY: `side` holds 64 bytes then 3 words per block; the kernel finished.
            unsafe { dev.rt.memcpy_dtoh(&mut out, side.ptr().offset(64)) }?;
            let (mut fence_ns, mut fences, mut stream_ns_max) = (0f64, 0u64, 0u64);
            let mut fencers = 0u64;
            for b in 0..grid as usize {
                if out[3 * b + 1] > 0 {
                    fence_ns += out[3 * b] as f64 / out[3 * b + 1] as f64;
                    fences += out[3 * b + 1];
                    fencers += 1;
                }
                stream_ns_max = stream_ns_max.max(out[3 * b + 2]);
            }
            let per_fence_us = (fencers > 0).then(|| fence_ns / fencers as f64 / 1e3);
            let moved = (stream_blocks as u64 * vecs * 16) as f64 * reps as f64;
            let gbps = if op != 0 && stream_ns_max > 0 { moved / stream_ns_max as f64 } else { 0.0 };
            emit(
                n,
                &Row {
                    part: "fence",
                    family: format!("{place}-{name}"),
                    bytes: if op != 0 { moved as u64 } else { 0 },
                    blocks: grid,
                    threads: 512,
                    mode: "kernel",
                    us: per_fence_us,
                    calls: fences as usize,
                    check: "ok",
                    extra: format!(
                        "stream_GBps={gbps:.1};fencers={fencers};kernel_ms={kernel_ms:.3};stream_ns_max={stream_ns_max}"
                    ),
                    ..Row::default()
                },
            );
        }
    }
    Ok(())
}
