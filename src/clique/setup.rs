//! Setting up a clique, for a batch of communicators.
//!
//! Setup ([`Setup::start`], then [`Setup::poll`] until done; [`establish`] does both and waits):
//! 1. Each rank fills a [`record::Record`] (host, pid, device and its GPU's identity, arch,
//!    `Policies`): nothing is allocated yet. A rank that cannot take part (no kernels for its
//!    arch) still sends one, with `capable = 0`.
//! 2. An all-gather of the records through a [`Transport`]: the library's is `ncclAllGather` on
//!    the stock communicator, for all communicators of the batch in one stock group (one thread
//!    may own several ranks of a clique).
//! 3. From the records every rank computes the same verdict (one host, all capable, same arch
//!    and sizes, 2..=8 ranks, each on a GPU of its own unless the setup's [`Sharing`] allows
//!    otherwise). Only then does it allocate (so a communicator rcclx will not use costs no
//!    memory), and a second all-gather carries the records again with the buffers' IPC handles
//!    and pointers (`capable = 0`: this rank's allocation failed).
//! 4. With every rank's buffers, each rank joins the clique's lease (`lease.rs`) and maps its
//!    peers: raw pointers plus peer access for peers in its own process (IPC cannot open a handle
//!    in the process that made it), IPC for the others.
//! 5. A third exchange of "my mappings worked": the kernels are on iff they worked everywhere.
//!
//! [`Setup::with`] takes the members, the transport and the sharing explicitly: that is how a
//! test harness runs several ranks on one GPU (which the stock library refuses) through this
//! same setup and these same kernels (`gpu-tests/src/world.rs`).
//!
//! Every rank takes part in all three exchanges and reaches the same verdict: a local failure
//! (lease, allocation, mapping) travels as `capable = 0` or a "mapped" bit of 0, and every rank
//! turns the kernels off (every call forwards). An exchange that fails or a time limit that
//! passes ends [`Setup::poll`] with an error, which the caller turns into a communicator in
//! error; its peers time out into the same error. A rank that ends without a clique buries the
//! buffers whose handles it published (`teardown.rs`) and never frees anything.
//! The exchanges are the communicator's first operations on every rank (the caller makes sure
//! no user operation is issued before setup ends), so they never put ranks out of step.

use std::ffi::c_int;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::collective::Fabric;
use crate::error::Error;
use crate::gpu::{self, IpcMapping, MemKind};
use crate::intercept::{CommFacts, Policies};
use crate::types::{ncclComm_t, ncclResult_t};
use crate::upstream;

use super::args::{
    FLAG_STRIDE, KernelArgs, LL128_REGION_BYTES, MAX_COMM_RANKS, MAX_RANKS, THREADS, rail_scratch_bytes,
};
use super::exchange::{Member, StockTransport, Transport};
use super::host;
use super::lease::{self, Lease};
use super::live::{Clique, Kernel, Span};
use super::rail::{self, Rail};
use super::rankmap::RankMap;
use super::record::{self, Record};
use super::teardown::{self, Fence, Owned, Slab};

/// Default staging buffer per rank (`RCCL_DDA_SENDBUF_BYTES`), without and with a
/// low-precision switch on (larger windows halve its barriers per byte: +6-7 % at 256 MiB on
/// 2x H200; DDA gains nothing from them).
pub const DEFAULT_STAGING: u64 = 16 << 20;
pub const DEFAULT_STAGING_LOWP: u64 = 32 << 20;

/// 16-byte LL units per (parity, source) slot of an inbox for messages up to `ll_max` bytes.
fn ll_units(ll_max: u64) -> u64 {
    ll_max.div_ceil(8).max(1)
}

/// Whether the ranks of a clique may share a GPU. Every rank of a clique passes the same value
/// (the verdict turns the kernels off otherwise).
///
/// The library's communicators use the default: each rank on a GPU of its own, and a clique
/// with two ranks on one GPU gets no kernels (it forwards): the stock library refuses such
/// communicators itself, and rcclx's kernels spin on their peers, so ranks whose grids do not
/// all fit on the GPU at once could wait on each other forever. A harness that runs 3-8 ranks
/// on 1-2 GPUs sets `shared_gpus` and, when several ranks' kernels run at once on one GPU
/// (streams of one process), a `grid_cap` that makes their grids fit together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sharing {
    /// Ranks may sit on one GPU.
    pub shared_gpus: bool,
    /// Most blocks any kernel of the clique runs (0: no cap beyond the GPU's). With k ranks'
    /// grids on one GPU at once, `multiprocessors / k` guarantees they are all resident: no
    /// block is bigger than a multiprocessor, so that many blocks always find room.
    pub grid_cap: u32,
    /// The cap is [`per_rank_cap`] (replacing `grid_cap` once the GPU is known): all ranks may
    /// be on one GPU, their kernels running at once (processes under MPS).
    pub cap_per_rank: bool,
}

/// Every grid's cap when all `nranks` ranks may sit on one GPU as processes whose kernels run
/// at once (MPS): half a multiprocessor's share each, so all of them are resident together
/// with room to spare for the other kernels of those processes (their compute, the stock
/// library's). With the whole share (`multiprocessors / nranks`, what suffices for streams of
/// one process), low-precision AllReduce at 8 ranks waited forever under MPS while a DDP
/// backward ran (one H100, issue 46).
/// The grid cap `cap` (0: none) within NCCL's SM budget `max_ctas` (0: none).
fn within_budget(cap: u32, max_ctas: u32) -> u32 {
    match (cap, max_ctas) {
        (0, m) | (m, 0) => m,
        (c, m) => c.min(m),
    }
}

pub fn per_rank_cap(multiprocessors: u32, nranks: usize) -> u32 {
    (multiprocessors / (2 * nranks as u32)).max(1)
}

impl Sharing {
    /// The library's: each rank on a GPU of its own; with a simulated host
    /// (`RCCLX_SIM_HOSTID`), ranks of several processes on one GPU, every grid capped so that
    /// all of them fit on it at once.
    pub fn of_library(simulated: bool) -> Sharing {
        Sharing { shared_gpus: simulated, grid_cap: 0, cap_per_rank: simulated }
    }
}

/// This rank's part of a setup.
struct Local {
    member: Member,
    /// The kernels of its GPU (step 1), then its buffers (step 3).
    kernels: Option<Arc<Vec<Kernel>>>,
    res: Option<Slab>,
    /// Joined before this rank's handles were published (step 3).
    lease: Option<Lease>,
    /// Peers mapped so far (step 4).
    peers: Vec<IpcMapping>,
    /// Its buffers' handles went out with `capable = 1` and a peer may map them: they can only
    /// be buried (`teardown.rs`), never freed or pooled at once.
    published: bool,
    record: Record,
    fault: Fault,
    /// Where this rank sits once the first verdict held: its host's ranks form its clique.
    place: Option<Place>,
    /// Its rail (a communicator spanning hosts), being made, then made.
    splitting: Option<rail::Pending>,
    rail: Option<Rail>,
}

/// A rank's place in a communicator's [`RankMap`].
struct Place {
    map: RankMap,
    host: usize,
    local: usize,
}

impl Place {
    /// The records of this rank's host, by local index.
    fn host_records(&self, recs: &[Record]) -> Vec<Record> {
        self.map.host(self.host).iter().map(|&r| recs[r]).collect()
    }
}

impl Local {
    /// A rank at the start of its setup: nothing loaded, allocated, joined or mapped yet.
    fn new(member: Member, fault: Fault) -> Local {
        Local {
            member,
            kernels: None,
            res: None,
            lease: None,
            peers: Vec::new(),
            published: false,
            record: Record::zeroed(),
            fault,
            place: None,
            splitting: None,
            rail: None,
        }
    }
}

