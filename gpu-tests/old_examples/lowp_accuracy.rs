//! Accuracy and correctness test of rcclx's FP8 low-precision (LP) collectives on real GPUs.
//!
//! ```text
//! lowp_accuracy [--procs N | --one-process | --toggle] [--quick] [--filter TEXT] [--no-lp]
//!               [--seed N] [--list]
//!   --procs N       (default, N = 2) N child processes, one GPU each (rank r on device r),
//!                   communicator by ncclCommInitRank (unique id through a temp file)
//!   --one-process   one thread, ncclCommInitAll on devices 0..N-1 (N from --procs, default 2),
//!                   every case issued for all communicators inside ncclGroupStart/End
//!   --toggle        LP switch read at communicator creation: comm A with
//!                   RCCL_LOW_PRECISION_ENABLE=1, comm B with it unset, comm C with only
//!                   RCCL_LOW_PRECISION_ENABLE_ALLGATHER=1; checks which calls took the FP8 path
//!   --quick         counts 1, 127, 129, 128*N+1, 1Mi+3 only; gaussian and big-and-small only
//!   --filter TEXT   only cases whose name ("allreduce bf16 127 in-place gaussian") contains TEXT
//!   --no-lp         control run: RCCL_LOW_PRECISION_ENABLE=0; expects the non-FP8 path and
//!                   compares with the exact result rounded to the output type
//!   --seed N        base seed of the input data (default 1)
//!   --list          print the cases and exit (no GPU needed)
//!   --host-check    no GPU: feed the codec model itself through the checks as if it were the GPU's
//!                   output (validates the harness: bounds, tolerances, verdicts; and host time)
//!   (internal) --child RANK IDFILE: one rank of --procs
//! ```
//!
//! Environment: `RCCLX_UPSTREAM_LIB` (the stock libnccl.so.2) as for any rcclx program. Unless
//! already set, the program sets `RCCL_LOW_PRECISION_ENABLE=1` (`0` with `--no-lp`),
//! `RCCLX_LP_MIN_BYTES=0` and `NCCL_NVLS_ENABLE=0` before the first rcclx call; the path each
//! case should take is predicted from those variables with rcclx's own config parser.
//!
//! Each case: collective x type x count x placement x distribution. The host computes the exact
//! result (f64), the codec model (`rcclx::lowp::codec::*_ref`, what the kernels must produce,
//! rounded to the output type) and the documented per-element error bound, and compares every
//! output element. See [`CRITERIA`] for what passes. Output: one line per case,
//! `PASS|FAIL coll dtype count placement dist relL2=.. maxrel=.. vs_model=.. ...`, mismatches
//! verbatim under it, then `N passed, M failed`.
//!
//! Exit status: 0 all passed, 1 a case failed, 2 no GPU / fewer than N GPUs / bad arguments,
//! 3 a stall (no progress for 300 s; every wait is bounded).
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use std::collections::HashMap;
use std::ffi::{CStr, c_int, c_void};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use rcclx::abi::own::{rcclxCommGetStats, rcclxCommStats, rcclxForwardReasonName, rcclxGetUpstreamPath};
use rcclx::abi::table as nccl;
use rcclx::gpu::{self, DeviceBuffer, DevicePtr, MemKind, Runtime, Stream};
use rcclx::lowp::codec::{self, BLOCK, Fp8Format, Io, synth::Dist};
use rcclx::types::{ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t, ncclUniqueId};

// ---------------------------------------------------------------------------------------------
// Pass criteria and limits
// ---------------------------------------------------------------------------------------------

/// Largest relative L2 error vs the exact (f64) result, every distribution.
const MAX_REL_L2: f64 = 0.05;
/// `|gpu - model| <= MODEL_TOL_ULPS * ulp(output type at the model value) + MODEL_TOL_ABS`.
const MODEL_TOL_ULPS: f32 = 1.0;
const MODEL_TOL_ABS: f32 = f32::MIN_POSITIVE;
/// Bytes of 0xFF before and after every buffer; a kernel write there is a failure.
const GUARD: usize = 256;
/// A child that prints nothing for this long is killed.
const CHILD_SILENCE: Duration = Duration::from_secs(300);
/// Bound on each stream wait.
const STREAM_WAIT: Duration = Duration::from_secs(120);
/// No progress for this long ends the process (exit 3).
const STALL_LIMIT: Duration = Duration::from_secs(300);
/// Mismatches / bound violations printed per rank and case.
const MAX_NOTES: usize = 5;
/// Ranks supported (fixed-size arrays in the bound computation).
const MAX_RANKS: usize = 8;
/// Bytes of one staging half with the default staging buffer of an FP8 communicator.
const DEFAULT_HALF_BYTES: u64 = rcclx::dda::setup::DEFAULT_STAGING_LOWP / 2;
const MI: usize = 1024 * 1024;
/// Count of the `--toggle` calls.
const TOGGLE_COUNT: usize = 64 * 1024 + 3;

const CRITERIA: &[&str] = &[
    "no NaN/Inf in any output (inputs are finite)",
    "|gpu - model| <= 1 ulp of the output type + 1.2e-38 for every element (model = rcclx::lowp::codec::*_ref, rounded RNE to the output type)",
    "relative L2 error vs the exact f64 result <= 0.05",
    "|gpu - exact| <= documented bound (codec::element_error_bound / allreduce_error_bound, + 1 ulp of the output type) for every element",
    "allreduce and allgather: every rank's output bit-identical",
    "the FP8 path was taken (rcclxCommStats.lowpCalls + 1 per rank) exactly when the switches and RCCLX_LP_MIN_BYTES say so",
    "no write into the 256-byte guards around each buffer; out-of-place input unchanged",
];

// ---------------------------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Op {
    AllReduce,
    ReduceScatter,
    AllGather,
    /// `ncclAlltoAll` (NCCL's name).
    AlltoAll,
    /// `ncclAllToAll` (RCCL's name).
    AllToAllRccl,
}

impl Op {
    const ALL: [Op; 5] = [Op::AllReduce, Op::ReduceScatter, Op::AllGather, Op::AlltoAll, Op::AllToAllRccl];

    fn name(self) -> &'static str {
        match self {
            Op::AllReduce => "allreduce",
            Op::ReduceScatter => "reducescatter",
            Op::AllGather => "allgather",
            Op::AlltoAll => "alltoall",
            Op::AllToAllRccl => "alltoall-rccl",
        }
    }
    fn is_a2a(self) -> bool {
        matches!(self, Op::AlltoAll | Op::AllToAllRccl)
    }
    /// Elements of each rank's input / output for the call's `count`.
    fn in_len(self, count: usize, n: usize) -> usize {
        match self {
            Op::AllReduce | Op::AllGather => count,
            _ => count * n,
        }
    }
    fn out_len(self, count: usize, n: usize) -> usize {
        match self {
            Op::AllReduce | Op::ReduceScatter => count,
            _ => count * n,
        }
    }
    /// Every rank's output is the same tensor.
    fn shared_output(self) -> bool {
        matches!(self, Op::AllReduce | Op::AllGather)
    }
    /// Bytes rcclx compares with RCCLX_LP_MIN_BYTES (as `intercept::CallDesc::bytes`).
    fn lp_bytes(self, count: usize, n: usize, io: Io) -> u64 {
        let elems = if self == Op::AllReduce { count } else { count * n };
        (elems * io.size()) as u64
    }
}

fn dtype_of(io: Io) -> ncclDataType_t {
    match io {
        Io::F32 => ncclDataType_t::Float32,
        Io::Bf16 => ncclDataType_t::Bfloat16,
        Io::F16 => ncclDataType_t::Float16,
    }
}

/// Everything of a case except the placement (the host data is shared by both placements).
#[derive(Clone, Copy, Debug)]
struct Group {
    op: Op,
    io: Io,
    count: usize,
    dist: Dist,
}

