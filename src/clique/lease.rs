//! When a rank may free memory its peers have mapped: a small shared-memory file per clique
//! (`/dev/shm/rcclx-<uid>-<pid of rank 0>-<nonce of rank 0>`) holding one state word per rank.
//!
//! A rank marks itself `OPEN` before it maps any peer and `CLOSED` once it has stopped using the
//! mappings (its kernels finished, mappings closed). It frees its own buffers only when no peer
//! is still `OPEN` (or the peer's process is gone); until then they wait with the reaper
//! (`teardown.rs`). So memory a peer has mapped is never freed while that peer may still
//! read it, and no rank ever blocks on another to destroy a communicator. The file is removed
//! by whichever rank sees everyone closed.

use std::ffi::CString;
use std::sync::atomic::{AtomicU32, Ordering};

use super::MAX_RANKS;

const OPEN: u32 = 1;
const CLOSED: u32 = 2;
const MAGIC: u32 = 0x7263_6c78; // "rclx"
const BYTES: usize = 4096;

/// This rank's view of the clique's lease.
pub struct Lease {
    words: *mut AtomicU32,
    name: CString,
    rank: usize,
    /// Each rank's pid, where it names a process we can see (`None`: another pid namespace).
    pids: Vec<Option<u32>>,
}

// SAFETY: the mapping is only accessed through atomics, and lives until `drop`.
unsafe impl Send for Lease {}
// SAFETY: as above.
unsafe impl Sync for Lease {}

/// A random 64-bit value (the lease name must not collide with a stale file of an earlier run).
pub fn nonce() -> u64 {
    let mut v = 0u64;
    // SAFETY: writes at most 8 bytes into `v`.
    let got = unsafe { libc::getrandom(&mut v as *mut u64 as *mut libc::c_void, 8, 0) };
    if got != 8 {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        v = t ^ (u64::from(std::process::id()) << 32);
    }
    v
}

impl Lease {
    /// Opens (creating if needed) the lease named by rank 0's pid and nonce and marks `rank` open.
    /// `pids`: each rank's pid, or `None` for a rank in another pid namespace, whose liveness
    /// this process cannot check (such a peer counts as alive while it is open).
    pub fn join(pid0: u32, nonce0: u64, rank: usize, pids: Vec<Option<u32>>) -> Result<Lease, String> {
        if pids.len() > MAX_RANKS || rank >= pids.len() {
            return Err(format!("lease for rank {rank} of {}", pids.len()));
        }
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let name = CString::new(format!("/rcclx-{uid}-{pid0}-{nonce0:016x}")).map_err(|e| e.to_string())?;
        // SAFETY: valid NUL-terminated name; the returned descriptor is closed below.
        let fd = unsafe { libc::shm_open(name.as_ptr(), libc::O_RDWR | libc::O_CREAT, 0o600) };
        if fd < 0 {
            return Err(format!("shm_open {:?}: {}", name, std::io::Error::last_os_error()));
        }
        // SAFETY: `fd` is an open shared-memory object; growing it to BYTES zero-fills, and every
        // rank asks for the same size, so a concurrent ftruncate is harmless.
        let sized = unsafe { libc::ftruncate(fd, BYTES as libc::off_t) } == 0;
        let map = if sized {
            // SAFETY: maps BYTES of the object just sized; checked against MAP_FAILED below.
            unsafe {
                libc::mmap(std::ptr::null_mut(), BYTES, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
            }
        } else {
            libc::MAP_FAILED
        };
        let err = std::io::Error::last_os_error();
        // SAFETY: `fd` is ours; the mapping (if any) stays valid after closing it.
        unsafe { libc::close(fd) };
        if map == libc::MAP_FAILED {
            return Err(format!("mapping {:?}: {err}", name));
        }
        let lease = Lease { words: map as *mut AtomicU32, name, rank, pids };
        let _ = lease.word(MAX_RANKS).compare_exchange(0, MAGIC, Ordering::AcqRel, Ordering::Acquire);
        lease.word(rank).store(OPEN, Ordering::Release);
        Ok(lease)
    }

    fn word(&self, i: usize) -> &AtomicU32 {
        assert!(i <= MAX_RANKS);
        // SAFETY: the mapping holds BYTES >= (MAX_RANKS + 1) * 4 bytes of page-aligned memory,
        // alive until drop, accessed only atomically (by every rank of the clique).
        unsafe { &*self.words.add(i) }
    }

    /// This rank no longer touches any peer's memory.
    pub fn close(&self) {
        self.word(self.rank).store(CLOSED, Ordering::Release);
    }

    /// No peer may still read this rank's memory: each is closed, never opened, or gone.
    pub fn peers_done(&self) -> bool {
        (0..self.pids.len()).filter(|&p| p != self.rank).all(|p| {
            self.word(p).load(Ordering::Acquire) != OPEN || self.pids[p].is_some_and(|pid| !process_alive(pid))
        })
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.close();
        let everyone_done = self.peers_done();
        // SAFETY: unmaps exactly the mapping made in `join`; no reference into it outlives self.
        unsafe { libc::munmap(self.words as *mut libc::c_void, BYTES) };
        if everyone_done {
            // SAFETY: valid name; a second unlink by another rank fails harmlessly with ENOENT.
            unsafe { libc::shm_unlink(self.name.as_ptr()) };
        }
    }
}

fn process_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_only_when_every_peer_closed() {
        let me = std::process::id();
        let n = nonce();
        let a = Lease::join(me, n, 0, vec![Some(me), Some(me)]).unwrap();
        assert!(a.peers_done(), "a peer that never joined cannot have mapped anything");
        let b = Lease::join(me, n, 1, vec![Some(me), Some(me)]).unwrap();
        assert!(!a.peers_done() && !b.peers_done());
        a.close();
        assert!(b.peers_done() && !a.peers_done());
        b.close();
        assert!(a.peers_done());
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let path = format!("/dev/shm/rcclx-{uid}-{me}-{n:016x}");
        drop(a);
        drop(b);
        assert!(!std::path::Path::new(&path).exists(), "{path} left behind");
    }

    #[test]
    fn the_file_goes_when_the_last_live_rank_closes() {
        let me = std::process::id();
        let n = nonce();
        // Rank 1 is a process that died while open; rank 2 never joined.
        let a = Lease::join(me, n, 0, vec![Some(me), Some(u32::MAX / 2), Some(me)]).unwrap();
        a.word(1).store(OPEN, Ordering::Release);
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let path = format!("/dev/shm/rcclx-{uid}-{me}-{n:016x}");
        assert!(std::path::Path::new(&path).exists());
        drop(a);
        assert!(!std::path::Path::new(&path).exists(), "{path} left behind by the last live rank");
    }

    #[test]
    fn a_dead_peer_counts_as_done() {
        let me = std::process::id();
        let a = Lease::join(me, nonce(), 0, vec![Some(me), Some(u32::MAX / 2), None]).unwrap();
        // Mark the fake peer open by hand.
        a.word(1).store(OPEN, Ordering::Release);
        assert!(a.peers_done());
        // A peer in another pid namespace: its pid says nothing here, so it is alive while open.
        a.word(2).store(OPEN, Ordering::Release);
        assert!(!a.peers_done());
        a.word(2).store(CLOSED, Ordering::Release);
        assert!(a.peers_done());
        a.word(1).store(0, Ordering::Release);
        a.word(2).store(0, Ordering::Release);
    }
}