impl Drop for Local {
    /// A rank that ends its setup without a clique: buffers a peer may have mapped are buried
    /// (the lease says when every peer is done); unpublished ones go straight to the pool.
    /// Nothing is freed (a free waits for the whole device), whatever lock the caller holds.
    fn drop(&mut self) {
        if let Some(rail) = self.rail.take() {
            rail.end(false);
        }
        let peers = std::mem::take(&mut self.peers);
        let lease = self.lease.take();
        let Some(slab) = self.res.take() else { return };
        if self.published {
            teardown::bury(Owned { peers, lease, slab }, self.member.device, Fence::Ended, Arc::default());
        } else {
            drop((peers, lease));
            teardown::give_back(slab);
        }
    }
}

/// Every rank's buffers as this rank maps them.
struct Mapped {
    staging: [u64; MAX_RANKS],
    flags: [u64; MAX_RANKS],
    ll: [u64; MAX_RANKS],
}

/// Setup sites made to fail on purpose (`RCCLX_FAULT_INJECT=SITE[:RANK]`, tests only), one
/// per stage, each with the verdict every rank must reach.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fault {
    /// `describe`: this rank has no kernels (`capable = 0` in its first record): kernels off.
    describe: bool,
    /// `alloc`: its buffers cannot be allocated (`capable = 0` in the second): kernels off.
    alloc: bool,
    /// `lease`: its lease file cannot be reserved (a full `/dev/shm`): kernels off.
    lease: bool,
    /// `ipc`: opening a peer's IPC handle fails (its "mapped" bit is 0): kernels off.
    ipc: bool,
    /// `peer`: enabling peer access fails (its "mapped" bit is 0): kernels off.
    peer: bool,
    /// `split`: this rank takes no rail (`NCCL_SPLIT_NOCOLOR`; its "mapped" bit is 0): kernels
    /// off on every rank of a communicator spanning hosts.
    split: bool,
    /// `exchange1`..`exchange3`: that exchange cannot be posted (a stock error): the
    /// communicator is in error on this rank, and its peers time out into the same error.
    exchange: u8,
}

impl Fault {
    /// The sites, for messages.
    pub const SITES: &'static str = "describe, alloc, lease, ipc, peer, split, exchange1, exchange2, exchange3";

    /// The faults `RCCLX_FAULT_INJECT` asks for on `rank`: only in a build with the cargo
    /// feature `fault-inject` (the GPU test builds, `scripts/gpu-prep.sh`) and in unit tests;
    /// elsewhere the variable is ignored with a warning.
    fn from_config(spec: Option<&str>, rank: usize) -> Result<Fault, String> {
        #[cfg(any(test, feature = "fault-inject"))]
        {
            Fault::parse(spec, rank)
        }
        #[cfg(not(any(test, feature = "fault-inject")))]
        {
            let _ = rank;
            static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            if spec.is_some_and(|s| !s.trim().is_empty()) && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::warn!(
                    "RCCLX_FAULT_INJECT is ignored: this library was built without the test-only feature fault-inject"
                );
            }
            Ok(Fault::default())
        }
    }

    /// `SITE` or `SITE:RANK` (default: every rank), from the configuration read at startup
    /// (`Config::fault_inject`), applied to every setup of the process.
    /// An unknown site or rank is an error (a typo must not pass as a test without a fault).
    #[cfg_attr(not(any(test, feature = "fault-inject")), allow(dead_code))]
    pub fn parse(spec: Option<&str>, rank: usize) -> Result<Fault, String> {
        let mut f = Fault::default();
        let Some(spec) = spec.map(str::trim).filter(|s| !s.is_empty()) else { return Ok(f) };
        let (what, on) = match spec.split_once(':') {
            Some((w, r)) => match r.trim().parse::<usize>() {
                Ok(r) => (w.trim(), r == rank),
                Err(_) => return Err(format!("RCCLX_FAULT_INJECT={spec:?}: {r:?} is not a rank")),
            },
            None => (spec, true),
        };
        let mut known = true;
        let set = |flag: &mut bool| *flag = on;
        match what {
            "describe" => set(&mut f.describe),
            "alloc" => set(&mut f.alloc),
            "lease" => set(&mut f.lease),
            "ipc" => set(&mut f.ipc),
            "peer" => set(&mut f.peer),
            "split" => set(&mut f.split),
            "exchange1" => f.exchange = if on { 1 } else { 0 },
            "exchange2" => f.exchange = if on { 2 } else { 0 },
            "exchange3" => f.exchange = if on { 3 } else { 0 },
            _ => known = false,
        }
        if known {
            Ok(f)
        } else {
            Err(format!("RCCLX_FAULT_INJECT={spec:?}: no setup site {what:?} (sites: {})", Self::SITES))
        }
    }

    /// Fails posting exchange `n` (1..=3) when asked to.
    fn exchange(&self, n: u8) -> Result<(), Error> {
        if self.exchange == n {
            return Err(Error::new(
                ncclResult_t::SystemError,
                format!("RCCLX_FAULT_INJECT=exchange{n}: posting the exchange fails"),
            ));
        }
        Ok(())
    }
}

/// A batch of communicators being set up together (all owned by the calling thread).
pub struct Setup {
    locals: Vec<Local>,
    transport: Box<dyn Transport>,
    stage: Stage,
    started: Instant,
    /// No exchange is posted after this much time (`None`: no bound).
    limit: Option<Duration>,
}

enum Stage {
    /// Waiting for the records.
    Records,
    /// Waiting for the records with the buffers' handles.
    Handles,
    /// Waiting for the rails' splits (a communicator spanning hosts); rank 0's record and the
    /// pointers mapped, per member.
    Rails(Vec<Record>, Vec<Option<Mapped>>),
    /// Waiting for every rank's "mapped" bit; rank 0's record and the pointers mapped, per
    /// member.
    Verdicts(Vec<Record>, Vec<Option<Mapped>>),
    Done,
}

/// The outcome per communicator: its clique, or none (every call forwards).
pub type Outcome = Vec<(ncclComm_t, Option<Clique>)>;

/// The code of a setup that ran past its limit.
pub const TIMED_OUT: ncclResult_t = ncclResult_t::RemoteError;

/// Whether a setup could not start because the stock library lacks a call it needs (the same
/// library, so the same answer, on every rank).
pub fn lacks_stock_calls(e: &Error) -> bool {
    e.code == ncclResult_t::InvalidUsage && e.what.starts_with("stock library lacks")
}

impl Setup {
    /// Starts setting up `comms`, whose stock initialisation is complete, through the stock
    /// communicators: issues the record exchange. Never blocks on a peer. `Err`: nothing was
    /// posted. Communicators of a size rcclx cannot serve (one rank, more than
    /// [`MAX_COMM_RANKS`]) take no part: that is the same on every one of their ranks, so all of them
    /// forward without an exchange; they come back at once as the second value (no clique), and
    /// the setup is `None` when no communicator is left.
    pub fn start(comms: &[(ncclComm_t, u32)]) -> Result<(Option<Setup>, Outcome), Error> {
        let all = comms.iter().map(|&(c, max_ctas)| query(c, max_ctas)).collect::<Result<Vec<_>, _>>()?;
        let (members, others): (Vec<Member>, Vec<Member>) =
            all.into_iter().partition(|m| (2..=MAX_COMM_RANKS).contains(&m.nranks));
        let forward = others.iter().map(|m| (m.comm, None)).collect();
        if members.is_empty() {
            return Ok((None, forward));
        }
        let transport = StockTransport::new(&members);
        let simulated = host::simulated_host(crate::config::get().sim_hostid.as_deref()).is_some();
        if simulated {
            warn_simulated_once();
        }
        Ok((Some(Setup::with(members, Box::new(transport), Sharing::of_library(simulated))?), forward))
    }

