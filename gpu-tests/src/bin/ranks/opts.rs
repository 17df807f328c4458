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
}

/// `bench` parts run when `--parts` is not given.
pub const DEFAULT_PARTS: &[&str] = &["families", "micro"];
/// Every part of `bench`, in the order they run.
pub const PARTS: &[&str] = &["families", "sweep", "micro"];

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
                if let Some(bad) = o.parts.iter().find(|p| !PARTS.contains(&p.as_str())) {
                    return Err(format!("--parts: unknown part {bad:?} (parts: {})", PARTS.join(",")));
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
