//! The `graph` suite: one call of every kernel family (DDA LL, flat and two-shot, low precision
//! with the codec of `--codec`, the GPU-resident AllToAllv), captured on every rank's stream
//! into a CUDA/HIP graph together with a reset of its outputs, and replayed 1,000 times; then
//! every output must be bit-identical to the same calls run eagerly, and the eager DDA outputs
//! exact against the model. Replays advance the kernels' window counters and LL parities in
//! device memory, so a replay that reused stale state would hang or differ.

use rcclx::collective::Shape;
use rcclx::intercept::Coll;
use rcclx_gpu_tests::reduce::{self, Op, Ty};
use rcclx_gpu_tests::{Fail, watchdog};

use crate::a2av;
use crate::cases::{Case, Image, SPECIAL_EVERY, expected};
use crate::device::{self, Ranks, kernel_for, report, route_calls};
use crate::opts::Opts;

/// Replays of the graph.
const REPLAYS: usize = 1000;

/// A call of the graph.
enum Call {
    Coll(Case),
    A2av(a2av::Case, a2av::Prepared),
}

/// One call per kernel family the clique can run: for each target route, the first candidate
/// (type, op, size) that rcclx routes there; an error names the routes no candidate reaches.
fn calls(dev: &Ranks, seed: u64) -> Result<Vec<(String, Call)>, Fail> {
    let c = &dev.world.cliques[0];
    let n = dev.nranks();
    let p = c.facts.policies;
    let lp = if p.codec(1) == rcclx::config::LowpCodec::Int8 { "int8" } else { "lowp" };
    let (mut out, mut missing) = (Vec::new(), Vec::new());
    for coll in Coll::ALL {
        let q = *p.of(coll);
        let per_rank = if coll.spec().shape == Shape::Whole { 1 } else { n as u64 };
        let mut targets = crate::routes::dda_algos(&p, coll, n);
        if q.lowp != 0 {
            targets.push(lp);
        }
        for algo in targets {
            let want = match (coll, n, algo) {
                (Coll::AllReduce, 2, "lowp" | "int8") => format!("allreduce.{algo}_pair"),
                _ => format!("{}.{algo}", coll.name()),
            };
            let candidates = [(Ty::I32, Op::Sum), (Ty::F32, Op::Max), (Ty::F32, Op::Sum), (Ty::Bf16, Op::Sum)];
            let found = candidates.into_iter().find_map(|(ty, op)| {
                let s = ty.size() as u64;
                let per = s * per_rank;
                let counts = [
                    // Stream: the largest call (up to 8 MiB) first, many steps per replay.
                    if algo.starts_with("stream") { (q.max.min(8 << 20) / per).saturating_sub(3) } else { 4099 / s },
                    4099 / s,
                    p.ll_max / s + 5,
                    q.one_shot_max / per + 7,
                    // Just past LL128's limit: the one-shot again.
                    q.ll128_max / per + 1,
                    q.lowp_min.min(1 << 40) / per + 1001,
                    (3 << 20) / per,
                ];
                let root = if coll.spec().rooted() { n - 1 } else { 0 };
                counts
                    .into_iter()
                    .map(|count| Case {
                        coll,
                        ty,
                        op,
                        count: count.max(1) as usize,
                        inplace: false,
                        shift: 0,
                        root,
                        null_off_root: false,
                    })
                    .find(|case| kernel_for(c, &case.call()).0 == want)
            });
            match found {
                Some(case) => out.push((want, Call::Coll(case))),
                None => missing.push(want),
            }
        }
    }
    if !missing.is_empty() {
        return Err(Fail(format!("no call reaches {missing:?} with this clique's thresholds")));
    }
    // The GPU-resident AllToAllv: bytes, FP8 codes and scales delivered, INT8 decoded.
    let fmt = a2av::fp8_format(dev);
    let (packed, per_peer, random) = (a2av::Form::Packed, a2av::Form::PerPeer, a2av::Pattern::Random);
    let a2avs = [
        a2av::Case::plain(packed, random, Ty::Bf16, 7, 301),
        a2av::Case {
            wire: a2av::Wire::Fp8Codes(fmt),
            scale_row: 300,
            ..a2av::Case::plain(packed, random, Ty::Bf16, 300, 9)
        },
        a2av::Case {
            wire: a2av::Wire::Int8,
            scale_row: 256,
            ..a2av::Case::plain(per_peer, random, Ty::F32, 1, 256 * 9)
        },
    ];
    for (i, a) in a2avs.into_iter().enumerate() {
        let prep = a2av::Prepared::new(&a, n, seed, 7 + i);
        out.push((a.wire.route().into(), Call::A2av(a, prep)));
    }
    Ok(out)
}

