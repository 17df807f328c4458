//! How a clique's memory ends: one path for destroy, abort, a clique dropped unused and a setup
//! that published its buffers but ended without a clique.
//!
//! A clique's buffers may be reused only when (1) none of this rank's kernels can touch them or
//! its peers' memory any more, and (2) no peer can read them (the lease, `lease.rs`). Both can
//! take long: (1) waits for this clique's own last kernels (another communicator's kernel on the
//! same device may be stuck on a dead peer, but that is no concern of this clique), and (2)
//! waits for the peers' own teardown. So nothing of this waits in the application's thread:
//! [`bury`] hands the memory to one reaper thread and returns at once, whether the communicator
//! was destroyed or aborted (an abort first tells the kernels to stop,
//! `Clique::request_abort`, so they end within microseconds).
//!
//! The reaper, per buried clique ("grave"), polling and never waiting:
//! 1. its [`Fence`]: the event recorded after the communicator's last operation
//!    (`comm::order`) has completed (`cuEventQuery` / `hipEventQuery`), and every graph that
//!    captured one of its kernels has been destroyed with its launches completed (a user object
//!    each such graph owns, [`GraphRefs`]). No device-wide wait: a device synchronization is
//!    illegal while any thread of the process captures a graph, and would wait for every other
//!    communicator's kernels. A query that fails keeps the grave and is tried again later; a
//!    kernel that never ends holds back its own grave only;
//! 2. then closes the peer mappings and marks this rank closed in the lease;
//! 3. once every peer is closed or gone, puts the buffers in a pool per device, from which the
//!    next clique of the same sizes takes them ([`reuse`]).
//!
//! Steps 1 and 2 need no reaper when the fence has already passed at burial and the peers are
//! all in this process: then the rank closes at once, and the last rank to close puts every
//! rank's buffers in the pool (and the next setup looks too). So a process that destroys and
//! re-creates communicators reuses the same buffers every time.
//!
//! Why a pool and not a free: `cuMemFree` / `hipFree` wait for the whole device while holding
//! the driver up for every other thread of the process. A thread that launches the ranks of one
//! collective one after the other (one thread driving several GPUs, or several ranks as in the
//! GPU tests) then waits for a kernel that waits for its own next launch: a deadlock (seen in
//! the lifecycle test at 8 ranks; PyTorch guards its own frees against NCCL launches for the
//! same reason). So the memory of ended communicators stays with the process, at the most it
//! ever held at once, and is reused. A communicator whose peer never ends (a live process that
//! leaks it) keeps its buffers: a peer may still read them.
//!
//! At process exit the leases of quiet graves are closed (peers may then reuse their buffers);
//! a grave whose kernels may still run keeps its lease open (the peers see this process gone
//! once it has exited). A forked child never touches the parent's leases (`pthread_atfork`).

use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::lease::Lease;
use crate::gpu::{self, DeviceBuffer, Event, HostMapped, IpcMapping};

/// The memory a clique owns or maps: its peers' buffers mapped, the lease, its own buffers.
pub(super) struct Owned {
    pub peers: Vec<IpcMapping>,
    pub lease: Option<Lease>,
    pub slab: Slab,
}

/// One rank's buffers of a clique: staging, flags, LL inbox, window counters, the rail
/// scratch (low precision across hosts only), status word.
pub(super) struct Slab {
    pub staging: DeviceBuffer,
    pub flags: DeviceBuffer,
    pub ll: DeviceBuffer,
    pub seq: DeviceBuffer,
    pub scratch: Option<DeviceBuffer>,
    pub status: HostMapped,
}

impl Slab {
    fn sizes(&self) -> [usize; 5] {
        let scratch = self.scratch.as_ref().map_or(0, DeviceBuffer::len);
        [self.staging.len(), self.flags.len(), self.ll.len(), self.seq.len(), scratch]
    }
}

/// Slabs of ended cliques, by device, ready for the next clique of the same sizes.
static POOL: Mutex<Vec<Slab>> = Mutex::new(Vec::new());

