//! When a rank may reuse memory its peers have mapped: a small shared-memory file per clique
//! (`/dev/shm/rcclx-<uid>-<pid namespace of rank 0>-<pid of rank 0>-<nonce of rank 0>`)
//! holding one state word per rank.
//!
//! A rank marks itself `OPEN` before it publishes its buffers' handles (so before any peer can
//! map them, and before it maps any peer) and `CLOSED` once it has stopped using the mappings
//! (its kernels finished, mappings closed) or decided never to map them. It reuses its own
//! buffers only when every peer is `CLOSED` (or the peer's process is gone); until then they
//! wait with the reaper (`teardown.rs`). So memory a peer has mapped, or may still map, is
//! never reused while that peer may read it, and no rank ever blocks on another to destroy a
//! communicator.
//!
//! The file is reserved with `posix_fallocate` (a full `/dev/shm` is an error at join, not a
//! SIGBUS at the first store), unlinked as soon as every rank has joined (once the second
//! exchange of the setup has arrived: each rank joins before posting it), else by whichever
//! rank sees everyone closed. Files of this user whose rank 0
//! died in this pid namespace (a crash, a SIGKILL, a job that never destroyed its communicators)
//! are removed at the first join of a process. A forked child never writes the parent's words.

use std::ffi::CString;
use std::sync::atomic::{AtomicU32, Ordering};

use super::args::MAX_RANKS;

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
    /// The process that joined: a forked child (same mapping) writes nothing.
    owner: u32,
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
    /// Opens (creating if needed) the lease named by rank 0's pid namespace, pid and nonce and
    /// marks `rank` open. `pids`: each rank's pid, or `None` for a rank in another pid namespace,
    /// whose liveness this process cannot check (such a peer counts as alive while not closed).
    /// `Err` when the file cannot be made or reserved (a full `/dev/shm`): then no peer may map
    /// this rank's buffers.
    #[cfg(test)]
    pub fn join(pidns0: u64, pid0: u32, nonce0: u64, rank: usize, pids: Vec<Option<u32>>) -> Result<Lease, String> {
        Lease::join_with(pidns0, pid0, nonce0, rank, pids, false)
    }

    /// [`Lease::join`]; `no_space`: reserving the file fails with `ENOSPC` (a fault injected
    /// by `RCCLX_FAULT_INJECT=lease` and the tests).
    pub fn join_with(
        pidns0: u64,
        pid0: u32,
        nonce0: u64,
        rank: usize,
        pids: Vec<Option<u32>>,
        no_space: bool,
    ) -> Result<Lease, String> {
        if pids.len() > MAX_RANKS || rank >= pids.len() {
            return Err(format!("lease for rank {rank} of {}", pids.len()));
        }
        static SWEPT: std::sync::Once = std::sync::Once::new();
        SWEPT.call_once(remove_stale);
        let name = CString::new(format!("/{}", file_name(pidns0, pid0, nonce0))).map_err(|e| e.to_string())?;
        // SAFETY: valid NUL-terminated name; the returned descriptor is closed below.
        let fd = unsafe { libc::shm_open(name.as_ptr(), libc::O_RDWR | libc::O_CREAT, 0o600) };
        if fd < 0 {
            return Err(format!("shm_open {:?}: {}", name, std::io::Error::last_os_error()));
        }
        // Reserving BYTES zero-fills what is new and fails on a full file system (tmpfs reserves
        // nothing on ftruncate: the first store would then raise SIGBUS).
        let reserved = if no_space {
            libc::ENOSPC
        } else {
            // SAFETY: `fd` is an open shared-memory object; every rank asks for the same size,
            // so a concurrent call is harmless.
            unsafe { libc::posix_fallocate(fd, 0, BYTES as libc::off_t) }
        };
        let map = if reserved == 0 {
            // SAFETY: maps BYTES of the object just reserved; checked against MAP_FAILED below.
            unsafe {
                libc::mmap(std::ptr::null_mut(), BYTES, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
            }
        } else {
            libc::MAP_FAILED
        };
        let err =
            if reserved != 0 { std::io::Error::from_raw_os_error(reserved) } else { std::io::Error::last_os_error() };
        // SAFETY: `fd` is ours; the mapping (if any) stays valid after closing it.
        unsafe { libc::close(fd) };
        if map == libc::MAP_FAILED {
            if reserved != 0 && file_size(&name) == Some(0) {
                // A file this rank could not size, and no peer has: gone again.
                // SAFETY: valid name; a concurrent unlink fails harmlessly.
                unsafe { libc::shm_unlink(name.as_ptr()) };
            }
            return Err(format!("reserving {BYTES} bytes for {:?} in /dev/shm: {err}", name));
        }
        // SAFETY: getpid has no preconditions.
        let owner = unsafe { libc::getpid() } as u32;
        let lease = Lease { words: map as *mut AtomicU32, name, rank, pids, owner };
        let _ = lease.word(MAX_RANKS).compare_exchange(0, MAGIC, Ordering::AcqRel, Ordering::Acquire);
        lease.word(rank).store(OPEN, Ordering::Release);
        Ok(lease)
    }

    /// Removes the file's name (every rank has joined: nobody opens it again). The mappings
    /// stay valid.
    pub fn unlink(&self) {
        // SAFETY: valid name; a second unlink by another rank fails harmlessly with ENOENT.
        unsafe { libc::shm_unlink(self.name.as_ptr()) };
    }

    /// Whether this is the process that joined (not a forked child sharing the mapping).
    fn mine(&self) -> bool {
        // SAFETY: getpid has no preconditions.
        (unsafe { libc::getpid() } as u32) == self.owner
    }

    fn word(&self, i: usize) -> &AtomicU32 {
        assert!(i <= MAX_RANKS);
        // SAFETY: the mapping holds BYTES >= (MAX_RANKS + 1) * 4 bytes of page-aligned memory,
        // alive until drop, accessed only atomically (by every rank of the clique).
        unsafe { &*self.words.add(i) }
    }

    /// This rank no longer touches any peer's memory (and never will).
    pub fn close(&self) {
        if self.mine() {
            self.word(self.rank).store(CLOSED, Ordering::Release);
        }
    }

    /// No peer may still read this rank's memory: each is closed or gone. A peer that has not
    /// joined yet may still map what this rank published: it counts as open.
    pub fn peers_done(&self) -> bool {
        (0..self.pids.len()).filter(|&p| p != self.rank).all(|p| {
            self.word(p).load(Ordering::Acquire) == CLOSED || self.pids[p].is_some_and(|pid| !process_alive(pid))
        })
    }
}

