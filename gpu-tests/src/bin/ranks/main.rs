//! 3-8 ranks of rcclx's kernels on the GPUs present (1 or 2), by putting several ranks on one
//! GPU: rcclx's real peer layer, kernels and per-call path at rank counts no machine we have
//! can give one GPU per rank (`rcclx_gpu_tests::world`).
//!
//! ```text
//! ranks --nranks N [--gpus G] [--layout streams|procs] --suite dda|stress|graph|a2av|time|time-lowp|bench
//!       [--quick] [--seed S] [--codec fp8|int8] [--proto window|stream] [--ll128-max BYTES] [--list]
//!   --nranks N   2..=8 ranks
//!   --gpus G     GPUs to spread them over (default: 1); rank r on GPU r*G/N
//!   --layout     streams (default): one process, every rank a stream of its own (the kernels
//!                of ranks sharing a GPU run at once; every grid is capped so they fit together);
//!                procs: one process per rank (the IPC path; processes on one GPU are
//!                time-sliced, so every barrier costs milliseconds: use --quick)
//!   --suite      dda:    AllReduce (LL, flat, two-shot), ReduceScatter, AllGather, AllToAll,
//!                        Broadcast and Reduce from every root (LL, flat; NULL root-only buffers
//!                        off the root): every type and op, odd counts, in and out of place, around the
//!                        crossovers of this rank count; bit-exact against the CPU model of
//!                        rcclx's reduction order (rcclx_gpu_tests::reduce), ranks identical
//!                stress: 10,000 calls of random collective, type, op, size and placement, in
//!                        batches issued back to back; every call checked as in dda
//!                graph:  one call of every kernel family (low precision included: the suite
//!                        switches it on from 1 MiB), captured in a CUDA/HIP graph with a reset
//!                        of the outputs, replayed 1,000 times; outputs bit-identical to the
//!                        same calls run eagerly (and those exact against the model)
//!                a2av:   the GPU-resident AllToAllv, its three C forms: random, skewed,
//!                        all-to-one, zero, exact-capacity and over-capacity splits; received
//!                        bytes and counts against a CPU model
//!                time:   a timing proxy for A/B comparisons of kernels (streams layout only):
//!                        AllReduce bf16/f32 sum 64 KiB-64 MiB, f32 max and f64 sum, ReduceScatter
//!                        and AllGather bf16 at 16 MiB; per case warm-up calls, then timed calls
//!                        back to back between events on every rank's stream, the last output
//!                        checked; `TIME <route> <coll> <type> <op> <bytes> <us_per_call> <calls>`
//!                time-lowp: the same with low precision on (as graph; codec of --codec):
//!                        AllReduce bf16 16 and 64 MiB, AllGather and ReduceScatter bf16 16 MiB;
//!                        outputs checked against the model within a relative error
//!                bench:  the one-GPU proxy of issue 39 (streams layout only; bench.rs): every
//!                        DDA family forced at 1 KiB-64 MiB, back to back and in graph replays,
//!                        against its traffic twin; --parts sweep: a window-cost sweep (run
//!                        once per RCCL_DDA_SENDBUF_BYTES); micro: flag round trip and fence
//!                        under load; one `BENCH <csv>` line per measurement
//!   --parts      bench: families,sweep,micro (default families,micro)
//!   --quick      fewer types, ops and counts (for --layout procs); time suites: fewer sizes
//!   --codec      RCCLX_LOW_PRECISION_CODEC for the graph and time-lowp suites (default fp8)
//!   --proto      RCCLX_PROTO of every suite (default window); `stream`: the collectives with
//!                stream kernels run them wherever the windowed ones would, and the routes
//!                checked at the end are `<coll>.stream` instead of flat/tree for them
//!   --ll128-max  RCCLX_LL128_MAX_BYTES of every suite (default 0: off); above 0 the collectives
//!                with LL128 kernels run them above the LL sizes up to BYTES where the one-shot
//!                would, and the routes checked at the end include `<coll>.ll128`
//!   --list       print the cases of rank count N and exit (no GPU; dda, time and time-lowp, bench)
//!   (internal) --child P --dir DIR: process P of the layout, exchanging through DIR
//! ```
//!
//! Every call goes through `rcclx::comm` (decision, plan, grid, windows, launch, statistics)
//! with a forward that fails: a call rcclx would have forwarded is reported as a failure, and
//! so is a run in which any kernel family of the suite never ran (the `ROUTES` lines).
//! Hangs: every stream wait is bounded; a rank that does not finish is reported with its
//! kernel, its blocks' window counters and the barrier values its peers announced (`HANG`
//! lines), then its kernels are told to stop. A watchdog ends a process that makes no progress.
//!
//! Output: `PASS|FAIL <case> ...` per case, the routes per rank, then `N passed, M failed`.
//! Exit status: 0 all passed, 1 a case failed, 2 no GPU / bad arguments, 3 a stall.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod a2av;
mod bench;
mod cases;
mod device;
mod graph;
mod opts;
mod routes;
mod stress;
mod time;