/// The sizes of the pooled slabs on `device` (for the log line of a new allocation).
pub(super) fn pooled_sizes(device: i32) -> Vec<[usize; 5]> {
    POOL.lock().iter().filter(|s| s.staging.device() == device).map(Slab::sizes).collect()
}

/// A slab of an ended clique on `device` with exactly these sizes (staging, flags, LL inbox,
/// window counters, rail scratch), its flags, inbox, counters and status zeroed as a new one's are.
pub(super) fn reuse(device: i32, sizes: [usize; 5]) -> Option<Slab> {
    collect();
    let slab = {
        let mut pool = POOL.lock();
        let i = pool.iter().position(|s| s.staging.device() == device && s.sizes() == sizes)?;
        pool.swap_remove(i)
    };
    let zeroed = slab.flags.zero().and_then(|_| slab.ll.zero()).and_then(|_| slab.seq.zero());
    if let Err(e) = zeroed {
        tracing::warn!("rcclx: clearing reused buffers on device {device}: {e}");
        POOL.lock().push(slab);
        return None;
    }
    slab.status.words().iter().for_each(|w| w.store(0, Ordering::Release));
    Some(slab)
}

/// What says that this rank's kernels of a clique have ended (step 1).
pub enum Fence {
    /// Known to have ended (no kernel was ever launched, or the last one completed).
    Ended,
    /// The event recorded after the last operation (owned: destroyed once it completed).
    Event(Event),
    /// Unknown (a kernel may run for ever as far as rcclx can tell): the grave is kept for the
    /// life of the process, its lease open.
    Unknown,
}

/// The graphs that captured a clique's kernels and still live: each holds a user object whose
/// release (the graph and its executable forms destroyed, their launches completed) counts
/// down [`GraphRefs::live`].
#[derive(Default)]
pub struct GraphRefs {
    live: AtomicUsize,
    /// A capture whose graph could not be made to hold a reference (an old driver, an error):
    /// nothing says when its replays end, so the clique's memory is never reused.
    untracked: AtomicBool,
}

impl GraphRefs {
    /// Makes the graph being captured on `stream` keep this clique's memory alive. Never fails:
    /// a graph that cannot hold a reference pins the memory for the life of the process.
    pub fn retain(self: &Arc<Self>, stream: gpu::Stream) {
        let Ok(rt) = gpu::runtime() else { return self.untracked.store(true, Ordering::Release) };
        self.live.fetch_add(1, Ordering::AcqRel);
        let data = Arc::into_raw(self.clone()) as *mut c_void;
        // SAFETY: `graph_released` calls no runtime function; `data` is a strong count of an Arc
        // that the callback takes back (exactly once, or never on `Err`, undone below).
        match unsafe { rt.capture_retain(stream, graph_released, data) } {
            Ok(true) => {}
            outcome => {
                // SAFETY: the callback never ran and never will: take back the count given it.
                drop(unsafe { Arc::from_raw(data as *const GraphRefs) });
                self.live.fetch_sub(1, Ordering::AcqRel);
                if let Err(e) = outcome {
                    static WARNED: AtomicBool = AtomicBool::new(false);
                    if !WARNED.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            "rcclx: a graph captured an rcclx kernel but cannot keep its memory alive ({e}); that \
                             communicator's buffers are never reused"
                        );
                    }
                    self.untracked.store(true, Ordering::Release);
                }
            }
        }
    }

    /// No graph that captured a kernel of the clique lives any more (and none is untracked).
    fn released(&self) -> bool {
        self.live.load(Ordering::Acquire) == 0 && !self.untracked.load(Ordering::Acquire)
    }
}

/// The release of a graph's user object (a driver thread; must not call the runtime).
unsafe extern "C" fn graph_released(data: *mut c_void) {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: `data` is the count `GraphRefs::retain` gave the user object, released once.
        let refs = unsafe { Arc::from_raw(data as *const GraphRefs) };
        refs.live.fetch_sub(1, Ordering::AcqRel);
    });
}

struct Grave {
    owned: Owned,
    device: i32,
    fence: Fence,
    graphs: Arc<GraphRefs>,
    /// Step 2 done: this rank's kernels have ended and it touches no peer's memory.
    quiet: bool,
    /// A failed fence query was logged.
    warned: bool,
    id: u64,
}