/// The lease file's name in `/dev/shm` (rank 0's pid namespace, pid and nonce name the clique).
fn file_name(pidns0: u64, pid0: u32, nonce0: u64) -> String {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    format!("rcclx-{uid}-{pidns0:x}-{pid0}-{nonce0:016x}")
}

/// The size of the shared-memory object `name` (`/rcclx-...`), if it exists.
fn file_size(name: &CString) -> Option<u64> {
    let path = format!("/dev/shm{}", name.to_string_lossy());
    std::fs::metadata(path).ok().map(|m| m.len())
}

/// Removes this user's lease files of cliques whose rank 0 was a process of this pid namespace
/// that is gone (crashed, killed, or exited without destroying its communicators). A clique
/// whose rank 0 is gone can no longer finish its setup, and a set-up one has unlinked its file
/// already, so no live clique needs the name.
fn remove_stale() {
    let ns = super::host::pid_namespace();
    if ns == 0 {
        return; // pids say nothing without knowing our namespace
    }
    // SAFETY: getuid has no preconditions.
    let prefix = format!("rcclx-{}-{ns:x}-", unsafe { libc::getuid() });
    let Ok(dir) = std::fs::read_dir("/dev/shm") else { return };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(&prefix).and_then(|rest| rest.split('-').next()?.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !process_alive(pid) {
            tracing::info!("rcclx: removing /dev/shm/{name} (its process {pid} is gone)");
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.close();
        let everyone_done = self.mine() && self.peers_done();
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
    fn reused_only_when_every_peer_closed() {
        let me = std::process::id();
        let n = nonce();
        let ns = super::super::host::pid_namespace();
        let a = Lease::join(ns, me, n, 0, vec![Some(me), Some(me)]).unwrap();
        assert!(!a.peers_done(), "a live peer that has not joined yet may still map this rank's buffers");
        let b = Lease::join(ns, me, n, 1, vec![Some(me), Some(me)]).unwrap();
        assert!(!a.peers_done() && !b.peers_done());
        a.close();
        assert!(b.peers_done() && !a.peers_done());
        b.close();
        assert!(a.peers_done());
        let path = format!("/dev/shm/{}", file_name(ns, me, n));
        drop(a);
        drop(b);
        assert!(!std::path::Path::new(&path).exists(), "{path} left behind");
    }

    #[test]
    fn the_file_goes_when_the_last_live_rank_closes() {
        let me = std::process::id();
        let n = nonce();
        // Rank 1 is a process that died while open; rank 2 closed without mapping.
        let ns = super::super::host::pid_namespace();
        let a = Lease::join(ns, me, n, 0, vec![Some(me), Some(u32::MAX / 2), Some(me)]).unwrap();
        a.word(1).store(OPEN, Ordering::Release);
        a.word(2).store(CLOSED, Ordering::Release);
        let path = format!("/dev/shm/{}", file_name(ns, me, n));
        assert!(std::path::Path::new(&path).exists());
        drop(a);
        assert!(!std::path::Path::new(&path).exists(), "{path} left behind by the last live rank");
    }

    #[test]
    fn a_dead_peer_counts_as_done() {
        let me = std::process::id();
        let a = Lease::join(1, me, nonce(), 0, vec![Some(me), Some(u32::MAX / 2), None]).unwrap();
        // Mark the fake peer open by hand.
        a.word(1).store(OPEN, Ordering::Release);
        // A peer in another pid namespace: its pid says nothing here, so it is alive until it
        // closes (also before it joined: it may still map what this rank published).
        assert!(!a.peers_done());
        a.word(2).store(OPEN, Ordering::Release);
        assert!(!a.peers_done());
        a.word(2).store(CLOSED, Ordering::Release);
        assert!(a.peers_done());
        a.word(1).store(0, Ordering::Release);
        assert!(a.peers_done(), "the dead peer never joined: done");
        a.word(2).store(0, Ordering::Release);
    }

    #[test]
    fn a_full_dev_shm_is_an_error_not_a_sigbus() {
        let me = std::process::id();
        let n = nonce();
        let ns = super::super::host::pid_namespace();
        let e =
            Lease::join_with(ns, me, n, 0, vec![Some(me), Some(me)], true).err().expect("an injected ENOSPC joined");
        assert!(e.contains("No space left"), "{e}");
        assert!(!std::path::Path::new(&format!("/dev/shm/{}", file_name(ns, me, n))).exists());
    }

    #[test]
    fn files_of_dead_processes_are_removed() {
        let ns = super::super::host::pid_namespace();
        let dead = u32::MAX / 2 - 7;
        let stale = format!("/dev/shm/{}", file_name(ns, dead, 42));
        let live = format!("/dev/shm/{}", file_name(ns, 1, 43)); // pid 1 is alive
        std::fs::write(&stale, [0u8; 16]).unwrap();
        std::fs::write(&live, [0u8; 16]).unwrap();
        remove_stale();
        assert!(!std::path::Path::new(&stale).exists(), "{stale} of a dead process stayed");
        assert!(std::path::Path::new(&live).exists(), "{live} of a live process was removed");
        let _ = std::fs::remove_file(&live);
    }

    #[test]
    fn a_forked_child_leaves_the_parents_words_alone() {
        let me = std::process::id();
        let a = Lease::join(1, me, nonce(), 0, vec![Some(me), Some(me)]).unwrap();
        a.word(1).store(OPEN, Ordering::Release);
        // SAFETY: the child only calls async-signal-safe code paths (atomics, getpid, munmap)
        // before _exit.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // What a child's exit handlers would do (no allocation: a forked child of a
            // threaded process must not take the allocator's lock).
            a.close();
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(child, &mut status, 0) };
        assert_eq!(a.word(0).load(Ordering::Acquire), OPEN, "the child closed the parent's word");
        a.word(1).store(CLOSED, Ordering::Release);
    }
}