use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::time::Duration;

use rcclx::gpu::Runtime;
use rcclx_gpu_tests::children::{Children, Line, say};
use rcclx_gpu_tests::world::{World, fresh_dir};
use rcclx_gpu_tests::{self as harness, EXIT_FAILED, Tally, watchdog};

use opts::{Opts, Suite, USAGE, parse_args, set_env};

/// No progress for this long ends a process (a call that never returns: every wait of our own
/// is shorter, `device::wait_limit`).
const STALL_LIMIT: Duration = Duration::from_secs(200);
/// A child that prints nothing for this long is killed.
const CHILD_SILENCE: Duration = Duration::from_secs(250);

fn main() -> ExitCode {
    let opts = match harness::options_or_exit("ranks", USAGE, parse_args) {
        Ok(o) => o,
        Err(code) => return code,
    };
    if opts.list && opts.suite == Suite::Bench {
        set_env(&opts);
        bench::list(&opts);
        return ExitCode::SUCCESS;
    }
    if opts.list && matches!(opts.suite, Suite::Time | Suite::TimeLowp) {
        set_env(&opts);
        time::list(&opts);
        return ExitCode::SUCCESS;
    }
    if opts.list {
        let n = opts.placement.nranks;
        let p =
            rcclx::intercept::Policies::for_comm(&rcclx::config::Config::default(), n, rcclx::clique::local_fabric());
        for (i, c) in cases::dda_cases(n, &p, opts.quick, opts.seed).iter().enumerate() {
            println!("{i} {}", c.name());
        }
        return ExitCode::SUCCESS;
    }
    if opts.child.is_none() {
        set_env(&opts);
    }
    watchdog::start(STALL_LIMIT);
    let rt = match harness::gpu::runtime_or_exit("ranks", opts.placement.gpus) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match opts.child {
        Some(p) => run_child(&opts, p, rt),
        None => run_parent(&opts, rt),
    }
}

// ---------------------------------------------------------------------------------------------
// Parent: starts the processes, merges their results
// ---------------------------------------------------------------------------------------------

/// One rank's result of one case, as a child reports it:
/// `R <case> <rank> <ok> <group> <hash> <route> <detail>`.
struct RankLine {
    ok: bool,
    /// Ranks of one group must have produced identical outputs.
    group: usize,
    hash: String,
    route: String,
    detail: String,
}

fn parse_rank_line(rest: &str) -> Option<(usize, usize, RankLine)> {
    let mut t = rest.splitn(7, ' ');
    let case = t.next()?.parse().ok()?;
    let rank = t.next()?.parse().ok()?;
    let ok = t.next()? == "1";
    let group = t.next()?.parse().ok()?;
    let hash = t.next()?.to_string();
    let route = t.next()?.to_string();
    let detail = t.next().unwrap_or("").to_string();
    Some((case, rank, RankLine { ok, group, hash, route, detail }))
}

