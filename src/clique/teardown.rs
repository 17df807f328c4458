//! How a clique's memory ends: one path for destroy, abort and a clique dropped unused.
//!
//! A clique's buffers may be reused only when (1) none of this rank's kernels can touch them or
//! its peers' memory any more, and (2) no peer can read them (the lease, `lease.rs`). Both can
//! take long: (1) waits for the device, where another communicator's kernel may be stuck on a
//! dead peer, and (2) waits for the peers' own teardown. So nothing of this waits in the
//! application's thread: [`bury`] hands the memory to one reaper thread and returns at once,
//! whether the communicator was destroyed or aborted (an abort first tells the kernels to stop,
//! `Clique::request_abort`, so they end within microseconds).
//!
//! The reaper, per buried clique:
//! 1. waits until the device has finished the work queued so far (a device-wide wait, but in
//!    the reaper only, and one that holds up no other thread's calls; it covers kernels launched
//!    eagerly and by graph replays alike);
//! 2. closes the peer mappings and marks this rank closed in the lease;
//! 3. once every peer is closed or gone, puts the buffers in a pool per device, from which the
//!    next clique of the same sizes takes them ([`reuse`]).
//!
//! Steps 1 and 2 need no reaper when the communicator's last operation is known to have ended
//! (the event `comm::order` records after each one) and its peers are all in this process: then
//! the rank closes at once, and the last rank to close puts every rank's buffers in the pool
//! (and the next setup looks too). So a process that destroys and re-creates communicators
//! reuses the same buffers every time.
//!
//! Why a pool and not a free: `cuMemFree` / `hipFree` wait for the whole device while holding
//! the driver up for every other thread of the process. A thread that launches the ranks of one
//! collective one after the other (one thread driving several GPUs, or several ranks as in the
//! GPU tests) then waits for a kernel that waits for its own next launch: a deadlock (seen in
//! the lifecycle test at 8 ranks; PyTorch guards its own frees against NCCL launches for the
//! same reason). So the memory of ended communicators stays with the process, at the most it
//! ever held at once, and is reused. A communicator whose peer never ends (a live process that
//! leaks it) keeps its buffers: a peer may still read them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::lease::Lease;
use crate::gpu::{self, DeviceBuffer, HostMapped, IpcMapping};

/// The memory a clique owns or maps: its peers' buffers mapped, the lease, its own buffers.
pub(super) struct Owned {
    pub peers: Vec<IpcMapping>,
    pub lease: Option<Lease>,
    pub slab: Slab,
}

/// One rank's buffers of a clique: staging, flags, LL inbox, window counters, status word.
pub(super) struct Slab {
    pub staging: DeviceBuffer,
    pub flags: DeviceBuffer,
    pub ll: DeviceBuffer,
    pub seq: DeviceBuffer,
    pub status: HostMapped,
}

impl Slab {
    fn sizes(&self) -> [usize; 4] {
        [self.staging.len(), self.flags.len(), self.ll.len(), self.seq.len()]
    }
}

/// Slabs of ended cliques, by device, ready for the next clique of the same sizes.
static POOL: Mutex<Vec<Slab>> = Mutex::new(Vec::new());

/// A slab of an ended clique on `device` with exactly these sizes (staging, flags, LL inbox,
/// window counters), its flags, inbox, counters and status zeroed as a new one's are.
pub(super) fn reuse(device: i32, sizes: [usize; 4]) -> Option<Slab> {
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

struct Grave {
    owned: Owned,
    device: i32,
    /// Step 2 done: this rank's kernels have ended and it touches no peer's memory.
    quiet: bool,
    /// Order of burial: a device wait covers the graves buried before it began.
    id: u64,
}

static GRAVES: Mutex<Vec<Grave>> = Mutex::new(Vec::new());
static WAKE: Condvar = Condvar::new();
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// Hands `owned`, the memory of a clique on `device` whose communicator has ended, to the
/// reaper. Never waits. `settled`: this rank's kernels are known to have ended; then a clique
/// of one process (no peer mappings to close) is closed at once, and its memory is back in the
/// pool as soon as its peers have closed too, without the reaper.
pub(super) fn bury(owned: Owned, device: i32, settled: bool) {
    static REAPER: std::sync::Once = std::sync::Once::new();
    let quiet = settled && owned.peers.is_empty();
    if quiet && let Some(l) = &owned.lease {
        l.close();
    }
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    GRAVES.lock().push(Grave { owned, device, quiet, id });
    collect();
    REAPER.call_once(|| {
        if let Err(e) = std::thread::Builder::new().name("rcclx-reaper".into()).spawn(reap) {
            tracing::warn!("rcclx: no reaper thread ({e}); ended communicators keep their memory");
        }
        // SAFETY: registers a plain `extern "C" fn` that catches every panic.
        unsafe { libc::atexit(at_exit) };
    });
    WAKE.notify_one();
}

/// Step 3: moves the buffers of closed cliques that no peer can read any more to the pool.
fn collect() {
    let mut graves = GRAVES.lock();
    let mut pool = POOL.lock();
    let mut i = 0;
    while i < graves.len() {
        if graves[i].quiet && graves[i].owned.lease.as_ref().is_none_or(|l| l.peers_done()) {
            pool.push(graves.swap_remove(i).owned.slab);
        } else {
            i += 1;
        }
    }
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
    loop {
        // Steps 1 and 2 for the graves not yet closed: wait for their devices (the graves stay
        // listed, so `at_exit` sees them), then close those buried before the wait began.
        let (devices, last) = {
            let mut g = GRAVES.lock();
            while g.is_empty() {
                WAKE.wait(&mut g);
            }
            let loud = || g.iter().filter(|g| !g.quiet);
            let mut devices: Vec<i32> = loud().map(|g| g.device).collect();
            devices.sort_unstable();
            devices.dedup();
            (devices, loud().map(|g| g.id).max())
        };
        for &device in &devices {
            if let Ok(rt) = gpu::runtime()
                && let Err(e) = rt.synchronize_device(device)
            {
                tracing::warn!("rcclx: waiting for device {device} before reusing a communicator's memory: {e}");
            }
        }
        if let Some(last) = last {
            // The peer mappings are closed outside the lock (a driver call may take long).
            let mut mappings = Vec::new();
            for grave in GRAVES.lock().iter_mut().filter(|g| !g.quiet && g.id <= last) {
                mappings.push(std::mem::take(&mut grave.owned.peers));
                grave.quiet = true;
            }
            drop(mappings);
            for grave in GRAVES.lock().iter().filter(|g| g.quiet && g.id <= last) {
                if let Some(l) = &grave.owned.lease {
                    l.close();
                }
            }
        }
        collect();
        // Peers close on their own time: look again soon.
        if !GRAVES.lock().is_empty() {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// At process exit: every ended clique's lease is closed (the lease file goes once every rank
/// has closed or exited), and nothing else is touched (the driver frees the memory itself).
extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let Some(mut graves) = GRAVES.try_lock_for(Duration::from_millis(100)) else { return };
        for grave in std::mem::take(&mut *graves) {
            let Owned { peers, lease, slab } = grave.owned;
            drop(lease); // closes this rank and removes the file if no peer is still open
            std::mem::forget((peers, slab));
        }
    });
}
