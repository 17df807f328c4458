//! The routes a run of `ranks` must show on every rank (its statistics, `<coll>.<algo>`): the
//! parent fails a run in which one never ran or a call was forwarded.

use crate::opts::Suite;

/// The statistics routes (`<coll>.<algo>`) `suite` must run on every rank: each collective's LL, flat where its limit
/// passes LL's and two-shot where it has one, at this rank count with this environment's
/// settings; the graph suite adds the low-precision families and the AllToAllv; the time
/// suites want the routes of the calls they time (`quick`: of their `--quick` cases).
pub fn of_suite(suite: Suite, codec: &str, nranks: usize, quick: bool) -> Vec<String> {
    use rcclx::intercept::{Coll, Policies};
    let p = Policies::for_comm(rcclx::config::get(), nranks, rcclx::clique::local_fabric());
    let dda = dda_routes(&p, nranks);
    match suite {
        Suite::Dda | Suite::Stress => dda,
        Suite::Graph => {
            let lp = if codec == "int8" { "int8" } else { "lowp" };
            let lowp = Coll::ALL.into_iter().filter(|c| c.spec().lowp_var.is_some()).map(|c| {
                // At 2 ranks AllReduce has a low-precision kernel of its own (`<codec>_pair`).
                if c == Coll::AllReduce && nranks == 2 {
                    format!("allreduce.{lp}_pair")
                } else {
                    format!("{}.{lp}", c.name())
                }
            });
            dda.into_iter().chain(lowp).chain(["alltoallv.dynamic".to_string()]).collect()
        }
        Suite::A2av => vec!["alltoallv.dynamic".into()],
        // Launched past the statistics (forced families): nothing to count.
        Suite::Bench => Vec::new(),
        Suite::Time | Suite::TimeLowp => {
            let facts = rcclx::intercept::CommFacts { nranks, hosts: 1, rank_step: 1, policies: p };
            let mut v: Vec<String> = crate::time::cases(suite == Suite::TimeLowp, nranks, &p, quick)
                .iter()
                .map(|c| crate::device::route_for(&facts, &c.call()).0)
                .collect();
            v.sort();
            v.dedup();
            v
        }
    }
}

/// The DDA routes every rank must run with policies `p` at `nranks` ranks: each collective's
/// [`dda_algos`].
pub fn dda_routes(p: &rcclx::intercept::Policies, nranks: usize) -> Vec<String> {
    rcclx::intercept::Coll::ALL
        .into_iter()
        .flat_map(|coll| dda_algos(p, coll, nranks).into_iter().map(move |algo| format!("{}.{algo}", coll.name())))
        .collect()
}

/// The DDA algorithms (`Kernel::name`) of `coll` that some size reaches with policies `p` at
/// `nranks` ranks: LL, flat (or the stream protocol's one-shot) where its sizes pass LL's and,
/// with LL128 on, LL128's limit, LL128 where its limit passes LL's, and the two-shot where it has
/// one.
pub fn dda_algos(p: &rcclx::intercept::Policies, coll: rcclx::intercept::Coll, nranks: usize) -> Vec<&'static str> {
    use rcclx::collective::Shape;
    let q = p.of(coll);
    let per_rank = if coll.spec().shape == Shape::Whole { 1 } else { nranks as u64 };
    let mut algos = vec!["ll"];
    // The stream protocol (`--proto stream`, from 0 bytes) takes every call the windowed
    // kernels would: its one-shot the flat sizes, its two-shot the tree sizes.
    let (flat, tree) = if q.stream != 0 { ("stream", "stream_tree") } else { ("flat", "tree") };
    // LL128 (`--ll128-max`) takes the one-shot's sizes above LL up to its limit; the
    // one-shot keeps what lies above that.
    let one_shot = if coll.spec().two_shot { q.one_shot_max } else { q.max };
    if q.max > p.ll_max * per_rank && q.ll128_max > p.ll_max * per_rank {
        algos.push("ll128");
    }
    if q.max > p.ll_max * per_rank && one_shot > q.ll128_max {
        algos.push(flat);
    }
    if coll.spec().two_shot && q.one_shot_max < q.max {
        algos.push(tree);
    }
    algos
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cases::dda_cases;
    use rcclx::config::Config;
    use rcclx::intercept::{CommFacts, Policies, Route, decide};

    /// The routes a dda run must show ([`dda_routes`]) are the routes its cases take, with the
    /// default settings, with LL128 on at sizes around the one-shot limits (`--ll128-max`), and
    /// with the stream protocol: none missing (the run would fail it) and none unlisted.
    #[test]
    fn dda_routes_are_the_routes_of_the_cases() {
        use rcclx::config::{Proto, Protos};
        let ll128 = [0u64, 300 << 10, 1 << 20, 4 << 20, 64 << 20];
        for n in 2..=8 {
            for &ll128_max_bytes in &ll128 {
                for proto in [Proto::Window, Proto::Stream] {
                    let c =
                        Config { ll128_max_bytes, proto: Protos::all(proto), stream_min_bytes: 0, ..Config::default() };
                    let f = CommFacts {
                        nranks: n,
                        hosts: 1,
                        rank_step: 1,
                        policies: Policies::for_comm(&c, n, rcclx::clique::local_fabric()),
                    };
                    for quick in [false, true] {
                        let mut taken: Vec<String> = dda_cases(n, &f.policies, quick, 1)
                            .iter()
                            .map(|c| match decide(&c.call(), &f) {
                                Route::Own(a) => format!("{}.{}", c.coll.name(), a.name()),
                                r => panic!("n={n} {}: {r:?}", c.name()),
                            })
                            .collect();
                        taken.sort();
                        taken.dedup();
                        let mut want = dda_routes(&f.policies, n);
                        want.sort();
                        assert_eq!(taken, want, "n={n} ll128 {ll128_max_bytes} {proto:?} quick {quick}");
                    }
                }
            }
        }
    }
}