    /// Starts setting up `members` (ranks of one or more cliques, all driven by the calling
    /// thread), exchanging through `transport`, with `sharing`. Never blocks on a peer. `Err`:
    /// nothing was posted.
    pub fn with(members: Vec<Member>, mut transport: Box<dyn Transport>, sharing: Sharing) -> Result<Setup, Error> {
        let cfg = crate::config::get();
        let identity = host::Identity::of_process(cfg.sim_hostid.as_deref());
        let mut locals = Vec::new();
        for member in members {
            crate::log::set_device(member.device);
            let fault = Fault::from_config(cfg.fault_inject.as_deref(), member.rank)
                .map_err(|e| Error::new(ncclResult_t::InvalidArgument, e))?;
            let mut l = Local::new(member, fault);
            describe(&mut l, identity, sharing);
            locals.push(l);
        }
        for l in &locals {
            l.fault.exchange(1)?;
        }
        transport.start(locals.iter().map(|l| l.record.as_bytes().to_vec()).collect())?;
        Ok(Setup { locals, transport, stage: Stage::Records, started: Instant::now(), limit: None })
    }

    /// No exchange is posted after `limit` from the start, and [`Setup::poll`] then fails with
    /// [`TIMED_OUT`].
    pub fn set_limit(&mut self, limit: Option<Duration>) {
        self.limit = limit;
    }

    fn expired(&self) -> bool {
        self.limit.is_some_and(|l| self.started.elapsed() > l)
    }

    fn timed_out(&self) -> Error {
        Error::new(TIMED_OUT, format!("no answer from every peer within {:?}", self.limit.unwrap_or_default()))
    }

    /// Advances the setup without blocking; the outcome once every exchange has arrived.
    ///
    /// Every rank takes part in all three exchanges, whatever it found (a local failure is a
    /// `capable = 0` or a "mapped" bit of 0, so every rank reaches the same verdict). `Err`: an
    /// exchange could not be posted or failed, or the limit passed before one arrived: the
    /// caller fails the communicators (their peers time out the same way); buffers whose
    /// handles were published are buried, never freed.
    pub fn poll(&mut self) -> Result<Option<Outcome>, Error> {
        loop {
            match &mut self.stage {
                Stage::Records => {
                    let Some(recs) = self.gathered()? else { return self.waiting() };
                    for (l, recs) in self.locals.iter_mut().zip(&recs) {
                        match record::verdict(l.member.nranks, recs) {
                            Ok(map) => {
                                let (host, local) = map.place(l.member.rank);
                                l.place = Some(Place { map, host, local });
                                allocate_for(l, recs)
                            }
                            Err(why) => {
                                let (comm, rank) = (l.member.comm, l.member.rank);
                                // Simulated hosts that do not hold are a test rig set up wrong.
                                if record::simulated(recs) {
                                    tracing::warn!(
                                        "comm {comm:p} rank {rank}: rcclx kernels off, every call forwards: {why}"
                                    );
                                } else {
                                    tracing::info!("comm {comm:p} rank {rank}: rcclx kernels off: {why}");
                                }
                                l.record.capable = 0;
                            }
                        }
                    }
                    if self.expired() {
                        return Err(self.timed_out());
                    }
                    for l in &mut self.locals {
                        l.fault.exchange(2)?;
                        l.published = l.res.is_some() && l.record.capable == 1;
                    }
                    self.transport.start(self.locals.iter().map(|l| l.record.as_bytes().to_vec()).collect())?;
                    self.stage = Stage::Handles;
                }
                Stage::Handles => {
                    let Some(recs) = self.gathered()? else { return self.waiting() };
                    let mapped: Vec<Option<Mapped>> =
                        self.locals.iter_mut().zip(&recs).map(|(l, r)| map_clique(l, r)).collect();
                    start_rails(&mut self.locals, &recs);
                    let rank0 = recs.iter().map(|r| r[0]).collect();
                    self.stage = Stage::Rails(rank0, mapped);
                }
                Stage::Rails(..) => {
                    for l in &mut self.locals {
                        if let Some(p) = l.splitting.as_mut() {
                            match p.poll() {
                                None => return self.waiting(),
                                Some(rail) => {
                                    l.rail = rail;
                                    l.splitting = None;
                                }
                            }
                        }
                    }
                    if self.expired() {
                        return Err(self.timed_out());
                    }
                    let Stage::Rails(rank0, mapped) = &mut self.stage else { unreachable!() };
                    for l in &self.locals {
                        l.fault.exchange(3)?;
                    }
                    // Mapped, and holding its rail where the communicator spans hosts.
                    let ok = |(l, m): (&Local, &Option<Mapped>)| {
                        m.is_some() && (l.rail.is_some() || l.place.as_ref().is_none_or(|p| p.map.hosts() == 1))
                    };
                    let bits =
                        self.locals.iter().zip(mapped.iter()).map(|x| (ok(x) as u64).to_ne_bytes().to_vec()).collect();
                    self.transport.start(bits)?;
                    self.stage = Stage::Verdicts(std::mem::take(rank0), std::mem::take(mapped));
                }
                Stage::Verdicts(rank0, mapped) => {
                    let Some(oks) = self.transport.poll()? else { return self.waiting() };
                    let rank0 = std::mem::take(rank0);
                    let mapped = std::mem::take(mapped);
                    self.stage = Stage::Done;
                    let locals = std::mem::take(&mut self.locals);
                    let mut out = Vec::new();
                    for (((l, m), ok), r0) in locals.into_iter().zip(mapped).zip(oks).zip(rank0) {
                        let all_ok = ok.len() == 8 * l.member.nranks && ok.chunks(8).all(|c| c.iter().any(|&b| b != 0));
                        let comm = l.member.comm;
                        let clique = match (all_ok, m) {
                            (true, Some(m)) => Some(assemble(l, m, &r0, self.started)),
                            _ => {
                                if r0.simulated == 1 && r0.capable == 1 {
                                    // The verdict held: RCCLX_SIM_HOSTID joined ranks that cannot map each
                                    // other, or a rank has no rail.
                                    tracing::warn!(
                                        "comm {comm:p}: rcclx kernels off, every call forwards: a rank could not map \
                                         its peers or take its rail, though RCCLX_SIM_HOSTID puts them on simulated hosts"
                                    );
                                } else {
                                    tracing::info!(
                                        "comm {comm:p}: rcclx kernels off (a rank could not map its peers or take its rail)"
                                    );
                                }
                                None // `l` is dropped: its published buffers are buried
                            }
                        };
                        out.push((comm, clique));
                    }
                    return Ok(Some(out));
                }
                Stage::Done => return Err(Error::internal("setup polled after it finished")),
            }
        }
    }

    /// An exchange is still in flight: `Ok(None)`, or the timeout once the limit passed.
    fn waiting(&self) -> Result<Option<Outcome>, Error> {
        if self.expired() { Err(self.timed_out()) } else { Ok(None) }
    }

    /// Every member's gathered records, once the exchange has arrived.
    fn gathered(&mut self) -> Result<Option<Vec<Vec<Record>>>, Error> {
        let Some(gathered) = self.transport.poll()? else { return Ok(None) };
        if gathered.len() != self.locals.len()
            || gathered.iter().zip(&self.locals).any(|(g, l)| g.len() != record::BYTES * l.member.nranks)
        {
            return Err(Error::internal("the record exchange returned the wrong number of bytes"));
        }
        Ok(Some(gathered.iter().map(|g| Record::all(g)).collect()))
    }

    /// Drops `comm` from the batch (it was aborted): the others go on without it, its buffers
    /// are buried (a peer may have mapped them). `false`: the transport cannot drop a member of
    /// an exchange in flight (then the batch must end).
    pub fn drop_member(&mut self, comm: ncclComm_t) -> bool {
        let Some(i) = self.locals.iter().position(|l| l.member.comm == comm) else { return true };
        // A split in flight writes its child later: the batch ends instead.
        if self.locals[i].splitting.is_some() || !self.transport.drop_member(i) {
            return false;
        }
        // Aborted (or destroyed) during setup: its rail is aborted, never waited for.
        if let Some(rail) = self.locals[i].rail.take() {
            rail.end(true);
        }
        drop(self.locals.remove(i));
        if let Stage::Verdicts(rank0, mapped) | Stage::Rails(rank0, mapped) = &mut self.stage {
            rank0.remove(i);
            mapped.remove(i);
        }
        if self.locals.is_empty() {
            self.stage = Stage::Done;
        }
        true
    }

