//! The communicator life cycle on one GPU: rcclx's teardown, with N ranks as streams of this
//! process (`rcclx_gpu_tests::world`: rcclx's real setup, cliques, kernels and per-call path;
//! the stock library refuses several ranks on one GPU, so it takes no part).
//!
//! ```text
//! lifecycle [--nranks N] [--cycles K]      (default 4 ranks, 200 cycles)
//! ```
//! Checks (PASS|FAIL lines, then `N passed, M failed`; exit 0, 1 a check failed, 2 no GPU,
//! 3 a stall):
//! * `cycles-destroy`, `cycles-abort`: K cycles of {set up N ranks, one AllReduce per rank,
//!   checked, every rank destroyed | aborted}; then the GPU's free memory, this process's open
//!   file descriptors and the `/dev/shm/rcclx-*` files are where they were after the first
//!   cycle (memory within 2 MiB; rcclx keeps ended cliques' buffers for the next ones,
//!   `rcclx::clique` teardown). Prints the time per cycle and what one live clique costs.
//! * `memory-per-rank`: one live clique's device memory per rank (free memory before and after
//!   its setup) within its budget: the staging buffer plus 8 MiB (README, "Memory per rank").
//! * The next two run three times: the first may grow rcclx's pool; rcclx's own device memory
//!   must not grow after it, nor the device's free memory fall in both later runs (a one-time
//!   fall is the driver's: reported).
//! * `stuck-abort`: while the kernels of clique A wait for a rank that has not called yet,
//!   clique B is set up, used, left waiting the same way and aborted: every abort returns within
//!   50 ms and B's kernels end; clique C is set up and used meanwhile (nothing waits for B's
//!   memory, which waits for the device); once A's last rank calls, A completes and every
//!   ended clique's memory is back in rcclx's pool.
//! * `destroy-order`: every rank has a call of A (even ranks) or C (odd ranks) in flight, each
//!   waiting for the other half, then destroys B, then makes its call of the other clique: the
//!   destroys must not wait for the device (which waits for A and C, which wait for the calls
//!   made after the destroys), so everything completes.
//! * `stream-destroyed`: each rank calls on stream S, the application destroys S, the next
//!   calls on stream T work (the communicator's order across streams never touches S again).
//! * `capture-order` (audit N2): every rank captures an AllReduce on stream X, ends the capture,
//!   then captures one on stream Y (two captures: no dependency may cross them), then captures
//!   one on X and one on Y in one capture (Y forked into it: the second waits for the first
//!   inside the graph); every replay exact.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rcclx::clique::{self, Buffers, Sharing};
use rcclx::comm::{self, lifecycle};
use rcclx::gpu::{CaptureMode, DeviceBuffer, GraphExec, MemKind, Runtime, Stream};
use rcclx::intercept::{CallDesc, Coll};
use rcclx::types::{ncclComm_t, ncclDataType_t, ncclResult_t};
use rcclx_gpu_tests::world::{FORWARDED, Layout, Placement, World, fresh_dir};
use rcclx_gpu_tests::{self as harness, Fail, Outcome, Tally, watchdog};

/// Elements of every AllReduce (f32: 16 KiB, a one-shot kernel at every rank count).
const COUNT: usize = 4096;
/// Bound on one wait for a rank's stream.
const WAIT: Duration = Duration::from_secs(30);
/// Memory the GPU may report differently after the cycles (allocation granularity).
const SLACK: u64 = 2 << 20;
/// Bound on one abort or destroy (rcclx's part never waits).
const END_LIMIT: Duration = Duration::from_millis(50);
const STALL_LIMIT: Duration = Duration::from_secs(120);

struct Opts {
    nranks: usize,
    cycles: usize,
}