#[derive(Clone, Copy, Debug)]
struct Case {
    g: Group,
    inplace: bool,
}

impl Case {
    fn name(&self) -> String {
        format!(
            "{} {} {} {} {}",
            self.g.op.name(),
            self.g.io.name(),
            self.g.count,
            if self.inplace { "in-place" } else { "out-of-place" },
            self.g.dist.name()
        )
    }
}

/// Elements per window of `op`'s FP8 kernel with the default staging size (rcclx's own grid).
fn window_elems(op: Op, n: usize) -> u64 {
    use rcclx::intercept::Coll;
    let coll = match op {
        Op::AllReduce => Coll::AllReduce,
        Op::ReduceScatter => Coll::ReduceScatter,
        Op::AllGather => Coll::AllGather,
        Op::AlltoAll | Op::AllToAllRccl => Coll::AllToAll,
    };
    rcclx::lowp::launch::grid(coll, u64::MAX, n as u64, DEFAULT_HALF_BYTES, 128).0
}

/// Element count that spans 3 of the largest LP windows and one element more (default staging).
fn windows_count(op: Op, n: usize) -> usize {
    3 * window_elems(op, n) as usize + 1
}

/// The case list, in run order (groups; each group runs out-of-place then in-place).
fn groups(n: usize, quick: bool) -> Vec<Group> {
    let mut out = Vec::new();
    for op in Op::ALL {
        for io in Io::ALL {
            let big = if op == Op::AllReduce && io != Io::F16 && !quick { 16 * MI + 3 } else { MI + 3 };
            let mut counts = vec![(1, false), (127, false), (129, false), (128 * n + 1, false), (big, false)];
            if !quick {
                // Multi-window: AllReduce (f32, bf16, every distribution) as specified; the
                // others once (f32, gaussian) since they window per chunk too.
                if op == Op::AllReduce && io != Io::F16 {
                    counts.push((windows_count(op, n), false));
                } else if op != Op::AllReduce && io == Io::F32 {
                    counts.push((windows_count(op, n), true));
                }
            }
            for (count, gaussian_only) in counts {
                for dist in Dist::ALL {
                    if (quick && !matches!(dist, Dist::Gaussian | Dist::BigAndSmall))
                        || (gaussian_only && dist != Dist::Gaussian)
                    {
                        continue;
                    }
                    out.push(Group { op, io, count, dist });
                }
            }
        }
    }
    out
}

fn cases(opts: &Opts) -> Vec<Case> {
    groups(opts.nranks, opts.quick)
        .into_iter()
        .flat_map(|g| [false, true].map(|inplace| Case { g, inplace }))
        .filter(|c| opts.filter.as_ref().is_none_or(|f| c.name().contains(f.as_str())))
        .collect()
}

/// Seed of rank `r`'s input of a group (the two AllToAll spellings share data).
fn seed(g: &Group, r: usize, base: u64) -> u64 {
    let op = if g.op.is_a2a() { Op::AlltoAll } else { g.op };
    let mut h = Fnv::new();
    for v in [base, op as u64, g.io as u64, g.count as u64, g.dist as u64, r as u64] {
        h.write(&v.to_le_bytes());
    }
    h.0
}

struct Fnv(u64);
impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Procs,
    OneProcess,
    Toggle,
    Child(usize),
}

#[derive(Clone, Debug)]
struct Opts {
    mode: Mode,
    nranks: usize,
    quick: bool,
    filter: Option<String>,
    no_lp: bool,
    seed: u64,
    list: bool,
    host_check: bool,
    idfile: Option<String>,
    /// The arguments as given (passed on to children).
    raw: Vec<String>,
}

