//! Issue 37's scenarios on one GPU: teardown that never touches another communicator's memory,
//! and setups that end the same way on every rank. Ranks run through rcclx's real setup,
//! cliques, kernels and per-call path (`rcclx_gpu_tests::world`), as streams of one process or
//! as one process per rank (the IPC and reaper paths).
//!
//! ```text
//! teardown [--layout streams|procs] [--nranks N] [--cycles K] [--race-cycles R] [--only CHECK]
//!          [--shm-full] [--capture-mode global|thread-local|relaxed]
//! ```
//! (defaults: streams, 2 ranks, 200 cycles, 1000 race cycles, every check, captures in global
//! mode, PyTorch's default, where any thread's unsafe driver call not in relaxed mode breaks them). Checks (PASS|FAIL|SKIP
//! lines, then `N passed, M failed`; exit 0, 1 a check failed, 2 no GPU, 3 a stall: a check with
//! no progress for 90 s prints `FAIL <check> stalled: ...` and the process ends):
//! * `capture-teardown`: one thread captures a small graph, replays it and checks its output in a
//!   loop, while the main thread sets up, uses (checked AllReduce), destroys or aborts (in turn)
//!   K communicators, whose other ranks are in other processes with `--layout procs`: no capture
//!   may fail (a device-wide wait in teardown invalidates a concurrent capture), every replay and
//!   every AllReduce exact.
//! * `replay-after-destroy` (both layouts): capture every rank's AllReduce (buffers of the
//!   graphs' own), destroy the communicators, set up new ones of the same sizes (none of whose
//!   buffers may be an old clique's), then use the new ones, replay the old graphs, use the new
//!   ones, replay again, use again: every replay exact (its outputs wiped before, so a replay
//!   that did not run fails; they run on the old cliques' memory, which the graphs keep) and
//!   every call of the new communicators exact (nothing of theirs was touched); once the graphs
//!   are destroyed every ended clique's memory is back in the pool.
//! * `fault-<site>`: `RCCLX_FAULT_INJECT=<site>:1` in every process (a build with the cargo
//!   feature `rcclx/fault-inject`, as `scripts/gpu-prep.sh` makes): each rank's setup runs on
//!   its own (as in separate processes) and every rank must end with the same verdict: kernels
//!   on (no fault, and sites that cannot fire in this layout: `peer` on one GPU, `ipc` as
//!   streams), off (`describe`, `alloc`, `lease`, `ipc` as procs) or in error (`exchange1..3`);
//!   no hang, and every process's ended setups back in the pool (nothing freed, nothing leaked).
//!   With `--shm-full` (the caller mounted a full tmpfs over `/dev/shm`), every setup must end
//!   with the kernels off (no lease file can be reserved: a WARN, no SIGBUS), run it with
//!   `--only fault-`.
//! * `shm-residue`: a process killed with SIGKILL in the middle of a setup leaves its lease file;
//!   the next process's first setup removes it.
//! * `fork-exit`: a forked child that calls `exit()` leaves the parent's communicators working
//!   (streams) and never closes the parent's lease words (procs: rank 0's destroyed clique is
//!   held by a graph while its child exits; the other ranks, in other processes, destroy theirs
//!   and must keep their buffers until rank 0 destroys the graph, then get them back).
//! * `abort-pending-setup` (streams): `ncclCommAbort` of a communicator whose non-blocking setup
//!   is past its first exchange (its buffers allocated and published, the peer silent), while
//!   another clique's kernel is stuck on the same GPU (rank 0 of an AllReduce whose rank 1 has
//!   not been launched): the abort must return within 5 s (a device free or a device-wide wait
//!   on its path would wait for the stuck kernel for ever) and bury the setup's buffers; then the
//!   stuck AllReduce is completed and checked, and every buffer is back in the pool. The stuck
//!   kernel is rcclx's, not the stock library's (that needs two GPUs: the stock library refuses
//!   two ranks on one), which is the same to a call that waits for the device.
//! * `capture-probe`, `abort-behind-launch` (streams): `probe.rs`.
//! * `destroy-race` (streams): two threads set up, use and destroy or abort communicators on
//!   streams of their own at once, R times each: every ended clique goes quiet only after its
//!   own fence passed (`rcclx::clique::teardown_counts`), no fence query fails, all exact.
//!
//! Child roles (started by the checks above): `--peer RANK --dir D --cycles K`, `--replay-peer
//! RANK --dir D`, `--fork-peer RANK --dir D`, `--fault-child
//! SITE --ranks R,R.. --dir D`, `--shm-victim D`, `--shm-sweep D`.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod probe;

use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rcclx::clique::{self, Buffers, Member, Setup, Sharing};
use rcclx::comm::{self, lifecycle};
use rcclx::gpu::{CaptureMode, DeviceBuffer, MemKind, Runtime, Stream};
use rcclx::intercept::{CallDesc, Coll};
use rcclx::types::{ncclComm_t, ncclDataType_t, ncclResult_t};
use rcclx_gpu_tests::children::{Children, say};
use rcclx_gpu_tests::world::{FORWARDED, FileTransport, Layout, Placement, World, fresh_dir};
use rcclx_gpu_tests::{self as harness, Fail, Outcome, Tally, watchdog};

/// Elements of every AllReduce (f32: 16 KiB, a one-shot kernel at every rank count).
const COUNT: usize = 4096;
const WAIT: Duration = Duration::from_secs(60);
/// No progress for this long fails the check then running, by name (`watchdog`): every wait of
/// a check is bounded by [`WAIT`], so only a call that never returns gets here.
const STALL_LIMIT: Duration = Duration::from_secs(90);
/// The setup limit of the fault checks (a rank whose peer failed to post an exchange waits
/// this long, then ends in error).
const FAULT_LIMIT: Duration = Duration::from_secs(5);
const SITES: [&str; 9] = ["none", "describe", "alloc", "lease", "ipc", "peer", "exchange1", "exchange2", "exchange3"];

enum Role {
    Main,
    Peer { rank: usize, dir: PathBuf, cycles: usize },
    ReplayPeer { rank: usize, dir: PathBuf },
    ForkPeer { rank: usize, dir: PathBuf },
    Fault { site: String, ranks: Vec<usize>, dir: PathBuf },
    ShmVictim(PathBuf),
    ShmSweep(PathBuf),
}

struct Opts {
    layout: Layout,
    nranks: usize,
    cycles: usize,
    race_cycles: usize,
    only: Option<String>,
    /// `/dev/shm` is full (a small tmpfs mounted by the caller): no lease file can be reserved,
    /// so every setup, even without a fault, must end with the kernels off (no SIGBUS).
    shm_full: bool,
    /// The mode of `capture-teardown`'s captures.
    capture_mode: CaptureMode,
    role: Role,
}