fn parse(args: Vec<String>) -> Result<Opts, String> {
    let mut o = Opts { nranks: 4, cycles: 200 };
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut num =
            |what: &str| it.next().and_then(|v| v.parse::<usize>().ok()).ok_or(format!("{what} needs a number"));
        match a.as_str() {
            "--nranks" => o.nranks = num("--nranks")?,
            "--cycles" => o.cycles = num("--cycles")?.max(2),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if !(2..=8).contains(&o.nranks) {
        return Err("--nranks must be 2..=8".into());
    }
    Ok(o)
}

fn main() -> ExitCode {
    let o = match harness::options_or_exit("lifecycle", "usage: lifecycle [--nranks N] [--cycles K]", parse) {
        Ok(o) => o,
        Err(code) => return code,
    };
    let rt = match harness::gpu::runtime_or_exit("lifecycle", 1) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    watchdog::start(STALL_LIMIT);
    let lab = match Lab::new(rt, o.nranks) {
        Ok(l) => l,
        Err(Fail(e)) => {
            println!("FAIL setup {e}");
            return ExitCode::from(harness::EXIT_FAILED);
        }
    };
    let mut tally = Tally::timed();
    tally.check("memory-per-rank", || lab.memory_per_rank());
    tally.check("cycles-destroy", || lab.cycles(o.cycles, false));
    tally.check("cycles-abort", || lab.cycles(o.cycles, true));
    tally.check("stuck-abort", || lab.three_runs("stuck-abort", Lab::stuck_abort));
    tally.check("destroy-order", || lab.three_runs("destroy-order", Lab::destroy_order));
    tally.check("stream-destroyed", || lab.stream_destroyed());
    tally.check("capture-order", || lab.capture_order());
    tally.finish()
}

/// Each rank's input and output buffers (kept for the whole run, so that the memory the checks
/// compare is rcclx's alone), and where the worlds exchange their records.
struct Lab {
    rt: &'static Runtime,
    nranks: usize,
    send: Vec<DeviceBuffer>,
    recv: Vec<DeviceBuffer>,
    dir: PathBuf,
    multiprocessors: u32,
    /// Device memory one rank of a live clique takes (measured at the second setup), and its
    /// staging buffer.
    clique_bytes: u64,
    staging_bytes: u64,
}

/// Rank r's input: small integers, so that every f32 sum is exact.
fn input(rank: usize, salt: usize) -> Vec<f32> {
    rcclx_gpu_tests::exact::input(COUNT, rank, salt)
}

fn expected(nranks: usize, salt: usize) -> Vec<f32> {
    rcclx_gpu_tests::exact::expected(COUNT, nranks, salt)
}

impl Lab {
    fn new(rt: &'static Runtime, nranks: usize) -> Result<Lab, Fail> {
        let bytes = COUNT * 4;
        let send = (0..nranks).map(|_| rt.alloc(0, bytes, MemKind::Normal)).collect::<Result<Vec<_>, _>>()?;
        let recv = (0..nranks).map(|_| rt.alloc(0, bytes, MemKind::Normal)).collect::<Result<Vec<_>, _>>()?;
        let multiprocessors = rt.device_info(0)?.multiprocessors;
        let mut lab = Lab {
            rt,
            nranks,
            send,
            recv,
            dir: fresh_dir("lifecycle")?,
            multiprocessors,
            clique_bytes: 0,
            staging_bytes: 0,
        };
        // The first setup of a process loads rcclx's kernels (once per device): not a clique's
        // cost, so the one measured is the second's.
        let w = lab.world("warm-up", None)?;
        lab.use_world(&w, 0)?;
        let before = lab.free_memory()?;
        let w2 = lab.world("warm-up-2", None)?;
        lab.clique_bytes = before.saturating_sub(lab.free_memory()?) / nranks as u64;
        lab.staging_bytes = w2.cliques[0].args().half_bytes * 2;
        w2.end(rt);
        w.end(rt);
        lab.all_pooled("warm-up")?;
        Ok(lab)
    }

    fn placement(&self) -> Placement {
        Placement { nranks: self.nranks, gpus: 1, layout: Layout::Streams }
    }

    /// A new world of every rank, through files in a directory of its own.
    fn world(&self, tag: &str, sharing: Option<Sharing>) -> Result<World, Fail> {
        watchdog::progress(tag);
        let dir = self.dir.join(tag);
        std::fs::create_dir_all(&dir)?;
        let ranks: Vec<usize> = (0..self.nranks).collect();
        let w = match sharing {
            Some(s) => World::join_sharing(self.rt, self.placement(), &ranks, &dir, WAIT, s)?,
            None => World::join(self.rt, self.placement(), &ranks, &dir, WAIT)?,
        };
        let _ = std::fs::remove_dir_all(&dir);
        Ok(w)
    }

    /// Three worlds' kernels at once on the GPU: grids capped to a third of the usual.
    fn third(&self) -> Sharing {
        Sharing {
            shared_gpus: true,
            grid_cap: (self.multiprocessors / (3 * self.nranks as u32)).max(1),
            cap_per_rank: false,
        }
    }

    /// Uploads rank `k`'s input for `salt` (synchronously; nothing runs on the buffers now).
    fn upload(&self, k: usize, salt: usize) -> Result<(), Fail> {
        let _g = self.rt.device_guard(0)?;
        self.send[k].copy_from_host(&input(k, salt))?;
        Ok(())
    }

    /// Rank `k`'s AllReduce on `comm` and `stream`, through rcclx's per-call path.
    fn call(&self, k: usize, comm: ncclComm_t, stream: Stream) -> Result<(), Fail> {
        let call = CallDesc::new(Coll::AllReduce, COUNT, ncclDataType_t::Float32);
        let bufs =
            Buffers { send: self.send[k].ptr().as_raw() as *const c_void, recv: self.recv[k].ptr().as_raw(), stream };
        match comm::collective(comm, call, bufs, || FORWARDED) {
            ncclResult_t::Success => Ok(()),
            FORWARDED => Err(Fail(format!("rank {k}: rcclx would have forwarded the call"))),
            r => Err(Fail(format!("rank {k}: AllReduce returned {}", r.0))),
        }
    }

    fn wait(&self, k: usize, stream: Stream, what: &str) -> Result<(), Fail> {
        if self.rt.wait_stream(stream, WAIT)? {
            Ok(())
        } else {
            Err(Fail(format!("rank {k}: {what} did not finish within {} s", WAIT.as_secs())))
        }
    }

    /// Rank `k`'s output against the sum of every rank's input for `salt`.
    fn verify(&self, k: usize, salt: usize) -> Result<(), Fail> {
        let mut got = vec![0f32; COUNT];
        let _g = self.rt.device_guard(0)?;
        self.recv[k].copy_to_host(&mut got)?;
        let want = expected(self.nranks, salt);
        match got.iter().zip(&want).position(|(g, w)| g.to_bits() != w.to_bits()) {
            None => Ok(()),
            Some(i) => Err(Fail(format!("rank {k}: element {i} is {} instead of {}", got[i], want[i]))),
        }
    }

    /// One AllReduce on every rank of `w`, waited for and checked.
    fn use_world(&self, w: &World, salt: usize) -> Result<(), Fail> {
        for k in 0..self.nranks {
            self.upload(k, salt)?;
        }
        self.use_world_on(w, salt)
    }

    /// A live clique's device memory per rank (absolute: free memory before and after one
    /// setup) within its budget: the staging buffer (16 MiB, 32 with low precision) plus 8 MiB
    /// for the LL inbox, the flags and the allocator's rounding (README, "Memory per rank").
    fn memory_per_rank(&self) -> Result<Outcome, Fail> {
        const MIB: f64 = (1 << 20) as f64;
        let budget = self.staging_bytes + (8 << 20);
        let report = format!(
            "{} ranks: {:.1} MiB per rank (staging {:.0} MiB), budget {:.0} MiB",
            self.nranks,
            self.clique_bytes as f64 / MIB,
            self.staging_bytes as f64 / MIB,
            budget as f64 / MIB
        );
        if self.clique_bytes > budget {
            return Err(Fail(format!("over budget: {report}")));
        }
        Ok(Outcome::Pass(report))
    }

    fn free_memory(&self) -> Result<u64, Fail> {
        Ok(self.rt.memory_info(0)?.0)
    }

    /// Every ended clique's memory back in rcclx's pool (the reaper works in the background).
    fn all_pooled(&self, what: &str) -> Result<(), Fail> {
        if clique::wait_pooled(Duration::from_secs(10)) {
            Ok(())
        } else {
            Err(Fail(format!("{what}: {} ended cliques not back in the pool after 10 s", clique::ended_not_pooled())))
        }
    }

    fn cycles(&self, cycles: usize, abort: bool) -> Result<Outcome, Fail> {
        let how = if abort { "abort" } else { "destroy" };
        let mut baseline = None;
        let started = Instant::now();
        let mut slowest_end = Duration::ZERO;
        for c in 0..cycles {
            let w = self.world(&format!("{how}-{c}"), None)?;
            self.use_world(&w, c)?;
            let t = Instant::now();
            w.end_as(self.rt, abort);
            slowest_end = slowest_end.max(t.elapsed());
            if c == 0 {
                self.all_pooled(how)?;
                baseline = Some((self.free_memory()?, open_files()?, shm_files()?));
            }
        }
        let per_cycle = started.elapsed() / cycles as u32;
        self.all_pooled(how)?;
        let (mem0, fds0, shm0) = baseline.expect("set in cycle 0");
        let (mem, fds, shm) = (self.free_memory()?, open_files()?, shm_files()?);
        let report = format!(
            "{cycles} cycles of {} ranks: {:.1} ms per cycle, slowest {how} of a world {:.2} ms; one live clique {:.1} MiB; after: device memory {:+.1} MiB, files {:+}, /dev/shm/rcclx-* {:+}",
            self.nranks,
            per_cycle.as_secs_f64() * 1e3,
            slowest_end.as_secs_f64() * 1e3,
            self.clique_bytes as f64 / (1 << 20) as f64,
            (mem0 as f64 - mem as f64) / (1 << 20) as f64,
            fds as i64 - fds0 as i64,
            shm as i64 - shm0 as i64,
        );
        if mem0.saturating_sub(mem) > SLACK || fds > fds0 || shm > shm0 {
            return Err(Fail(format!("leaks: {report}")));
        }
        Ok(Outcome::Pass(report))
    }

    /// `scenario` three times. The first run may grow rcclx's pool (and the driver its own
    /// memory: streams, lazily loaded kernels); the later runs must reuse it. A leak is (1)
    /// memory rcclx's runtime holds more of after the second or third run than after the first
    /// (every device allocation goes through it: `gpu::live_device_bytes`), or (2) device memory
    /// that falls in the second run and again in the third (growth per run, whoever holds it).
    /// A fall in one later run only is the driver's one-time growth: reported, not a leak.
    fn three_runs(&self, what: &str, scenario: impl Fn(&Lab) -> Result<String, Fail>) -> Result<Outcome, Fail> {
        let measure = |lab: &Lab| -> Result<(u64, u64), Fail> {
            lab.all_pooled(what)?;
            Ok((lab.free_memory()?, rcclx::gpu::live_device_bytes()))
        };
        let before = (self.free_memory()?, rcclx::gpu::live_device_bytes());
        scenario(self)?;
        let first = measure(self)?;
        scenario(self)?;
        let second = measure(self)?;
        let report = scenario(self)?;
        let third = measure(self)?;
        let mib = |a: u64, b: u64| (a as f64 - b as f64) / (1 << 20) as f64;
        let report = format!(
            "{report}; device memory: {:+.1} MiB after the first run (pool), then {:+.1} and {:+.1} MiB; \
             rcclx's: {:+.1} MiB, then {:+.1} and {:+.1} MiB",
            mib(before.0, first.0),
            mib(first.0, second.0),
            mib(second.0, third.0),
            mib(first.1, before.1),
            mib(second.1, first.1),
            mib(third.1, second.1),
        );
        if second.1 > first.1 || third.1 > first.1 {
            return Err(Fail(format!("leaks (rcclx's memory grew after the first run): {report}")));
        }
        let fell = |a: u64, b: u64| a.saturating_sub(b) > SLACK;
        if fell(first.0, second.0) && fell(second.0, third.0) {
            return Err(Fail(format!("leaks (device memory fell in every run, none of it rcclx's): {report}")));
        }
        Ok(Outcome::Pass(report))
    }

    fn stuck_abort(&self) -> Result<String, Fail> {
        let a = self.world("stuck-a", Some(self.third()))?;
        let last = self.nranks - 1;
        for k in 0..self.nranks {
            self.upload(k, 1)?;
        }
        for k in 0..last {
            self.call(k, a.comms[k], a.streams[k])?;
        }
        std::thread::sleep(Duration::from_millis(50));
        if self.rt.query_stream(a.streams[0])? {
            return Err(Fail("clique A's kernel finished without its last rank".into()));
        }
        // B: set up, used and aborted while A waits. It shares A's buffers and inputs (salt 1):
        // A's ranks write the same sums there once they finish.
        let b = self.world("stuck-b", Some(self.third()))?;
        let result = (|| {
            // B: used, then stuck like A (its last rank does not call), then aborted: its kernels
            // stop, and its memory waits for the device, where A's kernels still wait.
            self.use_world_on(&b, 1)?;
            for k in 0..last {
                self.call(k, b.comms[k], b.streams[k])?;
            }
            let mut slowest = Duration::ZERO;
            for &c in &b.comms {
                let t = Instant::now();
                lifecycle::ended(c, true, || ncclResult_t::Success);
                slowest = slowest.max(t.elapsed());
            }
            for k in 0..last {
                if !self.rt.wait_stream(b.streams[k], Duration::from_secs(1))? {
                    return Err(Fail(format!("rank {k}: clique B's kernel still running 1 s after the abort")));
                }
            }
            let held = clique::ended_not_pooled();
            // C: set up and used while B's memory waits for the device (A's kernels).
            let c = self.world("stuck-c", Some(self.third()))?;
            self.use_world_on(&c, 1)?;
            c.end(self.rt);
            Ok::<_, Fail>((slowest, held))
        })();
        // A's last rank calls: every kernel of A can finish.
        let finish = self.call(last, a.comms[last], a.streams[last]);
        if result.is_err() || finish.is_err() {
            a.abort_kernels();
        }
        let (slowest, held) = result?;
        finish?;
        for k in 0..self.nranks {
            self.wait(k, a.streams[k], "clique A's AllReduce")?;
            self.verify(k, 1)?;
        }
        b.end(self.rt);
        a.end(self.rt);
        let report = format!(
            "slowest abort {:.2} ms of a clique whose kernels wait, with another clique's kernels waiting too; {held} ended cliques waited for the device meanwhile; C set up and ran",
            slowest.as_secs_f64() * 1e3,
        );
        if slowest > END_LIMIT {
            return Err(Fail(report));
        }
        Ok(report)
    }

    /// `use_world` for a world whose inputs are already uploaded with `salt`.
    fn use_world_on(&self, w: &World, salt: usize) -> Result<(), Fail> {
        for k in 0..self.nranks {
            self.call(k, w.comms[k], w.streams[k])?;
        }
        for k in 0..self.nranks {
            self.wait(k, w.streams[k], "AllReduce")?;
            self.verify(k, salt)?;
        }
        Ok(())
    }

    fn destroy_order(&self) -> Result<String, Fail> {
        let a = self.world("order-a", Some(self.third()))?;
        let b = self.world("order-b", Some(self.third()))?;
        let c = self.world("order-c", Some(self.third()))?;
        for k in 0..self.nranks {
            self.upload(k, 2)?;
        }
        self.use_world_on(&b, 2)?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            for k in 0..self.nranks {
                let (first, second) = if k % 2 == 0 { (&a, &c) } else { (&c, &a) };
                let (f, sc) =
                    ((first.comms[k] as usize, first.streams[k]), (second.comms[k] as usize, second.streams[k]));
                let b_comm = b.comms[k] as usize;
                let tx = tx.clone();
                s.spawn(move || {
                    let r = (|| {
                        self.call(k, f.0 as ncclComm_t, f.1)?;
                        lifecycle::ended(b_comm as ncclComm_t, false, || ncclResult_t::Success);
                        self.call(k, sc.0 as ncclComm_t, sc.1)
                    })();
                    let _ = tx.send((k, r));
                });
            }
            drop(tx);
            let deadline = Instant::now() + WAIT;
            let mut done = 0;
            let mut outcome = Ok(());
            while done < self.nranks {
                watchdog::progress("destroy-order");
                match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                    Ok((_, r)) => {
                        done += 1;
                        outcome = outcome.and(r);
                    }
                    Err(_) => {
                        outcome = Err(Fail(format!(
                            "{} ranks still in their calls or destroys after {} s",
                            self.nranks - done,
                            WAIT.as_secs()
                        )));
                        a.abort_kernels();
                        c.abort_kernels();
                        break;
                    }
                }
            }
            outcome
        })?;
        for k in 0..self.nranks {
            self.wait(k, a.streams[k], "clique A's AllReduce")?;
            self.wait(k, c.streams[k], "clique C's AllReduce")?;
            self.verify(k, 2)?;
        }
        a.end(self.rt);
        b.end(self.rt);
        c.end(self.rt);
        Ok(format!("{} ranks: A and C completed around the destroys of B", self.nranks))
    }

    fn stream_destroyed(&self) -> Result<Outcome, Fail> {
        let mut w = self.world("streams", None)?;
        self.use_world(&w, 3)?;
        for k in 0..self.nranks {
            let fresh = self.rt.create_stream(0)?;
            let old = std::mem::replace(&mut w.streams[k], fresh);
            // SAFETY: our own stream, idle (waited for above), not used again.
            unsafe { self.rt.destroy_stream(old) }?;
        }
        self.use_world(&w, 4)?;
        self.use_world(&w, 5)?;
        w.end(self.rt);
        self.all_pooled("stream-destroyed")?;
        Ok(Outcome::Pass("calls on a new stream after the old one was destroyed: correct".into()))
    }
}