    /// How long ago the setup started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The communicators of this batch.
    pub fn comms(&self) -> Vec<ncclComm_t> {
        self.locals.iter().map(|l| l.member.comm).collect()
    }
}

/// Runs `setup` to its end, polling. Every communicator forwards when `stop` says so (the
/// communicator was aborted). `Err` when the setup failed or `limit` passed first (a peer that
/// died, or one without rcclx, never answers): the caller fails the communicators.
pub fn establish(mut setup: Setup, stop: impl Fn() -> bool, limit: Option<Duration>) -> Result<Outcome, Error> {
    let comms = setup.comms();
    setup.set_limit(limit);
    let mut nap = Duration::from_micros(20);
    loop {
        match setup.poll()? {
            Some(out) => return Ok(out),
            None if stop() => return Ok(comms.into_iter().map(|c| (c, None)).collect()),
            None => {
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(1));
            }
        }
    }
}

/// Rank, size and device of `comm`, from the stock library; its SM budget is the caller's.
fn query(comm: ncclComm_t, max_ctas: u32) -> Result<Member, Error> {
    let u = upstream::get().map_err(|code| Error::new(code, "no stock library"))?;
    let (Some(count), Some(user_rank), Some(cu_device)) =
        (u.fns.ncclCommCount, u.fns.ncclCommUserRank, u.fns.ncclCommCuDevice)
    else {
        return Err(Error::new(ncclResult_t::InvalidUsage, "stock library lacks comm queries"));
    };
    let (mut n, mut r, mut d): (c_int, c_int, c_int) = (0, 0, 0);
    // SAFETY: valid communicator handle and out-pointers to locals.
    Error::check("ncclCommCount", upstream::guarded(|| unsafe { count(comm, &mut n) }))?;
    // SAFETY: as above.
    Error::check("ncclCommUserRank", upstream::guarded(|| unsafe { user_rank(comm, &mut r) }))?;
    // SAFETY: as above.
    Error::check("ncclCommCuDevice", upstream::guarded(|| unsafe { cu_device(comm, &mut d) }))?;
    Ok(Member { comm, rank: r as usize, nranks: n as usize, device: d, max_ctas })
}

/// The fabric between this process's GPUs, as the default crossovers see it: NVLink through
/// NVSwitch on NVIDIA, AMD's point-to-point xGMI mesh on HIP (`collective::Fabric`).
pub fn local_fabric() -> Fabric {
    match gpu::runtime().map(|rt| rt.vendor()) {
        Ok(gpu::Vendor::Hip) => Fabric::Mesh,
        _ => Fabric::Switch,
    }
}

/// The one WARN of a process whose host is simulated: what `RCCLX_SIM_HOSTID` does.
fn warn_simulated_once() {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            "RCCLX_SIM_HOSTID={:?} (a simulation setting): rcclx groups ranks into hosts by this id, not by \
             NCCL_HOSTID or the host name as the stock library does, and lets ranks of several processes share \
             one GPU (every grid capped at half of multiprocessors / ranks). Ranks that disagree or cannot map each \
             other's memory forward. Not for real clusters",
            crate::config::get().sim_hostid.as_deref().unwrap_or_default()
        )
    });
}

/// Fills this rank's record (step 1; capable = 0 when it cannot take part). Allocates nothing.
fn describe(l: &mut Local, identity: host::Identity, sharing: Sharing) {
    let cfg = crate::config::get();
    let m = l.member;
    let rec = &mut l.record;
    rec.magic = record::MAGIC;
    rec.host = identity.host;
    rec.machine = identity.machine;
    rec.simulated = identity.simulated as u32;
    rec.nonce = lease::nonce();
    rec.pid = std::process::id();
    rec.pidns = host::pid_namespace();
    rec.device = m.device;
    rec.max_blocks = cfg.dda_max_blocks;
    rec.shared_gpus = sharing.shared_gpus as u32;
    rec.grid_cap = sharing.grid_cap;
    let policies = Policies::for_comm(&cfg.with_lowp_now(), m.nranks, local_fabric());
    rec.policies = policies;
    rec.timeout_ms = cfg.timeout_ms;
    let staging =
        cfg.dda_sendbuf_bytes.unwrap_or(if policies.any_lowp() { DEFAULT_STAGING_LOWP } else { DEFAULT_STAGING });
    rec.staging_bytes = staging;
    if !(2..=MAX_COMM_RANKS).contains(&m.nranks) {
        return; // rcclx cannot serve this communicator: nothing to learn about the GPU
    }
    if l.fault.describe {
        tracing::warn!("comm {:p} rank {}: RCCLX_FAULT_INJECT=describe: no kernels for this GPU", m.comm, m.rank);
        return;
    }
    let described = gpu::runtime().map_err(Error::from).and_then(|rt| {
        let info = rt.device_info(m.device)?;
        let kernels = device_kernels(m.device)?;
        Ok((info, kernels))
    });
    match described {
        Ok((info, kernels)) => {
            let n = info.arch.len().min(31);
            rec.arch[..n].copy_from_slice(&info.arch.as_bytes()[..n]);
            rec.multiprocessors = info.multiprocessors as u64;
            if sharing.cap_per_rank {
                rec.grid_cap = per_rank_cap(info.multiprocessors, m.nranks);
            }
            rec.grid_cap = within_budget(rec.grid_cap, m.max_ctas);
            if let Some(tuned) = cfg.tuning.limits_for(&info.name, m.nranks) {
                rec.policies = policies.tuned(cfg, tuned); // rank 0's are adopted by every rank
            }
            rec.gpu = host::gpu_id(&info.pci_bus_id);
            rec.capable = 1;
            l.kernels = Some(kernels);
        }
        Err(e) => {
            tracing::warn!("comm {:p} rank {}: rcclx kernels unavailable, forwarding every call: {e}", m.comm, m.rank)
        }
    }
}

/// Once the verdict holds (step 3): joins the clique's lease and allocates this rank's buffers,
/// and puts their handles and pointers in its record; `capable = 0` when either fails (then
/// nobody maps anything: the buffers go back to the pool when the setup ends).
fn allocate_for(l: &mut Local, recs: &[Record]) {
    let m = l.member;
    l.record.capable = 0;
    let Some(place) = &l.place else { return };
    let host = place.host_records(recs);
    let local = place.local;
    // Low precision across hosts stages its codes in a buffer of its own.
    let scratch = if place.map.hosts() > 1 && recs[0].policies.of(crate::intercept::Coll::AllReduce).lowp != 0 {
        rail_scratch_bytes()
    } else {
        0
    };
    // A peer's pid says whether it is alive only inside our pid namespace.
    let pids = record::visible_pids(&host, &host[local]);
    match Lease::join_with(host[0].pidns, host[0].pid, host[0].nonce, local, pids, l.fault.lease) {
        Ok(lease) => l.lease = Some(lease),
        Err(e) => {
            tracing::warn!("comm {:p} rank {}: rcclx kernels off: no lease ({e})", m.comm, m.rank);
            return;
        }
    }
    if l.fault.alloc {
        tracing::warn!("comm {:p} rank {}: RCCLX_FAULT_INJECT=alloc: allocation fails", m.comm, m.rank);
        return;
    }
    let rec = &mut l.record;
    match allocate(m.device, rec.staging_bytes as usize, rec.max_blocks, rec.policies.ll_max, scratch) {
        Ok(res) => {
            match (res.staging.ipc_handle(), res.flags.ipc_handle(), res.ll.ipc_handle()) {
                (Ok(s), Ok(f), Ok(ll)) => {
                    rec.staging_ipc = s.0;
                    rec.flags_ipc = f.0;
                    rec.ll_ipc = ll.0;
                }
                (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                    tracing::info!("rank {}: no IPC handle ({e}); peers in other processes cannot map it", m.rank);
                }
            }
            rec.staging_ptr = res.staging.ptr().0;
            rec.flags_ptr = res.flags.ptr().0;
            rec.ll_ptr = res.ll.ptr().0;
            rec.capable = 1;
            l.res = Some(res);
        }
        Err(e) => {
            tracing::warn!("comm {:p} rank {}: rcclx kernels unavailable, forwarding every call: {e}", m.comm, m.rank)
        }
    }
}

