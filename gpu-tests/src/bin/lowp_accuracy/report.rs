//! The pass criteria, each rank's result of a case (also its one-line form, which `--child`
//! ranks send to the parent), the verdict line of a case, and the header of a run.

use std::collections::HashMap;
use std::ffi::CStr;

use rcclx::abi::own::rcclxGetUpstreamPath;
use rcclx::gpu::Runtime;
use rcclx_gpu_tests::codec::{BLOCK, Io};

use crate::cases::{Case, Op, codec_name, window_elems};
use crate::opts::Opts;
use crate::reference::{MODEL_TOL_ABS, Prepared, fp8_format, from_bytes, model_codec, raw_bits};
use rcclx_gpu_tests::fnv::Fnv;

/// Largest relative L2 error vs the exact (f64) result, every distribution.
const MAX_REL_L2: f64 = 0.05;
/// Outputs shorter than this are exempt from [`MAX_REL_L2`]: a few elements make no statistic
/// (a sum of quantized terms that nearly cancel has a large relative error within its bound),
/// and the per-element bound covers them.
const MIN_L2_ELEMS: usize = 1024;
/// `|gpu - model| <= MODEL_TOL_ULPS * ulp(output type at the model value) + MODEL_TOL_ABS`.
const MODEL_TOL_ULPS: f32 = 1.0;
/// Mismatches / bound violations printed per rank and case.
const MAX_NOTES: usize = 5;

const CRITERIA: &[&str] = &[
    "no NaN/Inf where the model is finite; where it is not (a NaN/inf input, `specials` inputs only), the same: NaN for NaN (any payload), the same inf for inf (exact own chunks); such elements are left out of the other criteria",
    "|gpu - model| <= 1 ulp of the output type + 1.2e-38 for every element (model = rcclx_gpu_tests::codec::*_ref of the codec, rounded RNE to the output type; each rank's own AllGather/AllToAll chunk and ReduceScatter term exact; AllReduce: 2 ranks exchange, more re-quantize)",
    "relative L2 error vs the exact f64 result <= 0.05 (outputs of 1024 elements or more)",
    "|gpu - exact| <= documented bound (codec::*_error_bounds, + 1 ulp of the output type) for every element",
    "allreduce: every rank's output bit-identical",
    "the low-precision path of the codec was taken (routes <coll>.lowp[_*] for fp8, <coll>.int8[_*] for int8: + 1 call per rank; none on the other codec's) exactly when the switches and RCCLX_LP_MIN_BYTES say so",
    "no write into the 256-byte guards around each buffer; out-of-place input unchanged",
];

/// One rank's result of one case.
#[derive(Clone, Debug, Default)]
pub struct RankResult {
    pub call_ok: bool,
    pub err: String,
    /// Growth of the communicator's call count on the case's low-precision route of the
    /// expected codec (1: the call took it).
    pub lp_delta: u64,
    /// Growth of the call count on the case's low-precision route of the other codec.
    pub lp_other: u64,
    /// Why rcclx forwarded the call, if it did.
    pub fwd_reason: String,
    pub nonfinite: u64,
    /// Elements off the codec model by more than the tolerance.
    pub mism: u64,
    /// Elements outside the error bound.
    pub viol: u64,
    /// Elements that came out 0 where the exact result is not.
    pub flushed: u64,
    pub guard_ok: bool,
    pub send_ok: bool,
    pub rel_l2: f64,
    pub max_rel: f64,
    /// Largest |gpu - model| in units of the element's bound.
    pub vs_model: f64,
    /// Fingerprint of the output bytes (ranks sharing an output must agree).
    pub hash: u64,
}