// SAFETY: the event handle is usable from any thread; graves are used under `GRAVES` or by the
// reaper alone (which owns the event's destruction).
unsafe impl Send for Grave {}

static GRAVES: Mutex<Vec<Grave>> = Mutex::new(Vec::new());
static WAKE: Condvar = Condvar::new();
static NEXT_ID: AtomicU64 = AtomicU64::new(0);
/// Set at process exit: the reaper stops calling the driver.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Set in a forked child: the parent's graves and leases are not the child's.
static IN_CHILD: AtomicBool = AtomicBool::new(false);

/// How graves went quiet (a test hook: a grave never goes quiet without its fence checked).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Graves buried.
    pub buried: u64,
    /// Graves that went quiet with their fence passed at burial (no kernel left).
    pub quiet_at_burial: u64,
    /// Graves that went quiet after the reaper saw their fence pass.
    pub quiet_by_reaper: u64,
    /// Fence queries that failed (the grave was kept and retried).
    pub failed_queries: u64,
}

static COUNTS: Mutex<Counts> =
    Mutex::new(Counts { buried: 0, quiet_at_burial: 0, quiet_by_reaper: 0, failed_queries: 0 });

/// How many graves were buried and how each went quiet so far.
pub fn counts() -> Counts {
    *COUNTS.lock()
}

impl Fence {
    /// `Ok(true)` once the fence has passed (then an event is destroyed and it becomes `Ended`);
    /// never waits.
    fn passed(&mut self, device: i32) -> Result<bool, gpu::Error> {
        match *self {
            Fence::Ended => Ok(true),
            Fence::Unknown => Ok(false),
            Fence::Event(e) => {
                let rt = gpu::runtime()?;
                let _guard = rt.device_guard(device)?;
                if !rt.query_event(e)? {
                    return Ok(false);
                }
                // SAFETY: the grave owns the event, and nothing records or waits on it any more.
                let _ = unsafe { rt.destroy_event(e) };
                *self = Fence::Ended;
                Ok(true)
            }
        }
    }
}

/// Hands `owned`, the memory of a clique on `device` whose communicator has ended, to the
/// reaper. Never waits (one event query at most). Once `fence` has passed and `graphs` are all
/// gone, a clique of one process (no peer mappings to close) is closed at once, and its memory
/// is back in the pool as soon as its peers have closed too, without the reaper.
pub(super) fn bury(owned: Owned, device: i32, mut fence: Fence, graphs: Arc<GraphRefs>) {
    static REAPER: std::sync::Once = std::sync::Once::new();
    let passed = matches!(fence.passed(device), Ok(true)) && graphs.released();
    let quiet = passed && owned.peers.is_empty();
    if quiet && let Some(l) = &owned.lease {
        l.close();
    }
    {
        let mut graves = GRAVES.lock();
        // The id is taken under the lock (unique, in the order of burial).
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        graves.push(Grave { owned, device, fence, graphs, quiet, warned: false, id });
        let mut c = COUNTS.lock();
        c.buried += 1;
        c.quiet_at_burial += u64::from(quiet);
    }
    collect();
    REAPER.call_once(|| {
        if let Err(e) = std::thread::Builder::new().name("rcclx-reaper".into()).spawn(reap) {
            tracing::warn!("rcclx: no reaper thread ({e}); ended communicators keep their memory");
        }
        // SAFETY: registers plain `extern "C" fn`s that catch every panic.
        unsafe {
            libc::atexit(at_exit);
            libc::pthread_atfork(None, None, Some(in_child));
        }
    });
    WAKE.notify_one();
}

/// A slab that was never published (no peer has its handles): straight back to the pool.
pub(super) fn give_back(slab: Slab) {
    POOL.lock().push(slab);
}

/// Step 3: moves the buffers of closed cliques that no peer can read any more to the pool;
/// how many.
fn collect() -> usize {
    let mut graves = GRAVES.lock();
    let mut pool = POOL.lock();
    let (mut i, mut moved) = (0, 0);
    while i < graves.len() {
        if graves[i].quiet && graves[i].owned.lease.as_ref().is_none_or(|l| l.peers_done()) {
            pool.push(graves.swap_remove(i).owned.slab);
            moved += 1;
        } else {
            i += 1;
        }
    }
    moved
}

