//! 3-8 ranks on the GPUs present: communicators made without the stock library, so that several
//! ranks can share a GPU (the stock library refuses that), running rcclx's real peer layer
//! (`rcclx::clique`: staging, IPC or peer mappings, flags, LL inbox, lease), its real kernels
//! and its real per-call path (`rcclx::comm`: decision, plan, grid, windows, stream order,
//! statistics).
//!
//! * [`Placement`]: which GPU and which process each rank is on. Two layouts: `streams`, one
//!   process drives every rank, each on its own stream (kernels of ranks sharing a GPU run at
//!   once: fast, for the full matrix); `procs`, one process per rank (the IPC path; processes on
//!   one GPU are time-sliced, so every barrier costs milliseconds: fewer cases).
//! * [`FileTransport`]: the setup's all-gather through files in a directory that every rank's
//!   process can see (written whole, then renamed, so a reader never sees part of one).
//! * [`World`]: one process's ranks, set up with `rcclx::clique::Setup::with` and registered
//!   with `rcclx::comm::lifecycle::adopt` under handles of their own.
//!
//! Calls go through `rcclx::comm::collective` with a `forward` that fails: these communicators
//! have no stock counterpart, so a call rcclx would forward is an error the tests report.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcclx::clique::{Clique, Member, Setup, Sharing, Transport};
use rcclx::comm::{self, lifecycle};
use rcclx::error::Error;
use rcclx::gpu::{Runtime, Stream};
use rcclx::types::{ncclComm_t, ncclResult_t};

use crate::results::Fail;
use crate::watchdog;

/// How the processes of a run hold the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One process drives every rank, each on a stream of its own.
    Streams,
    /// One process per rank.
    Procs,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Streams => "streams",
            Layout::Procs => "procs",
        }
    }

    pub fn parse(s: &str) -> Option<Layout> {
        match s {
            "streams" => Some(Layout::Streams),
            "procs" => Some(Layout::Procs),
            _ => None,
        }
    }
}

/// Where each of `nranks` ranks runs: GPU `rank * gpus / nranks` (consecutive ranks share a
/// GPU, as on a node whose GPUs are numbered in rank order), process by `layout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub nranks: usize,
    pub gpus: usize,
    pub layout: Layout,
}

impl Placement {
    pub fn device(&self, rank: usize) -> i32 {
        (rank * self.gpus / self.nranks) as i32
    }

    /// The ranks of each process, in process order.
    pub fn processes(&self) -> Vec<Vec<usize>> {
        match self.layout {
            Layout::Streams => vec![(0..self.nranks).collect()],
            Layout::Procs => (0..self.nranks).map(|r| vec![r]).collect(),
        }
    }

    /// The most ranks on one GPU.
    pub fn ranks_per_gpu(&self) -> usize {
        (0..self.gpus).map(|g| (0..self.nranks).filter(|&r| self.device(r) == g as i32).count()).max().unwrap_or(0)
    }

    /// The setup's GPU sharing: allowed; and with ranks of one process sharing a GPU (their
    /// kernels run at once), every grid capped so that they fit on it together.
    pub fn sharing(&self, multiprocessors: u32) -> Sharing {
        let k = self.ranks_per_gpu() as u32;
        let grid_cap = match self.layout {
            Layout::Streams if k > 1 => (multiprocessors / k).max(1),
            _ => 0,
        };
        Sharing { shared_gpus: true, grid_cap, cap_per_rank: false }
    }

    /// `N ranks on G GPU(s), layout` for reports.
    pub fn describe(&self) -> String {
        format!(
            "{} ranks on {} GPU(s), {} per GPU at most, layout {}",
            self.nranks,
            self.gpus,
            self.ranks_per_gpu(),
            self.layout.name()
        )
    }
}

/// The setup's all-gather through files: round `k`'s part of rank `r` is `DIR/k.r`.
pub struct FileTransport {
    dir: PathBuf,
    /// The ranks of the members, in member order.
    ranks: Vec<usize>,
    nranks: usize,
    round: u32,
}

impl FileTransport {
    pub fn new(dir: &Path, ranks: Vec<usize>, nranks: usize) -> FileTransport {
        FileTransport { dir: dir.to_path_buf(), ranks, nranks, round: 0 }
    }

    fn path(&self, rank: usize) -> PathBuf {
        self.dir.join(format!("{}.{rank}", self.round))
    }
}

