//! The `time` and `time-lowp` suites: a timing proxy for comparing two builds whose only
//! difference is the kernels (A/B). Every rank is a stream of one process on one GPU, so link
//! bandwidth and latency do not transfer to a real machine; instruction counts, HBM passes and
//! serialized phases do. Per case: warm-up calls, then timed calls back to back on every rank
//! (no check between them), between two timed events on every rank's stream; the time per call
//! is the largest (end - start) of the ranks over the timed calls. The last call's output is
//! then checked (DDA: exact against the model; low precision: within a relative error), so a
//! broken kernel cannot report a fast time.
//!
//! `TIME <route> <coll> <type> <op> <bytes> <us_per_call> <calls>` per case (`failed` for the
//! time of a case whose check failed), then the usual `PASS`/`FAIL` line.

use rcclx::collective::Shape;
use rcclx::gpu::Event;
use rcclx::intercept::{Coll, CommFacts, Policies};
use rcclx_gpu_tests::children::say;
use rcclx_gpu_tests::reduce::{self, Op, Ty};
use rcclx_gpu_tests::{Fail, watchdog};

use crate::cases::{Case, SPECIAL_EVERY, expected};
use crate::device::{self, Ranks, kernel_for, report, route_calls, route_for};
use crate::opts::{Opts, Suite};

const MIB: u64 = 1 << 20;
/// Largest relative L2 error of a low-precision output against the exact model (FP8 and INT8
/// stay well below; a kernel that writes garbage or nothing is near 1).
const LOWP_BOUND: f64 = 0.25;

/// The timed calls: `lowp` those of `time-lowp`. A DDA size past the collective's limit at this
/// rank count is lowered to the limit (the call would be forwarded); duplicates are dropped.
pub fn cases(lowp: bool, n: usize, p: &Policies, quick: bool) -> Vec<Case> {
    let sizes: &[u64] = match (lowp, quick) {
        (false, false) => &[64 << 10, MIB, 16 * MIB, 64 * MIB],
        (false, true) => &[64 << 10, 16 * MIB],
        (true, false) => &[16 * MIB, 64 * MIB],
        (true, true) => &[16 * MIB],
    };
    let mut want: Vec<(Coll, Ty, Op, u64)> = Vec::new();
    for ty in if lowp { vec![Ty::Bf16] } else { vec![Ty::Bf16, Ty::F32] } {
        want.extend(sizes.iter().map(|&b| (Coll::AllReduce, ty, Op::Sum, b)));
    }
    if !lowp {
        want.extend([(Coll::AllReduce, Ty::F32, Op::Max, 16 * MIB), (Coll::AllReduce, Ty::F64, Op::Sum, 16 * MIB)]);
    }
    want.extend([(Coll::ReduceScatter, Ty::Bf16, Op::Sum, 16 * MIB), (Coll::AllGather, Ty::Bf16, Op::Sum, 16 * MIB)]);
    let mut out: Vec<Case> = Vec::new();
    for (coll, ty, op, bytes) in want {
        let bytes = if lowp { bytes } else { bytes.min(p.of(coll).max) };
        let per = ty.size() as u64 * if coll.spec().shape == Shape::Whole { 1 } else { n as u64 };
        let case = Case {
            coll,
            ty,
            op,
            count: (bytes / per) as usize,
            inplace: false,
            shift: 0,
            root: 0,
            null_off_root: false,
        };
        if !out.contains(&case) {
            out.push(case);
        }
    }
    out
}

/// `--list`: the cases and the route each takes with this run's settings (`set_env` first).
pub fn list(opts: &Opts) {
    let n = opts.placement.nranks;
    let policies = Policies::for_comm(rcclx::config::get(), n, rcclx::clique::local_fabric());
    let facts = CommFacts { nranks: n, hosts: 1, rank_step: 1, policies };
    for (i, c) in cases(opts.suite == Suite::TimeLowp, n, &policies, opts.quick).iter().enumerate() {
        let (route, kernel) = route_for(&facts, &c.call());
        println!("{i} {route} {} {} bytes {kernel}", c.name(), c.call().bytes(n).unwrap_or(0));
    }
}

/// Elements of a bf16 or f32 buffer as f64.
fn floats(ty: Ty, b: &[u8]) -> Vec<f64> {
    match ty {
        Ty::Bf16 => b
            .chunks_exact(2)
            .map(|c| f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16) as f64)
            .collect(),
        _ => b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect(),
    }
}

/// Relative L2 error of `got` against `want`; infinite if `got` has an element that is not finite.
fn relative_error(ty: Ty, got: &[u8], want: &[u8]) -> f64 {
    let (g, w) = (floats(ty, got), floats(ty, want));
    if g.iter().any(|x| !x.is_finite()) {
        return f64::INFINITY;
    }
    let err: f64 = g.iter().zip(&w).map(|(a, b)| (a - b) * (a - b)).sum();
    let norm: f64 = w.iter().map(|b| b * b).sum();
    (err / norm.max(f64::MIN_POSITIVE)).sqrt()
}

