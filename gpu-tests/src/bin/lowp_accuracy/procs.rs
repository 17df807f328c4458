//! `--procs N`: one process per rank. The parent starts N copies of itself with
//! `--child RANK IDFILE`; rank 0 writes the NCCL unique id to IDFILE, the others read it, each
//! runs every case on its own communicator and reports `RESULT <case index> key=value...`
//! lines, which the parent merges into one verdict per case.

use std::collections::HashMap;
use std::ffi::c_int;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rcclx::abi::table as api;
use rcclx::gpu::Runtime;
use rcclx::types::{NCCL_UNIQUE_ID_BYTES, ncclComm_t, ncclUniqueId};
use rcclx_gpu_tests::children::{Children, Line};
use rcclx_gpu_tests::world::{self, Layout, Placement};
use rcclx_gpu_tests::{EXIT_FAILED, Tally, hex, nccl, watchdog};

use crate::cases::expect_lowp;
use crate::device::Comms;
use crate::opts::Opts;
use crate::reference::{for_each_prepared, model_codec};
use crate::report::{RankResult, judge};

/// A child that prints nothing for this long is killed.
const CHILD_SILENCE: Duration = Duration::from_secs(300);
/// How long the other ranks wait for rank 0's unique id.
const ID_WAIT: Duration = Duration::from_secs(120);
/// How long the children get to exit after their output ended.
const EXIT_WAIT: Duration = Duration::from_secs(10);

