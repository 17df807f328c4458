//! Accuracy and correctness test of rcclx's low-precision (LP) collectives (block-scaled FP8 or
//! INT8 on the wire) on real GPUs.
//!
//! ```text
//! lowp_accuracy [--procs N | --one-process | --toggle] [--codec fp8|int8] [--quick]
//!               [--filter TEXT] [--no-lp] [--default-min-bytes] [--seed N] [--list]
//!   --procs N       (default, N = 2) N child processes, one GPU each (rank r on device r),
//!                   communicator by ncclCommInitRank (unique id through a temp file)
//!   --one-process   one thread, ncclCommInitAll on devices 0..N-1 (N from --procs, default 2),
//!                   every case issued for all communicators inside ncclGroupStart/End
//!   --world G       communicators made by the test harness instead of the stock library
//!                   (rcclx_gpu_tests::world), so that ranks can share GPUs: the N ranks on G
//!                   GPUs (rank r on GPU r*G/N); with --one-process every rank is a stream of
//!                   this process (the grids of ranks sharing a GPU capped to fit together),
//!                   else one process per rank (IPC; time-sliced on a shared GPU: use --quick)
//!   --toggle        LP switch read at communicator creation: comm A with
//!                   RCCL_LOW_PRECISION_ENABLE=1, comm B with it unset, comm C with only
//!                   RCCL_LOW_PRECISION_ENABLE_ALLGATHER=1; checks which calls took the LP path
//!   --codec C       the LP codec, fp8 or int8 (default: RCCLX_LOW_PRECISION_CODEC, else fp8);
//!                   sets RCCLX_LOW_PRECISION_CODEC for rcclx (and the --procs children)
//!   --quick         counts 1, 127, 129, 128*N+1, 1Mi+3 only; gaussian, big-and-small and specials only
//!   --filter TEXT   only cases whose name ("allreduce bf16 127 in-place gaussian") contains TEXT
//!   --default-min-bytes  leave RCCLX_LP_MIN_BYTES unset: rcclx's default thresholds decide
//!                   which cases take the low-precision path (the rest are checked as exact)
//!   --no-lp         control run: RCCL_LOW_PRECISION_ENABLE=0; expects the non-LP path and
//!                   compares with the exact result rounded to the output type
//!   --seed N        base seed of the input data (default 1)
//!   --list          print the cases and exit (no GPU needed)
//!   --host-check    no GPU: feed the codec model itself through the checks as if it were the GPU's
//!                   output (validates the harness: bounds, tolerances, verdicts; and host time);
//!                   N ranks from --procs (FP8 as E4m3fn)
//!   (internal) --child RANK IDFILE: one rank of --procs
//! ```
//!
//! Environment: `RCCLX_UPSTREAM_LIB` (the stock libnccl.so.2) as for any rcclx program. Unless
//! already set, the program sets `RCCL_LOW_PRECISION_ENABLE=1` (`0` with `--no-lp`),
//! `RCCLX_LP_MIN_BYTES=0` (not with `--default-min-bytes`) and `NCCL_NVLS_ENABLE=0` before
//! the first rcclx call, and always `RCCLX_LOW_PRECISION_CODEC` (the codec chosen above); the
//! path each case should take is rcclx's own decision (`rcclx::intercept::decide`) for those
//! variables, and the model is that codec's (FP8 in device 0's E4M3 format).
//!
//! Each case: collective x type x count x placement x distribution (`cases.rs`). The host
//! computes the exact result (f64), the codec model (`rcclx_gpu_tests::codec::*_ref`, what the
//! kernels must produce, rounded to the output type: a rank's own AllGather and AllToAll chunk
//! and its own ReduceScatter term are exact; AllReduce on 2 ranks sums both quantized inputs,
//! on more ranks re-quantizes the owner's sum) and the documented per-element error bound
//! (`reference.rs`), runs the case (`device.rs`; `procs.rs` for one process per rank) and
//! compares every output element (`report.rs`, whose `CRITERIA` say what passes). Output: one
//! line per case, `PASS|FAIL coll dtype count placement dist relL2=.. maxrel=.. vs_model=.. ...`,
//! mismatches verbatim under it, then `N passed, M failed`.
//!
//! Exit status: 0 all passed, 1 a case failed, 2 no GPU / fewer than N GPUs / bad arguments,
//! 3 a stall (no progress for 300 s; every wait is bounded).
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod cases;
mod device;
mod opts;
mod procs;
mod reference;
mod report;

