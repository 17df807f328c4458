//! The `stress` suite: 10,000 calls (1,000 with `--quick`) of a random collective, type, op,
//! size (log-uniform, 1 byte to 1 MiB or more: LL, LL128 with `--ll128-max`, flat and two-shot;
//! [`max_bytes`]) and placement, in
//! batches issued back to back without waiting (so consecutive kernels of different algorithms
//! and grids meet the window counters and LL parities their predecessors left), every call
//! then checked as in the `dda` suite. One result line per batch and rank.

use rcclx::collective::Shape;
use rcclx::gpu::Event;
use rcclx::intercept::{Coll, CommFacts, Route, decide};
use rcclx_gpu_tests::reduce::{self, Op, Rng, Ty};
use rcclx_gpu_tests::{Fail, watchdog};

use crate::cases::{Case, Image, SPECIAL_EVERY, expected};
use crate::device::{self, Ranks, kernel_for, report, route_calls};
use crate::opts::Opts;

/// Calls per batch.
const BATCH: usize = 200;
/// Largest call, in bytes of its largest buffer (AllReduce: see [`max_bytes`]).
const MAX_BYTES: u64 = 1 << 20;

/// The largest call of `coll`: 1 MiB, and for AllReduce twice the one-shot limit where a
/// two-shot range follows it (so that some calls take the two-shot kernel), at most 4 MiB; with
/// LL128 on (`--ll128-max`), twice its limit (at most the DDA limit), so that some calls take the
/// one-shot behind it.
fn max_bytes(coll: Coll, facts: &CommFacts) -> u64 {
    let q = facts.policies.of(coll);
    let two_shot = if coll.spec().two_shot && q.one_shot_max < q.max {
        (2 * q.one_shot_max).clamp(MAX_BYTES, 4 << 20)
    } else {
        MAX_BYTES
    };
    two_shot.max((2 * q.ll128_max).min(q.max))
}

/// A random call that rcclx runs on its own kernels at this rank count: collective, type and
/// op uniform, size log-uniform from 1 byte to [`max_bytes`], placement and a 16-byte
/// misalignment at random.
fn random_case(rng: &mut Rng, n: usize, facts: &CommFacts) -> Case {
    loop {
        let coll = Coll::ALL[rng.below(Coll::ALL.len() as u64) as usize];
        let ty = Ty::ALL[rng.below(10) as usize];
        let op = if coll.spec().reduces { Op::ALL[rng.below(5) as usize] } else { Op::Sum };
        let bytes = (max_bytes(coll, facts) as f64).powf(rng.unit()) as usize;
        let per = if coll.spec().shape == Shape::Whole { ty.size() } else { ty.size() * n };
        let count = (bytes / per).max(1);
        let inplace = rng.below(2) == 0;
        let shift = if rng.below(4) == 0 && ty.size() < 16 { ty.size() } else { 0 };
        let root = if coll.spec().rooted() { rng.below(n as u64) as usize } else { 0 };
        // A rooted call's root-only buffer is NULL off the root in one call in four.
        let null_off_root = coll.spec().rooted() && !inplace && rng.below(4) == 0;
        let c = Case { coll, ty, op, count, inplace, shift, root, null_off_root };
        if matches!(decide(&c.call(), facts), Route::Own(_)) {
            return c;
        }
    }
}