/// Blocks of `THREADS` threads a multiprocessor holds at most (2048 threads on sm_90 and on
/// CDNA3's compute units): the flag and window-counter arrays have room for that many per
/// multiprocessor.
const MAX_BLOCKS_PER_MULTIPROCESSOR: u64 = 4;

/// Entries of the per-block arrays: room for the DDA grid cap and for every multiprocessor full.
fn block_slots(max_blocks: u64, multiprocessors: u64) -> u64 {
    max_blocks.max(multiprocessors * MAX_BLOCKS_PER_MULTIPROCESSOR)
}

/// The kernels of the device's code object, resolved once per device.
fn device_kernels(device: i32) -> Result<Arc<Vec<Kernel>>, gpu::Error> {
    static CACHE: Mutex<Vec<(i32, Arc<Vec<Kernel>>)>> = Mutex::new(Vec::new());
    let mut cache = CACHE.lock();
    if let Some((_, k)) = cache.iter().find(|(d, _)| *d == device) {
        return Ok(k.clone());
    }
    let rt = gpu::runtime()?;
    let _guard = rt.device_guard(device)?;
    let module = rt.load_rcclx_module(device)?;
    let kernel = |name: String| -> Result<Kernel, gpu::Error> {
        let func = rt.function(module, &name)?;
        let per_mp = rt.blocks_per_multiprocessor(func, THREADS)?;
        Ok(Kernel { func, blocks_per_multiprocessor: per_mp.min(MAX_BLOCKS_PER_MULTIPROCESSOR as u32) })
    };
    let kernels = Arc::new(crate::kernel_table::kernel_names().map(kernel).collect::<Result<Vec<_>, _>>()?);
    cache.push((device, kernels.clone()));
    Ok(kernels)
}

/// This rank's buffers: an ended clique's of the same sizes, or new ones.
fn allocate(
    device: i32,
    staging_bytes: usize,
    max_blocks: u64,
    ll_max: u64,
    scratch_bytes: usize,
) -> Result<Slab, gpu::Error> {
    let rt = gpu::runtime()?;
    let info = rt.device_info(device)?;
    let slots = block_slots(max_blocks, info.multiprocessors as u64) as usize;
    // LL inbox: [2 parities][MAX_RANKS sources][units] x 16 bytes, then the LL128 region
    // (`hip_kernels/ll128.cuh`: counters and rings, the same size whatever the message sizes).
    let ll_bytes = 2 * MAX_RANKS as u64 * ll_units(ll_max) * 16 + LL128_REGION_BYTES;
    let sizes = [staging_bytes, slots * FLAG_STRIDE * 4, ll_bytes as usize, slots * 4, scratch_bytes];
    if let Some(slab) = teardown::reuse(device, sizes) {
        return Ok(slab);
    }
    // A failure part-way keeps (leaks) what was allocated: a free waits for the whole device,
    // and a setup may run under the lock every destroy and abort takes (`comm::lifecycle`).
    use std::mem::ManuallyDrop as Kept;
    // Uncached on AMD like the flags: peers read and write it (docs/memory-model.md).
    let staging = Kept::new(rt.alloc(device, sizes[0], MemKind::Uncached)?);
    let flags = Kept::new(rt.alloc(device, sizes[1], MemKind::Uncached)?);
    let ll = Kept::new(rt.alloc(device, sizes[2], MemKind::Uncached)?);
    let seq = Kept::new(rt.alloc(device, sizes[3], MemKind::Normal)?);
    flags.zero()?;
    ll.zero()?;
    seq.zero()?;
    // Only this rank's kernels and the stock library read it: not shared, cached.
    let scratch =
        if scratch_bytes > 0 { Some(Kept::new(rt.alloc(device, scratch_bytes, MemKind::Normal)?)) } else { None };
    let status = rt.alloc_host_mapped(device, 64)?;
    let [staging, flags, ll, seq] = [staging, flags, ll, seq].map(Kept::into_inner);
    Ok(Slab { staging, flags, ll, seq, scratch: scratch.map(Kept::into_inner), status })
}

/// Step 4, given every rank's record with its buffers: the peer mappings (kept in `l`).
/// `None`: kernels off.
fn map_clique(l: &mut Local, recs: &[Record]) -> Option<Mapped> {
    let m = l.member;
    // Every rank that will ever join the lease has (before it posted these records): nobody
    // opens the file again.
    if let Some(lease) = &l.lease {
        lease.unlink();
    }
    // No buffers: the verdict did not hold, or this rank's allocation failed (both logged).
    if let Some(p) = recs.iter().position(|r| r.capable == 0) {
        if l.res.is_some() {
            tracing::info!(
                "comm {:p} rank {}: rcclx kernels off: rank {p} could not allocate its buffers",
                m.comm,
                m.rank
            );
        }
        // Every rank sees the same records: nobody maps anything, so nothing was published.
        l.published = false;
        return None;
    }
    l.res.as_ref()?;
    let place = l.place.as_ref()?;
    let (host, local) = (place.host_records(recs), place.local);
    // The mappings opened stay with `l` even if a later one fails: a rank without a clique
    // buries them with its buffers (closed by the reaper, outside any lock of setup's).
    let mut peers = std::mem::take(&mut l.peers);
    let mapped = map_peers(l, &host, local, &mut peers);
    l.peers = peers;
    match mapped {
        Ok((staging, flags, ll)) => Some(Mapped { staging, flags, ll }),
        Err(e) => {
            tracing::info!("comm {:p} rank {}: rcclx kernels off: {e}", m.comm, m.rank);
            None
        }
    }
}

type PeerPtrs = ([u64; MAX_RANKS], [u64; MAX_RANKS], [u64; MAX_RANKS]);

/// Maps the staging buffer, flags and LL inbox of every peer of this rank's host (`recs`, by
/// local index; this rank's is `rank`) into this process; each mapping goes to `maps` as soon
/// as it is open.
fn map_peers(l: &Local, recs: &[Record], rank: usize, maps: &mut Vec<IpcMapping>) -> Result<PeerPtrs, Error> {
    let rt = gpu::runtime()?;
    let device = l.member.device;
    let me = &recs[rank];
    let (mut staging, mut flags, mut ll) = ([0u64; MAX_RANKS], [0u64; MAX_RANKS], [0u64; MAX_RANKS]);
    for (p, r) in recs.iter().enumerate() {
        if p == rank || record::same_process(r, me) {
            // Same process (ncclCommInitAll, threads, nccl-tests -g N): raw pointers.
            if r.device != device {
                if l.fault.peer {
                    return Err(Error::internal("RCCLX_FAULT_INJECT=peer: peer access fails"));
                }
                rt.enable_peer_access(device, r.device)?;
            }
            staging[p] = r.staging_ptr;
            flags[p] = r.flags_ptr;
            ll[p] = r.ll_ptr;
        } else {
            if l.fault.ipc {
                return Err(Error::internal("RCCLX_FAULT_INJECT=ipc: opening an IPC handle fails"));
            }
            let open = |ipc: [u8; 64]| {
                rt.open_ipc(device, &gpu::IpcHandle(ipc)).inspect_err(|e| {
                    if let Some(why) = record::same_pid_refusal(e, me, p, r) {
                        tracing::warn!("comm {:p} rank {rank}: {why}", l.member.comm);
                    }
                })
            };
            for (ipc, ptrs) in [(r.staging_ipc, &mut staging), (r.flags_ipc, &mut flags), (r.ll_ipc, &mut ll)] {
                let mapping = open(ipc)?;
                ptrs[p] = mapping.ptr().0;
                maps.push(mapping);
            }
        }
    }
    Ok((staging, flags, ll))
}