impl Transport for FileTransport {
    fn start(&mut self, parts: Vec<Vec<u8>>) -> Result<(), Error> {
        if parts.len() != self.ranks.len() {
            return Err(Error::internal(format!("{} parts for {} members", parts.len(), self.ranks.len())));
        }
        self.round += 1;
        for (&rank, bytes) in self.ranks.iter().zip(&parts) {
            let path = self.path(rank);
            // A name of this writer's own (`k.r` has no extension to replace: `with_extension`
            // would give every rank of a round the same temporary file).
            let tmp = self.dir.join(format!("{}.{rank}.{}.tmp", self.round, std::process::id()));
            std::fs::write(&tmp, bytes)
                .and_then(|_| std::fs::rename(&tmp, &path))
                .map_err(|e| Error::internal(format!("writing {}: {e}", path.display())))?;
        }
        Ok(())
    }

    fn poll(&mut self) -> Result<Option<Vec<Vec<u8>>>, Error> {
        let mut all = Vec::new();
        for rank in 0..self.nranks {
            match std::fs::read(self.path(rank)) {
                Ok(b) => all.extend(b),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(Error::internal(format!("reading {}: {e}", self.path(rank).display()))),
            }
        }
        Ok(Some(vec![all; self.ranks.len()]))
    }
}

/// A call rcclx would have forwarded: there is no stock communicator behind these handles.
pub const FORWARDED: ncclResult_t = ncclResult_t::InvalidUsage;

/// One process's ranks of a run.
pub struct World {
    pub placement: Placement,
    /// This process's ranks, their devices, communicators (rcclx's side-table keys) and streams.
    pub ranks: Vec<usize>,
    pub devices: Vec<i32>,
    pub comms: Vec<ncclComm_t>,
    pub streams: Vec<Stream>,
    pub cliques: Vec<Arc<Clique>>,
}

// SAFETY: the communicator handles are plain keys (never dereferenced); the cliques and streams
// are usable from any thread.
unsafe impl Send for World {}

impl World {
    /// Sets up `ranks` of `placement` in this process (all of them, or one per process), with
    /// the other processes' ranks through files in `dir`; gives up after `limit`.
    pub fn join(
        rt: &'static Runtime,
        placement: Placement,
        ranks: &[usize],
        dir: &Path,
        limit: Duration,
    ) -> Result<World, Fail> {
        let mps = rt.device_info(0).map_err(|e| Fail(format!("device 0: {e}")))?.multiprocessors;
        World::join_sharing(rt, placement, ranks, dir, limit, placement.sharing(mps))
    }

    /// [`World::join`] with a GPU sharing of the caller's (a smaller grid cap, so that the
    /// kernels of several worlds fit on the GPU together).
    pub fn join_sharing(
        rt: &'static Runtime,
        placement: Placement,
        ranks: &[usize],
        dir: &Path,
        limit: Duration,
        sharing: Sharing,
    ) -> Result<World, Fail> {
        let devices: Vec<i32> = ranks.iter().map(|&r| placement.device(r)).collect();
        // Handles of our own: unique addresses, never dereferenced.
        let comms: Vec<ncclComm_t> = ranks.iter().map(|_| Box::into_raw(Box::new(0u64)) as ncclComm_t).collect();
        let members = ranks
            .iter()
            .zip(&devices)
            .zip(&comms)
            .map(|((&rank, &device), &comm)| Member { comm, rank, nranks: placement.nranks, device, max_ctas: 0 })
            .collect();
        let transport = FileTransport::new(dir, ranks.to_vec(), placement.nranks);
        let mut setup = Setup::with(members, Box::new(transport), sharing).map_err(|e| Fail(format!("setup: {e}")))?;
        let deadline = Instant::now() + limit;
        let outcome = loop {
            watchdog::progress("world setup");
            match setup.poll() {
                Ok(Some(o)) => break o,
                Ok(None) if Instant::now() > deadline => {
                    return Err(Fail(format!(
                        "setup of ranks {ranks:?}: the other ranks did not answer within {} s",
                        limit.as_secs()
                    )));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(1)),
                Err(e) => return Err(Fail(format!("setup of ranks {ranks:?}: {e}"))),
            }
        };
        let mut cliques = Vec::new();
        for ((comm, clique), &rank) in outcome.into_iter().zip(ranks) {
            let Some(clique) = clique else {
                return Err(Fail(format!("rank {rank}: rcclx turned its kernels off (its log says why)")));
            };
            lifecycle::adopt(comm, Some(clique));
            let state = comm::lookup(comm).ok_or_else(|| Fail("adopted communicator not found".into()))?;
            cliques.push(state.clique().cloned().ok_or_else(|| Fail("adopted communicator has no clique".into()))?);
        }
        let streams = devices.iter().map(|&d| rt.create_stream(d)).collect::<Result<Vec<_>, _>>()?;
        Ok(World { placement, ranks: ranks.to_vec(), devices, comms, streams, cliques })
    }

    /// Destroys every communicator (`ncclCommDestroy`'s path: the memory goes to rcclx's
    /// pool once no kernel and no peer can touch it) and the streams.
    pub fn end(self, rt: &Runtime) {
        self.end_as(rt, false);
    }