use std::process::ExitCode;
use std::time::Duration;

use rcclx::config::LowpCodec;
use rcclx::gpu::Runtime;
use rcclx_gpu_tests::codec::synth::Dist;
use rcclx_gpu_tests::codec::{Codec, Fp8Format, Io};
use rcclx_gpu_tests::world::{self, Layout, Placement};
use rcclx_gpu_tests::{self as harness, EXIT_FAILED, Tally, watchdog};

use cases::{Case, Group, Op, codec_name, expect_lowp};
use device::Comms;
use opts::{Mode, Opts, USAGE, parse_args, set_default_env};
use reference::{for_each_prepared, model_codec, prepare, to_bytes};
use report::{RankResult, evaluate, judge};

/// No progress for this long ends the process (exit 3).
const STALL_LIMIT: Duration = Duration::from_secs(300);
/// Count of the `--toggle` calls.
const TOGGLE_COUNT: usize = 64 * 1024 + 3;

fn main() -> ExitCode {
    let opts = match harness::options_or_exit("lowp_accuracy", USAGE, parse_args) {
        Ok(o) => o,
        Err(code) => return code,
    };
    if opts.list {
        for (i, c) in opts.cases().iter().enumerate() {
            println!("{i} {}", c.name());
        }
        return ExitCode::SUCCESS;
    }
    // Before any rcclx call (rcclx reads its configuration once) and before any thread exists.
    // A child inherits its parent's environment.
    if !matches!(opts.mode, Mode::Child(_)) {
        set_default_env(opts.no_lp, opts.default_min_bytes, opts.codec);
    }
    if opts.host_check {
        return run_host_check(&opts);
    }
    watchdog::start(STALL_LIMIT);
    let rt = match harness::gpu::runtime_or_exit("lowp_accuracy", opts.world.unwrap_or(opts.nranks)) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match opts.mode {
        Mode::Child(r) => procs::run_child(&opts, r, rt),
        Mode::Procs => {
            report::header(&opts, rt);
            procs::run_procs(&opts)
        }
        Mode::OneProcess => {
            report::header(&opts, rt);
            run_one_process(&opts, rt)
        }
        Mode::Toggle => {
            report::header(&opts, rt);
            run_toggle(&opts, rt)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Modes (--procs and --child: procs.rs)
// ---------------------------------------------------------------------------------------------

/// `--one-process`: one thread drives every rank.
fn run_one_process(opts: &Opts, rt: &'static Runtime) -> ExitCode {
    let n = opts.nranks;
    let made = match opts.world {
        Some(gpus) => {
            let placement = Placement { nranks: n, gpus, layout: Layout::Streams };
            println!("INFO {}", placement.describe());
            let ranks: Vec<usize> = (0..n).collect();
            world::fresh_dir("lowp").map_err(|f| f.0).and_then(|dir| Comms::world(rt, placement, &ranks, &dir))
        }
        None => Comms::init_all(rt, n),
    };
    let comms = match made {
        Ok(c) => c,
        Err(e) => {
            println!("FATAL {e}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let (codec, _) = model_codec(rt, opts.codec);
    let mut tally = Tally::new();
    let mut coverage = LpCoverage::default();
    for_each_prepared(&opts.cases(), n, codec, opts.seed, |_, case, p, lowp, _| {
        let mut notes = Vec::new();
        let rs = comms.run_case(rt, case, p, &mut |s| notes.push(s));
        let (ok, line) = judge(case, lowp, &rs);
        coverage.add(case.g.op, lowp);
        tally.record(ok, &line);
        notes.iter().for_each(|s| println!("    {s}"));
    });
    comms.destroy(rt);
    coverage.check(&mut tally, opts);
    tally.finish()
}

/// Cases per collective, and how many of them the low-precision path runs (`judge` checks
/// that it ran exactly there).
#[derive(Default)]
pub struct LpCoverage(std::collections::BTreeMap<&'static str, (usize, usize)>);

impl LpCoverage {
    pub fn add(&mut self, op: Op, lowp: bool) {
        let e = self.0.entry(op.name()).or_default();
        e.0 += 1;
        e.1 += usize::from(lowp);
    }

    /// With the LP switch on and every message eligible (`RCCLX_LP_MIN_BYTES=0`), every
    /// collective the run exercised must have had at least one low-precision case: a run that
    /// checked only the exact path asserted nothing about low precision.
    pub fn check(&self, tally: &mut Tally, opts: &Opts) {
        if opts.no_lp || opts.default_min_bytes {
            return;
        }
        for (op, (cases, lp)) in &self.0 {
            let ok = *lp >= 1;
            let verdict = if ok { "PASS" } else { "FAIL" };
            tally.record(ok, &format!("{verdict} lp-coverage {op}: {lp} of {cases} cases on the low-precision path"));
        }
    }
}

/// `--host-check`: the model stands in for the GPU's output of every rank.
fn run_host_check(opts: &Opts) -> ExitCode {
    let n = opts.nranks;
    let mut tally = Tally::new();
    let all = opts.cases();
    let codec = match opts.codec {
        LowpCodec::Fp8 => Codec::Fp8(Fp8Format::E4m3fn),
        LowpCodec::Int8 => Codec::Int8,
    };
    println!(
        "INFO host check: the codec model ({}, {n} ranks) is fed through the checks as the GPU output ({} cases)",
        codec.name(),
        all.len()
    );
    let mut coverage = LpCoverage::default();
    for_each_prepared(&all, n, codec, opts.seed, |_, case, p, lowp, prep| {
        let g = case.g;
        coverage.add(g.op, lowp);
        let mut notes = Vec::new();
        let rs: Vec<RankResult> = (0..n)
            .map(|r| {
                let mut x = evaluate(p, r, g.io, &to_bytes(g.io, p.model(r)), &mut |s| notes.push(s));
                x.lp_delta = lowp as u64;
                x
            })
            .collect();
        let (mut ok, mut line) = judge(case, lowp, &rs);
        // The checks must catch a wrong element: 4 ulps off, and a NaN.
        let m = p.model(0);
        let finite = |i: &usize| m[*i].is_finite();
        // (An output of one NaN element, from a `specials` input at count 1, has no finite one.)
        let mut planted = Vec::new();
        if let Some(k) = (0..m.len()).filter(finite).max_by(|&a, &b| m[a].abs().total_cmp(&m[b].abs())) {
            planted.extend([(k, "4 ulp", m[k] + 4.0 * g.io.ulp(m[k])), (k, "NaN", f32::NAN)]);
        }
        // Where the model is NaN/inf (a NaN/inf input), a finite value must be caught too.
        if let Some(j) = (0..m.len()).find(|i| !finite(i)) {
            planted.push((j, "finite-for-non-finite", 0.0));
        }
        for (k, what, bad) in planted {
            let mut v = m.to_vec();
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
    coverage.check(&mut tally, opts);
    tally.finish()
}

/// `--toggle`: the LP switches are read when a communicator is created.
fn run_toggle(opts: &Opts, rt: &'static Runtime) -> ExitCode {
    let n = opts.nranks;
    let (codec, _) = model_codec(rt, opts.codec);
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
            [Op::AllReduce, Op::AllGather].iter().map(|&op| expect_lowp(op, Io::F32, TOGGLE_COUNT, n)).collect();
        match Comms::init_all(rt, n) {
            Ok(c) => sets.push((label, c, expect)),
            Err(e) => {
                println!("FATAL toggle {label}: {e}");
                return ExitCode::from(EXIT_FAILED);
            }
        }
    }
    set(AR, Some("1"));
    set(AG, None);
    let mut tally = Tally::new();
    for (label, comms, expect) in &sets {
        for (k, op) in [Op::AllReduce, Op::AllGather].into_iter().enumerate() {
            let case = Case { g: Group { op, io: Io::F32, count: TOGGLE_COUNT, dist: Dist::Gaussian }, inplace: false };
            let p = prepare(&case.g, n, codec, opts.seed, expect[k]);
            let mut notes = Vec::new();
            let rs = comms.run_case(rt, &case, &p, &mut |s| notes.push(s));
            let (ok, line) = judge(&case, expect[k], &rs);
            let mut line = format!(
                "{} toggle {label} expects {} {}",
                &line[..4],
                if expect[k] { codec_name(opts.codec) } else { "non-LP" },
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
        c.destroy(rt);
    }
    tally.finish()
}