pub fn run(dev: &mut Ranks, opts: &Opts) -> Result<(), Fail> {
    let n = dev.nranks();
    let total = if opts.quick { 1_000 } else { 10_000 };
    let mut rng = Rng::new(opts.seed ^ 0x0571_2e55);
    let events: Vec<Vec<Event>> = (0..dev.local())
        .map(|k| (0..BATCH).map(|_| dev.rt.create_event(dev.world.devices[k])).collect::<Result<Vec<_>, _>>())
        .collect::<Result<_, _>>()?;
    for (b, first) in (0..total).step_by(BATCH).enumerate() {
        let c0 = &dev.world.cliques[0];
        let calls: Vec<Case> = (0..BATCH.min(total - first)).map(|_| random_case(&mut rng, n, &c0.facts)).collect();
        let name = format!("stress batch {b}: calls {first}-{}", first + calls.len() - 1);
        if dev.announcer {
            rcclx_gpu_tests::children::say(&format!("CASE {b} {name}"));
        }
        watchdog::progress(&format!("{name} (inputs)"));
        let seed = opts.seed ^ (b as u64) << 20;
        // Every rank's input of every call, in parallel over the calls.
        let inputs: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
            let hs: Vec<_> = calls
                .iter()
                .map(|c| {
                    s.spawn(move || {
                        (0..n).map(|r| reduce::generate(c.ty, c.in_len(n), c.seed(seed, r), SPECIAL_EVERY)).collect()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("generator panicked")).collect()
        });
        // One image per rank: the calls' images back to back (each 256-byte aligned).
        let mut layouts = Vec::new();
        for k in 0..dev.local() {
            let r = dev.world.ranks[k];
            let (mut at, mut per_call, mut bytes) = (0usize, Vec::new(), Vec::new());
            for (c, ins) in calls.iter().zip(&inputs) {
                let s = c.ty.size();
                let img = Image::new(c.coll, c.inplace, r, c.in_len(n) * s, c.out_len(n, r) * s, c.shift);
                bytes.resize(at, 0xFF);
                bytes.extend(img.build(&ins[r], 0xEE));
                per_call.push((at, img));
                at = bytes.len().next_multiple_of(256);
            }
            dev.arena(k, bytes.len())?;
            dev.upload(k, 0, &bytes)?;
            layouts.push((per_call, bytes.len()));
        }
        let before: Vec<Vec<u64>> = (0..dev.local()).map(|k| route_calls(dev.world.comms[k])).collect();
        watchdog::progress(&format!("{name} (run)"));
        let mut rets = vec![Vec::new(); dev.local()];
        for (i, c) in calls.iter().enumerate() {
            for k in 0..dev.local() {
                let (at, img) = &layouts[k].0[i];
                let base = dev.arena_ptr(k)?.offset(*at);
                let (null_send, null_recv) = c.null_at(dev.world.ranks[k]);
                let ptr = |null: bool, at: usize| if null { rcclx::gpu::DevicePtr(0) } else { base.offset(at) };
                rets[k].push(dev.collective(k, c.call(), ptr(null_send, img.send), ptr(null_recv, img.recv)));
                dev.rt.record_event(events[k][i], dev.stream(k))?;
            }
        }
        let what = |k: usize| {
            let i = (0..calls.len()).find(|&i| !dev.rt.query_event(events[k][i]).unwrap_or(true)).unwrap_or(0);
            let c = &calls[i];
            format!(
                "{name}: call {} ({}), kernel {}",
                first + i,
                c.name(),
                kernel_for(&dev.world.cliques[k], &c.call()).1
            )
        };
        dev.wait_all(&what)?;
        watchdog::progress(&format!("{name} (check)"));
        for k in 0..dev.local() {
            let r = dev.world.ranks[k];
            let got = dev.download(k, 0, layouts[k].1)?;
            let mut same = Vec::new(); // outputs identical on every rank (Case::shared_output)
            let mut fails = Vec::new();
            for (i, (c, ins)) in calls.iter().zip(&inputs).enumerate() {
                let (at, img) = &layouts[k].0[i];
                let ret = rets[k][i];
                let verdict = img.check(&got[*at..*at + img.total], &ins[r]).and_then(|out| {
                    if !ret.is_ok() {
                        return Err(format!("returned {}", ret.0));
                    }
                    let want = expected(c, n, r, ins);
                    match reduce::mismatches(c.ty, out, &want) {
                        (0, _) => Ok(out),
                        (bad, Some(j)) => Err(format!(
                            "{bad} elements differ, first {j}: got {} want {}",
                            reduce::show(c.ty, out, j),
                            reduce::show(c.ty, &want, j)
                        )),
                        (bad, None) => Err(format!("{bad} elements differ")),
                    }
                });
                match verdict {
                    Ok(out) if c.shared_output() => same.extend_from_slice(out),
                    Ok(_) => {}
                    Err(e) => fails.push(format!("call {} ({}): {e}", first + i, c.name())),
                }
            }
            let routes = device::grown(&before[k], &route_calls(dev.world.comms[k]));
            let ok = fails.is_empty() && !routes.contains("forwarded");
            let detail = if fails.is_empty() {
                format!("{} calls exact", calls.len())
            } else {
                format!("{} failed: {}", fails.len(), fails[..fails.len().min(3)].join("; "))
            };
            report(b, r, ok, 0, &device::hash(&same), &routes, &detail);
        }
    }
    for (k, evs) in events.into_iter().enumerate() {
        for e in evs {
            let _g = dev.rt.device_guard(dev.world.devices[k]);
            // SAFETY: our own events; every stream they were recorded on has finished.
            let _ = unsafe { dev.rt.destroy_event(e) };
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcclx::config::Config;
    use rcclx::intercept::Policies;

    /// 10,000 draws at every rank count, LL128 off and on, reach every route the run asserts
    /// (`routes::dda_routes`: the parent fails a run in which a route never ran), and none forwards.
    #[test]
    fn random_calls_reach_every_algorithm() {
        for n in 2..=8 {
            for ll128_max_bytes in [0, 4 << 20] {
                let c = Config { ll128_max_bytes, ..Config::default() };
                let facts = CommFacts {
                    nranks: n,
                    hosts: 1,
                    rank_step: 1,
                    policies: Policies::for_comm(&c, n, rcclx::clique::local_fabric()),
                };
                let mut rng = Rng::new(1 ^ 0x0571_2e55);
                let mut seen = std::collections::HashMap::new();
                for _ in 0..10_000 {
                    let c = random_case(&mut rng, n, &facts);
                    let Route::Own(a) = decide(&c.call(), &facts) else { panic!("{}", c.name()) };
                    *seen.entry(format!("{}.{}", c.coll.name(), a.name())).or_insert(0) += 1;
                }
                for route in crate::routes::dda_routes(&facts.policies, n) {
                    let least = if route.ends_with(".ll") { 100 } else { 20 };
                    let got = seen.get(&route).copied().unwrap_or(0);
                    assert!(got > least, "n={n} ll128 {ll128_max_bytes}: {route} {got} times: {seen:?}");
                }
            }
        }
    }
}