impl Lab {
    fn capture_order(&self) -> Result<Outcome, Fail> {
        let (rt, n) = (self.rt, self.nranks);
        let w = self.world("capture-order", None)?;
        let _g = rt.device_guard(0)?;
        let new_streams = || (0..n).map(|_| rt.create_stream(0)).collect::<Result<Vec<_>, _>>();
        let (xs, ys) = (new_streams()?, new_streams()?);
        // Rank k's graph of whatever `body` enqueues on `stream` in one global-mode capture.
        let capture = |k: usize, stream: Stream, body: &dyn Fn() -> Result<(), Fail>| -> Result<GraphExec, Fail> {
            rt.begin_capture_in(stream, CaptureMode::Global)?;
            let enqueued = body();
            let graph = rt.end_capture(stream).map_err(|e| Fail(format!("rank {k}: capture: {e}")));
            enqueued?;
            graph
        };
        // Replays every rank's graph of `graphs` on `streams` on fresh inputs: exact.
        let replay = |graphs: &[GraphExec], streams: &[Stream], salt: usize| -> Result<(), Fail> {
            for k in 0..n {
                self.upload(k, salt)?;
            }
            for (&graph, &stream) in graphs.iter().zip(streams) {
                rt.launch_graph(graph, stream)?;
            }
            for (k, &stream) in streams.iter().enumerate() {
                self.wait(k, stream, "a replay")?;
                self.verify(k, salt)?;
            }
            Ok(())
        };
        // Two captures in turn, on X then on Y.
        let on_x =
            (0..n).map(|k| capture(k, xs[k], &|| self.call(k, w.comms[k], xs[k]))).collect::<Result<Vec<_>, _>>()?;
        let on_y =
            (0..n).map(|k| capture(k, ys[k], &|| self.call(k, w.comms[k], ys[k]))).collect::<Result<Vec<_>, _>>()?;
        // One capture over X and Y: Y joins X's capture, each gets an AllReduce, Y joins back.
        let event = rt.create_event(0)?;
        let both = (0..n)
            .map(|k| {
                capture(k, xs[k], &|| {
                    rt.record_event(event, xs[k])?;
                    rt.stream_wait_event(ys[k], event)?;
                    self.call(k, w.comms[k], xs[k])?;
                    self.call(k, w.comms[k], ys[k])?;
                    rt.record_event(event, ys[k])?;
                    rt.stream_wait_event(xs[k], event)?;
                    Ok(())
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        replay(&on_x, &xs, 11)?;
        replay(&on_y, &ys, 12)?;
        replay(&both, &xs, 13)?;
        replay(&both, &xs, 14)?;
        // SAFETY: every replay was waited for; none of these is used again.
        unsafe {
            for g in on_x.into_iter().chain(on_y).chain(both) {
                rt.destroy_graph(g)?;
            }
            rt.destroy_event(event)?;
            for s in xs.into_iter().chain(ys) {
                rt.destroy_stream(s)?;
            }
        }
        w.end(rt);
        self.all_pooled("capture-order")?;
        Ok(Outcome::Pass(format!(
            "{n} ranks: captures on X then on Y (no dependency across them), and one over X and Y (Y after X inside it): every replay exact"
        )))
    }
}

fn count_entries(dir: &Path, prefix: &str) -> Result<usize, Fail> {
    Ok(std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .count())
}

fn open_files() -> Result<usize, Fail> {
    count_entries(Path::new("/proc/self/fd"), "")
}

fn shm_files() -> Result<usize, Fail> {
    count_entries(Path::new("/dev/shm"), "rcclx-")
}