    /// Ends every communicator as `ncclCommDestroy` (`abort` false) or `ncclCommAbort` does,
    /// then destroys the streams.
    pub fn end_as(self, rt: &Runtime, abort: bool) {
        for &c in &self.comms {
            lifecycle::ended(c, abort, || ncclResult_t::Success);
        }
        for (&c, &s) in self.comms.iter().zip(&self.streams) {
            // SAFETY: our own stream, not used afterwards.
            let _ = unsafe { rt.destroy_stream(s) };
            // SAFETY: made by Box::into_raw in `join`; the side table no longer holds it.
            drop(unsafe { Box::from_raw(c as *mut u64) });
        }
    }

    /// Tells every local rank's kernels to stop waiting (after a hang was reported).
    pub fn abort_kernels(&self) {
        self.cliques.iter().for_each(|c| c.request_abort());
    }
}

/// A fresh directory for one run's exchange files: `<tmp>/rcclx-world-<pid>-<tag>`.
pub fn fresh_dir(tag: &str) -> Result<PathBuf, Fail> {
    let dir = std::env::temp_dir().join(format!("rcclx-world-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_spreads_ranks_over_gpus_in_order() {
        let p = Placement { nranks: 8, gpus: 2, layout: Layout::Streams };
        assert_eq!((0..8).map(|r| p.device(r)).collect::<Vec<_>>(), [0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(p.ranks_per_gpu(), 4);
        assert_eq!(p.processes(), vec![(0..8).collect::<Vec<_>>()]);
        assert_eq!(p.sharing(132), Sharing { shared_gpus: true, grid_cap: 33, cap_per_rank: false });
        let q = Placement { nranks: 3, gpus: 2, layout: Layout::Procs };
        assert_eq!((0..3).map(|r| q.device(r)).collect::<Vec<_>>(), [0, 0, 1]);
        assert_eq!(q.ranks_per_gpu(), 2);
        assert_eq!(q.processes().len(), 3);
        assert_eq!(q.sharing(132).grid_cap, 0, "processes on one GPU are time-sliced: no cap needed");
        let one = Placement { nranks: 7, gpus: 1, layout: Layout::Streams };
        assert!((0..7).all(|r| one.device(r) == 0));
        assert_eq!(one.sharing(132).grid_cap, 18);
    }

    /// Every rank's bytes arrive at every member, in rank order, whatever the order of arrival;
    /// nothing is returned before the last rank's part is there.
    #[test]
    fn file_transport_gathers_across_threads_and_rounds() {
        let dir = fresh_dir("unit-threads").unwrap();
        let n = 8;
        // Ranks 0-1 in one "process" (two members), the others alone: all writing at once.
        let groups: Vec<Vec<usize>> = vec![vec![0, 1], vec![2], vec![3], vec![4], vec![5], vec![6], vec![7]];
        let results: Vec<Vec<Vec<Vec<u8>>>> = std::thread::scope(|s| {
            let hs: Vec<_> = groups
                .iter()
                .map(|g| {
                    let dir = dir.clone();
                    s.spawn(move || {
                        let mut t = FileTransport::new(&dir, g.clone(), n);
                        let mut rounds = Vec::new();
                        for round in 0..20u8 {
                            // The last rank is late: nobody may see a result before it writes.
                            if g[0] == 7 && round % 4 == 0 {
                                std::thread::sleep(Duration::from_millis(30));
                            }
                            t.start(g.iter().map(|&r| vec![r as u8, round, 7]).collect()).unwrap();
                            let deadline = Instant::now() + Duration::from_secs(20);
                            let got = loop {
                                if let Some(x) = t.poll().unwrap() {
                                    break x;
                                }
                                assert!(Instant::now() < deadline, "round {round}: a rank's part never arrived");
                                std::thread::sleep(Duration::from_millis(1));
                            };
                            assert_eq!(got.len(), g.len());
                            rounds.push(got[0].clone());
                            assert!(got.iter().all(|x| *x == got[0]));
                        }
                        rounds.into_iter().map(|r| vec![r]).collect::<Vec<_>>()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for per_group in results {
            for (round, got) in per_group.iter().enumerate() {
                let want: Vec<u8> = (0..n).flat_map(|r| [r as u8, round as u8, 7]).collect();
                assert_eq!(got[0], want);
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn file_transport_waits_for_missing_ranks() {
        let dir = fresh_dir("unit-missing").unwrap();
        let mut t = FileTransport::new(&dir, vec![1], 3);
        t.start(vec![vec![1, 2, 3, 4]]).unwrap();
        assert!(t.poll().unwrap().is_none(), "ranks 0 and 2 never wrote");
        assert!(t.start(vec![]).is_err(), "one part per member");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