pub fn run(dev: &mut Ranks, opts: &Opts) -> Result<(), Fail> {
    let n = dev.nranks();
    let lowp = opts.suite == Suite::TimeLowp;
    let (warm, timed) = if opts.quick { (3, 20) } else { (10, 100) };
    let p = dev.world.cliques[0].facts.policies;
    let timed_event = |k: usize| dev.rt.create_timed_event(dev.world.devices[k]);
    let starts: Vec<Event> = (0..dev.local()).map(timed_event).collect::<Result<_, _>>()?;
    let ends: Vec<Event> = (0..dev.local()).map(timed_event).collect::<Result<_, _>>()?;
    for (i, case) in cases(lowp, n, &p, opts.quick).iter().enumerate() {
        let name = format!("time {}", case.name());
        if dev.announcer {
            say(&format!("CASE {i} {name}"));
        }
        watchdog::progress(&format!("{name} (inputs)"));
        // Low precision: finite inputs (the codec's scales are per block).
        let special = if lowp { 0 } else { SPECIAL_EVERY };
        let ins: Vec<Vec<u8>> =
            (0..n).map(|r| reduce::generate(case.ty, case.in_len(n), case.seed(opts.seed, r), special)).collect();
        let images = crate::cases::upload_images(dev, case, &ins, 0xEE)?;
        let before: Vec<Vec<u64>> = (0..dev.local()).map(|k| route_calls(dev.world.comms[k])).collect();
        watchdog::progress(&format!("{name} (run)"));
        let call = case.call();
        let mut bad_ret = vec![None; dev.local()];
        for j in 0..warm + timed {
            if j == warm {
                for (k, &e) in starts.iter().enumerate() {
                    dev.rt.record_event(e, dev.stream(k))?;
                }
            }
            for (k, (img, base)) in images.iter().enumerate() {
                let ret = dev.collective(k, call, base.offset(img.send), base.offset(img.recv));
                if !ret.is_ok() {
                    bad_ret[k].get_or_insert(ret.0);
                }
            }
        }
        for (k, &e) in ends.iter().enumerate() {
            dev.rt.record_event(e, dev.stream(k))?;
        }
        let kernel = kernel_for(&dev.world.cliques[0], &call).1;
        dev.wait_all(&|_| format!("{name}: {} calls, kernel {kernel}", warm + timed))?;
        let mut ms = 0f32;
        for k in 0..dev.local() {
            ms = ms.max(dev.rt.elapsed_ms(starts[k], ends[k])?);
        }
        watchdog::progress(&format!("{name} (check)"));
        let (mut all_ok, mut routes) = (true, Vec::new());
        for (k, (img, _)) in images.iter().enumerate() {
            let r = dev.world.ranks[k];
            let route = device::grown(&before[k], &route_calls(dev.world.comms[k]));
            let got = dev.download(k, 0, img.total)?;
            let want = expected(case, n, r, &ins);
            let (ok, h, detail) = match img.check(&got, &ins[r]) {
                Err(e) => (false, "-".to_string(), e),
                Ok(out) if lowp => {
                    let e = relative_error(case.ty, out, &want);
                    (e <= LOWP_BOUND, device::hash(out), format!("relative error {e:.4} (bound {LOWP_BOUND})"))
                }
                Ok(out) => match reduce::mismatches(case.compare_as(), out, &want) {
                    (0, _) => (true, device::hash(out), format!("{} elements exact", case.out_len(n, r))),
                    (bad, _) => (false, device::hash(out), format!("{bad} elements differ from the model")),
                },
            };
            let (ok, detail) = match bad_ret[k] {
                Some(code) => (false, format!("a call returned {code} ({detail})")),
                None => (ok && route != "forwarded" && route != "none", detail),
            };
            // A low-precision AllGather keeps each rank's own chunk exact: outputs differ.
            let group = if lowp && case.coll == Coll::AllGather { r } else { case.group(r) };
            report(i, r, ok, group, &h, &route, &format!("{detail}; {:.2} us per call", ms * 1e3 / timed as f32));
            all_ok &= ok;
            routes.push(route);
        }
        routes.dedup();
        let us = if all_ok { format!("{:.2}", ms * 1e3 / timed as f32) } else { "failed".into() };
        say(&format!(
            "TIME {} {} {} {} {} {us} {timed}",
            routes.join(","),
            case.coll.name(),
            case.ty.name(),
            if case.coll.spec().reduces { case.op.name() } else { "-" },
            call.bytes(n).unwrap_or(0)
        ));
    }
    for (k, e) in starts.into_iter().chain(ends).enumerate() {
        let _g = dev.rt.device_guard(dev.world.devices[k % dev.local()]);
        // SAFETY: our own events; every stream they were recorded on has finished.
        let _ = unsafe { dev.rt.destroy_event(e) };
    }
    Ok(())
}
