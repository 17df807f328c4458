//! One process's ranks on the GPU: their buffers (with guards), calls through rcclx's own path,
//! bounded waits with the hang report, and the statistics of each rank's communicator.

use std::ffi::c_void;
use std::time::Duration;

use rcclx::clique::{Buffers, Clique, FLAG_STRIDE};
use rcclx::comm;
use rcclx::config::LowpCodec;
use rcclx::gpu::{DeviceBuffer, DevicePtr, MemKind, Runtime, Stream};
use rcclx::intercept::{CallDesc, Coll, CommFacts, FamilyKey, Kernel, Route};
use rcclx::kernel_table;
use rcclx::types::ncclResult_t;
use rcclx_gpu_tests::Fail;
use rcclx_gpu_tests::children::say;
use rcclx_gpu_tests::world::{FORWARDED, Layout, Placement, World};

/// Bytes of 0xFF before and after every buffer of a case; a kernel write there is a failure.
pub const GUARD: usize = 256;

/// How long a rank's stream may take for one wait before it counts as hung: ranks as streams run
/// at once; processes on one GPU are time-sliced (milliseconds per barrier).
pub fn wait_limit(p: Placement) -> Duration {
    match p.layout {
        Layout::Streams => Duration::from_secs(60),
        Layout::Procs => Duration::from_secs(150),
    }
}

/// The limits, buffer sizes and grid cap the clique agreed (what this run exercises).
pub fn describe_clique(w: &World) -> String {
    let c = &w.cliques[0];
    let p = &c.facts.policies;
    let kib = |b: u64| if b >= 1 << 20 { format!("{}MiB", b >> 20) } else { format!("{}KiB", b >> 10) };
    let colls: Vec<String> = Coll::ALL
        .iter()
        .map(|&k| {
            let q = p.of(k);
            let two = if k.spec().two_shot { format!(" (one-shot <= {})", kib(q.one_shot_max)) } else { String::new() };
            let lowp = if q.lowp != 0 { format!(", low precision from {}", kib(q.lowp_min)) } else { String::new() };
            format!("{} <= {}{two}{lowp}", k.spec().title, kib(q.max))
        })
        .collect();
    format!(
        "clique of {} ranks: LL <= {} per rank; {}; staging {} per half, LL inbox {} per source, DDA and AllToAllv grids <= {} blocks, every grid <= {}",
        c.nranks,
        kib(p.ll_max),
        colls.join("; "),
        kib(c.args().half_bytes),
        kib(p.ll_max),
        c.max_blocks,
        if c.grid_cap() > 0 {
            format!("{} blocks (ranks sharing a GPU run at once)", c.grid_cap())
        } else {
            "the GPU's".into()
        }
    )
}

/// The kernel rcclx runs for `call` on `clique` (its route; the kernel's name), or why none.
pub fn kernel_for(clique: &Clique, call: &CallDesc) -> (String, String) {
    route_for(&clique.facts, call)
}

/// [`kernel_for`] from a communicator's facts (no clique needed: `--list`, `routes::of_suite`).
pub fn route_for(facts: &CommFacts, call: &CallDesc) -> (String, String) {
    match rcclx::intercept::decide(call, facts) {
        Route::Own(algo) => {
            let key = match (call.coll, algo, facts.nranks) {
                (Coll::AllReduce, Kernel { codec: Some(LowpCodec::Fp8), .. }, 2) => {
                    FamilyKey::AllReducePair(LowpCodec::Fp8)
                }
                (Coll::AllReduce, Kernel { codec: Some(LowpCodec::Int8), .. }, 2) => {
                    FamilyKey::AllReducePair(LowpCodec::Int8)
                }
                _ => FamilyKey::Coll(call.coll, algo),
            };
            let family = rcclx::intercept::family(key);
            let name = family
                .and_then(|f| kernel_table::kernel_index(f, call.dtype.0, call.op.0))
                .and_then(|i| kernel_table::kernel_names().nth(i))
                .unwrap_or_else(|| "(no kernel)".into());
            let route = family.map_or("?".into(), |f| {
                format!("{}.{}", kernel_table::FAMILIES[f].coll, kernel_table::FAMILIES[f].algo)
            });
            (route, name)
        }
        Route::Upstream(why) => ("forwarded".into(), format!("(forwarded: {})", why.c_name().to_string_lossy())),
        // The harness's cliques are one host each.
        Route::AcrossHosts(_) => unreachable!("a harness clique spans hosts"),
    }
}

/// The calls per route of a communicator's statistics (`kernel_table` order, then forwarded).
pub fn route_calls(world_comm: rcclx::types::ncclComm_t) -> Vec<u64> {
    comm::lookup(world_comm).map(|s| s.stats.snapshot().routes.iter().map(|c| c.calls).collect()).unwrap_or_default()
}

/// The name of route `i`.
pub fn route_name(i: usize) -> String {
    comm::stats::route_name(i).unwrap_or_else(|| format!("route{i}"))
}