/// The verdict line of one case from every rank's line.
fn judge(name: &str, lines: &[RankLine]) -> (bool, String) {
    let mut bad: Vec<String> =
        lines.iter().enumerate().filter(|(_, l)| !l.ok).map(|(r, l)| format!("rank {r}: {}", l.detail)).collect();
    let mut groups: HashMap<usize, Vec<(usize, &str)>> = HashMap::new();
    for (r, l) in lines.iter().enumerate() {
        groups.entry(l.group).or_default().push((r, &l.hash));
    }
    for (g, members) in groups {
        if members.iter().any(|(_, h)| *h != members[0].1) {
            bad.push(format!(
                "ranks of group {g} differ: {}",
                members.iter().map(|(r, h)| format!("{r}:{h}")).collect::<Vec<_>>().join(" ")
            ));
        }
    }
    let mut routes: Vec<&str> = lines.iter().map(|l| l.route.as_str()).collect();
    routes.dedup();
    let route = routes.join(",");
    if bad.is_empty() {
        let detail = lines.first().map_or("", |l| l.detail.as_str());
        (true, format!("PASS {name} route={route} {detail}"))
    } else {
        (false, format!("FAIL {name} route={route} {}", bad.join("; ")))
    }
}

fn run_parent(opts: &Opts, rt: &'static Runtime) -> ExitCode {
    let p = opts.placement;
    println!(
        "INFO ranks: suite {}, {}, seed {}, codec {}, proto {}, ll128 max {}",
        opts.suite.name(),
        p.describe(),
        opts.seed,
        opts.codec,
        opts.proto,
        opts.ll128_max
    );
    for d in 0..p.gpus as i32 {
        if let Ok(i) = rt.device_info(d) {
            println!(
                "INFO device {d}: {} {} {} multiprocessors, pci {}",
                i.name, i.arch, i.multiprocessors, i.pci_bus_id
            );
        }
    }
    let dir = match fresh_dir(&format!("{}-{}", opts.suite.name(), p.nranks)) {
        Ok(d) => d,
        Err(e) => {
            println!("FATAL exchange directory: {}", e.0);
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let procs = p.processes();
    let args = (0..procs.len()).map(|i| {
        let mut a = opts.raw.clone();
        a.extend(["--child".into(), i.to_string(), "--dir".into(), dir.to_string_lossy().into_owned()]);
        a
    });
    let mut children = match Children::spawn(args) {
        Ok(c) => c,
        Err(e) => {
            println!("FATAL starting the ranks: {}", e.0);
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let n = p.nranks;
    let mut names: HashMap<usize, String> = HashMap::new();
    let mut pending: BTreeMap<usize, Vec<Option<RankLine>>> = BTreeMap::new();
    let mut routes: Vec<BTreeMap<String, u64>> = vec![BTreeMap::new(); n];
    let mut tally = Tally::new();
    let (mut done, mut eof) = (vec![false; procs.len()], vec![false; procs.len()]);
    let mut fatal = false;
    let mut reported = 0usize;
    while !eof.iter().all(|&e| e) {
        match children.lines().recv(CHILD_SILENCE) {
            Ok(Line { from, text: Some(line) }) => {
                watchdog::progress("waiting for the ranks");
                let (tag, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
                match tag {
                    "CASE" => {
                        if let Some((i, name)) = rest.split_once(' ')
                            && let Ok(i) = i.parse()
                        {
                            names.insert(i, name.to_string());
                        }
                    }
                    "R" => {
                        let Some((case, rank, rl)) = parse_rank_line(rest).filter(|(_, r, _)| *r < n) else {
                            println!("  [process {from}] unparsable: {line}");
                            continue;
                        };
                        let slot = pending.entry(case).or_insert_with(|| (0..n).map(|_| None).collect());
                        slot[rank] = Some(rl);
                        if slot.iter().all(Option::is_some) {
                            let lines: Vec<RankLine> =
                                pending.remove(&case).unwrap_or_default().into_iter().flatten().collect();
                            let name = names.get(&case).cloned().unwrap_or_else(|| format!("case {case}"));
                            let (ok, text) = judge(&name, &lines);
                            tally.record(ok, &text);
                            reported += 1;
                        }
                    }
                    "ROUTES" => {
                        let mut t = rest.split_whitespace();
                        if let Some(r) = t.next().and_then(|r| r.parse::<usize>().ok()).filter(|&r| r < n) {
                            for kv in t {
                                if let Some((k, v)) = kv.split_once('=') {
                                    *routes[r].entry(k.to_string()).or_default() += v.parse::<u64>().unwrap_or(0);
                                }
                            }
                        }
                    }
                    "DONE" => done[from] = true,
                    "FATAL" => {
                        println!("FATAL process {from}: {rest}");
                        fatal = true;
                    }
                    "INFO" if from != 0 => {}
                    _ => println!("{line}"),
                }
            }
            Ok(Line { from, text: None }) => {
                eof[from] = true;
                if !done[from] && !fatal {
                    println!("FATAL process {from} exited before finishing");
                    fatal = true;
                }
                if fatal {
                    // The others cannot finish a collective without it; they report their own
                    // hang within their wait limit, then exit. Give them that long.
                    let limit = device::wait_limit(p) + Duration::from_secs(20);
                    for (i, status) in children.wait_all(limit).into_iter().enumerate() {
                        if let Err(e) = status {
                            println!("  process {i}: {}", e.0);
                        }
                    }
                    break;
                }
            }
            Err(_) => {
                println!("FATAL no output from the ranks for {} s; killing them", CHILD_SILENCE.as_secs());
                fatal = true;
                children.kill_all();
                break;
            }
        }
    }
    for (i, status) in children.wait_all(Duration::from_secs(30)).into_iter().enumerate() {
        match status {
            Ok(s) if !s.success() && !fatal => {
                println!("FATAL process {i} exited with {s}");
                fatal = true;
            }
            Err(e) if !fatal => {
                println!("FATAL process {i}: {}", e.0);
                fatal = true;
            }
            _ => {}
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if !pending.is_empty() {
        println!("FAIL {} case(s) without every rank's result", pending.len());
        tally.count_failures(pending.len());
    }
    // The routes: every family the suite exercises ran on every rank, nothing was forwarded.
    let want = routes::of_suite(opts.suite, &opts.codec, n, opts.quick);
    for (r, got) in routes.iter().enumerate() {
        let line: Vec<String> = got.iter().filter(|(_, c)| **c > 0).map(|(k, c)| format!("{k}={c}")).collect();
        println!("ROUTES rank {r}: {}", line.join(" "));
        let missing: Vec<&str> =
            want.iter().filter(|w| got.get(*w).copied().unwrap_or(0) == 0).map(|w| w.as_str()).collect();
        let forwarded = got.get("forwarded").copied().unwrap_or(0);
        if !fatal && (!missing.is_empty() || forwarded > 0) {
            tally.record(false, &format!("FAIL routes rank {r}: never ran {missing:?}; forwarded {forwarded} call(s)"));
        }
    }
    if fatal && tally.failed() == 0 {
        tally.count_failures(1);
    }
    println!("INFO {reported} cases reported");
    tally.finish()
}

// ---------------------------------------------------------------------------------------------
// Child: one process's ranks
// ---------------------------------------------------------------------------------------------

fn run_child(opts: &Opts, process: usize, rt: &'static Runtime) -> ExitCode {
    let p = opts.placement;
    let ranks = p.processes()[process].clone();
    let dir = opts.dir.clone().expect("a child has a directory");
    let world = match World::join(rt, p, &ranks, &dir, Duration::from_secs(120)) {
        Ok(w) => w,
        Err(e) => {
            say(&format!("FATAL setting up ranks {ranks:?}: {}", e.0));
            return ExitCode::from(EXIT_FAILED);
        }
    };
    if process == 0 {
        say(&format!("INFO {}", device::describe_clique(&world)));
    }
    let mut dev = device::Ranks::new(rt, world, process == 0);
    let result = match opts.suite {
        Suite::Dda => cases::run(&mut dev, opts),
        Suite::Stress => stress::run(&mut dev, opts),
        Suite::Graph => graph::run(&mut dev, opts),
        Suite::A2av => a2av::run(&mut dev, opts),
        Suite::Time | Suite::TimeLowp => time::run(&mut dev, opts),
        Suite::Bench => bench::run(&mut dev, opts),
    };
    if let Err(e) = result {
        say(&format!("FATAL {}", e.0));
        return ExitCode::from(EXIT_FAILED);
    }
    dev.report_routes();
    dev.end();
    say("DONE");
    ExitCode::SUCCESS
}
