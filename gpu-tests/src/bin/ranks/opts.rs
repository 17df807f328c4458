//! The command line and environment of `ranks`: the suites, the options, the variables a run
//! sets before any rcclx call. Every other module of `ranks` reads its options from here.

use std::path::PathBuf;

use rcclx_gpu_tests::world::{Layout, Placement};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Suite {
    Dda,
    Stress,
    Graph,
    A2av,
    /// Timings of DDA kernels (`time.rs`).
    Time,
    /// Timings of low-precision kernels: low precision switched on as in `graph`.
    TimeLowp,
    /// The one-GPU proxy of issue 39 (`bench.rs`): every DDA family forced, twins, microbenchmarks.
    Bench,
}

impl Suite {
    fn parse(s: &str) -> Option<Suite> {
        match s {
            "dda" => Some(Suite::Dda),
            "stress" => Some(Suite::Stress),
            "graph" => Some(Suite::Graph),
            "a2av" => Some(Suite::A2av),
            "time" => Some(Suite::Time),
            "time-lowp" => Some(Suite::TimeLowp),
            "bench" => Some(Suite::Bench),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Suite::Dda => "dda",
            Suite::Stress => "stress",
            Suite::Graph => "graph",
            Suite::A2av => "a2av",
            Suite::Time => "time",
            Suite::TimeLowp => "time-lowp",
            Suite::Bench => "bench",
        }
    }