/// The routes whose call count grew between two snapshots, joined by `+`.
pub fn grown(before: &[u64], after: &[u64]) -> String {
    let v: Vec<String> = after
        .iter()
        .enumerate()
        .filter(|(i, c)| **c > before.get(*i).copied().unwrap_or(0))
        .map(|(i, _)| route_name(i))
        .collect();
    if v.is_empty() { "none".into() } else { v.join("+") }
}

/// One process's ranks and their device memory.
pub struct Ranks {
    pub rt: &'static Runtime,
    pub world: World,
    /// Process 0 announces the cases (`CASE` lines).
    pub announcer: bool,
    /// Per local rank: a buffer reused by every case (grown when a case needs more).
    arenas: Vec<Option<DeviceBuffer>>,
}

impl Ranks {
    pub fn new(rt: &'static Runtime, world: World, announcer: bool) -> Ranks {
        let n = world.ranks.len();
        Ranks { rt, world, announcer, arenas: (0..n).map(|_| None).collect() }
    }

    pub fn local(&self) -> usize {
        self.world.ranks.len()
    }

    pub fn nranks(&self) -> usize {
        self.world.placement.nranks
    }

    /// Local rank k's arena of at least `bytes` bytes (grown by reallocating).
    pub fn arena(&mut self, k: usize, bytes: usize) -> Result<DevicePtr, Fail> {
        let big_enough = self.arenas[k].as_ref().is_some_and(|b| b.len() >= bytes);
        if !big_enough {
            self.arenas[k] = None;
            let b = self.rt.alloc(self.world.devices[k], bytes.max(1).next_multiple_of(1 << 20), MemKind::Normal)?;
            self.arenas[k] = Some(b);
        }
        Ok(self.arenas[k].as_ref().expect("allocated above").ptr())
    }

    /// Local rank k's arena (allocated by an earlier [`Ranks::arena`]).
    pub fn arena_ptr(&self, k: usize) -> Result<DevicePtr, Fail> {
        Ok(self.arenas[k].as_ref().ok_or("no arena")?.ptr())
    }

    /// Enqueues `len` bytes of `value` at `at` (inside local rank k's arena) on its stream.
    pub fn memset(&self, k: usize, at: DevicePtr, value: u8, len: usize) -> Result<(), Fail> {
        let b = self.arenas[k].as_ref().ok_or("no arena")?;
        if at.0 < b.ptr().0 || at.0 + len as u64 > b.ptr().0 + b.len() as u64 {
            return Err(Fail("memset outside the arena".into()));
        }
        // SAFETY: the range lies inside our arena (checked above), used only by this rank's
        // stream, in order.
        unsafe { self.rt.memset_async(at, value, len, self.world.streams[k]) }?;
        Ok(())
    }

    /// Copies `bytes` to local rank k's arena at `off` (synchronously).
    pub fn upload(&self, k: usize, off: usize, bytes: &[u8]) -> Result<(), Fail> {
        let b = self.arenas[k].as_ref().ok_or("no arena")?;
        if off + bytes.len() > b.len() {
            return Err(Fail("upload past the arena".into()));
        }
        let _g = self.rt.device_guard(self.world.devices[k])?;
        // SAFETY: the range lies inside our arena (checked above); no kernel uses it now (the
        // caller waited for the streams).
        unsafe { self.rt.memcpy_htod(b.ptr().offset(off), bytes) }?;
        Ok(())
    }

    /// Reads `len` bytes of local rank k's arena at `off`.
    pub fn download(&self, k: usize, off: usize, len: usize) -> Result<Vec<u8>, Fail> {
        let b = self.arenas[k].as_ref().ok_or("no arena")?;
        if off + len > b.len() {
            return Err(Fail("download past the arena".into()));
        }
        let mut v = vec![0u8; len];
        let _g = self.rt.device_guard(self.world.devices[k])?;
        // SAFETY: the range lies inside our arena (checked above).
        unsafe { self.rt.memcpy_dtoh(&mut v, b.ptr().offset(off)) }?;
        Ok(v)
    }

    /// Local rank k's collective through rcclx's per-call path (`comm::collective`); a call rcclx
    /// would forward returns [`FORWARDED`].
    pub fn collective(&self, k: usize, call: CallDesc, send: DevicePtr, recv: DevicePtr) -> ncclResult_t {
        let bufs = Buffers { send: send.as_raw() as *const c_void, recv: recv.as_raw(), stream: self.world.streams[k] };
        comm::collective(self.world.comms[k], call, bufs, || FORWARDED)
    }

    pub fn stream(&self, k: usize) -> Stream {
        self.world.streams[k]
    }