fn parse_args(args: Vec<String>) -> Result<Opts, String> {
    let mut o = Opts {
        mode: Mode::Procs,
        nranks: 2,
        quick: false,
        filter: None,
        no_lp: false,
        seed: 1,
        list: false,
        host_check: false,
        idfile: None,
        raw: args.clone(),
    };
    let mut it = args.into_iter();
    let num = |v: Option<String>, what: &str| -> Result<u64, String> {
        v.ok_or(format!("{what} needs a value"))?.parse::<u64>().map_err(|e| format!("{what}: {e}"))
    };
    let mut child = None;
    while let Some(a) = it.next() {
        match a.as_str() {
            "--procs" => o.nranks = num(it.next(), "--procs")? as usize,
            "--one-process" => o.mode = Mode::OneProcess,
            "--toggle" => o.mode = Mode::Toggle,
            "--quick" => o.quick = true,
            "--no-lp" => o.no_lp = true,
            "--list" => o.list = true,
            "--host-check" => o.host_check = true,
            "--seed" => o.seed = num(it.next(), "--seed")?,
            "--filter" => o.filter = Some(it.next().ok_or("--filter needs a value")?),
            "--child" => {
                child = Some(num(it.next(), "--child")? as usize);
                o.idfile = Some(it.next().ok_or("--child needs RANK IDFILE")?);
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if !(2..=MAX_RANKS).contains(&o.nranks) {
        return Err(format!("--procs must be 2..={MAX_RANKS}"));
    }
    if let Some(r) = child {
        if r >= o.nranks {
            return Err(format!("--child rank {r} >= {}", o.nranks));
        }
        o.mode = Mode::Child(r);
    }
    Ok(o)
}

const USAGE: &str = "usage: lowp_accuracy [--procs N | --one-process | --toggle] [--quick] [--filter TEXT] [--no-lp] [--seed N] [--list] [--host-check]";

// ---------------------------------------------------------------------------------------------
// Environment and the predicted path
// ---------------------------------------------------------------------------------------------

fn set_default_env(no_lp: bool) {
    let lp = if no_lp { "0" } else { "1" };
    for (k, v) in [("RCCL_LOW_PRECISION_ENABLE", lp), ("RCCLX_LP_MIN_BYTES", "0"), ("NCCL_NVLS_ENABLE", "0")] {
        let forced = no_lp && k == "RCCL_LOW_PRECISION_ENABLE";
        if forced || std::env::var_os(k).is_none() {
            // SAFETY: called at the start of main, before any other thread exists.
            unsafe { std::env::set_var(k, v) };
        }
    }
}

/// Whether rcclx should run `g` on the FP8 path, from the current environment (parsed by
/// rcclx's own config parser, as a communicator created now would see it).
fn expect_lp(op: Op, io: Io, count: usize, n: usize) -> bool {
    let (c, _) = rcclx::config::Config::from_lookup(|k| std::env::var(k).ok());
    let sw = rcclx::intercept::LowpSwitches::from_config(&c);
    let on = match op {
        Op::AllReduce => sw.all_reduce,
        Op::ReduceScatter => sw.reduce_scatter,
        Op::AllGather => sw.all_gather,
        Op::AlltoAll | Op::AllToAllRccl => sw.all_to_all,
    };
    on && !c.disable && op.lp_bytes(count, n, io) >= c.lp_min_bytes
}

// ---------------------------------------------------------------------------------------------
// Watchdog: every wait is bounded, and a stall ends the process
// ---------------------------------------------------------------------------------------------

fn epoch() -> Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    *E.get_or_init(Instant::now)
}
static LAST_PROGRESS_MS: AtomicU64 = AtomicU64::new(0);
static PHASE: Mutex<String> = Mutex::new(String::new());

fn progress(phase: &str) {
    LAST_PROGRESS_MS.store(epoch().elapsed().as_millis() as u64, Ordering::Relaxed);
    if let Ok(mut p) = PHASE.lock() {
        p.clear();
        p.push_str(phase);
    }
}

fn start_watchdog() {
    progress("start");
    std::thread::spawn(|| {
        loop {
            std::thread::sleep(Duration::from_secs(2));
            let last = Duration::from_millis(LAST_PROGRESS_MS.load(Ordering::Relaxed));
            if epoch().elapsed().saturating_sub(last) > STALL_LIMIT {
                let phase = PHASE.lock().map(|p| p.clone()).unwrap_or_default();
                println!("FATAL no progress for {} s during: {phase}", STALL_LIMIT.as_secs());
                let _ = std::io::stdout().flush();
                std::process::exit(3);
            }
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Host reference data
// ---------------------------------------------------------------------------------------------

/// Inputs, exact result, codec model and error bound of one group.
struct Prepared {
    inputs: Vec<Vec<f32>>,
    /// Per output (one for allreduce/allgather, else one per rank).
    exact: Vec<Vec<f64>>,
    model: Vec<Vec<f32>>,
    bound: Vec<Vec<f32>>,
}

impl Prepared {
    fn out(&self, r: usize) -> usize {
        if self.exact.len() == 1 { 0 } else { r }
    }
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(4, |n| n.get()).clamp(1, 32)
}

/// Runs `f` on block-aligned segments of `[0, len)` in parallel; results in order.
fn par_segments<T: Send>(len: usize, f: impl Fn(std::ops::Range<usize>) -> T + Sync) -> Vec<T> {
    let t = threads().min(len.div_ceil(64 * BLOCK)).max(1);
    let seg = len.div_ceil(t).div_ceil(BLOCK) * BLOCK;
    let f = &f;
    std::thread::scope(|s| {
        let hs: Vec<_> =
            (0..len.div_ceil(seg.max(1))).map(|i| s.spawn(move || f(i * seg..((i + 1) * seg).min(len)))).collect();
        hs.into_iter().map(|h| h.join().expect("worker panicked")).collect()
    })
}

fn e_bound(fmt: Fp8Format, x: f32, a: f32) -> f64 {
    f64::from(codec::element_error_bound(fmt, x, a))
}

/// f32 recursive-summation factor for n terms.
fn gamma(n: usize) -> f64 {
    let k = (n as f64 - 1.0) * 2f64.powi(-24);
    k / (1.0 - k)
}

/// Adds the output type's rounding (1 ulp) and converts a bound to f32, rounding up.
fn finish_bound(io: Io, b: f64, exact: f64) -> f32 {
    let total = b + f64::from(io.ulp((exact.abs() + b) as f32));
    let f = total as f32;
    if f64::from(f) < total { f.next_up() } else { f }
}

/// Per-block amaxes of `xs` (blocks from `xs[0]`).
fn amaxes(xs: &[f32]) -> Vec<f32> {
    xs.chunks(BLOCK).map(codec::block_amax).collect()
}

fn prepare(g: &Group, n: usize, fmt: Fp8Format, base_seed: u64, lp: bool) -> Prepared {
    let in_len = g.op.in_len(g.count, n);
    let inputs: Vec<Vec<f32>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                s.spawn(move || {
                    let mut v = g.dist.generate(seed(g, r, base_seed), in_len);
                    g.io.round_all(&mut v);
                    v
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("generator panicked")).collect()
    });
    let io = g.io;
    let count = g.count;
    let ins: Vec<&[f32]> = inputs.iter().map(|v| v.as_slice()).collect();

    // Exact results (f64), per output.
    let exact: Vec<Vec<f64>> = match g.op {
        Op::AllReduce => {
            par_segments(count, |rg| rg.map(|i| ins.iter().map(|v| f64::from(v[i])).sum()).collect::<Vec<f64>>())
                .concat()
        }
        Op::ReduceScatter => (0..n)
            .map(|r| (0..count).map(|i| ins.iter().map(|v| f64::from(v[r * count + i])).sum()).collect())
            .collect::<Vec<Vec<f64>>>()
            .concat(),
        Op::AllGather => ins.iter().flat_map(|v| v.iter().map(|&x| f64::from(x))).collect(),
        Op::AlltoAll | Op::AllToAllRccl => (0..n)
            .flat_map(|p| (0..n).flat_map(move |r| (0..count).map(move |i| (r, p * count + i))))
            .map(|(r, j)| f64::from(ins[r][j]))
            .collect(),
    }
    .chunks(g.op.out_len(count, n))
    .map(|c| c.to_vec())
    .collect();

    if !lp {
        // Control: the stock path rounds the exact result to the output type (sums of n terms
        // in the output type: up to n-1 roundings).
        let k = (n - 1).max(1) as f32;
        let model = exact.iter().map(|e| e.iter().map(|&x| io.round(x as f32)).collect()).collect();
        let bound = exact.iter().map(|e| e.iter().map(|&x| k * io.ulp(x as f32) + MODEL_TOL_ABS).collect()).collect();
        return Prepared { inputs, exact, model, bound };
    }

    let (model, bound): (Vec<Vec<f32>>, Vec<Vec<f32>>) = match g.op {
        Op::AllReduce => {
            let ex = &exact[0];
            let parts = par_segments(count, |rg| {
                let seg: Vec<&[f32]> = ins.iter().map(|v| &v[rg.clone()]).collect();
                let mut model = codec::allreduce_ref(fmt, &seg);
                io.round_all(&mut model);
                let mut bound = Vec::with_capacity(rg.len());
                let q: Vec<Vec<f32>> = seg.iter().map(|v| codec::roundtrip(fmt, v)).collect();
                for b0 in (0..rg.len()).step_by(BLOCK) {
                    let b1 = (b0 + BLOCK).min(rg.len());
                    let mut am = [0f32; MAX_RANKS];
                    for (r, v) in seg.iter().enumerate() {
                        am[r] = codec::block_amax(&v[b0..b1]);
                    }
                    let sums: Vec<f32> = (b0..b1)
                        .map(|i| {
                            let mut s = q[0][i];
                            q[1..].iter().for_each(|v| s += v[i]);
                            s
                        })
                        .collect();
                    let out_amax = codec::block_amax(&sums);
                    for i in b0..b1 {
                        let mut xs = [0f32; MAX_RANKS];
                        for (r, v) in seg.iter().enumerate() {
                            xs[r] = v[i];
                        }
                        let b = codec::allreduce_error_bound(fmt, &xs[..n], &am[..n], sums[i - b0], out_amax);
                        bound.push(finish_bound(io, f64::from(b), ex[rg.start + i]));
                    }
                }
                (model, bound)
            });
            let (m, b): (Vec<Vec<f32>>, Vec<Vec<f32>>) = parts.into_iter().unzip();
            (vec![m.concat()], vec![b.concat()])
        }
        Op::ReduceScatter => {
            let mut model = codec::reduce_scatter_ref(fmt, &ins);
            model.iter_mut().for_each(|m| io.round_all(m));
            let bound = (0..n)
                .map(|r| {
                    let chunk: Vec<&[f32]> = ins.iter().map(|v| &v[r * count..(r + 1) * count]).collect();
                    let am: Vec<Vec<f32>> = chunk.iter().map(|c| amaxes(c)).collect();
                    (0..count)
                        .map(|i| {
                            let (mut e, mut mags) = (0.0, 0.0);
                            for (p, c) in chunk.iter().enumerate() {
                                let ep = e_bound(fmt, c[i], am[p][i / BLOCK]);
                                e += ep;
                                mags += f64::from(c[i].abs()) + ep;
                            }
                            finish_bound(io, e + gamma(n) * mags, exact[r][i])
                        })
                        .collect()
                })
                .collect();
            (model, bound)
        }
        Op::AllGather => {
            let mut model = codec::all_gather_ref(fmt, &ins);
            io.round_all(&mut model);
            let bound = ins
                .iter()
                .flat_map(|v| {
                    let am = amaxes(v);
                    v.iter().enumerate().map(move |(i, &x)| (x, am[i / BLOCK])).collect::<Vec<_>>()
                })
                .zip(&exact[0])
                .map(|((x, a), &e)| finish_bound(io, e_bound(fmt, x, a), e))
                .collect();
            (vec![model], vec![bound])
        }
        Op::AlltoAll | Op::AllToAllRccl => {
            let mut model = codec::all_to_all_ref(fmt, &ins);
            model.iter_mut().for_each(|m| io.round_all(m));
            let bound = (0..n)
                .map(|p| {
                    let mut b = Vec::with_capacity(n * count);
                    for (r, v) in ins.iter().enumerate() {
                        let src = &v[p * count..(p + 1) * count];
                        let am = amaxes(src);
                        for (i, &x) in src.iter().enumerate() {
                            // The chunk a rank keeps is copied exactly.
                            let e = if r == p { 0.0 } else { e_bound(fmt, x, am[i / BLOCK]) };
                            b.push(finish_bound(io, e, exact[p][r * count + i]));
                        }
                    }
                    b
                })
                .collect();
            (model, bound)
        }
    };
    Prepared { inputs, exact, model, bound }
}

// ---------------------------------------------------------------------------------------------
// Per-rank results
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, Default)]
struct RankResult {
    call_ok: bool,
    err: String,
    lp_delta: u64,
    fwd_reason: String,
    nonfinite: u64,
    mism: u64,
    viol: u64,
    flushed: u64,
    guard_ok: bool,
    send_ok: bool,
    rel_l2: f64,
    max_rel: f64,
    vs_model: f64,
    hash: u64,
}

impl RankResult {
    fn failed_call(err: String) -> Self {
        RankResult {
            err,
            guard_ok: true,
            send_ok: true,
            rel_l2: f64::NAN,
            max_rel: f64::NAN,
            vs_model: f64::NAN,
            ..Default::default()
        }
    }

    fn to_line(&self) -> String {
        format!(
            "call={} lp={} fwd={} nonfinite={} mism={} viol={} flushed={} guard={} send={} relL2={:e} maxrel={:e} vsmodel={:e} hash={:x} err={}",
            self.call_ok as u8,
            self.lp_delta,
            if self.fwd_reason.is_empty() { "-" } else { &self.fwd_reason },
            self.nonfinite,
            self.mism,
            self.viol,
            self.flushed,
            self.guard_ok as u8,
            self.send_ok as u8,
            self.rel_l2,
            self.max_rel,
            self.vs_model,
            self.hash,
            self.err.split_whitespace().collect::<Vec<_>>().join("_"),
        )
    }

    fn parse(s: &str) -> Option<Self> {
        let kv: HashMap<&str, &str> = s.split_whitespace().filter_map(|t| t.split_once('=')).collect();
        let g = |k: &str| kv.get(k).copied();
        let f = |k: &str| g(k).and_then(|v| v.parse::<f64>().ok());
        let u = |k: &str| g(k).and_then(|v| v.parse::<u64>().ok());
        Some(RankResult {
            call_ok: g("call")? == "1",
            err: g("err").unwrap_or("").to_string(),
            lp_delta: u("lp")?,
            fwd_reason: g("fwd").filter(|v| *v != "-").unwrap_or("").to_string(),
            nonfinite: u("nonfinite")?,
            mism: u("mism")?,
            viol: u("viol")?,
            flushed: u("flushed")?,
            guard_ok: g("guard")? == "1",
            send_ok: g("send")? == "1",
            rel_l2: f("relL2")?,
            max_rel: f("maxrel")?,
            vs_model: f("vsmodel")?,
            hash: u64::from_str_radix(g("hash")?, 16).ok()?,
        })
    }
}

/// Compares rank `r`'s output with the exact result, the model and the bound. Prints up to
/// [`MAX_NOTES`] offending elements through `note`.
fn evaluate(p: &Prepared, r: usize, io: Io, out_bytes: &[u8], note: &mut dyn FnMut(String)) -> RankResult {
    let got = from_bytes(io, out_bytes);
    let o = p.out(r);
    let (exact, model, bound) = (&p.exact[o], &p.model[o], &p.bound[o]);
    assert_eq!(got.len(), exact.len());
    let mut res = RankResult { call_ok: true, guard_ok: true, send_ok: true, ..Default::default() };
    let (mut num, mut den, mut maxabs, mut maxe) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    let mut notes = 0;
    for i in 0..got.len() {
        let (g, e, m, b) = (got[i], exact[i], model[i], bound[i]);
        if !g.is_finite() {
            res.nonfinite += 1;
        }
        let de = (f64::from(g) - e).abs();
        num += de * de;
        den += e * e;
        maxabs = maxabs.max(if de.is_nan() { f64::INFINITY } else { de });
        maxe = maxe.max(e.abs());
        let dm = (g - m).abs();
        let tol = MODEL_TOL_ULPS * io.ulp(m) + MODEL_TOL_ABS;
        let bad_model = dm.is_nan() || dm > tol;
        let bad_bound = de.is_nan() || de > f64::from(b);
        if bad_model {
            res.mism += 1;
        }
        if bad_bound {
            res.viol += 1;
        }
        let unit = f64::from(b.max(io.ulp(e as f32)));
        res.vs_model = res.vs_model.max(if dm.is_nan() { f64::INFINITY } else { f64::from(dm) / unit });
        if g == 0.0 && e != 0.0 {
            res.flushed += 1;
        }
        if (bad_model || bad_bound) && notes < MAX_NOTES {
            notes += 1;
            note(format!(
                "{} rank {r} element {i} (block {}): gpu={g:e} ({:#x}) model={m:e} exact={e:e} |gpu-model|={dm:e} tol={tol:e} |gpu-exact|={de:e} bound={b:e}",
                if bad_model { "MISMATCH" } else { "BOUND" },
                i / BLOCK,
                raw_bits(io, out_bytes, i),
            ));
        }
    }
    res.rel_l2 = (num / den).sqrt();
    res.max_rel = maxabs / maxe;
    let mut h = Fnv::new();
    h.write(out_bytes);
    res.hash = h.0;
    res
}

fn raw_bits(io: Io, bytes: &[u8], i: usize) -> u32 {
    let s = io.size();
    bytes[i * s..(i + 1) * s].iter().rev().fold(0u32, |a, &b| (a << 8) | u32::from(b))
}

fn to_bytes(io: Io, xs: &[f32]) -> Vec<u8> {
    match io {
        Io::F32 => xs.iter().flat_map(|x| x.to_le_bytes()).collect(),
        _ => xs.iter().flat_map(|&x| io.to_bits16(x).to_le_bytes()).collect(),
    }
}

fn from_bytes(io: Io, b: &[u8]) -> Vec<f32> {
    match io {
        Io::F32 => b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        _ => b.chunks_exact(2).map(|c| io.from_bits16(u16::from_le_bytes([c[0], c[1]]))).collect(),
    }
}

/// Merges the ranks' results into the case's verdict line.
fn judge(case: &Case, lp: bool, rs: &[RankResult]) -> (bool, String) {
    let mut why = Vec::new();
    for (r, x) in rs.iter().enumerate() {
        if !x.call_ok {
            why.push(format!("rank {r}: {}", x.err));
        }
    }
    let all_called = rs.iter().all(|x| x.call_ok);
    if all_called {
        for (r, x) in rs.iter().enumerate() {
            match (lp, x.lp_delta) {
                (true, 1) | (false, 0) => {}
                (true, d) => why.push(format!(
                    "rank {r}: FP8 path not taken (lowpCalls +{d}{})",
                    if x.fwd_reason.is_empty() { String::new() } else { format!(", forwarded: {}", x.fwd_reason) }
                )),
                (false, d) => why.push(format!("rank {r}: FP8 path taken though not expected (lowpCalls +{d})")),
            }
            if !x.guard_ok {
                why.push(format!("rank {r}: write into a guard outside the buffer"));
            }
            if !x.send_ok {
                why.push(format!("rank {r}: out-of-place input modified"));
            }
        }
        let sum = |f: fn(&RankResult) -> u64| rs.iter().map(f).sum::<u64>();
        if sum(|x| x.nonfinite) > 0 {
            why.push(format!("{} non-finite outputs", sum(|x| x.nonfinite)));
        }
        if sum(|x| x.mism) > 0 {
            why.push(format!(
                "{} elements differ from the codec model by more than {MODEL_TOL_ULPS} ulp",
                sum(|x| x.mism)
            ));
        }
        if sum(|x| x.viol) > 0 {
            why.push(format!("{} elements outside the documented error bound", sum(|x| x.viol)));
        }
        let worst_l2 = if rs.iter().any(|x| x.rel_l2.is_nan()) {
            f64::NAN
        } else {
            rs.iter().map(|x| x.rel_l2).fold(0.0, f64::max)
        };
        if worst_l2.is_nan() || worst_l2 > MAX_REL_L2 {
            why.push(format!("relative L2 {worst_l2:.3e} > {MAX_REL_L2}"));
        }
        if case.g.op.shared_output() && rs.iter().any(|x| x.hash != rs[0].hash) {
            why.push("ranks' outputs are not bit-identical".into());
        }
    }
    let maxf = |f: fn(&RankResult) -> f64| rs.iter().map(f).fold(f64::NAN, f64::max);
    let sumu = |f: fn(&RankResult) -> u64| rs.iter().map(f).sum::<u64>();
    let lps: Vec<String> = rs.iter().map(|x| x.lp_delta.to_string()).collect();
    let ok = why.is_empty();
    let mut line = format!(
        "{} {} relL2={:.3e} maxrel={:.3e} vs_model={:.3} mism={} viol={} flushed={} nonfinite={} lp={}{}",
        if ok { "PASS" } else { "FAIL" },
        case.name(),
        maxf(|x| x.rel_l2),
        maxf(|x| x.max_rel),
        maxf(|x| x.vs_model),
        sumu(|x| x.mism),
        sumu(|x| x.viol),
        sumu(|x| x.flushed),
        sumu(|x| x.nonfinite),
        lps.join(","),
        if lp { "" } else { " (control: non-FP8 path)" },
    );
    if !ok {
        line += " -- ";
        line += &why.join("; ");
    }
    (ok, line)
}

// ---------------------------------------------------------------------------------------------
// GPU side: buffers, calls, stats
// ---------------------------------------------------------------------------------------------

/// One rank's device buffers for a case (guards of 0xFF around each).
struct RankBufs {
    /// The output buffer (also the input for in-place), and its host image before the call.
    main: DeviceBuffer,
    /// Separate input buffer (out-of-place) and its host image.
    send_buf: Option<(DeviceBuffer, Vec<u8>)>,
    send: DevicePtr,
    recv: DevicePtr,
    /// Byte range of the output within `main`.
    out: std::ops::Range<usize>,
}

fn setup_buffers(
    rt: &'static Runtime,
    dev: i32,
    case: &Case,
    n: usize,
    r: usize,
    input: &[f32],
) -> Result<RankBufs, String> {
    let (op, io, count) = (case.g.op, case.g.io, case.g.count);
    let sz = io.size();
    let inb = op.in_len(count, n) * sz;
    let outb = op.out_len(count, n) * sz;
    let input = to_bytes(io, input);
    let image = |len: usize, at: usize| {
        let mut v = vec![0xFFu8; GUARD + len + GUARD];
        v[GUARD + at..GUARD + at + input.len()].copy_from_slice(&input);
        v
    };
    let upload = |img: &[u8]| -> Result<DeviceBuffer, String> {
        let b = rt.alloc(dev, img.len(), MemKind::Normal).map_err(|e| e.to_string())?;
        b.copy_from_host(img).map_err(|e| e.to_string())?;
        Ok(b)
    };
    if !case.inplace {
        let simg = image(inb, 0);
        let send = upload(&simg)?;
        let main = upload(&vec![0xFFu8; GUARD + outb + GUARD])?;
        let (s, rp) = (send.ptr().offset(GUARD), main.ptr().offset(GUARD));
        return Ok(RankBufs { main, send_buf: Some((send, simg)), send: s, recv: rp, out: GUARD..GUARD + outb });
    }
    let own = r * count * sz;
    let (main, send_off, recv_off) = match op {
        Op::AllReduce | Op::AlltoAll | Op::AllToAllRccl => (upload(&image(inb, 0))?, 0, 0),
        // nccl-tests layouts: allgather sendbuff = recvbuff + rank*count,
        // reducescatter recvbuff = sendbuff + rank*count.
        Op::AllGather => (upload(&image(outb, own))?, own, 0),
        Op::ReduceScatter => (upload(&image(inb, 0))?, 0, own),
    };
    let base = main.ptr().offset(GUARD);
    Ok(RankBufs {
        send: base.offset(send_off),
        recv: base.offset(recv_off),
        out: GUARD + recv_off..GUARD + recv_off + outb,
        main,
        send_buf: None,
    })
}

/// Reads the output back; (output bytes, guards intact, out-of-place input unchanged).
fn collect(b: &RankBufs) -> Result<(Vec<u8>, bool, bool), String> {
    let mut all = vec![0u8; b.main.len()];
    b.main.copy_to_host(&mut all).map_err(|e| e.to_string())?;
    let end = b.main.len() - GUARD;
    let guard_ok = all[..GUARD].iter().chain(&all[end..]).all(|&x| x == 0xFF);
    let send_ok = match &b.send_buf {
        Some((buf, img)) => {
            let mut s = vec![0u8; img.len()];
            buf.copy_to_host(&mut s).map_err(|e| e.to_string())?;
            &s == img
        }
        None => true,
    };
    Ok((all[b.out.clone()].to_vec(), guard_ok, send_ok))
}

/// Issues the case's collective on one communicator.
///
/// # Safety
/// `send`/`recv` are device buffers of the sizes the call implies on the communicator's
/// device, and `stream` is a stream of that device.
unsafe fn issue(
    op: Op,
    io: Io,
    count: usize,
    send: DevicePtr,
    recv: DevicePtr,
    comm: ncclComm_t,
    stream: Stream,
) -> ncclResult_t {
    let (s, r, dt, st) = (send.as_raw() as *const c_void, recv.as_raw(), dtype_of(io), stream.as_raw());
    // SAFETY: forwarded from the caller (the NCCL contract of each call).
    unsafe {
        match op {
            Op::AllReduce => nccl::ncclAllReduce(s, r, count, dt, ncclRedOp_t::Sum, comm, st),
            Op::ReduceScatter => nccl::ncclReduceScatter(s, r, count, dt, ncclRedOp_t::Sum, comm, st),
            Op::AllGather => nccl::ncclAllGather(s, r, count, dt, comm, st),
            Op::AlltoAll => nccl::ncclAlltoAll(s, r, count, dt, comm, st),
            Op::AllToAllRccl => nccl::ncclAllToAll(s, r, count, dt, comm, st),
        }
    }
}

fn stats(comm: ncclComm_t) -> rcclxCommStats {
    let mut s = rcclxCommStats::default();
    // SAFETY: `s` is a writable rcclxCommStats; an unknown comm only returns an error.
    unsafe { rcclxCommGetStats(comm, &mut s) };
    s
}

/// Name of the forward reason whose counter grew between two snapshots.
fn forward_reason(before: &rcclxCommStats, after: &rcclxCommStats) -> String {
    let mut names = Vec::new();
    for i in 0..before.forwardedByReason.len() {
        if after.forwardedByReason[i] > before.forwardedByReason[i] {
            let p = rcclxForwardReasonName(i as c_int);
            names.push(if p.is_null() {
                format!("reason{i}")
            } else {
                // SAFETY: a non-NULL result is a static NUL-terminated string.
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            });
        }
    }
    names.join(",")
}

fn err_string(r: ncclResult_t) -> String {
    // SAFETY: ncclGetErrorString accepts any value and returns a static string or NULL.
    let p = unsafe { nccl::ncclGetErrorString(r) };
    let text = if p.is_null() {
        String::new()
    } else {
        // SAFETY: non-NULL: a static NUL-terminated string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    };
    format!("nccl error {} ({text})", r.0)
}

fn async_error(comm: ncclComm_t) -> ncclResult_t {
    let mut e = ncclResult_t::Success;
    // SAFETY: valid communicator and out-pointer.
    let r = unsafe { nccl::ncclCommGetAsyncError(comm, &mut e) };
    if r.is_ok() { e } else { r }
}

/// Waits for `stream`; a stream that does not finish is fatal (its kernels cannot be stopped).
fn wait_or_die(rt: &Runtime, stream: Stream, what: &str) -> Result<(), String> {
    match rt.wait_stream(stream, STREAM_WAIT) {
        Ok(true) => Ok(()),
        Ok(false) => {
            println!("FATAL {what}: stream did not finish within {} s", STREAM_WAIT.as_secs());
            let _ = std::io::stdout().flush();
            std::process::exit(1);
        }
        Err(e) => Err(format!("stream wait: {e}")),
    }
}

/// A set of communicators driven from this thread (one per rank in `ranks`).
struct Comms {
    ranks: Vec<usize>,
    comms: Vec<ncclComm_t>,
    streams: Vec<Stream>,
    nranks: usize,
}

impl Comms {
    /// Runs one case on every local rank (inside a group when there are several) and evaluates
    /// each rank's output.
    fn run_case(
        &self,
        rt: &'static Runtime,
        case: &Case,
        p: &Prepared,
        note: &mut dyn FnMut(String),
    ) -> Vec<RankResult> {
        let n = self.nranks;
        let (op, io, count) = (case.g.op, case.g.io, case.g.count);
        let mut bufs = Vec::new();
        for (k, &r) in self.ranks.iter().enumerate() {
            match setup_buffers(rt, r as i32, case, n, r, &p.inputs[r]) {
                Ok(b) => bufs.push(b),
                Err(e) => {
                    return self
                        .ranks
                        .iter()
                        .map(|_| RankResult::failed_call(format!("buffers on rank {}: {e}", self.ranks[k])))
                        .collect();
                }
            }
        }
        let before: Vec<rcclxCommStats> = self.comms.iter().map(|&c| stats(c)).collect();
        progress(&format!("{} (issue)", case.name()));
        let grouped = self.comms.len() > 1;
        let mut rets = Vec::new();
        // SAFETY: group calls take no arguments.
        let gs = if grouped { unsafe { nccl::ncclGroupStart() } } else { ncclResult_t::Success };
        for (k, b) in bufs.iter().enumerate() {
            // SAFETY: buffers sized for this call on rank k's device; stream of that device.
            rets.push(unsafe { issue(op, io, count, b.send, b.recv, self.comms[k], self.streams[k]) });
        }
        // SAFETY: as above.
        let ge = if grouped { unsafe { nccl::ncclGroupEnd() } } else { ncclResult_t::Success };
        progress(&format!("{} (wait)", case.name()));
        let mut out = Vec::new();
        for (k, b) in bufs.iter().enumerate() {
            let r = self.ranks[k];
            let failed = [gs, rets[k], ge].into_iter().find(|x| !x.is_ok());
            let mut res = match failed {
                Some(e) => RankResult::failed_call(format!("call returned {}", err_string(e))),
                None => match wait_or_die(rt, self.streams[k], &case.name()).and_then(|_| collect(b)) {
                    Err(e) => RankResult::failed_call(e),
                    Ok((bytes, guard_ok, send_ok)) => {
                        progress(&format!("{} (check rank {r})", case.name()));
                        let mut res = evaluate(p, r, io, &bytes, note);
                        res.guard_ok = guard_ok;
                        res.send_ok = send_ok;
                        res
                    }
                },
            };
            let ae = async_error(self.comms[k]);
            if !ae.is_ok() && res.call_ok {
                res.call_ok = false;
                res.err = format!("ncclCommGetAsyncError: {}", err_string(ae));
            }
            let after = stats(self.comms[k]);
            res.lp_delta = after.lowpCalls - before[k].lowpCalls;
            res.fwd_reason = forward_reason(&before[k], &after);
            out.push(res);
        }
        out
    }

    fn destroy(self) {
        for (&c, &s) in self.comms.iter().zip(&self.streams) {
            // SAFETY: our own communicator, destroyed once, after its work finished.
            unsafe { nccl::ncclCommDestroy(c) };
            // SAFETY: our own stream, not used afterwards.
            let _ = unsafe { gpu::runtime().map(|rt| rt.destroy_stream(s)) };
        }
    }
}

fn init_all(rt: &'static Runtime, n: usize) -> Result<Comms, String> {
    let mut comms: Vec<ncclComm_t> = vec![std::ptr::null_mut(); n];
    let devs: Vec<c_int> = (0..n as c_int).collect();
    progress("ncclCommInitAll");
    // SAFETY: `comms` has room for n handles, `devs` lists n devices.
    let r = unsafe { nccl::ncclCommInitAll(comms.as_mut_ptr(), n as c_int, devs.as_ptr()) };
    if !r.is_ok() {
        return Err(format!("ncclCommInitAll: {}", err_string(r)));
    }
    let streams =
        (0..n).map(|d| rt.create_stream(d as i32)).collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string())?;
    Ok(Comms { ranks: (0..n).collect(), comms, streams, nranks: n })
}

// ---------------------------------------------------------------------------------------------
// Modes
// ---------------------------------------------------------------------------------------------

struct Tally {
    passed: usize,
    failed: usize,
}

impl Tally {
    fn record(&mut self, ok: bool, line: &str) {
        if ok {
            self.passed += 1
        } else {
            self.failed += 1
        }
        println!("{line}");
    }
    fn finish(&self) -> ExitCode {
        println!("{} passed, {} failed", self.passed, self.failed);
        if self.failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) }
    }
}

fn fp8_format(rt: &Runtime) -> (Fp8Format, String) {
    let arch = rt.device_info(0).map(|i| i.arch).unwrap_or_default();
    match rcclx::kernels::for_arch(&arch) {
        Some(co) => (co.fp8_format(), format!("arch {arch} -> code object {} ({:?})", co.target, co.fp8_format())),
        None => (
            Fp8Format::E4m3fn,
            format!("arch {arch}: NO rcclx code object (rcclx will only forward); model assumes E4m3fn"),
        ),
    }
}

fn header(opts: &Opts, rt: &Runtime) {
    println!("lowp_accuracy: FP8 low-precision collectives vs exact f64 and the codec model (rcclx::lowp::codec)");
    println!(
        "INFO mode {:?}, {} ranks, {} cases{}",
        opts.mode,
        opts.nranks,
        cases(opts).len(),
        if opts.quick { " (quick)" } else { "" }
    );
    println!(
        "INFO runtime {} ({}), {} device(s); {}",
        rt.vendor().name(),
        rt.library(),
        rt.device_count(),
        fp8_format(rt).1
    );
    let up = rcclxGetUpstreamPath();
    let up = if up.is_null() {
        "NONE (set RCCLX_UPSTREAM_LIB)".into()
    } else {
        // SAFETY: non-NULL: a NUL-terminated string that lives as long as the process.
        unsafe { CStr::from_ptr(up) }.to_string_lossy().into_owned()
    };
    println!("INFO stock library: {up}");
    for k in [
        "RCCL_LOW_PRECISION_ENABLE",
        "RCCLX_LP_MIN_BYTES",
        "RCCL_DDA_SENDBUF_BYTES",
        "NCCL_NVLS_ENABLE",
        "RCCLX_UPSTREAM_LIB",
    ] {
        println!("INFO {k}={}", std::env::var(k).unwrap_or_else(|_| "(unset)".into()));
    }
    println!("INFO pass criteria (per case):");
    for c in CRITERIA {
        println!("INFO   - {c}");
    }
    println!(
        "INFO multi-window counts assume the default staging size (largest AllReduce window {} elements per rank)",
        window_elems(Op::AllReduce, 2)
    );
}

fn run_one_process(opts: &Opts, rt: &'static Runtime) -> ExitCode {
    let n = opts.nranks;
    let comms = match init_all(rt, n) {
        Ok(c) => c,
        Err(e) => {
            println!("FATAL {e}");
            return ExitCode::from(1);
        }
    };
    let (fmt, _) = fp8_format(rt);
    let mut tally = Tally { passed: 0, failed: 0 };
    for_each_prepared(&cases(opts), n, fmt, opts.seed, |_, case, p, lp, _| {
        let mut notes = Vec::new();
        let rs = comms.run_case(rt, case, p, &mut |s| notes.push(s));
        let (ok, line) = judge(case, lp, &rs);
        tally.record(ok, &line);
        notes.iter().for_each(|s| println!("    {s}"));
    });
    comms.destroy();
    tally.finish()
}

/// `--host-check`: the model stands in for the GPU's output of every rank.
fn run_host_check(opts: &Opts) -> ExitCode {
    let n = opts.nranks;
    let mut tally = Tally { passed: 0, failed: 0 };
    let all = cases(opts);
    println!("INFO host check: the codec model is fed through the checks as the GPU output ({} cases)", all.len());
    for_each_prepared(&all, n, Fp8Format::E4m3fn, opts.seed, |_, case, p, lp, prep| {
        let g = case.g;
        let mut notes = Vec::new();
        let rs: Vec<RankResult> = (0..n)
            .map(|r| {
                let mut x = evaluate(p, r, g.io, &to_bytes(g.io, &p.model[p.out(r)]), &mut |s| notes.push(s));
                x.lp_delta = lp as u64;
                x
            })
            .collect();
        let (mut ok, mut line) = judge(case, lp, &rs);
        // The checks must catch a wrong element: 4 ulps off, and a NaN.
        let m = &p.model[p.out(0)];
        let k = (0..m.len()).max_by(|&a, &b| m[a].abs().total_cmp(&m[b].abs())).unwrap_or(0);
        for (what, bad) in [("4 ulp", m[k] + 4.0 * g.io.ulp(m[k])), ("NaN", f32::NAN)] {
            let mut v = m.clone();
            v[k] = bad;
            let x = evaluate(p, 0, g.io, &to_bytes(g.io, &v), &mut |_| {});
            if x.mism == 0 || (bad.is_nan() && x.nonfinite == 0) {
                ok = false;
                line = format!("FAIL{} -- a {what} error at element {k} went unnoticed", &line[4..]);
            }
        }
        tally.record(ok, &format!("{line} [host {prep:.2} s]"));
        notes.iter().for_each(|s| println!("    {s}"));
    });
    tally.finish()
}

/// Walks `all` in order and calls `each(index, case, inputs, lp, prepare_seconds)`; the inputs
/// and model outputs are prepared once per group (consecutive cases of one op, type, count and
/// distribution share them).
fn for_each_prepared(
    all: &[Case],
    n: usize,
    fmt: Fp8Format,
    seed: u64,
    mut each: impl FnMut(usize, &Case, &Prepared, bool, f64),
) {
    let mut i = 0;
    while i < all.len() {
        let g = all[i].g;
        let lp = expect_lp(g.op, g.io, g.count, n);
        progress(&format!("prepare {} {} {} {}", g.op.name(), g.io.name(), g.count, g.dist.name()));
        let t = Instant::now();
        let p = prepare(&g, n, fmt, seed, lp);
        let prep = t.elapsed().as_secs_f64();
        while i < all.len() && same_group(&all[i].g, &g) {
            each(i, &all[i], &p, lp, prep);
            i += 1;
        }
    }
}

fn same_group(a: &Group, b: &Group) -> bool {
    a.op == b.op && a.io == b.io && a.count == b.count && a.dist == b.dist
}

/// `--toggle`: the LP switches are read when a communicator is created.
fn run_toggle(opts: &Opts, rt: &'static Runtime) -> ExitCode {
    let n = opts.nranks;
    let (fmt, _) = fp8_format(rt);
    let set = |k: &str, v: Option<&str>| match v {
        // SAFETY: this mode's only other thread is the watchdog, which reads no environment;
        // no communicator call is in flight while the environment changes.
        Some(v) => unsafe { std::env::set_var(k, v) },
        // SAFETY: as above.
        None => unsafe { std::env::remove_var(k) },
    };
    const AR: &str = "RCCL_LOW_PRECISION_ENABLE";
    const AG: &str = "RCCL_LOW_PRECISION_ENABLE_ALLGATHER";
    // (label, global switch, allgather switch)
    let configs = [("A:LP=1", Some("1"), None), ("B:LP-unset", None, None), ("C:only-ALLGATHER=1", None, Some("1"))];
    let mut sets = Vec::new();
    for (label, ar, ag) in configs {
        set(AR, ar);
        set(AG, ag);
        let expect: Vec<bool> =
            [Op::AllReduce, Op::AllGather].iter().map(|&op| expect_lp(op, Io::F32, TOGGLE_COUNT, n)).collect();
        match init_all(rt, n) {
            Ok(c) => sets.push((label, c, expect)),
            Err(e) => {
                println!("FATAL toggle {label}: {e}");
                return ExitCode::from(1);
            }
        }
    }
    set(AR, Some("1"));
    set(AG, None);
    let mut tally = Tally { passed: 0, failed: 0 };
    for (label, comms, expect) in &sets {
        for (k, op) in [Op::AllReduce, Op::AllGather].into_iter().enumerate() {
            let case = Case { g: Group { op, io: Io::F32, count: TOGGLE_COUNT, dist: Dist::Gaussian }, inplace: false };
            let p = prepare(&case.g, n, fmt, opts.seed, expect[k]);
            let mut notes = Vec::new();
            let rs = comms.run_case(rt, &case, &p, &mut |s| notes.push(s));
            let (ok, line) = judge(&case, expect[k], &rs);
            let mut line = format!(
                "{} toggle {label} expects {} {}",
                &line[..4],
                if expect[k] { "FP8" } else { "non-FP8" },
                &line[5..]
            );
            if !ok && !expect[k] && rs.iter().any(|x| x.lp_delta > 0) {
                line += " (rcclx did not re-read the LP switches when this communicator was created)";
            }
            tally.record(ok, &line);
            notes.iter().for_each(|s| println!("    {s}"));
        }
    }
    for (_, c, _) in sets {
        c.destroy();
    }
    tally.finish()
}

/// `--procs N`: the parent spawns N children and merges their results.
fn run_procs(opts: &Opts) -> ExitCode {
    let n = opts.nranks;
    let idfile = std::env::temp_dir().join(format!("lowp_accuracy.{}.id", std::process::id()));
    let _ = std::fs::remove_file(&idfile);
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            println!("FATAL current_exe: {e}");
            return ExitCode::from(2);
        }
    };
    let (tx, rx) = mpsc::channel::<(usize, Option<String>)>();
    let mut children: Vec<Child> = Vec::new();
    for r in 0..n {
        let spawned = Command::new(&exe)
            .args(&opts.raw)
            .arg("--child")
            .arg(r.to_string())
            .arg(&idfile)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                println!("FATAL spawning rank {r}: {e}");
                children.iter_mut().for_each(|c| {
                    let _ = c.kill();
                });
                return ExitCode::from(1);
            }
        };
        let out = child.stdout.take().expect("piped stdout");
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                match line {
                    Ok(l) => {
                        if tx.send((r, Some(l))).is_err() {
                            return;
                        }
                    }
                    Err(_) => break,
                }
            }
            let _ = tx.send((r, None));
        });
        children.push(child);
    }
    drop(tx);

    let all = cases(opts);
    let mut results: HashMap<usize, Vec<Option<RankResult>>> = HashMap::new();
    let mut reported = vec![false; all.len()];
    let (mut done, mut eof) = (vec![false; n], vec![false; n]);
    let mut tally = Tally { passed: 0, failed: 0 };
    let mut fatal = false;
    let kill_all = |children: &mut Vec<Child>| {
        for c in children.iter_mut() {
            let _ = c.kill();
        }
    };
    while !eof.iter().all(|&e| e) {
        match rx.recv_timeout(CHILD_SILENCE) {
            Ok((r, Some(line))) => {
                let (tag, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
                match tag {
                    "RESULT" => {
                        let (idx, body) = rest.split_once(' ').unwrap_or((rest, ""));
                        let (Ok(idx), Some(res)) = (idx.parse::<usize>(), RankResult::parse(body)) else {
                            println!("  [rank {r}] unparsable: {line}");
                            continue;
                        };
                        if idx >= all.len() {
                            continue;
                        }
                        let slot = results.entry(idx).or_insert_with(|| vec![None; n]);
                        slot[r] = Some(res);
                        if slot.iter().all(Option::is_some) {
                            let rs: Vec<RankResult> =
                                results.remove(&idx).unwrap().into_iter().map(Option::unwrap).collect();
                            let c = &all[idx];
                            let (ok, l) = judge(c, expect_lp(c.g.op, c.g.io, c.g.count, n), &rs);
                            tally.record(ok, &l);
                            reported[idx] = true;
                        }
                    }
                    "NOTE" => println!("    [rank {r}] {rest}"),
                    "DONE" => done[r] = true,
                    "FATAL" => {
                        println!("FATAL rank {r}: {rest}");
                        fatal = true;
                    }
                    "INFO" if r != 0 => {}
                    _ => println!("  [rank {r}] {line}"),
                }
            }
            Ok((r, None)) => {
                eof[r] = true;
                if !done[r] && !fatal {
                    println!("FATAL rank {r} exited before finishing; stopping the other ranks");
                    fatal = true;
                }
                if fatal {
                    // A peer cannot finish a collective without it: stop everyone.
                    std::thread::sleep(Duration::from_secs(2));
                    kill_all(&mut children);
                }
            }
            Err(_) => {
                let silent: Vec<usize> = (0..n).filter(|&r| !eof[r]).collect();
                println!("FATAL no output from rank(s) {silent:?} for {} s; killing them", CHILD_SILENCE.as_secs());
                fatal = true;
                kill_all(&mut children);
                break;
            }
        }
    }
    for (r, c) in children.iter_mut().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match c.try_wait() {
                Ok(Some(st)) => {
                    if !st.success() && !fatal {
                        println!("FATAL rank {r} exited with {st}");
                        fatal = true;
                    }
                    break;
                }
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
                _ => {
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
            }
        }
    }
    let _ = std::fs::remove_file(&idfile);
    let missing = reported.iter().filter(|&&x| !x).count();
    if missing > 0 {
        println!("FAIL {missing} case(s) did not complete");
        tally.failed += missing;
    }
    if fatal && tally.failed == 0 {
        tally.failed += 1;
    }
    tally.finish()
}