pub fn run(dev: &mut Ranks, opts: &Opts) -> Result<(), Fail> {
    let n = dev.nranks();
    let list = calls(dev, opts.seed)?;
    // Every rank's inputs (for the model), and each call's place in every local rank's arena.
    let inputs: Vec<Vec<Vec<u8>>> = list
        .iter()
        .map(|(_, c)| match c {
            Call::Coll(case) => (0..n)
                .map(|r| reduce::generate(case.ty, case.in_len(n), case.seed(opts.seed, r), SPECIAL_EVERY))
                .collect(),
            Call::A2av(..) => Vec::new(),
        })
        .collect();
    // Per local rank: each call's offset (and image, for a collective), and the whole upload.
    type Layout = (Vec<(usize, Option<Image>)>, Vec<u8>);
    let mut layouts: Vec<Layout> = Vec::new();
    for k in 0..dev.local() {
        let r = dev.world.ranks[k];
        let (mut per, mut bytes) = (Vec::new(), Vec::new());
        for ((_, c), ins) in list.iter().zip(&inputs) {
            let at = bytes.len().next_multiple_of(256);
            bytes.resize(at, 0xFF);
            match c {
                Call::Coll(case) => {
                    let s = case.ty.size();
                    let img = Image::new(case.coll, false, r, case.in_len(n) * s, case.out_len(n, r) * s, 0);
                    bytes.extend(img.build(&ins[r], 0xEE));
                    per.push((at, Some(img)));
                }
                Call::A2av(case, prep) => {
                    bytes.extend(prep.image(case, r));
                    per.push((at, None));
                }
            }
        }
        layouts.push((per, bytes));
    }
    let upload = |dev: &mut Ranks| -> Result<(), Fail> {
        for (k, (_, bytes)) in layouts.iter().enumerate() {
            dev.arena(k, bytes.len())?;
            dev.upload(k, 0, bytes)?;
        }
        Ok(())
    };
    // Issues every call on local rank k (`reset`: first the poison over what each call writes);
    // the route each call took (its statistics route).
    let issue = |dev: &Ranks, k: usize, reset: bool| -> Result<Vec<String>, Fail> {
        let base = dev.arena_ptr(k)?;
        let mut routes = Vec::new();
        for (i, (_, c)) in list.iter().enumerate() {
            let at = layouts[k].0[i].0;
            let p = base.offset(at);
            let before = route_calls(dev.world.comms[k]);
            let ret = match c {
                Call::Coll(case) => {
                    let img = layouts[k].0[i].1.as_ref().expect("a collective has an image");
                    if reset && !img.out.is_empty() {
                        dev.memset(k, p.offset(img.out.start), 0xEE, img.out.len())?;
                    }
                    dev.collective(k, case.call(), p.offset(img.send), p.offset(img.recv))
                }
                Call::A2av(case, prep) => {
                    if reset {
                        for w in prep.written() {
                            dev.memset(k, p.offset(w.start), a2av::POISON, w.len())?;
                        }
                    }
                    prep.issue(dev, k, case, p)
                }
            };
            if !ret.is_ok() {
                return Err(Fail(format!("rank {}: {} returned {}", dev.world.ranks[k], list[i].0, ret.0)));
            }
            routes.push(device::grown(&before, &route_calls(dev.world.comms[k])));
        }
        Ok(routes)
    };
    let names: Vec<String> = list
        .iter()
        .map(|(w, c)| match c {
            Call::Coll(case) => format!("{w} ({})", case.name()),
            Call::A2av(case, _) => format!("{w} ({})", case.name()),
        })
        .collect();
    let what = |_: usize| format!("graph of {}", names.join(", "));

    // 1. Eagerly: the reference outputs.
    watchdog::progress("graph: eager run");
    upload(dev)?;
    let mut eager_routes = Vec::new();
    for k in 0..dev.local() {
        eager_routes.push(issue(dev, k, false)?);
    }
    dev.wait_all(&what)?;
    let eager: Vec<Vec<u8>> =
        (0..dev.local()).map(|k| dev.download(k, 0, layouts[k].1.len())).collect::<Result<_, _>>()?;

    // 2. Captured with the resets, then replayed.
    watchdog::progress("graph: capture");
    upload(dev)?;
    let mut graphs = Vec::new();
    for k in 0..dev.local() {
        let _g = dev.rt.device_guard(dev.world.devices[k])?;
        dev.rt.begin_capture(dev.stream(k))?;
        let issued = issue(dev, k, true);
        let graph = dev.rt.end_capture(dev.stream(k));
        issued?;
        graphs.push(graph?);
    }
    watchdog::progress("graph: replays");
    for _ in 0..REPLAYS {
        for (k, &g) in graphs.iter().enumerate() {
            dev.rt.launch_graph(g, dev.stream(k))?;
        }
    }
    dev.wait_all(&|k| format!("{} replays of the {}", REPLAYS, what(k)))?;

    // 3. Every call's output after the replays against the eager one (and the eager DDA outputs
    // against the model).
    for k in 0..dev.local() {
        let r = dev.world.ranks[k];
        let got = dev.download(k, 0, layouts[k].1.len())?;
        for (i, (want_route, c)) in list.iter().enumerate() {
            if dev.announcer && k == 0 {
                rcclx_gpu_tests::children::say(&format!("CASE {i} graph x{REPLAYS}: {}", names[i]));
            }
            let at = layouts[k].0[i].0;
            let (ranges, group, model_ok) = match c {
                Call::Coll(case) => {
                    let img = layouts[k].0[i].1.as_ref().expect("a collective has an image");
                    let out = (at + img.out.start)..(at + img.out.end);
                    // DDA outputs are exact; low-precision ones are checked by lowp_accuracy.
                    let model_ok = if want_route.ends_with(".lowp")
                        || want_route.ends_with(".int8")
                        || want_route.contains("_pair")
                    {
                        Ok(())
                    } else {
                        let want = expected(case, n, r, &inputs[i]);
                        match reduce::mismatches(case.compare_as(), &eager[k][out.clone()], &want) {
                            (0, _) => Ok(()),
                            (bad, _) => Err(format!("eager output: {bad} elements differ from the model")),
                        }
                    };
                    // A low-precision AllGather keeps each rank's own chunk exact: outputs differ.
                    let group = if want_route == "allgather.lowp" || want_route == "allgather.int8" {
                        r
                    } else {
                        case.group(r)
                    };
                    (vec![out], group, model_ok)
                }
                Call::A2av(case, prep) => {
                    let (problems, _, _) = prep.check(case, r, &eager[k][at..at + prep.total()]);
                    let ok = if problems.is_empty() { Ok(()) } else { Err(format!("eager: {}", problems.join("; "))) };
                    (prep.written().iter().map(|w| (at + w.start)..(at + w.end)).collect(), r, ok)
                }
            };
            let same = ranges.iter().all(|rg| got[rg.clone()] == eager[k][rg.clone()]);
            let bytes: usize = ranges.iter().map(|rg| rg.len()).sum();
            let route = &eager_routes[k][i];
            let (ok, detail) = match (&model_ok, same) {
                _ if route != want_route => (false, format!("took route {route}, not {want_route}")),
                (Ok(()), true) => (true, format!("{bytes} bytes identical after {REPLAYS} replays")),
                (Err(e), _) => (false, e.clone()),
                (Ok(()), false) => (false, format!("output after {REPLAYS} replays differs from the eager run")),
            };
            let h = device::hash(&ranges.iter().flat_map(|rg| got[rg.clone()].to_vec()).collect::<Vec<u8>>());
            report(i, r, ok, group, &h, route, &detail);
        }
    }
    for (k, g) in graphs.into_iter().enumerate() {
        let _g = dev.rt.device_guard(dev.world.devices[k]);
        // SAFETY: our own graph; its replays have finished (waited above).
        let _ = unsafe { dev.rt.destroy_graph(g) };
    }
    Ok(())
}