    /// The statistics routes (`<coll>.<algo>`) the suite must run on every rank: each collective's LL, flat where its limit
    /// passes LL's and two-shot where it has one, at this rank count with this environment's
    /// settings; the graph suite adds the low-precision families and the AllToAllv; the time
    /// suites want the routes of the calls they time (`quick`: of their `--quick` cases).
    pub fn routes(self, codec: &str, nranks: usize, quick: bool) -> Vec<String> {
        use rcclx::intercept::{Coll, Policies};
        let p = Policies::for_comm(rcclx::config::get(), nranks, rcclx::clique::local_fabric());
        let dda = dda_routes(&p, nranks);
        match self {
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
                let facts = rcclx::intercept::CommFacts { nranks, hosts: 1, policies: p };
                let mut v: Vec<String> = crate::time::cases(self == Suite::TimeLowp, nranks, &p, quick)
                    .iter()
                    .map(|c| crate::device::route_for(&facts, &c.call()).0)
                    .collect();
                v.sort();
                v.dedup();
                v
            }
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

/// The DDA algorithms (`Algo::name`) of `coll` that some size reaches with policies `p` at
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

#[derive(Clone, Debug)]
pub struct Opts {
    pub placement: Placement,
    pub suite: Suite,
    pub quick: bool,
    pub seed: u64,
    pub codec: String,
    /// `RCCLX_PROTO` of the run (`window` or `stream`).
    pub proto: String,
    /// `RCCLX_LL128_MAX_BYTES` of the run (0: LL128 off).
    pub ll128_max: u64,
    pub list: bool,
    /// `--parts`: the bench suite's parts (empty: its default).
    pub parts: Vec<String>,
    pub child: Option<usize>,
    pub dir: Option<PathBuf>,
    pub raw: Vec<String>,
}

pub const USAGE: &str = "usage: ranks --nranks N [--gpus G] [--layout streams|procs] --suite dda|stress|graph|a2av|time|time-lowp|bench [--quick] [--seed S] [--codec fp8|int8] [--proto window|stream] [--ll128-max BYTES] [--parts families,sweep,micro] [--list]";

pub fn parse_args(args: Vec<String>) -> Result<Opts, String> {
    let (mut nranks, mut gpus, mut layout, mut suite) = (0usize, 1usize, Layout::Streams, None);
    let mut o = Opts {
        placement: Placement { nranks: 0, gpus: 1, layout },
        suite: Suite::Dda,
        quick: false,
        seed: 1,
        codec: "fp8".into(),
        proto: "window".into(),
        ll128_max: 0,
        list: false,
        parts: Vec::new(),
        child: None,
        dir: None,
        raw: args.clone(),
    };
    let mut it = args.into_iter();
    let num = |v: Option<String>, what: &str| -> Result<u64, String> {
        v.ok_or(format!("{what} needs a value"))?.parse::<u64>().map_err(|e| format!("{what}: {e}"))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--nranks" => nranks = num(it.next(), "--nranks")? as usize,
            "--gpus" => gpus = num(it.next(), "--gpus")? as usize,
            "--layout" => {
                let v = it.next().unwrap_or_default();
                layout = Layout::parse(&v).ok_or(format!("--layout {v:?}: streams or procs"))?;
            }
            "--suite" => {
                let v = it.next().unwrap_or_default();
                suite = Some(
                    Suite::parse(&v)
                        .ok_or(format!("--suite {v:?}: dda, stress, graph, a2av, time, time-lowp or bench"))?,
                );
            }
            "--quick" => o.quick = true,
            "--list" => o.list = true,
            "--parts" => {
                let v = it.next().unwrap_or_default();
                o.parts = v.split(',').filter(|p| !p.is_empty()).map(String::from).collect();
                if let Some(bad) = o.parts.iter().find(|p| !crate::bench::PARTS.contains(&p.as_str())) {
                    return Err(format!("--parts: unknown part {bad:?} (parts: {})", crate::bench::PARTS.join(",")));
                }
            }
            "--seed" => o.seed = num(it.next(), "--seed")?,
            "--codec" => {
                o.codec = it.next().unwrap_or_default();
                if o.codec != "fp8" && o.codec != "int8" {
                    return Err(format!("--codec {:?}: fp8 or int8", o.codec));
                }
            }
            "--proto" => {
                o.proto = it.next().unwrap_or_default();
                if o.proto != "window" && o.proto != "stream" {
                    return Err(format!("--proto {:?}: window or stream", o.proto));
                }
            }
            "--ll128-max" => o.ll128_max = num(it.next(), "--ll128-max")?,
            "--child" => o.child = Some(num(it.next(), "--child")? as usize),
            "--dir" => o.dir = Some(PathBuf::from(it.next().ok_or("--dir needs a value")?)),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if !(2..=rcclx::clique::MAX_RANKS).contains(&nranks) {
        return Err("--nranks must be 2..=8".into());
    }
    if !(1..=nranks).contains(&gpus) {
        return Err("--gpus must be 1..=nranks".into());
    }
    o.suite = suite.ok_or("--suite is required")?;
    o.placement = Placement { nranks, gpus, layout };
    if matches!(o.suite, Suite::Time | Suite::TimeLowp | Suite::Bench) && layout != Layout::Streams {
        return Err("--suite time, time-lowp and bench: --layout streams (one process times every rank)".into());
    }
    if o.child.is_some_and(|p| p >= o.placement.processes().len()) || o.child.is_some() != o.dir.is_some() {
        return Err("--child P needs --dir, and P < the number of processes".into());
    }
    Ok(o)
}

/// The environment of the run, set before any rcclx call (and inherited by the children).
pub fn set_env(o: &Opts) {
    let mut vars: Vec<(&str, String)> = vec![
        ("NCCL_DEBUG", "WARN".into()),
        ("NCCL_NVLS_ENABLE", "0".into()),
        ("RCCLX_LOW_PRECISION_CODEC", o.codec.clone()),
        ("RCCLX_PROTO", o.proto.clone()),
        ("RCCLX_STREAM_MIN_BYTES", "0".into()),
        ("RCCLX_LL128_MAX_BYTES", o.ll128_max.to_string()),
    ];
    if matches!(o.suite, Suite::Graph | Suite::TimeLowp) {
        // Low precision on, from 1 MiB: every family, DDA and low precision, has sizes left.
        vars.push(("RCCL_LOW_PRECISION_ENABLE", "1".into()));
        vars.push(("RCCLX_LP_MIN_BYTES", "1M".into()));
    }
    for (k, v) in vars {
        // The run's protocol wins over the environment: the routes checked at the end assume it.
        let forced = ["RCCLX_LOW_PRECISION_CODEC", "RCCLX_PROTO", "RCCLX_STREAM_MIN_BYTES", "RCCLX_LL128_MAX_BYTES"];
        if forced.contains(&k) || std::env::var_os(k).is_none() {
            // SAFETY: called at the start of main, before any other thread exists.
            unsafe { std::env::set_var(k, v) };
        }
    }
}