/// The parent: spawns the ranks and merges their results.
pub fn run_procs(opts: &Opts) -> ExitCode {
    let n = opts.nranks;
    // The NCCL unique id's file, or (--world) the directory of the harness's exchange.
    let idfile = match opts.world {
        Some(_) => match world::fresh_dir("lowp") {
            Ok(d) => d,
            Err(e) => {
                println!("FATAL {}", e.0);
                return ExitCode::from(EXIT_FAILED);
            }
        },
        None => std::env::temp_dir().join(format!("lowp_accuracy.{}.id", std::process::id())),
    };
    let _ = std::fs::remove_file(&idfile);
    let rank_args = (0..n).map(|r| {
        let mut args: Vec<String> = opts.raw.clone();
        args.extend(["--child".to_string(), r.to_string(), idfile.to_string_lossy().into_owned()]);
        args
    });
    let mut children = match Children::spawn(rank_args) {
        Ok(c) => c,
        Err(e) => {
            println!("FATAL spawning the ranks: {}", e.0);
            return ExitCode::from(EXIT_FAILED);
        }
    };

    let all = opts.cases();
    let mut results: HashMap<usize, Vec<Option<RankResult>>> = HashMap::new();
    let mut reported = vec![false; all.len()];
    let (mut done, mut eof) = (vec![false; n], vec![false; n]);
    let mut tally = Tally::new();
    let mut coverage = crate::LpCoverage::default();
    let mut fatal = false;
    while !eof.iter().all(|&e| e) {
        match children.lines().recv(CHILD_SILENCE) {
            Ok(Line { from: r, text: Some(line) }) => {
                // The ranks' progress is ours (their silence has its own bound, CHILD_SILENCE).
                watchdog::progress("waiting for the ranks");
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
                                results.remove(&idx).unwrap_or_default().into_iter().flatten().collect();
                            let c = &all[idx];
                            let lowp = expect_lowp(c.g.op, c.g.io, c.g.count, n);
                            let (ok, l) = judge(c, lowp, &rs);
                            coverage.add(c.g.op, lowp);
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
            Ok(Line { from: r, text: None }) => {
                eof[r] = true;
                if !done[r] && !fatal {
                    println!("FATAL rank {r} exited before finishing; stopping the other ranks");
                    fatal = true;
                }
                if fatal {
                    // A peer cannot finish a collective without it: stop everyone.
                    std::thread::sleep(Duration::from_secs(2));
                    children.kill_all();
                }
            }
            Err(_) => {
                let silent: Vec<usize> = (0..n).filter(|&r| !eof[r]).collect();
                println!("FATAL no output from rank(s) {silent:?} for {} s; killing them", CHILD_SILENCE.as_secs());
                fatal = true;
                children.kill_all();
                break;
            }
        }
    }
    for (r, status) in children.wait_all(EXIT_WAIT).into_iter().enumerate() {
        // A rank still running after its output ended was killed: its results are in.
        if let Ok(status) = status
            && !status.success()
            && !fatal
        {
            println!("FATAL rank {r} exited with {status}");
            fatal = true;
        }
    }
    let _ = std::fs::remove_file(&idfile);
    let _ = std::fs::remove_dir_all(&idfile);
    let missing = reported.iter().filter(|&&x| !x).count();
    if missing > 0 {
        println!("FAIL {missing} case(s) did not complete");
        tally.count_failures(missing);
    }
    if fatal && tally.failed() == 0 {
        tally.count_failures(1);
    }
    coverage.check(&mut tally, opts);
    tally.finish()
}

/// One rank (`--child RANK IDFILE`; with `--world`, IDFILE is the exchange directory): results
/// go to stdout as `RESULT <case index> key=value...`.
pub fn run_child(opts: &Opts, rank: usize, rt: &'static Runtime) -> ExitCode {
    let n = opts.nranks;
    let fatal = |what: String| {
        println!("FATAL {what}");
        ExitCode::from(EXIT_FAILED)
    };
    let idfile = opts.idfile.clone().expect("child has an id file");
    let comms = match opts.world {
        Some(gpus) => {
            let placement = Placement { nranks: n, gpus, layout: Layout::Procs };
            match Comms::world(rt, placement, &[rank], std::path::Path::new(&idfile)) {
                Ok(c) => c,
                Err(e) => return fatal(e),
            }
        }
        None => match nccl_rank(opts, rank, rt, &idfile) {
            Ok(c) => c,
            Err(e) => return fatal(e),
        },
    };
    let (codec, _) = model_codec(rt, opts.codec);
    for_each_prepared(&opts.cases(), n, codec, opts.seed, |i, case, p, _, _| {
        let rs = comms.run_case(rt, case, p, &mut |s| println!("NOTE {s}"));
        println!("RESULT {i} {}", rs[0].to_line());
    });
    comms.destroy(rt);
    println!("DONE");
    ExitCode::SUCCESS
}

/// Rank `rank`'s stock communicator: rank 0 writes the NCCL unique id to `idfile`, the others
/// read it.
fn nccl_rank(opts: &Opts, rank: usize, rt: &'static Runtime, idfile: &str) -> Result<Comms, String> {
    let n = opts.nranks;
    let fatal = Err::<Comms, String>;
    rt.set_device(rank as i32).map_err(|e| format!("set_device({rank}): {e}"))?;
    let id = if rank == 0 {
        let mut id = ncclUniqueId { internal: [0; NCCL_UNIQUE_ID_BYTES] };
        // SAFETY: `id` is a writable ncclUniqueId.
        let r = unsafe { api::ncclGetUniqueId(&mut id) };
        if !r.is_ok() {
            return fatal(format!("ncclGetUniqueId: {}", nccl::error_string(r)));
        }
        let tmp = format!("{idfile}.tmp");
        // Written whole, then renamed: a reader never sees part of it.
        if let Err(e) =
            std::fs::write(&tmp, hex::encode(&id.internal.map(|b| b as u8))).and_then(|_| std::fs::rename(&tmp, idfile))
        {
            return fatal(format!("writing {idfile}: {e}"));
        }
        id
    } else {
        let deadline = Instant::now() + ID_WAIT;
        loop {
            watchdog::progress("waiting for the unique id");
            let text = std::fs::read_to_string(idfile).unwrap_or_default();
            if let Ok(bytes) = hex::decode(&text, NCCL_UNIQUE_ID_BYTES) {
                break ncclUniqueId { internal: std::array::from_fn(|i| bytes[i] as _) };
            }
            if Instant::now() > deadline {
                return fatal(format!("no unique id in {idfile} after {} s", ID_WAIT.as_secs()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let mut comm: ncclComm_t = std::ptr::null_mut();
    watchdog::progress("ncclCommInitRank");
    // SAFETY: `comm` is a writable handle; `id` came from ncclGetUniqueId on rank 0.
    let r = unsafe { api::ncclCommInitRank(&mut comm, n as c_int, id, rank as c_int) };
    if !r.is_ok() {
        return fatal(format!("ncclCommInitRank: {}", nccl::error_string(r)));
    }
    let stream = match rt.create_stream(rank as i32) {
        Ok(s) => s,
        Err(e) => return fatal(format!("create_stream: {e}")),
    };
    Ok(Comms { ranks: vec![rank], comms: vec![comm], streams: vec![stream], nranks: n, world: None })
}