    /// Waits for every local rank's stream. A stream that does not finish within the limit is a
    /// hang: `HANG` lines for every local rank (`what(k)` names what it was running), its
    /// kernels are told to stop, and the process ends (its state cannot be trusted).
    pub fn wait_all(&self, what: &dyn Fn(usize) -> String) -> Result<(), Fail> {
        let limit = wait_limit(self.world.placement);
        for k in 0..self.local() {
            match self.rt.wait_stream(self.world.streams[k], limit) {
                Ok(true) => {}
                Ok(false) => self.hang(k, what),
                Err(e) => return Err(Fail(format!("rank {}: stream: {e}", self.world.ranks[k]))),
            }
        }
        Ok(())
    }

    /// Reports a hang (see [`Ranks::wait_all`]) and exits.
    fn hang(&self, first: usize, what: &dyn Fn(usize) -> String) -> ! {
        for k in 0..self.local() {
            let done = self.rt.query_stream(self.world.streams[k]).unwrap_or(false);
            let state = if done { "finished".to_string() } else { self.barrier_state(k) };
            say(&format!(
                "HANG rank {}{}: {}: {state}",
                self.world.ranks[k],
                if k == first { " (first not to finish)" } else { "" },
                what(k)
            ));
        }
        self.world.abort_kernels();
        for k in 0..self.local() {
            let _ = self.rt.wait_stream(self.world.streams[k], Duration::from_secs(10));
        }
        say("FATAL a rank did not finish (HANG lines above); its kernels were told to stop");
        std::process::exit(rcclx_gpu_tests::EXIT_FAILED.into());
    }

    /// Where local rank k's blocks are: the window counter each started its call with and the
    /// barrier values (window counter * 4 + phase) every rank announced to it.
    fn barrier_state(&self, k: usize) -> String {
        let c = &self.world.cliques[k];
        let a = c.args();
        let slots = a.seq_slots as usize;
        let (n, me) = (c.nranks, c.rank);
        let mut seq = vec![0u32; slots];
        let mut flags = vec![0u32; slots * FLAG_STRIDE];
        let _g = self.rt.device_guard(self.world.devices[k]);
        // SAFETY: the clique's own window counters (`slots` words) and flag array (`slots`
        // lines of FLAG_STRIDE words), read on rcclx's own stream while kernels may still run.
        let read = unsafe {
            self.rt
                .memcpy_dtoh(&mut seq, DevicePtr(a.seq))
                .and_then(|_| self.rt.memcpy_dtoh(&mut flags, DevicePtr(a.flags[me])))
        };
        if let Err(e) = read {
            return format!("(could not read its flags: {e})");
        }
        // Group blocks with the same state so that the line stays short.
        let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
        for b in 0..slots {
            let vals: Vec<u32> = (0..n).map(|p| flags[b * FLAG_STRIDE + p]).collect();
            let own = vals[me];
            let window = if own >> 2 >= seq[b] && own != 0 {
                format!("window {} phase {}", (own >> 2) - seq[b], own & 3)
            } else {
                "before its first barrier".into()
            };
            let behind: Vec<usize> = (0..n).filter(|&p| vals[p] < own).collect();
            let text = format!("counter {} {window}, announced {vals:?}, waiting for {behind:?}", seq[b]);
            match groups.iter_mut().find(|(t, _)| *t == text) {
                Some((_, bs)) => bs.push(b),
                None => groups.push((text, vec![b])),
            }
        }
        groups.iter().take(6).map(|(t, bs)| format!("blocks {}: {t}", ranges(bs))).collect::<Vec<_>>().join(" | ")
    }

    /// `ROUTES <rank> <route>=<calls> ...` for every local rank (the parent checks them).
    pub fn report_routes(&self) {
        for (k, &r) in self.world.ranks.iter().enumerate() {
            let calls = route_calls(self.world.comms[k]);
            let kv: Vec<String> = calls
                .iter()
                .enumerate()
                .filter(|(_, c)| **c > 0)
                .map(|(i, c)| format!("{}={c}", route_name(i)))
                .collect();
            say(&format!("ROUTES {r} {}", kv.join(" ")));
        }
    }

    /// Destroys the communicators (`World::end`).
    pub fn end(self) {
        self.world.end(self.rt);
    }
}

/// `0-3,7` for sorted block numbers.
fn ranges(v: &[usize]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if i == j { v[i].to_string() } else { format!("{}-{}", v[i], v[j]) });
        i = j + 1;
    }
    out.join(",")
}

/// FNV-1a of bytes, as 16 hex digits (ranks that must agree compare these).
pub fn hash(bytes: &[u8]) -> String {
    format!("{:016x}", rcclx_gpu_tests::fnv::fnv1a(bytes))
}

/// Reports local rank `rank`'s result of case `case`: `R <case> <rank> <ok> <group> <hash>
/// <route> <detail>`.
pub fn report(case: usize, rank: usize, ok: bool, group: usize, hash: &str, route: &str, detail: &str) {
    say(&format!("R {case} {rank} {} {group} {hash} {route} {detail}", ok as u8));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_ranges() {
        assert_eq!(ranges(&[0, 1, 2, 3, 7, 9, 10]), "0-3,7,9-10");
        assert_eq!(ranges(&[]), "");
    }
}