impl RankResult {
    pub fn failed_call(err: String) -> Self {
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

    /// `key=value ...`, read back by [`RankResult::parse`].
    pub fn to_line(&self) -> String {
        format!(
            "call={} lp={} lpx={} fwd={} nonfinite={} mism={} viol={} flushed={} guard={} send={} relL2={:e} maxrel={:e} vsmodel={:e} hash={:x} err={}",
            self.call_ok as u8,
            self.lp_delta,
            self.lp_other,
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

    pub fn parse(s: &str) -> Option<Self> {
        let kv: HashMap<&str, &str> = s.split_whitespace().filter_map(|t| t.split_once('=')).collect();
        let g = |k: &str| kv.get(k).copied();
        let f = |k: &str| g(k).and_then(|v| v.parse::<f64>().ok());
        let u = |k: &str| g(k).and_then(|v| v.parse::<u64>().ok());
        Some(RankResult {
            call_ok: g("call")? == "1",
            err: g("err").unwrap_or("").to_string(),
            lp_delta: u("lp")?,
            lp_other: u("lpx")?,
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
pub fn evaluate(p: &Prepared, r: usize, io: Io, out_bytes: &[u8], note: &mut dyn FnMut(String)) -> RankResult {
    let got = from_bytes(io, out_bytes);
    let (exact, model, bound) = (p.exact(r), p.model(r), p.bound(r));
    assert_eq!(got.len(), exact.len());
    let mut res = RankResult { call_ok: true, guard_ok: true, send_ok: true, ..Default::default() };
    let (mut num, mut den, mut maxabs, mut maxe) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    let mut notes = 0;
    for i in 0..got.len() {
        let (g, e, m, b) = (got[i], exact[i], model[i], bound[i]);
        if !m.is_finite() {
            // A NaN/inf input: the codecs send NaN for it, exact own chunks keep it.
            if !(g == m || (g.is_nan() && m.is_nan())) {
                res.mism += 1;
                if notes < MAX_NOTES {
                    notes += 1;
                    note(format!(
                        "MISMATCH rank {r} element {i} (block {}): gpu={g:e} ({:#x}) model={m:e}",
                        i / BLOCK,
                        raw_bits(io, out_bytes, i)
                    ));
                }
            }
            continue;
        }
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
    // No finite exact value (every element a NaN/inf input's, left out above): nothing to measure.
    res.rel_l2 = if den > 0.0 {
        (num / den).sqrt()
    } else if num == 0.0 {
        0.0
    } else {
        f64::INFINITY
    };
    res.max_rel = maxabs / maxe;
    let mut h = Fnv::new();
    h.write(out_bytes);
    res.hash = h.0;
    res
}

/// Merges the ranks' results into the case's verdict: (passed, `PASS|FAIL <case> ...` line).
pub fn judge(case: &Case, lowp: bool, rs: &[RankResult]) -> (bool, String) {
    let mut why = Vec::new();
    for (r, x) in rs.iter().enumerate() {
        if !x.call_ok {
            why.push(format!("rank {r}: {}", x.err));
        }
    }
    let all_called = rs.iter().all(|x| x.call_ok);
    if all_called {
        for (r, x) in rs.iter().enumerate() {
            match (lowp, x.lp_delta, x.lp_other) {
                (true, 1, 0) | (false, 0, 0) => {}
                (true, _, o) if o > 0 => {
                    why.push(format!("rank {r}: low-precision path taken with the other codec (+{o} calls)"))
                }
                (true, d, _) => why.push(format!(
                    "rank {r}: low-precision path not taken (+{d} calls{})",
                    if x.fwd_reason.is_empty() { String::new() } else { format!(", forwarded: {}", x.fwd_reason) }
                )),
                (false, d, o) => {
                    why.push(format!("rank {r}: low-precision path taken though not expected (+{} calls)", d + o))
                }
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
        let statistic = case.g.op.out_len(case.g.count, rs.len()) >= MIN_L2_ELEMS;
        if worst_l2.is_nan() || (statistic && worst_l2 > MAX_REL_L2) {
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
        if lowp { "" } else { " (control: non-low-precision path)" },
    );
    if !ok {
        line += " -- ";
        line += &why.join("; ");
    }
    (ok, line)
}

/// The INFO lines a GPU run starts with: mode, runtime and code object, stock library,
/// environment, criteria.
pub fn header(opts: &Opts, rt: &Runtime) {
    println!("lowp_accuracy: low-precision collectives vs exact f64 and the codec model (rcclx_gpu_tests::codec)");
    println!(
        "INFO mode {:?}, {} ranks, {} cases{}",
        opts.mode,
        opts.nranks,
        opts.cases().len(),
        if opts.quick { " (quick)" } else { "" }
    );
    println!(
        "INFO runtime {} ({}), {} device(s); {}",
        rt.vendor().name(),
        rt.library(),
        rt.device_count(),
        fp8_format(rt).1
    );
    println!(
        "INFO codec {} (RCCLX_LOW_PRECISION_CODEC), model {}",
        codec_name(opts.codec),
        model_codec(rt, opts.codec).0.name()
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
        "RCCLX_LOW_PRECISION_CODEC",
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
        "INFO windows from the staging size of the environment (largest AllReduce window {} elements per rank)",
        window_elems(Op::AllReduce, opts.nranks)
    );
}