/// One rank of `--procs`: results go to stdout as `RESULT <case index> key=value...`.
fn run_child(opts: &Opts, rank: usize, rt: &'static Runtime) -> ExitCode {
    let n = opts.nranks;
    let fatal = |what: String| {
        println!("FATAL {what}");
        ExitCode::from(1)
    };
    if let Err(e) = rt.set_device(rank as i32) {
        return fatal(format!("set_device({rank}): {e}"));
    }
    let idfile = opts.idfile.clone().expect("child has an id file");
    let id = if rank == 0 {
        let mut id = ncclUniqueId { internal: [0; 128] };
        // SAFETY: `id` is a writable ncclUniqueId.
        let r = unsafe { nccl::ncclGetUniqueId(&mut id) };
        if !r.is_ok() {
            return fatal(format!("ncclGetUniqueId: {}", err_string(r)));
        }
        let hex: String = id.internal.iter().map(|&b| format!("{:02x}", b as u8)).collect();
        let tmp = format!("{idfile}.tmp");
        if let Err(e) = std::fs::write(&tmp, hex).and_then(|_| std::fs::rename(&tmp, &idfile)) {
            return fatal(format!("writing {idfile}: {e}"));
        }
        id
    } else {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            progress("waiting for the unique id");
            if let Ok(hex) = std::fs::read_to_string(&idfile)
                && hex.len() == 256
            {
                let mut id = ncclUniqueId { internal: [0; 128] };
                for (i, b) in id.internal.iter_mut().enumerate() {
                    *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or(0) as _;
                }
                break id;
            }
            if Instant::now() > deadline {
                return fatal(format!("no unique id in {idfile} after 120 s"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let mut comm: ncclComm_t = std::ptr::null_mut();
    progress("ncclCommInitRank");
    // SAFETY: `comm` is a writable handle; `id` came from ncclGetUniqueId on rank 0.
    let r = unsafe { nccl::ncclCommInitRank(&mut comm, n as c_int, id, rank as c_int) };
    if !r.is_ok() {
        return fatal(format!("ncclCommInitRank: {}", err_string(r)));
    }
    let stream = match rt.create_stream(rank as i32) {
        Ok(s) => s,
        Err(e) => return fatal(format!("create_stream: {e}")),
    };
    let comms = Comms { ranks: vec![rank], comms: vec![comm], streams: vec![stream], nranks: n };
    let (fmt, _) = fp8_format(rt);
    for_each_prepared(&cases(opts), n, fmt, opts.seed, |i, case, p, _, _| {
        let rs = comms.run_case(rt, case, p, &mut |s| println!("NOTE {s}"));
        println!("RESULT {i} {}", rs[0].to_line());
    });
    comms.destroy();
    println!("DONE");
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let opts = match parse_args(std::env::args().skip(1).collect()) {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("lowp_accuracy: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    if opts.list {
        for (i, c) in cases(&opts).iter().enumerate() {
            println!("{i} {}", c.name());
        }
        return ExitCode::SUCCESS;
    }
    // Before any rcclx call (rcclx reads its configuration once) and before any thread exists.
    if !matches!(opts.mode, Mode::Child(_)) {
        set_default_env(opts.no_lp);
    }
    if opts.host_check {
        return run_host_check(&opts);
    }
    start_watchdog();
    let rt = match gpu::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            println!("lowp_accuracy: no GPU: {e}");
            return ExitCode::from(2);
        }
    };
    if (rt.device_count() as usize) < opts.nranks {
        println!("lowp_accuracy: no GPU: needs {} GPUs, the runtime sees {}", opts.nranks, rt.device_count());
        return ExitCode::from(2);
    }
    match opts.mode {
        Mode::Child(r) => run_child(&opts, r, rt),
        Mode::Procs => {
            header(&opts, rt);
            run_procs(&opts)
        }
        Mode::OneProcess => {
            header(&opts, rt);
            run_one_process(&opts, rt)
        }
        Mode::Toggle => {
            header(&opts, rt);
            run_toggle(&opts, rt)
        }
    }
}