fn parse(args: Vec<String>) -> Result<Opts, String> {
    let mut o = Opts {
        layout: Layout::Streams,
        nranks: 2,
        cycles: 200,
        race_cycles: 1000,
        only: None,
        shm_full: false,
        capture_mode: CaptureMode::Global,
        role: Role::Main,
    };
    let (mut peer, mut fault, mut victim, mut sweep, mut dir, mut ranks) = (None, None, None, None, None, None);
    let (mut replay_peer, mut fork_peer) = (None, None);
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut value = |what: &str| it.next().ok_or(format!("{what} needs a value"));
        let num = |v: String, what: &str| v.parse::<usize>().map_err(|_| format!("{what} needs a number"));
        match a.as_str() {
            "--layout" => o.layout = Layout::parse(&value("--layout")?).ok_or("--layout is streams or procs")?,
            "--nranks" => o.nranks = num(value("--nranks")?, "--nranks")?,
            "--cycles" => o.cycles = num(value("--cycles")?, "--cycles")?.max(1),
            "--race-cycles" => o.race_cycles = num(value("--race-cycles")?, "--race-cycles")?.max(1),
            "--only" => o.only = Some(value("--only")?),
            "--shm-full" => o.shm_full = true,
            "--capture-mode" => {
                o.capture_mode = match value("--capture-mode")?.as_str() {
                    "global" => CaptureMode::Global,
                    "thread-local" => CaptureMode::ThreadLocal,
                    "relaxed" => CaptureMode::Relaxed,
                    _ => return Err("--capture-mode is global, thread-local or relaxed".into()),
                }
            }
            "--peer" => peer = Some(num(value("--peer")?, "--peer")?),
            "--replay-peer" => replay_peer = Some(num(value("--replay-peer")?, "--replay-peer")?),
            "--fork-peer" => fork_peer = Some(num(value("--fork-peer")?, "--fork-peer")?),
            "--fault-child" => fault = Some(value("--fault-child")?),
            "--shm-victim" => victim = Some(PathBuf::from(value("--shm-victim")?)),
            "--shm-sweep" => sweep = Some(PathBuf::from(value("--shm-sweep")?)),
            "--dir" => dir = Some(PathBuf::from(value("--dir")?)),
            "--ranks" => {
                ranks = Some(
                    value("--ranks")?
                        .split(',')
                        .map(|r| r.parse::<usize>().map_err(|_| "--ranks: numbers".to_string()))
                        .collect::<Result<Vec<_>, _>>()?,
                )
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if !(2..=8).contains(&o.nranks) {
        return Err("--nranks must be 2..=8".into());
    }
    let dir = || dir.clone().ok_or("this role needs --dir");
    if let Some(rank) = replay_peer {
        o.role = Role::ReplayPeer { rank, dir: dir()? };
        return Ok(o);
    }
    if let Some(rank) = fork_peer {
        o.role = Role::ForkPeer { rank, dir: dir()? };
        return Ok(o);
    }
    o.role = match (peer, fault, victim, sweep) {
        (Some(rank), None, None, None) => Role::Peer { rank, dir: dir()?, cycles: o.cycles },
        (None, Some(site), None, None) => {
            Role::Fault { site, ranks: ranks.ok_or("--fault-child needs --ranks")?, dir: dir()? }
        }
        (None, None, Some(d), None) => Role::ShmVictim(d),
        (None, None, None, Some(d)) => Role::ShmSweep(d),
        (None, None, None, None) => Role::Main,
        _ => return Err("one role at most".into()),
    };
    Ok(o)
}

fn main() -> ExitCode {
    let o = match harness::options_or_exit(
        "teardown",
        "usage: teardown [--layout streams|procs] [--nranks N] [--cycles K] [--race-cycles R] [--only CHECK] [--shm-full] [--capture-mode global|thread-local|relaxed]",
        parse,
    ) {
        Ok(o) => o,
        Err(code) => return code,
    };
    let rt = match harness::gpu::runtime_or_exit("teardown", 1) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    watchdog::start(STALL_LIMIT);
    let child = match &o.role {
        Role::Main => None,
        Role::Peer { rank, dir, cycles } => Some(peer(rt, &o, *rank, dir, *cycles)),
        Role::ReplayPeer { rank, dir } => Some(replay_peer(rt, &o, *rank, dir)),
        Role::ForkPeer { rank, dir } => Some(fork_peer(rt, &o, *rank, dir)),
        Role::Fault { site, ranks, dir } => Some(fault_child(rt, &o, site, ranks, dir)),
        Role::ShmVictim(dir) => Some(shm_victim(rt, dir)),
        Role::ShmSweep(dir) => Some(shm_sweep(rt, dir)),
    };
    if let Some(r) = child {
        return match r {
            Ok(()) => ExitCode::SUCCESS,
            Err(Fail(e)) => {
                say(&format!("ERROR {e}"));
                ExitCode::from(harness::EXIT_FAILED)
            }
        };
    }
    let mut tally = Tally::timed();
    let wanted = |name: &str| o.only.as_deref().is_none_or(|only| name.starts_with(only));
    let streams = o.layout == Layout::Streams;
    let skip = |why: &str| Ok(Outcome::Skip(why.to_string()));
    if wanted("capture-teardown") {
        tally.check("capture-teardown", || capture_teardown(rt, &o));
    }
    if wanted("replay-after-destroy") {
        tally.check("replay-after-destroy", || replay_after_destroy(rt, &o));
    }
    for site in SITES {
        let name = format!("fault-{site}");
        if wanted(&name) {
            tally.check(&name, || fault_stage(&o, site));
        }
    }
    if wanted("shm-residue") {
        tally.check("shm-residue", shm_residue);
    }
    if wanted("fork-exit") {
        tally.check("fork-exit", || if streams { fork_exit(rt, &o) } else { fork_exit_procs(rt, &o) });
    }
    if wanted("abort-pending-setup") {
        tally.check("abort-pending-setup", || if streams { abort_pending_setup(rt) } else { skip("streams only") });
    }
    if wanted("capture-probe") {
        tally.check("capture-probe", || probe::capture_probe(rt));
    }
    if wanted("abort-behind-launch") {
        tally.check(
            "abort-behind-launch",
            || if streams { probe::abort_behind_launch(rt) } else { skip("streams only") },
        );
    }
    if wanted("destroy-race") {
        tally.check("destroy-race", || if streams { destroy_race(rt, &o) } else { skip("streams only") });
    }
    tally.finish()
}

// ---- ranks, buffers, calls ------------------------------------------------------------------

/// Rank r's input: small integers, so that every f32 sum is exact.
fn input(rank: usize, salt: usize) -> Vec<f32> {
    rcclx_gpu_tests::exact::input(COUNT, rank, salt)
}

fn expected(nranks: usize, salt: usize) -> Vec<f32> {
    rcclx_gpu_tests::exact::expected(COUNT, nranks, salt)
}

/// Input and output buffers of some ranks (by position).
struct Bufs {
    send: Vec<DeviceBuffer>,
    recv: Vec<DeviceBuffer>,
}

/// Streams of one process sharing GPU 0 with grids of a quarter of it, so that the kernels of
/// two worlds of 2 ranks (or one stuck and one more) fit together.
fn quarter_gpu(rt: &Runtime) -> Result<Sharing, Fail> {
    let mps = rt.device_info(0)?.multiprocessors;
    Ok(Sharing { shared_gpus: true, grid_cap: (mps / 4).max(1), cap_per_rank: false })
}

impl Bufs {
    /// Every rank's input for `salt` (rank = position), synchronously.
    fn upload(&self, rt: &Runtime, salt: usize) -> Result<(), Fail> {
        let _g = rt.device_guard(0)?;
        for (r, send) in self.send.iter().enumerate() {
            send.copy_from_host(&input(r, salt))?;
        }
        Ok(())
    }

    fn new(rt: &'static Runtime, n: usize) -> Result<Bufs, Fail> {
        let alloc = || rt.alloc(0, COUNT * 4, MemKind::Normal);
        Ok(Bufs {
            send: (0..n).map(|_| alloc()).collect::<Result<_, _>>()?,
            recv: (0..n).map(|_| alloc()).collect::<Result<_, _>>()?,
        })
    }
}

fn placement(layout: Layout, nranks: usize) -> Placement {
    Placement { nranks, gpus: 1, layout }
}

/// This process's `ranks` of a world through files in `dir`; `sharing` or the layout's.
fn join(
    rt: &'static Runtime,
    p: Placement,
    ranks: &[usize],
    dir: &Path,
    sharing: Option<Sharing>,
) -> Result<World, Fail> {
    std::fs::create_dir_all(dir)?;
    match sharing {
        Some(s) => World::join_sharing(rt, p, ranks, dir, WAIT, s),
        None => World::join(rt, p, ranks, dir, WAIT),
    }
}

/// One AllReduce on every local rank of `w` (`bufs` by position), waited for and checked.
fn all_reduce(rt: &Runtime, w: &World, bufs: &Bufs, salt: usize) -> Result<(), Fail> {
    let _g = rt.device_guard(0)?;
    for (i, &r) in w.ranks.iter().enumerate() {
        bufs.send[i].copy_from_host(&input(r, salt))?;
    }
    for i in 0..w.ranks.len() {
        call(w, bufs, i, w.streams[i])?;
    }
    for (i, &r) in w.ranks.iter().enumerate() {
        harness::gpu::wait_stream(rt, w.streams[i], WAIT, &format!("rank {r}: AllReduce"))?;
        verify(bufs, i, r, w.placement.nranks, salt)?;
    }
    Ok(())
}

/// Local rank `i`'s AllReduce on `stream`, through rcclx's per-call path.
fn call(w: &World, bufs: &Bufs, i: usize, stream: Stream) -> Result<(), Fail> {
    let c = CallDesc::new(Coll::AllReduce, COUNT, ncclDataType_t::Float32);
    let b = Buffers { send: bufs.send[i].ptr().as_raw() as *const c_void, recv: bufs.recv[i].ptr().as_raw(), stream };
    match comm::collective(w.comms[i], c, b, || FORWARDED) {
        ncclResult_t::Success => Ok(()),
        FORWARDED => Err(Fail(format!("rank {}: rcclx would have forwarded the call", w.ranks[i]))),
        r => Err(Fail(format!("rank {}: AllReduce returned {}", w.ranks[i], r.0))),
    }
}

fn verify(bufs: &Bufs, i: usize, rank: usize, nranks: usize, salt: usize) -> Result<(), Fail> {
    let mut got = vec![0f32; COUNT];
    bufs.recv[i].copy_to_host(&mut got)?;
    let want = expected(nranks, salt);
    match got.iter().zip(&want).position(|(g, w)| g.to_bits() != w.to_bits()) {
        None => Ok(()),
        Some(k) => Err(Fail(format!("rank {rank}: element {k} is {} instead of {}", got[k], want[k]))),
    }
}

fn pooled(what: &str) -> Result<(), Fail> {
    if clique::wait_pooled(Duration::from_secs(20)) {
        Ok(())
    } else {
        Err(Fail(format!("{what}: {} ended cliques not back in the pool after 20 s", clique::ended_not_pooled())))
    }
}

/// Children for ranks 1..N of a `--layout procs` check, each with `args` after its rank.
fn spawn_peers(o: &Opts, args: &[String]) -> Result<Children, Fail> {
    spawn_peers_as(o, "--peer", args)
}

/// [`spawn_peers`] in the child role `role` (`--peer`, `--replay-peer`).
fn spawn_peers_as(o: &Opts, role: &str, args: &[String]) -> Result<Children, Fail> {
    Children::spawn((1..o.nranks).map(|r| {
        let mut a = vec!["--nranks".to_string(), o.nranks.to_string(), role.to_string(), r.to_string()];
        a.extend(args.iter().cloned());
        a
    }))
}

// ---- capture during teardown ---------------------------------------------------------------

/// Captures a memset of `buf` into a graph, replays it and checks the bytes, until `stop`.
/// (captures that succeeded, failures)
fn capture_loop(rt: &'static Runtime, stop: &AtomicBool, mode: CaptureMode) -> Result<(usize, Vec<String>), Fail> {
    let _g = rt.device_guard(0)?;
    let stream = rt.create_stream(0)?;
    let buf = rt.alloc(0, 4096, MemKind::Normal)?;
    let (mut ok, mut failures) = (0usize, Vec::new());
    let mut i = 0u8;
    while !stop.load(Ordering::Acquire) && failures.len() < 20 {
        i = i.wrapping_add(1) | 1;
        if let Err(e) = rt.begin_capture_in(stream, mode) {
            failures.push(format!("begin capture: {e}"));
            continue;
        }
        // SAFETY: `buf` is ours and nothing else uses it; the memset is only captured here.
        let set = unsafe { rt.memset_async(buf.ptr(), i, buf.len(), stream) };
        let graph = match (set, rt.end_capture(stream)) {
            (Ok(()), Ok(g)) => g,
            (Err(e), Ok(g)) => {
                failures.push(format!("capture: {e}"));
                // SAFETY: never launched.
                let _ = unsafe { rt.destroy_graph(g) };
                continue;
            }
            (_, Err(e)) => {
                failures.push(format!("capture: {e}"));
                continue;
            }
        };
        let replayed = rt.launch_graph(graph, stream).and_then(|_| rt.wait_stream(stream, WAIT));
        // SAFETY: the replay has completed (or failed); not used again.
        let _ = unsafe { rt.destroy_graph(graph) };
        match replayed {
            Ok(true) => {}
            Ok(false) => failures.push("a replay did not finish".into()),
            Err(e) => failures.push(format!("replay: {e}")),
        }
        let mut got = vec![0u8; 4096];
        buf.copy_to_host(&mut got)?;
        if got.iter().any(|&b| b != i) {
            failures.push(format!("replay {ok}: wrong bytes"));
        }
        ok += 1;
    }
    // SAFETY: idle (every replay waited for), not used again.
    let _ = unsafe { rt.destroy_stream(stream) };
    Ok((ok, failures))
}

/// Rank 0 (procs) or every rank (streams): K cycles of set up, use, destroy | abort.
fn cycles(rt: &'static Runtime, p: Placement, ranks: &[usize], dir: &Path, cycles: usize) -> Result<(), Fail> {
    let bufs = Bufs::new(rt, ranks.len())?;
    for c in 0..cycles {
        watchdog::progress("capture-teardown cycles");
        let d = dir.join(format!("c{c}"));
        let w = join(rt, p, ranks, &d, None)?;
        all_reduce(rt, &w, &bufs, c)?;
        w.end_as(rt, c % 2 == 1);
        if ranks[0] == 0 {
            let _ = std::fs::remove_dir_all(&d);
        }
    }
    pooled("cycles")
}

fn capture_teardown(rt: &'static Runtime, o: &Opts) -> Result<Outcome, Fail> {
    let dir = fresh_dir("teardown-capture")?;
    let p = placement(o.layout, o.nranks);
    let stop = AtomicBool::new(false);
    let mut peers = match o.layout {
        Layout::Procs => {
            Some(spawn_peers(o, &["--dir".into(), dir.display().to_string(), "--cycles".into(), o.cycles.to_string()])?)
        }
        Layout::Streams => None,
    };
    let local: Vec<usize> = match o.layout {
        Layout::Procs => vec![0],
        Layout::Streams => (0..o.nranks).collect(),
    };
    let started = Instant::now();
    let (mine, captured) = std::thread::scope(|s| {
        let capturer = s.spawn(|| capture_loop(rt, &stop, o.capture_mode));
        let mine = cycles(rt, p, &local, &dir, o.cycles);
        stop.store(true, Ordering::Release);
        let captured = capturer.join().unwrap_or_else(|_| Err(Fail("the capture thread panicked".into())));
        (mine, captured)
    });
    if mine.is_err()
        && let Some(c) = &mut peers
    {
        c.kill_all();
    }
    mine?;
    if let Some(c) = &mut peers {
        c.finish(WAIT)?;
    }
    let (ok, failures) = captured?;
    let counts = clique::teardown_counts();
    let report = format!(
        "{} cycles of {} ranks ({}) in {:.1} s, {ok} graphs captured and replayed meanwhile; graves: {} buried, {} quiet at burial, {} by the reaper, {} failed queries",
        o.cycles,
        o.nranks,
        o.layout.name(),
        started.elapsed().as_secs_f64(),
        counts.buried,
        counts.quiet_at_burial,
        counts.quiet_by_reaper,
        counts.failed_queries
    );
    if !failures.is_empty() {
        return Err(Fail(format!("{} capture failures ({}): {report}", failures.len(), failures.join("; "))));
    }
    if ok == 0 {
        return Err(Fail(format!("no graph was captured: {report}")));
    }
    Ok(Outcome::Pass(report))
}

/// `--peer RANK`: rank RANK of the cycles of `capture-teardown`.
fn peer(rt: &'static Runtime, o: &Opts, rank: usize, dir: &Path, k: usize) -> Result<(), Fail> {
    cycles(rt, placement(Layout::Procs, o.nranks), &[rank], dir, k)
}

// ---- replay after destroy --------------------------------------------------------------------

fn replay_after_destroy(rt: &'static Runtime, o: &Opts) -> Result<Outcome, Fail> {
    let dir = fresh_dir("teardown-replay")?;
    let p = placement(o.layout, o.nranks);
    match o.layout {
        Layout::Streams => replay_ranks(rt, p, &(0..o.nranks).collect::<Vec<_>>(), &dir).map(Outcome::Pass),
        Layout::Procs => {
            let mut peers = spawn_peers_as(o, "--replay-peer", &["--dir".into(), dir.display().to_string()])?;
            let mine = replay_ranks(rt, p, &[0], &dir);
            if mine.is_err() {
                peers.kill_all();
            }
            let report = mine?;
            peers.finish(WAIT)?;
            Ok(Outcome::Pass(format!("rank 0 of {} processes: {report}", o.nranks)))
        }
    }
}

/// `--replay-peer RANK`: rank RANK of `replay-after-destroy` as procs.
fn replay_peer(rt: &'static Runtime, o: &Opts, rank: usize, dir: &Path) -> Result<(), Fail> {
    replay_ranks(rt, placement(Layout::Procs, o.nranks), &[rank], dir).map(|_| ())
}

/// This process's `ranks` of `replay-after-destroy`.
///
/// The graphs have buffers of their own (the new communicator's calls cannot hide a replay
/// that wrote nothing), and their outputs are wiped before every replay: a replay is exact only
/// if it ran. The old graphs replay between two uses of the new communicator, whose memory must
/// be none of the old cliques' (the graphs still hold it) and whose results stay exact.
fn replay_ranks(rt: &'static Runtime, p: Placement, ranks: &[usize], dir: &Path) -> Result<String, Fail> {
    let (n, k) = (p.nranks, ranks.len());
    let graph_bufs = Bufs::new(rt, k)?;
    let bufs = Bufs::new(rt, k)?;
    let a = join(rt, p, ranks, &dir.join("a"), None)?;
    all_reduce(rt, &a, &graph_bufs, 1)?;
    // Capture every local rank's AllReduce of salt 2 (inputs uploaded now; replays read them).
    // The device stays current for the whole scenario: `end_capture` instantiates the graph,
    // which needs a current context (without it: CUDA_ERROR_INVALID_CONTEXT, seen on one H200:
    // this thread has a current context only inside device guards).
    let _g = rt.device_guard(0)?;
    for (i, &r) in ranks.iter().enumerate() {
        graph_bufs.send[i].copy_from_host(&input(r, 2))?;
    }
    let mut graphs = Vec::new();
    for i in 0..k {
        rt.begin_capture(a.streams[i])?;
        let called = call(&a, &graph_bufs, i, a.streams[i]);
        let g = rt.end_capture(a.streams[i])?;
        called?;
        graphs.push(g);
    }
    let wiped = vec![f32::NAN; COUNT];
    let replay = |streams: &[Stream], what: &str| -> Result<(), Fail> {
        for b in &graph_bufs.recv {
            b.copy_from_host(&wiped)?;
        }
        for (g, &s) in graphs.iter().zip(streams) {
            rt.launch_graph(*g, s)?;
        }
        for (i, &r) in ranks.iter().enumerate() {
            harness::gpu::wait_stream(rt, streams[i], WAIT, &format!("rank {r}: {what}"))?;
            verify(&graph_bufs, i, r, n, 2).map_err(|Fail(e)| Fail(format!("{what}: {e}")))?;
        }
        Ok(())
    };
    replay(&a.streams, "replay before destroy")?;
    let old = own_memory(&a);
    let streams: Vec<Stream> = (0..k).map(|_| rt.create_stream(0)).collect::<Result<_, _>>()?;
    let before = clique::teardown_counts();
    a.end(rt); // destroy while the graphs live
    std::thread::sleep(Duration::from_millis(200));
    let held = clique::ended_not_pooled();
    if held < k {
        return Err(Fail(format!("{held} of {k} destroyed cliques held while their graphs live")));
    }
    let b = join(rt, p, ranks, &dir.join("b"), None)?;
    let new = own_memory(&b);
    if let Some(x) = new.iter().find(|x| old.contains(x)) {
        return Err(Fail(format!("the new communicator got buffer {x:#x} of a destroyed one whose graphs live")));
    }
    all_reduce(rt, &b, &bufs, 3)?;
    // The old graphs again, on streams of their own: they run on the old cliques' memory.
    replay(&streams, "replay after destroy")?;
    all_reduce(rt, &b, &bufs, 4)?;
    replay(&streams, "second replay after destroy")?;
    all_reduce(rt, &b, &bufs, 5)?;
    let still = clique::ended_not_pooled();
    if still < k {
        return Err(Fail(format!("{still} of {k} destroyed cliques held after the replays, their graphs alive")));
    }
    for g in graphs {
        // SAFETY: every replay was waited for; not used again.
        unsafe { rt.destroy_graph(g) }?;
    }
    for s in streams {
        // SAFETY: idle, ours, not used again.
        let _ = unsafe { rt.destroy_stream(s) };
    }
    b.end(rt);
    pooled("replay-after-destroy")?;
    let after = clique::teardown_counts();
    Ok(format!(
        "{k} of {n} ranks here: {held} destroyed cliques held by their graphs; the new communicator on other memory, exact around 2 exact replays of the old graphs; {} graves quiet by the reaper since",
        after.quiet_by_reaper - before.quiet_by_reaper
    ))
}

/// The start of every buffer of this process's ranks of `w` (staging, flags, LL inbox, window
/// counters), as its kernels see them.
fn own_memory(w: &World) -> Vec<u64> {
    w.cliques
        .iter()
        .flat_map(|c| {
            let a = c.args();
            [a.staging[c.rank], a.flags[c.rank], a.ll[c.rank], a.seq]
        })
        .collect()
}

// ---- a fault at each setup stage --------------------------------------------------------------

/// What every rank must end with when `site` fails on rank 1, in `layout` on one GPU (with
/// `/dev/shm` full, every setup that gets past its first exchange finds no room for its lease).
fn expected_verdict(site: &str, layout: Layout, shm_full: bool) -> &'static str {
    match site {
        "describe" | "alloc" | "lease" if shm_full => "off",
        "none" | "peer" | "ipc" if shm_full => "off",
        "none" | "peer" => "on", // peer access is only enabled between two GPUs
        "ipc" if layout == Layout::Streams => "on", // one process: raw pointers, no IPC
        "exchange1" | "exchange2" | "exchange3" => "err",
        _ => "off",
    }
}

fn fault_stage(o: &Opts, site: &str) -> Result<Outcome, Fail> {
    let dir = fresh_dir(&format!("teardown-fault-{site}"))?;
    let groups: Vec<Vec<usize>> = placement(o.layout, o.nranks).processes();
    let env = if site == "none" { String::new() } else { format!("{site}:1") };
    let exe = std::env::current_exe()?;
    let mut kids = Vec::new();
    for g in &groups {
        let ranks = g.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(",");
        let child = std::process::Command::new(&exe)
            .args(["--nranks", &o.nranks.to_string(), "--layout", o.layout.name(), "--fault-child", site])
            .args(["--ranks", &ranks, "--dir", &dir.display().to_string()])
            .env("RCCLX_FAULT_INJECT", &env)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()?;
        kids.push(child);
    }
    let mut verdicts = Vec::new();
    let mut failures = Vec::new();
    for k in kids {
        watchdog::progress("fault children");
        let out = k.wait_with_output()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        for line in text.lines() {
            if let Some(v) = line.strip_prefix("VERDICT ") {
                verdicts.push(v.to_string());
            } else if let Some(e) = line.strip_prefix("ERROR ") {
                failures.push(e.to_string());
            }
        }
        if !out.status.success() && failures.is_empty() {
            failures.push(format!("a child exited with {}", out.status));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let want = expected_verdict(site, o.layout, o.shm_full);
    let report = format!("RCCLX_FAULT_INJECT={env:?}, {} ranks ({}): verdicts {verdicts:?}", o.nranks, o.layout.name());
    if !failures.is_empty() {
        return Err(Fail(format!("{}: {report}", failures.join("; "))));
    }
    if verdicts.len() != o.nranks || verdicts.iter().any(|v| v.split(' ').nth(1) != Some(want)) {
        let hint = if want != "on" && verdicts.iter().all(|v| v.ends_with(" on")) {
            " (no fault fired: is rcclx built with the fault-inject feature, as scripts/gpu-prep.sh does?)"
        } else {
            ""
        };
        return Err(Fail(format!("every rank should end {want}: {report}{hint}")));
    }
    Ok(Outcome::Pass(report))
}

/// `--fault-child SITE --ranks ..`: each rank's setup on its own, then `VERDICT rank on|off|err
/// CODE` per rank; the cliques that came up are used once and destroyed; every ended setup's
/// memory must be back in the pool.
fn fault_child(rt: &'static Runtime, o: &Opts, _site: &str, ranks: &[usize], dir: &Path) -> Result<(), Fail> {
    let p = placement(o.layout, o.nranks);
    let mps = rt.device_info(0)?.multiprocessors;
    let mut setups = Vec::new();
    for &r in ranks {
        // A handle of our own: a unique address, never dereferenced (leaked on purpose).
        let comm = Box::into_raw(Box::new(0u64)) as ncclComm_t;
        let member = Member { comm, rank: r, nranks: o.nranks, device: 0, max_ctas: 0 };
        let t = FileTransport::new(dir, vec![r], o.nranks);
        match Setup::with(vec![member], Box::new(t), p.sharing(mps)) {
            Ok(mut s) => {
                s.set_limit(Some(FAULT_LIMIT));
                setups.push((r, comm, Some(s)));
            }
            Err(e) => {
                say(&format!("VERDICT {r} err {}", e.code.0));
                setups.push((r, comm, None));
            }
        }
    }
    let deadline = Instant::now() + WAIT;
    let mut on = Vec::new();
    while setups.iter().any(|(_, _, s)| s.is_some()) {
        watchdog::progress("fault setup");
        if Instant::now() > deadline {
            return Err(Fail("a setup neither finished nor failed".into()));
        }
        for (r, comm, slot) in &mut setups {
            let Some(s) = slot else { continue };
            match s.poll() {
                Ok(None) => continue,
                Ok(Some(mut out)) => {
                    let clique = out.pop().and_then(|(_, c)| c);
                    say(&format!("VERDICT {r} {}", if clique.is_some() { "on" } else { "off" }));
                    if clique.is_some() {
                        lifecycle::adopt(*comm, clique);
                        on.push((*r, *comm));
                    }
                }
                Err(e) => say(&format!("VERDICT {r} err {}", e.code.0)),
            }
            *slot = None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(setups);
    if !on.is_empty() {
        let streams = on.iter().map(|_| rt.create_stream(0)).collect::<Result<Vec<_>, _>>()?;
        let w = World {
            placement: p,
            ranks: on.iter().map(|x| x.0).collect(),
            devices: vec![0; on.len()],
            comms: on.iter().map(|x| x.1).collect(),
            streams,
            cliques: vec![],
        };
        // Only when every rank came up (else the call would wait for a rank without kernels).
        if on.len() == ranks.len() {
            let bufs = Bufs::new(rt, on.len())?;
            all_reduce(rt, &w, &bufs, 5)?;
        }
        w.end(rt);
    }
    pooled("fault child")
}

// ---- /dev/shm residue ---------------------------------------------------------------------------

/// This user's lease files of process `pid` in this pid namespace.
fn lease_files_of(pid: u32) -> Vec<String> {
    let ns = std::fs::metadata("/proc/self/ns/pid").map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap_or(0);
    // SAFETY: getuid has no preconditions.
    let prefix = format!("rcclx-{}-{ns:x}-{pid}-", unsafe { libc::getuid() });
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

fn shm_residue() -> Result<Outcome, Fail> {
    let dir = fresh_dir("teardown-shm")?;
    let d = dir.display().to_string();
    let mut victim = Children::spawn([["--shm-victim", d.as_str()]])?;
    // Rank 1 takes part in the first exchange only: rank 0 then joins the lease and waits.
    let t = FileTransport::new(&dir, vec![1], 2);
    let member = Member { comm: 0x5eed as ncclComm_t, rank: 1, nranks: 2, device: 0, max_ctas: 0 };
    let setup = Setup::with(vec![member], Box::new(t), Sharing { shared_gpus: true, ..Sharing::default() })
        .map_err(|e| Fail(format!("rank 1's setup: {e}")))?;
    let pid: u32 =
        victim.lines().expect("JOINED", "victim", WAIT)?.trim().parse().map_err(|_| Fail("the victim's pid".into()))?;
    let files = lease_files_of(pid);
    if files.is_empty() {
        return Err(Fail("the victim joined no lease file".into()));
    }
    victim.kill_all(); // SIGKILL
    let _ = victim.wait_all(WAIT);
    drop(setup);
    let sweep_dir = dir.join("sweep");
    let mut sweeper = Children::spawn([["--shm-sweep", &sweep_dir.display().to_string()]])?;
    sweeper.finish(WAIT)?;
    let left = lease_files_of(pid);
    let _ = std::fs::remove_dir_all(&dir);
    if !left.is_empty() {
        return Err(Fail(format!("/dev/shm still has {left:?} of the killed process {pid}")));
    }
    Ok(Outcome::Pass(format!("{files:?} of a process killed mid-setup removed by the next process's first setup")))
}

/// `--shm-victim DIR`: rank 0 of 2, set up until it has joined the lease, then waits (killed).
fn shm_victim(rt: &'static Runtime, dir: &Path) -> Result<(), Fail> {
    let _ = rt;
    let t = FileTransport::new(dir, vec![0], 2);
    let member = Member { comm: 0x5eed as ncclComm_t, rank: 0, nranks: 2, device: 0, max_ctas: 0 };
    let mut setup = Setup::with(vec![member], Box::new(t), Sharing { shared_gpus: true, ..Sharing::default() })
        .map_err(|e| Fail(format!("rank 0's setup: {e}")))?;
    let me = std::process::id();
    let deadline = Instant::now() + WAIT;
    loop {
        watchdog::progress("victim");
        setup.poll().map_err(|e| Fail(format!("rank 0's setup: {e}")))?;
        if !lease_files_of(me).is_empty() {
            say(&format!("JOINED {me}"));
            break;
        }
        if Instant::now() > deadline {
            return Err(Fail("never joined a lease".into()));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(WAIT);
    Err(Fail("not killed".into()))
}

/// `--shm-sweep DIR`: a process's first setup (2 ranks as streams), used and destroyed.
fn shm_sweep(rt: &'static Runtime, dir: &Path) -> Result<(), Fail> {
    let w = join(rt, placement(Layout::Streams, 2), &[0, 1], dir, None)?;
    let bufs = Bufs::new(rt, 2)?;
    all_reduce(rt, &w, &bufs, 6)?;
    w.end(rt);
    pooled("sweep")
}

// ---- fork ------------------------------------------------------------------------------------

fn fork_exit(rt: &'static Runtime, o: &Opts) -> Result<Outcome, Fail> {
    let dir = fresh_dir("teardown-fork")?;
    let n = o.nranks;
    let p = placement(Layout::Streams, n);
    let bufs = Bufs::new(rt, n)?;
    // A destroyed clique in the reaper's hands and a live one, while the child exits.
    let old = join(rt, p, &(0..n).collect::<Vec<_>>(), &dir.join("old"), None)?;
    all_reduce(rt, &old, &bufs, 7)?;
    let w = join(rt, p, &(0..n).collect::<Vec<_>>(), &dir.join("w"), None)?;
    all_reduce(rt, &w, &bufs, 8)?;
    old.end(rt);
    let status = fork_a_child_that_exits()?;
    for salt in 9..12 {
        all_reduce(rt, &w, &bufs, salt)?;
    }
    w.end(rt);
    pooled("fork-exit")?;
    Ok(Outcome::Pass(format!("{n} ranks: a forked child's exit() (status {status}) left the communicators working")))
}

// ---- abort of a pending setup while another clique's kernel is stuck -----------------------

fn abort_pending_setup(rt: &'static Runtime) -> Result<Outcome, Fail> {
    let dir = fresh_dir("teardown-pending")?;
    let p = placement(Layout::Streams, 2);
    // Room on the GPU for the stuck world and, later, its missing rank.
    let sharing = quarter_gpu(rt)?;
    // The pending setup: rank 0 of 2, polled until it has posted its second exchange (buffers
    // allocated, lease joined, handles published); rank 1 posts its first exchange, then waits.
    let pend_dir = dir.join("pending");
    std::fs::create_dir_all(&pend_dir)?;
    let pending_comm = Box::into_raw(Box::new(0u64)) as ncclComm_t;
    let silent_comm = Box::into_raw(Box::new(0u64)) as ncclComm_t;
    let setup = |rank: usize, comm: ncclComm_t| {
        let t = FileTransport::new(&pend_dir, vec![rank], 2);
        let member = Member { comm, rank, nranks: 2, device: 0, max_ctas: 0 };
        Setup::with(vec![member], Box::new(t), sharing).map_err(|e| Fail(format!("rank {rank}'s setup: {e}")))
    };
    let mut silent = setup(1, silent_comm)?;
    let mut pending = setup(0, pending_comm)?;
    let deadline = Instant::now() + WAIT;
    while !pend_dir.join("2.0").exists() {
        watchdog::progress("abort-pending-setup: setup");
        if pending.poll().map_err(|e| Fail(format!("rank 0's setup: {e}")))?.is_some() {
            return Err(Fail("rank 0's setup finished without its peer's second exchange".into()));
        }
        if Instant::now() > deadline {
            return Err(Fail("rank 0's setup never posted its second exchange".into()));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    lifecycle::pend(pending_comm, pending);
    // Another clique's kernel, stuck: rank 0 of an AllReduce whose rank 1 is not launched.
    let w = join(rt, p, &[0, 1], &dir.join("stuck"), Some(sharing))?;
    let bufs = Bufs::new(rt, 2)?;
    bufs.upload(rt, 21)?;
    call(&w, &bufs, 0, w.streams[0])?;
    std::thread::sleep(Duration::from_millis(100));
    if rt.query_stream(w.streams[0])? {
        return Err(Fail("rank 0's AllReduce finished without rank 1".into()));
    }
    let before = clique::teardown_counts();
    let (tx, rx) = std::sync::mpsc::channel();
    let comm = pending_comm as usize;
    let started = Instant::now();
    let aborter = std::thread::spawn(move || {
        let r = lifecycle::ended(comm as ncclComm_t, true, || ncclResult_t::Success);
        let _ = tx.send(r);
    });
    let limit = Duration::from_secs(5);
    let returned = rx.recv_timeout(limit);
    let took = started.elapsed();
    if returned.is_err() {
        // Let the abort finish (the stuck kernel stops), then report.
        w.abort_kernels();
        let _ = rx.recv_timeout(WAIT);
        let _ = aborter.join();
        return Err(Fail(format!(
            "ncclCommAbort of a pending setup did not return within {} s while another clique's kernel was stuck (it waits for the device)",
            limit.as_secs()
        )));
    }
    let _ = aborter.join();
    let after = clique::teardown_counts();
    // The stuck AllReduce completes once its rank 1 runs, exact.
    call(&w, &bufs, 1, w.streams[1])?;
    for r in 0..2 {
        harness::gpu::wait_stream(rt, w.streams[r], WAIT, &format!("rank {r}: the stuck AllReduce"))?;
        verify(&bufs, r, r, 2, 21)?;
    }
    w.end(rt);
    // The silent rank goes on alone (it joins the lease and posts its last exchanges) and times
    // out (its peer left): its memory is buried too, and its lease word closed, so that rank 0's
    // buffers, which it may have seen, go back to the pool only now.
    silent.set_limit(Some(silent.elapsed() + FAULT_LIMIT));
    let deadline = Instant::now() + WAIT;
    let silent_end = loop {
        watchdog::progress("abort-pending-setup: the silent rank");
        match silent.poll() {
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
            Ok(None) => return Err(Fail("the silent rank's setup neither finished nor failed".into())),
            Ok(Some(_)) => break "finished".to_string(),
            Err(e) => break format!("failed ({})", e.code.0),
        }
    };
    drop(silent);
    // SAFETY: made by Box::into_raw above; rcclx's side table no longer holds them.
    unsafe {
        drop(Box::from_raw(pending_comm as *mut u64));
        drop(Box::from_raw(silent_comm as *mut u64));
    }
    pooled("abort-pending-setup")?;
    let _ = std::fs::remove_dir_all(&dir);
    if after.buried <= before.buried {
        return Err(Fail("the aborted setup's published buffers were not buried".into()));
    }
    Ok(Outcome::Pass(format!(
        "abort of a setup past its first exchange returned in {:.1} ms with another clique's kernel stuck; its buffers buried ({} graves); the stuck AllReduce then exact; the silent rank {silent_end}",
        took.as_secs_f64() * 1e3,
        after.buried - before.buried
    )))
}

/// Forks a child that calls `exit(0)` (its exit handlers run, as a forked worker's that returns)
/// and waits for it (30 s at most); its exit status.
fn fork_a_child_that_exits() -> Result<i32, Fail> {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    // SAFETY: the child only calls exit(), which runs this program's and the libraries' exit
    // handlers (what the check is about), then ends.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(Fail(format!("fork: {}", std::io::Error::last_os_error())));
    }
    if child == 0 {
        // SAFETY: ends the child with its exit handlers, as a forked worker that returns does.
        unsafe { libc::exit(0) };
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut status = 0;
    loop {
        // SAFETY: polls our own child.
        let r = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
        if r == child {
            return Ok(status);
        }
        if Instant::now() > deadline {
            // SAFETY: our own child.
            unsafe { libc::kill(child, libc::SIGKILL) };
            return Err(Fail("the forked child did not exit within 30 s".into()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `fork-exit` as procs: rank 0 here, the other ranks in child processes (`--fork-peer`).
fn fork_exit_procs(rt: &'static Runtime, o: &Opts) -> Result<Outcome, Fail> {
    let dir = fresh_dir("teardown-fork-procs")?;
    let mut peers = spawn_peers_as(o, "--fork-peer", &["--dir".into(), dir.display().to_string()])?;
    let mine = fork_rank0(rt, o, &dir, &mut peers);
    if mine.is_err() {
        peers.kill_all();
    }
    let report = mine?;
    peers.finish(WAIT)?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Outcome::Pass(report))
}

/// Rank 0 of `fork-exit` as procs. Its destroyed clique stays loud (a graph holds it, so its
/// lease word stays open) while a forked child exits; the peers then destroy theirs and must
/// still hold their buffers (rank 0 may read them); once rank 0 destroys the graph they get
/// them back.
fn fork_rank0(rt: &'static Runtime, o: &Opts, dir: &Path, peers: &mut Children) -> Result<String, Fail> {
    let p = placement(Layout::Procs, o.nranks);
    let bufs = Bufs::new(rt, 1)?;
    let w = join(rt, p, &[0], &dir.join("w"), None)?;
    all_reduce(rt, &w, &bufs, 7)?;
    let _g = rt.device_guard(0)?;
    rt.begin_capture(w.streams[0])?;
    let called = call(&w, &bufs, 0, w.streams[0]);
    let graph = rt.end_capture(w.streams[0])?;
    called?;
    w.end(rt); // held by the graph: its lease word stays open
    let status = fork_a_child_that_exits()?;
    for i in 0..o.nranks - 1 {
        peers.send(i, "FORKED")?;
    }
    let mut held = Vec::new();
    for _ in 1..o.nranks {
        held.push(peers.lines().expect("HELD", "a peer", WAIT)?);
    }
    // SAFETY: never launched; not used again.
    unsafe { rt.destroy_graph(graph) }?;
    for i in 0..o.nranks - 1 {
        peers.send(i, "GO")?;
    }
    for _ in 1..o.nranks {
        peers.lines().expect("POOLED", "a peer", WAIT)?;
    }
    pooled("fork-exit")?;
    if !held.iter().all(|h| h.parse::<usize>().is_ok_and(|n| n > 0)) {
        return Err(Fail(format!(
            "after rank 0's forked child exited (status {status}), peers got back buffers rank 0 may still read (held: {held:?})"
        )));
    }
    Ok(format!(
        "{} processes: rank 0's forked child exit() (status {status}) left its lease open: the peers held their buffers ({held:?} graves) until rank 0's graph went, then got them back",
        o.nranks
    ))
}

/// `--fork-peer RANK`: rank RANK of `fork-exit` as procs.
fn fork_peer(rt: &'static Runtime, o: &Opts, rank: usize, dir: &Path) -> Result<(), Fail> {
    let lines = rcclx_gpu_tests::children::Lines::stdin();
    let p = placement(Layout::Procs, o.nranks);
    let bufs = Bufs::new(rt, 1)?;
    let w = join(rt, p, &[rank], &dir.join("w"), None)?;
    all_reduce(rt, &w, &bufs, 7)?;
    lines.expect("FORKED", "rank 0", WAIT)?;
    w.end(rt);
    // The reaper closes this rank's mappings at once (its last kernel has ended); its buffers
    // then wait for rank 0, which is alive and open.
    std::thread::sleep(Duration::from_millis(300));
    say(&format!("HELD {}", clique::ended_not_pooled()));
    lines.expect("GO", "rank 0", WAIT)?;
    pooled("fork peer")?;
    say("POOLED");
    Ok(())
}

// ---- concurrent destroys ---------------------------------------------------------------------

fn destroy_race(rt: &'static Runtime, o: &Opts) -> Result<Outcome, Fail> {
    let dir = fresh_dir("teardown-race")?;
    // Two threads' worlds of 2 ranks at once on the GPU: grids fit together.
    let sharing = quarter_gpu(rt)?;
    let p = placement(Layout::Streams, 2);
    // Both threads' buffers are allocated before and freed after the race: `cuMemFree` waits
    // for the whole device, so a thread freeing its buffers while the other has launched one
    // rank of an AllReduce but not yet the other (whose launch the free holds up) deadlocks.
    // (The likely cause of the stall after fork-exit on one H200: the thread that finished
    // first freed its buffers while the other was in its last cycles.)
    let all_bufs = [Bufs::new(rt, 2)?, Bufs::new(rt, 2)?];
    // For the same reason the race starts with both threads' cliques' memory in the pool (no
    // allocation while the other thread is between the launches of its two ranks): two worlds
    // live at once, used and ended here.
    let warm: Vec<World> =
        (0..2).map(|t| join(rt, p, &[0, 1], &dir.join(format!("warm{t}")), Some(sharing))).collect::<Result<_, _>>()?;
    for (w, bufs) in warm.iter().zip(&all_bufs) {
        all_reduce(rt, w, bufs, 0)?;
    }
    warm.into_iter().for_each(|w| w.end(rt));
    pooled("destroy-race warm-up")?;
    let before = clique::teardown_counts();
    let done = AtomicUsize::new(0);
    let started = Instant::now();
    let results: Vec<Result<(), Fail>> = std::thread::scope(|s| {
        let threads: Vec<_> = all_bufs
            .iter()
            .enumerate()
            .map(|(t, bufs)| {
                let (dir, done) = (&dir, &done);
                s.spawn(move || -> Result<(), Fail> {
                    for c in 0..o.race_cycles {
                        watchdog::progress("destroy-race");
                        let d = dir.join(format!("t{t}-{c}"));
                        let w = join(rt, p, &[0, 1], &d, Some(sharing))?;
                        all_reduce(rt, &w, bufs, c + t)?;
                        w.end_as(rt, (c + t) % 3 == 0);
                        let _ = std::fs::remove_dir_all(&d);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        threads.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(Fail("a thread panicked".into())))).collect()
    });
    drop(all_bufs);
    for r in results {
        r?;
    }
    pooled("destroy-race")?;
    let after = clique::teardown_counts();
    let buried = after.buried - before.buried;
    let quiet = (after.quiet_at_burial - before.quiet_at_burial) + (after.quiet_by_reaper - before.quiet_by_reaper);
    let failed = after.failed_queries - before.failed_queries;
    let report = format!(
        "{} worlds ended by 2 threads at once in {:.1} s: {buried} graves, {} quiet at burial, {} after the reaper saw their own fence, {failed} failed queries",
        done.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64(),
        after.quiet_at_burial - before.quiet_at_burial,
        after.quiet_by_reaper - before.quiet_by_reaper,
    );
    if buried != quiet || failed != 0 || buried < 2 * 2 * o.race_cycles as u64 {
        return Err(Fail(format!("a grave went quiet without its own fence, or a query failed: {report}")));
    }
    Ok(Outcome::Pass(report))
}