/// Ended cliques whose memory is not yet back in the pool.
pub fn pending() -> usize {
    GRAVES.lock().len()
}

/// Waits up to `limit` for every ended clique's memory to be back in the pool; whether it was.
pub fn wait_pooled(limit: Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while pending() > 0 {
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

fn reap() {
    let mut nap = Duration::from_millis(1);
    loop {
        // The loud graves' fences, checked outside the lock (driver calls).
        let mut loud: Vec<(u64, i32, Fence)> = {
            let mut g = GRAVES.lock();
            while g.is_empty() || EXITING.load(Ordering::Acquire) {
                WAKE.wait(&mut g);
            }
            g.iter_mut()
                .filter(|g| !g.quiet && g.graphs.released())
                .map(|g| (g.id, g.device, std::mem::replace(&mut g.fence, Fence::Unknown)))
                .collect()
        };
        let mut passed = Vec::new();
        let mut failed = Vec::new();
        for (id, device, fence) in &mut loud {
            match fence.passed(*device) {
                Ok(true) => passed.push(*id),
                Ok(false) => {}
                Err(e) => failed.push((*id, e)),
            }
        }
        // The peer mappings are closed outside the lock (a driver call may take long).
        let mut mappings = Vec::new();
        {
            let mut graves = GRAVES.lock();
            for (id, _, fence) in loud {
                let Some(g) = graves.iter_mut().find(|g| g.id == id) else { continue };
                g.fence = fence; // back with the grave (`Ended` once passed)
                if passed.contains(&id) {
                    mappings.push(std::mem::take(&mut g.owned.peers));
                    g.quiet = true;
                } else if let Some((_, e)) = failed.iter().find(|(f, _)| *f == id)
                    && !std::mem::replace(&mut g.warned, true)
                {
                    tracing::warn!(
                        "rcclx: device {}: cannot tell whether an ended communicator's last kernel finished ({e}); its memory waits, tried again later",
                        g.device
                    );
                }
            }
            let mut c = COUNTS.lock();
            c.quiet_by_reaper += passed.len() as u64;
            c.failed_queries += failed.len() as u64;
        }
        drop(mappings);
        for grave in GRAVES.lock().iter().filter(|g| g.quiet && passed.contains(&g.id)) {
            if let Some(l) = &grave.owned.lease {
                l.close();
            }
        }
        let pooled = collect();
        // Kernels and peers end on their own time: look again soon, less often while nothing
        // changes (a grave whose kernel never ends is polled, not waited for); a new burial
        // wakes the reaper at once.
        nap = if passed.is_empty() && pooled == 0 {
            (nap * 2).min(Duration::from_millis(20))
        } else {
            Duration::from_millis(1)
        };
        let mut g = GRAVES.lock();
        if !g.is_empty() {
            WAKE.wait_for(&mut g, nap);
        }
    }
}

/// In a forked child: the parent's graves and leases are left alone (`at_exit` does nothing).
extern "C" fn in_child() {
    IN_CHILD.store(true, Ordering::Release);
}

/// At process exit: the reaper stops calling the driver; every quiet grave's lease is closed
/// (the lease file goes once every rank has closed or exited). A grave whose kernels may still
/// run keeps its lease open: its peers may reuse their buffers only once this process has gone.
/// Nothing else is touched (the driver frees the memory itself).
extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if IN_CHILD.load(Ordering::Acquire) {
            return;
        }
        EXITING.store(true, Ordering::Release);
        let Some(mut graves) = GRAVES.try_lock_for(Duration::from_millis(100)) else { return };
        for grave in std::mem::take(&mut *graves) {
            let Owned { peers, lease, slab } = grave.owned;
            if grave.quiet {
                drop(lease); // closes this rank and removes the file if no peer is still open
            } else {
                std::mem::forget(lease);
            }
            std::mem::forget((peers, slab));
        }
    });
}