/// Step 4b, for the members whose communicator spans hosts: their rails' splits, in one stock
/// group (one thread may own several ranks). Every rank of such a communicator splits (the
/// verdict and the second records are the same everywhere), also one that could not map its
/// peers: the split is collective over the whole communicator. A rank whose fault says so
/// takes no rail (`NCCL_SPLIT_NOCOLOR`), and the third exchange turns the kernels off.
fn start_rails(locals: &mut [Local], recs: &[Vec<Record>]) {
    let mut splits = Vec::new();
    let mut who = Vec::new();
    for (i, (l, recs)) in locals.iter().zip(recs).enumerate() {
        let Some(p) = &l.place else { continue };
        if p.map.hosts() == 1 || recs.iter().any(|r| r.capable == 0) {
            continue;
        }
        if l.fault.split {
            tracing::warn!("comm {:p} rank {}: RCCLX_FAULT_INJECT=split: no rail", l.member.comm, l.member.rank);
        }
        splits.push((l.member.comm, (!l.fault.split).then_some(p.local), p.host));
        who.push(i);
    }
    if splits.is_empty() {
        return;
    }
    // A stock library without ncclCommSplit is the same on every rank: none splits. Any other
    // failure leaves this rank without its rails, and the third exchange turns the kernels off.
    match rail::split(&splits) {
        Ok(pending) => who.into_iter().zip(pending).for_each(|(i, p)| locals[i].splitting = Some(p)),
        Err(e) => tracing::warn!("rcclx: no rails ({e}); communicators spanning hosts forward"),
    }
}

/// The clique of a rank whose every peer mapped everything.
fn assemble(mut l: Local, m: Mapped, r0: &Record, started: Instant) -> Clique {
    let res = l.res.take().expect("a rank that mapped its peers has its buffers");
    let kernels = l.kernels.take().expect("a rank with buffers has its kernels");
    let (peers, lease) = (std::mem::take(&mut l.peers), l.lease.take());
    let place = l.place.take().expect("a rank with buffers has its place");
    let span = Span {
        comm_rank: l.member.rank,
        comm_nranks: l.member.nranks,
        hosts: place.map.hosts(),
        host: place.host,
        rail: parking_lot::RwLock::new(l.rail.take()),
        scratch: res.scratch.as_ref().map_or((0, 0), |b| (b.ptr().0, b.len() as u64)),
    };
    let (comm, device) = (l.member.comm, l.member.device);
    let (rank, nranks) = (place.local, place.map.host(place.host).len());
    let slots = block_slots(r0.max_blocks, r0.multiprocessors);
    // Every rank's grid of a call must be the same: the cap is agreed (the verdict checked it).
    let grid_cap = r0.grid_cap;
    let max_blocks = if grid_cap > 0 { r0.max_blocks.min(u64::from(grid_cap)) } else { r0.max_blocks };
    let facts = CommFacts { nranks, hosts: span.hosts, policies: r0.policies };
    let base_args = KernelArgs {
        send: 0,
        recv: 0,
        count: 0,
        window_elems: 0,
        half_bytes: r0.staging_bytes / 2,
        timeout_ns: if r0.timeout_ms == 0 { u64::MAX } else { r0.timeout_ms.saturating_mul(1_000_000) },
        staging: m.staging,
        flags: m.flags,
        ll: m.ll,
        seq: res.seq.ptr().0,
        status: res.status.device_ptr().0,
        ll_units: ll_units(r0.policies.ll_max),
        seq_slots: slots,
        rank: rank as i32,
        nranks: nranks as i32,
        root: 0,
        pad: 0,
    };
    let across = if span.hosts > 1 {
        format!(
            ", rank {} of {}: host {} of {} x {nranks} ranks, rail of {}",
            span.comm_rank, span.comm_nranks, span.host, span.hosts, span.hosts
        )
    } else {
        String::new()
    };
    tracing::info!(
        "comm {comm:p} rank {rank}/{nranks} device {device}: rcclx kernels on (staging {} B, {max_blocks} blocks max{}{across}) in {:?}",
        r0.staging_bytes,
        if grid_cap > 0 { format!(", every grid at most {grid_cap} blocks") } else { String::new() },
        started.elapsed()
    );
    Clique {
        rank,
        nranks,
        device,
        facts,
        max_blocks: max_blocks as u32,
        multiprocessors: r0.multiprocessors as u32,
        block_slots: slots as u32,
        grid_cap,
        base_args,
        kernels,
        owned: Mutex::new(Some(Owned { peers, lease, slab: res })),
        span,
        graphs: Arc::default(),
        launched: std::sync::atomic::AtomicBool::new(false),
    }
}

#[cfg(test)]
impl Setup {
    /// [`Setup::with`] with `fault` on every member instead of `RCCLX_FAULT_INJECT`.
    fn with_fault(
        members: Vec<Member>,
        mut transport: Box<dyn Transport>,
        fault: Fault,
        limit: Option<Duration>,
    ) -> Result<Setup, Error> {
        let mut locals = Vec::new();
        for member in members {
            let mut l = Local::new(member, fault);
            describe(&mut l, host::Identity::of_process(None), Sharing::default());
            locals.push(l);
        }
        fault.exchange(1)?;
        transport.start(locals.iter().map(|l| l.record.as_bytes().to_vec()).collect())?;
        Ok(Setup { locals, transport, stage: Stage::Records, started: Instant::now(), limit })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn the_sm_budget_caps_the_grid_cap() {
        assert_eq!(within_budget(0, 0), 0);
        assert_eq!(within_budget(0, 24), 24);
        assert_eq!(within_budget(16, 0), 16);
        assert_eq!(within_budget(16, 24), 16);
        assert_eq!(within_budget(16, 8), 8);
    }

    /// An all-gather whose peers never answer (they died, or run without rcclx).
    struct Silent;
    impl Transport for Silent {
        fn start(&mut self, _: Vec<Vec<u8>>) -> Result<(), Error> {
            Ok(())
        }
        fn poll(&mut self) -> Result<Option<Vec<Vec<u8>>>, Error> {
            Ok(None)
        }
    }

    /// Every rank of the clique is a member of this batch: the all-gather is a concatenation.
    /// Counts its rounds.
    struct Local(Option<Vec<Vec<u8>>>, Arc<AtomicUsize>);
    impl Transport for Local {
        fn start(&mut self, parts: Vec<Vec<u8>>) -> Result<(), Error> {
            let all = parts.concat();
            self.0 = Some(vec![all; parts.len()]);
            self.1.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        fn poll(&mut self) -> Result<Option<Vec<Vec<u8>>>, Error> {
            Ok(self.0.take())
        }
    }

    /// The all-gathers of several cliques, each rank a setup of its own (as ranks in separate
    /// processes are): parts by (clique, round), rank.
    type Parts = HashMap<(usize, usize), Vec<Option<Vec<u8>>>>;
    #[derive(Clone, Default)]
    struct Board(Arc<parking_lot::Mutex<Parts>>);

    /// One setup's view of the board: member i is rank `ranks[i]` of clique `cliques[i]`.
    struct OnBoard {
        board: Board,
        cliques: Vec<usize>,
        ranks: Vec<usize>,
        nranks: usize,
        round: Vec<usize>,
        /// Exchanges this setup posted.
        posted: Arc<AtomicUsize>,
    }

    impl Transport for OnBoard {
        fn start(&mut self, parts: Vec<Vec<u8>>) -> Result<(), Error> {
            let mut b = self.board.0.lock();
            for (i, part) in parts.into_iter().enumerate() {
                self.round[i] += 1;
                let slot = b.entry((self.cliques[i], self.round[i])).or_insert_with(|| vec![None; self.nranks]);
                slot[self.ranks[i]] = Some(part);
            }
            self.posted.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        fn poll(&mut self) -> Result<Option<Vec<Vec<u8>>>, Error> {
            let b = self.board.0.lock();
            let mut out = Vec::new();
            for (i, &c) in self.cliques.iter().enumerate() {
                match b.get(&(c, self.round[i])) {
                    Some(parts) if parts.iter().all(Option::is_some) => {
                        out.push(parts.iter().flatten().flatten().copied().collect())
                    }
                    _ => return Ok(None),
                }
            }
            Ok(Some(out))
        }
        fn drop_member(&mut self, i: usize) -> bool {
            self.cliques.remove(i);
            self.ranks.remove(i);
            self.round.remove(i);
            true
        }
    }

    fn member(clique: usize, rank: usize, nranks: usize) -> Member {
        Member { comm: (0x7200_0000 + clique * 4096 + rank * 64) as ncclComm_t, rank, nranks, device: 0, max_ctas: 0 }
    }

    fn members(n: usize) -> Vec<Member> {
        // Handles no stock library made, all on device 0: the verdict turns the kernels off
        // (two ranks on one GPU), so nothing is allocated even where a GPU is present.
        (0..n).map(|rank| member(9, rank, n)).collect()
    }

    /// Rank `rank` of `nranks` of clique `clique` as a setup of its own on `board`.
    fn rank_setup(
        board: &Board,
        clique: usize,
        rank: usize,
        nranks: usize,
        fault: Fault,
        limit: Option<Duration>,
    ) -> (Result<Setup, Error>, Arc<AtomicUsize>) {
        let posted = Arc::new(AtomicUsize::new(0));
        let t = OnBoard {
            board: board.clone(),
            cliques: vec![clique],
            ranks: vec![rank],
            nranks,
            round: vec![0],
            posted: posted.clone(),
        };
        (Setup::with_fault(vec![member(clique, rank, nranks)], Box::new(t), fault, limit), posted)
    }

    /// What each rank ended with: `Ok(kernels on)`, or the error code.
    type Verdicts = Vec<Result<bool, ncclResult_t>>;

    /// Polls every setup round-robin (as separate processes would progress) until each ended.
    fn run_all(mut setups: Vec<Option<Setup>>, mut ends: Verdicts) -> Verdicts {
        let deadline = Instant::now() + Duration::from_secs(10);
        while setups.iter().any(Option::is_some) {
            assert!(Instant::now() < deadline, "a setup neither finished nor timed out");
            for (s, end) in setups.iter_mut().zip(&mut ends) {
                let Some(setup) = s else { continue };
                match setup.poll() {
                    Ok(None) => continue,
                    Ok(Some(out)) => *end = Ok(out.iter().all(|(_, c)| c.is_some())),
                    Err(e) => *end = Err(e.code),
                }
                *s = None;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        ends
    }

    #[test]
    fn a_setup_whose_peers_never_answer_ends_at_its_limit() {
        let setup = Setup::with(members(2)[..1].to_vec(), Box::new(Silent), Sharing::default()).unwrap();
        let started = Instant::now();
        let outcome = establish(setup, || false, Some(Duration::from_millis(50)));
        let took = started.elapsed();
        let Err(e) = outcome else { panic!("a setup nobody answered succeeded") };
        assert_eq!(e.code, TIMED_OUT);
        assert!(took >= Duration::from_millis(50) && took < Duration::from_secs(5), "{took:?}");
        // Stopped (the communicator was aborted): no error, every call forwards.
        let setup = Setup::with(members(2)[..1].to_vec(), Box::new(Silent), Sharing::default()).unwrap();
        assert!(establish(setup, || true, None).is_ok_and(|o| o.iter().all(|(_, c)| c.is_none())));
    }

    #[test]
    fn a_setup_whose_verdict_fails_ends_after_its_three_exchanges() {
        let rounds = Arc::new(AtomicUsize::new(0));
        let setup = Setup::with(members(3), Box::new(Local(None, rounds.clone())), Sharing::default()).unwrap();
        let Ok(outcome) = establish(setup, || false, Some(Duration::from_secs(5))) else {
            panic!("every exchange answered, yet the setup failed")
        };
        // Every rank takes part in all three, whatever the verdict (they are the communicator's
        // first operations on every rank: a rank that skipped one would pair the next with a
        // user's collective).
        assert_eq!(rounds.load(Ordering::Relaxed), 3);
        assert_eq!(outcome.len(), 3);
        assert!(outcome.iter().all(|(_, c)| c.is_none()), "three ranks on one GPU got kernels");
    }

    /// Item 3: a local failure on one rank, at any stage, is reported through the remaining
    /// exchanges: every rank takes all three and reaches the same verdict (kernels off), none
    /// forwards alone.
    #[test]
    fn a_local_failure_on_one_rank_gives_every_rank_the_same_verdict() {
        for site in ["describe", "alloc", "lease", "ipc", "peer"] {
            for n in [2, 3, 8] {
                let board = Board::default();
                let mut setups = Vec::new();
                let mut posted = Vec::new();
                for r in 0..n {
                    let fault = Fault::parse(Some(&format!("{site}:1")), r).unwrap();
                    let (s, p) = rank_setup(&board, 0, r, n, fault, Some(Duration::from_secs(5)));
                    setups.push(Some(s.unwrap()));
                    posted.push(p);
                }
                let ends = run_all(setups, vec![Err(ncclResult_t::InternalError); n]);
                assert!(ends.iter().all(|e| *e == Ok(false)), "{site} on rank 1 of {n}: {ends:?}");
                assert!(posted.iter().all(|p| p.load(Ordering::Relaxed) == 3), "{site}: a rank skipped an exchange");
            }
        }
    }

    /// Items 3 and 4: an exchange that cannot be posted fails that rank's setup (the
    /// communicator is in error), and its peers end in the same error at their limit: no rank
    /// turns its kernels on or forwards.
    #[test]
    fn an_exchange_that_cannot_be_posted_fails_every_rank() {
        for k in 2..=3u8 {
            let board = Board::default();
            let n = 3;
            let mut setups = Vec::new();
            let mut posted = Vec::new();
            for r in 0..n {
                let fault = Fault::parse(Some(&format!("exchange{k}:1")), r).unwrap();
                let (s, p) = rank_setup(&board, 0, r, n, fault, Some(Duration::from_millis(100)));
                setups.push(Some(s.unwrap()));
                posted.push(p);
            }
            let ends = run_all(setups, vec![Ok(true); n]);
            assert_eq!(ends[1], Err(ncclResult_t::SystemError), "exchange{k}");
            assert_eq!(ends[0], Err(TIMED_OUT), "exchange{k}");
            assert_eq!(ends[2], Err(TIMED_OUT), "exchange{k}");
            assert_eq!(posted[1].load(Ordering::Relaxed), usize::from(k - 1), "rank 1 posted exchange {k}");
        }
        // The first exchange: nothing was posted, `Setup::with` itself fails.
        let (s, p) = rank_setup(&Board::default(), 0, 0, 2, Fault::parse(Some("exchange1"), 0).unwrap(), None);
        assert!(s.is_err() && p.load(Ordering::Relaxed) == 0);
    }

    /// Item 4: the limit is checked before an exchange is posted, never after: a rank whose
    /// limit passed while it waited posts nothing more.
    #[test]
    fn no_exchange_is_posted_after_the_limit() {
        let board = Board::default();
        let (s0, posted0) = rank_setup(&board, 0, 0, 2, Fault::default(), Some(Duration::from_millis(30)));
        let mut s0 = s0.unwrap();
        assert!(s0.poll().unwrap().is_none());
        std::thread::sleep(Duration::from_millis(60));
        // Rank 1 comes late: rank 0's first exchange completes after rank 0's limit.
        let (s1, _) = rank_setup(&board, 0, 1, 2, Fault::default(), None);
        let mut s1 = s1.unwrap();
        let e = s0.poll().err().expect("a setup past its limit went on");
        assert_eq!(e.code, TIMED_OUT);
        assert_eq!(posted0.load(Ordering::Relaxed), 1, "rank 0 posted an exchange after its limit");
        assert!(s1.poll().unwrap().is_none(), "rank 1 waits for rank 0's second exchange");
    }

    /// Item 3: an abort of one communicator of a batch drops only that one; the batch's other
    /// communicators finish their setup with their peers.
    #[test]
    fn an_aborted_member_leaves_the_rest_of_its_batch_going() {
        let board = Board::default();
        let posted = Arc::new(AtomicUsize::new(0));
        let t = OnBoard {
            board: board.clone(),
            cliques: vec![1, 2],
            ranks: vec![0, 0],
            nranks: 2,
            round: vec![0, 0],
            posted: posted.clone(),
        };
        let (a0, b0) = (member(1, 0, 2), member(2, 0, 2));
        let mut batch = Setup::with_fault(vec![a0, b0], Box::new(t), Fault::default(), None).unwrap();
        let (a1, _) = rank_setup(&board, 1, 1, 2, Fault::default(), Some(Duration::from_millis(100)));
        let (b1, _) = rank_setup(&board, 2, 1, 2, Fault::default(), Some(Duration::from_secs(5)));
        assert!(batch.poll().unwrap().is_none());
        assert!(batch.drop_member(a0.comm));
        assert_eq!(batch.comms(), vec![b0.comm]);
        let ends = run_all(vec![Some(batch), Some(a1.unwrap()), Some(b1.unwrap())], vec![Ok(true); 3]);
        assert_eq!(ends[0], Ok(false), "the batch's other communicator finished");
        assert_eq!(ends[2], Ok(false), "its peer finished with the same verdict");
        assert_eq!(ends[1], Err(TIMED_OUT), "the aborted communicator's peer ends in error");
    }

    /// Only a stock library without the setup's calls (the same on every rank) lets a setup
    /// that posted nothing forward; any other failure to start may be this rank's alone.
    #[test]
    fn only_missing_stock_calls_forward_without_an_exchange() {
        assert!(lacks_stock_calls(&Error::new(ncclResult_t::InvalidUsage, "stock library lacks ncclAllGather")));
        assert!(!lacks_stock_calls(&Error::upstream(
            "ncclAllGather (rcclx setup exchange)",
            ncclResult_t::InvalidUsage
        )));
        assert!(!lacks_stock_calls(&Error::internal("an exchange buffer could not be allocated")));
    }

    /// The WARN lines logged on this thread (what `tracing::warn!` writes).
    #[derive(Clone, Default)]
    struct Warnings(Arc<parking_lot::Mutex<Vec<String>>>);
    impl tracing::Subscriber for Warnings {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            struct Message(String);
            impl tracing::field::Visit for Message {
                fn record_debug(&mut self, _: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                    self.0 += &format!("{value:?}");
                }
            }
            if *event.metadata().level() == tracing::Level::WARN {
                let mut m = Message(String::new());
                event.record(&mut m);
                self.0.lock().push(m.0);
            }
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    /// `RCCLX_SIM_HOSTID` set wrong (issue 46): different ids on ranks that share memory, the
    /// same id on ranks of different machines, or the id on some ranks only. Each rank is a
    /// setup of its own, as processes are; each record says what a rank on a GPU would (this
    /// machine may have none). Every rank takes all three exchanges, warns that its kernels are
    /// off (the verdict refuses, before anything is allocated) and forwards; nobody waits past
    /// the exchanges.
    #[test]
    fn simulated_hosts_set_wrong_forward_on_every_rank() {
        let sim = |id: &str| host::Identity::of_process(Some(id));
        let other_machine = |id: &str| host::Identity { machine: sim(id).machine ^ 1, ..sim(id) };
        // (what, whether rank r of n is the odd one, the identity of the odd ranks and of the
        // others); the first is set right: a control, whose verdict holds.
        type Case<'a> = (&'a str, fn(usize, usize) -> bool, &'a dyn Fn(bool) -> host::Identity);
        let cases: [Case; 4] = [
            ("one id on one machine", |_, _| false, &|_| sim("a")),
            ("different ids", |r, n| r == n - 1, &|odd| sim(if odd { "b" } else { "a" })),
            ("another machine", |r, _| r == 1, &|odd| if odd { other_machine("a") } else { sim("a") }),
            ("set on some ranks", |r, _| r % 2 == 1, &|odd| {
                if odd { sim("a") } else { host::Identity::of_process(None) }
            }),
        ];
        for (what, odd, identity) in cases {
            for n in [2, 4, 8] {
                let board = Board::default();
                let mut setups = Vec::new();
                let mut posted = Vec::new();
                for r in 0..n {
                    let p = Arc::new(AtomicUsize::new(0));
                    let mut t = OnBoard {
                        board: board.clone(),
                        cliques: vec![0],
                        ranks: vec![r],
                        nranks: n,
                        round: vec![0],
                        posted: p.clone(),
                    };
                    let me = identity(odd(r, n));
                    let mut l = super::Local::new(member(0, r, n), Fault::default());
                    describe(&mut l, me, Sharing::of_library(me.simulated));
                    // What a rank on an H200 says (describe found no GPU here, or one without
                    // this rank's kernels loaded).
                    l.record.capable = 1;
                    l.record.arch[..5].copy_from_slice(b"sm_90");
                    l.record.multiprocessors = 132;
                    l.record.gpu = 77;
                    l.record.grid_cap = if me.simulated { per_rank_cap(132, n) } else { 0 };
                    t.start(vec![l.record.as_bytes().to_vec()]).unwrap();
                    let limit = Some(Duration::from_secs(5));
                    setups.push(Some(Setup {
                        locals: vec![l],
                        transport: Box::new(t),
                        stage: Stage::Records,
                        started: Instant::now(),
                        limit,
                    }));
                    posted.push(p);
                }
                let warnings = Warnings::default();
                let ends = tracing::subscriber::with_default(warnings.clone(), || {
                    run_all(setups, vec![Err(ncclResult_t::InternalError); n])
                });
                assert!(posted.iter().all(|p| p.load(Ordering::Relaxed) == 3), "{what}: a rank skipped an exchange");
                let refusals =
                    warnings.0.lock().iter().filter(|w| w.contains("kernels off, every call forwards")).count();
                if what == cases[0].0 {
                    // Its ranks allocate (which fails without a GPU): the same outcome everywhere.
                    assert!(ends.iter().all(|e| *e == ends[0] && e.is_ok()), "{what}, {n} ranks: {ends:?}");
                    assert_eq!(refusals, 0, "{what}, {n} ranks: {:?}", warnings.0.lock());
                } else {
                    assert!(ends.iter().all(|e| *e == Ok(false)), "{what}, {n} ranks: {ends:?}");
                    assert_eq!(refusals, n, "{what}, {n} ranks: every rank warns once: {:?}", warnings.0.lock());
                }
            }
        }
    }

    #[test]
    fn fault_spec() {
        assert_eq!(Fault::parse(None, 0), Ok(Fault::default()));
        assert_eq!(Fault::parse(Some(""), 0), Ok(Fault::default()));
        assert!(Fault::parse(Some("alloc"), 3).unwrap().alloc);
        assert!(Fault::parse(Some("ipc:1"), 1).unwrap().ipc);
        assert!(!Fault::parse(Some("ipc:1"), 0).unwrap().ipc);
        assert!(Fault::parse(Some("peer:0"), 0).unwrap().peer);
        assert!(Fault::parse(Some("lease:2"), 2).unwrap().lease);
        assert!(Fault::parse(Some("describe"), 5).unwrap().describe);
        assert_eq!(Fault::parse(Some("exchange3:1"), 1).unwrap().exchange, 3);
        assert_eq!(Fault::parse(Some("exchange3:1"), 0).unwrap().exchange, 0);
        // A typo is an error, not a test that injects nothing.
        assert!(Fault::parse(Some("bogus"), 0).unwrap_err().contains("no setup site"));
        assert!(Fault::parse(Some("alloc:x"), 0).unwrap_err().contains("not a rank"));
        assert!(Fault::parse(Some("allocc:1"), 0).is_err());
    }
}
