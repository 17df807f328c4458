//! Layer `clique`: the peer resources that DDA and low-precision kernels share, for one
//! communicator: this rank's staging buffer, flag array, LL inbox, window counters and status
//! word, every peer's mapped into this process, and what every rank agreed at setup.
//!
//! Layer: above `gpu`, `error`, `upstream`, `intercept`, `kernels`; below `dda`, `lowp`, `comm`.
//! It never looks into `comm`: [`Setup`] hands the finished [`Clique`]s back to the caller.
//!
//! Setup ([`Setup::start`], then [`Setup::poll`] until done; [`establish`] does both and waits):
//! 1. Each rank fills a [`record::Record`] (host, pid, device and its GPU's identity, arch,
//!    thresholds): nothing is allocated yet. A rank that cannot take part (no kernels for its
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
//! Anything failing leaves the communicator without a clique: every call forwards.
//! The exchanges are the communicator's first operations on every rank (the caller makes sure
//! no user operation is issued before setup ends), so they never put ranks out of step.

pub mod args;
mod exchange;
pub mod host;
mod lease;
mod record;
mod teardown;

pub use args::{
    A2AV_CODED, A2AV_HEADER_BYTES, A2AV_RECV_PACKED, A2AV_SEND_PACKED, AllToAllvArgs, Buffers, FLAG_STRIDE, Grid,
    KernelArgs, Launch, LaunchArgs, MAX_RANKS, THREADS, Work,
};

use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::Error;
use crate::gpu::{self, Function, IpcMapping, MemKind};
use crate::intercept::{CommFacts, Policies};
use crate::types::{ncclComm_t, ncclResult_t};
use crate::upstream;
pub use exchange::{StockTransport, Transport};
use lease::Lease;
use record::Record;
use teardown::{Owned, Slab};
pub use teardown::{pending as ended_not_pooled, wait_pooled};

/// Default staging buffer per rank (`RCCL_DDA_SENDBUF_BYTES`), without and with a
/// low-precision switch on (larger windows halve its barriers per byte: +6-7 % at 256 MiB on
/// 2x H200; DDA gains nothing from them).
pub const DEFAULT_STAGING: u64 = 16 << 20;
pub const DEFAULT_STAGING_LOWP: u64 = 32 << 20;

/// 16-byte LL units per (parity, source) slot of an inbox for messages up to `ll_max` bytes.
fn ll_units(ll_max: u64) -> u64 {
    ll_max.div_ceil(8).max(1)
}

/// One communicator's established clique. Dropping it releases it ([`Clique::release`]).
pub struct Clique {
    pub rank: usize,
    pub nranks: usize,
    pub device: i32,
    /// Agreed by every rank (rank 0's values): the input of `intercept::decide`.
    pub facts: CommFacts,
    pub max_blocks: u32,
    /// Arguments with every per-communicator field filled; per call only buffers and counts change.
    base_args: KernelArgs,
    /// Multiprocessors (SMs or CUs) of each rank's GPU (agreed: equal on every rank).
    multiprocessors: u32,
    /// Entries of the per-block flag and window-counter arrays: the largest grid of any kernel.
    block_slots: u32,
    /// Most blocks of any kernel (0: none beyond the GPU's; see [`Sharing::grid_cap`]).
    grid_cap: u32,
    kernels: Arc<Vec<Kernel>>,
    owned: Mutex<Option<Owned>>,
}

impl Clique {
    /// Most blocks of any kernel of this clique (0: no cap beyond the GPU's; [`Sharing`]).
    pub fn grid_cap(&self) -> u32 {
        self.grid_cap
    }

    /// The kernel arguments of this communicator, to be completed per call.
    pub fn args(&self) -> KernelArgs {
        self.base_args
    }

    /// The kernel of family `family` for `dtype` and `op`, if the table has one.
    pub fn kernel(&self, family: usize, dtype: i32, op: i32) -> Option<Kernel> {
        crate::kernel_table::kernel_index(family, dtype, op).and_then(|i| self.kernels.get(i).copied())
    }

    /// The most blocks of `kernel` the GPU runs at once: every multiprocessor full. The same
    /// on every rank (same arch, same multiprocessor count: the verdict checks both).
    pub fn resident_blocks(&self, kernel: Kernel) -> u32 {
        let all = self.multiprocessors.saturating_mul(kernel.blocks_per_multiprocessor).clamp(1, self.block_slots);
        if self.grid_cap > 0 { all.min(self.grid_cap) } else { all }
    }

    /// Launches `launch` on `stream`.
    pub fn launch(&self, launch: Launch, stream: gpu::Stream) -> Result<(), Error> {
        let rt = gpu::runtime()?;
        let _guard = rt.device_guard(self.device)?;
        let mut args = launch.args;
        let mut arg_ptr = match &mut args {
            LaunchArgs::Collective(a) => a as *mut KernelArgs as *mut c_void,
            LaunchArgs::AllToAllv(a) => a as *mut AllToAllvArgs as *mut c_void,
        };
        let (blocks, threads) = launch.grid;
        // SAFETY: every rcclx kernel takes one argument struct by value, `RcclxArgs` or (the
        // AllToAllv family) `RcclxA2avArgs`, whose layouts the two variants mirror (sizes
        // asserted on both sides); `plan` picked the variant of the kernel's family. Its pointers
        // are this clique's buffers and the caller's buffers of the declared sizes, on the
        // stream's device.
        unsafe {
            rt.launch(launch.func, (blocks, 1, 1), (threads, 1, 1), 0, stream, std::slice::from_mut(&mut arg_ptr))
        }
        .map_err(Error::from)
    }

    /// The first error a kernel reported: `ncclRemoteError` after a timeout, none after an abort
    /// the host asked for (the stock library reports that state itself).
    pub fn kernel_error(&self) -> ncclResult_t {
        let owned = self.owned.lock();
        match owned.as_ref().map(|o| o.slab.status.words()[0].load(Ordering::Acquire)) {
            Some(1) => ncclResult_t::RemoteError,
            _ => ncclResult_t::Success,
        }
    }

    /// Tells this communicator's kernels to stop waiting (they exit within microseconds).
    pub fn request_abort(&self) {
        if let Some(o) = self.owned.lock().as_ref() {
            o.slab.status.words()[1].store(1, Ordering::Release);
        }
    }

    /// Ends the clique: its memory goes back to the pool once no kernel and no peer can touch
    /// it (`teardown.rs`). Never waits. `settled`: every kernel of this rank is known to have
    /// ended (else the reaper waits for the device). An abort has told the kernels to stop
    /// first ([`Clique::request_abort`]).
    pub fn release(&self, settled: bool) {
        if let Some(owned) = self.owned.lock().take() {
            teardown::bury(owned, self.device, settled);
        }
    }
}

impl Drop for Clique {
    fn drop(&mut self) {
        self.release(false);
    }
}

// ---- setup ------------------------------------------------------------------------------------

/// One rank of a batch being set up: its communicator (the side table's key; a handle the
/// stock library made, or a harness's own), rank, rank count and device.
#[derive(Clone, Copy, Debug)]
pub struct Member {
    pub comm: ncclComm_t,
    pub rank: usize,
    pub nranks: usize,
    pub device: i32,
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
}

/// This rank's part of a setup.
struct Local {
    member: Member,
    /// The kernels of its GPU (step 1), then its buffers (step 3).
    kernels: Option<Arc<Vec<Kernel>>>,
    res: Option<Slab>,
    record: Record,
    fault: Fault,
}

/// A peer mapping that worked: the mappings, the lease and every rank's pointers.
struct Mapped {
    peers: Vec<IpcMapping>,
    lease: Lease,
    staging: [u64; MAX_RANKS],
    flags: [u64; MAX_RANKS],
    ll: [u64; MAX_RANKS],
}

/// A setup step made to fail on purpose (`RCCLX_FAULT_INJECT`, tests only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Fault {
    alloc: bool,
    ipc: bool,
    peer: bool,
}

impl Fault {
    /// `alloc`, `ipc` or `peer`, optionally `:RANK`; read at every setup, like the FP8 switches.
    fn parse(spec: Option<&str>, rank: usize) -> Fault {
        let mut f = Fault::default();
        let Some(spec) = spec else { return f };
        let (what, on) = match spec.split_once(':') {
            Some((w, r)) => (w, r.trim().parse::<usize>().ok() == Some(rank)),
            None => (spec, true),
        };
        if on {
            match what.trim() {
                "alloc" => f.alloc = true,
                "ipc" => f.ipc = true,
                "peer" => f.peer = true,
                other => tracing::warn!("RCCLX_FAULT_INJECT={other:?} is not alloc, ipc or peer; ignored"),
            }
        }
        f
    }
}

/// A batch of communicators being set up together (all owned by the calling thread).
pub struct Setup {
    locals: Vec<Local>,
    transport: Box<dyn Transport>,
    stage: Stage,
    started: Instant,
}

enum Stage {
    /// Waiting for the records.
    Records,
    /// Waiting for the records with the buffers' handles.
    Handles,
    /// Waiting for every rank's "mapped" bit; rank 0's record and the mappings that worked so
    /// far, per member.
    Verdicts(Vec<Record>, Vec<Option<Mapped>>),
    Done,
}

/// The outcome per communicator: its clique, or none (every call forwards).
pub type Outcome = Vec<(ncclComm_t, Option<Clique>)>;

impl Setup {
    /// Starts setting up `comms`, whose stock initialisation is complete, through the stock
    /// communicators: allocates, then issues the record exchange. Never blocks on a peer.
    pub fn start(comms: &[ncclComm_t]) -> Result<Setup, Error> {
        let members = comms.iter().map(|&c| query(c)).collect::<Result<Vec<_>, _>>()?;
        let transport = StockTransport::new(&members);
        Setup::with(members, Box::new(transport), Sharing::default())
    }

    /// Starts setting up `members` (ranks of one or more cliques, all driven by the calling
    /// thread), exchanging through `transport`, with `sharing`. Never blocks on a peer.
    pub fn with(members: Vec<Member>, mut transport: Box<dyn Transport>, sharing: Sharing) -> Result<Setup, Error> {
        let cfg = crate::config::get();
        let mut locals = Vec::new();
        for member in members {
            crate::log::set_device(member.device);
            let mut l = Local {
                member,
                kernels: None,
                res: None,
                record: Record::zeroed(),
                fault: Fault::parse(cfg.fault_inject.as_deref(), member.rank),
            };
            describe(&mut l, sharing);
            locals.push(l);
        }
        transport.start(locals.iter().map(|l| l.record.as_bytes().to_vec()).collect())?;
        Ok(Setup { locals, transport, stage: Stage::Records, started: Instant::now() })
    }

    /// Advances the setup without blocking; the outcome once every exchange has arrived.
    pub fn poll(&mut self) -> Result<Option<Outcome>, Error> {
        loop {
            match &mut self.stage {
                Stage::Records => {
                    let Some(recs) = self.gathered()? else { return Ok(None) };
                    for (l, recs) in self.locals.iter_mut().zip(&recs) {
                        match record::verdict(l.member.rank, l.member.nranks, recs) {
                            Ok(()) => allocate_for(l),
                            Err(why) => {
                                tracing::info!(
                                    "comm {:p} rank {}: rcclx kernels off: {why}",
                                    l.member.comm,
                                    l.member.rank
                                );
                                l.record.capable = 0;
                            }
                        }
                    }
                    self.transport.start(self.locals.iter().map(|l| l.record.as_bytes().to_vec()).collect())?;
                    self.stage = Stage::Handles;
                }
                Stage::Handles => {
                    let Some(recs) = self.gathered()? else { return Ok(None) };
                    let mapped: Vec<Option<Mapped>> =
                        self.locals.iter().zip(&recs).map(|(l, r)| map_clique(l, r)).collect();
                    let bits = mapped.iter().map(|m| (m.is_some() as u64).to_ne_bytes().to_vec()).collect();
                    self.transport.start(bits)?;
                    let rank0 = recs.iter().map(|r| r[0]).collect();
                    self.stage = Stage::Verdicts(rank0, mapped);
                }
                Stage::Verdicts(rank0, mapped) => {
                    let Some(oks) = self.transport.poll()? else { return Ok(None) };
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
                                tracing::info!("comm {comm:p}: rcclx kernels off (a rank could not map its peers)");
                                None
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
/// communicator was aborted) or when the setup fails; `Err` with that outcome when `limit`
/// passed first (a peer that died, or one without rcclx, never answers: the caller reports it).
pub fn establish(mut setup: Setup, stop: impl Fn() -> bool, limit: Option<Duration>) -> Result<Outcome, Outcome> {
    let none = |comms: Vec<ncclComm_t>| comms.into_iter().map(|c| (c, None)).collect();
    let comms = setup.comms();
    let mut nap = Duration::from_micros(20);
    loop {
        match setup.poll() {
            Ok(Some(out)) => return Ok(out),
            Ok(None) if stop() => return Ok(none(comms)),
            Ok(None) if limit.is_some_and(|l| setup.elapsed() > l) => return Err(none(comms)),
            Ok(None) => {
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(1));
            }
            Err(e) => {
                tracing::warn!("rcclx setup failed ({e}); these communicators forward every call");
                return Ok(none(comms));
            }
        }
    }
}

/// Rank, size and device of `comm`, from the stock library.
fn query(comm: ncclComm_t) -> Result<Member, Error> {
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
    Ok(Member { comm, rank: r as usize, nranks: n as usize, device: d })
}

/// Fills this rank's record (step 1; capable = 0 when it cannot take part). Allocates nothing.
fn describe(l: &mut Local, sharing: Sharing) {
    let cfg = crate::config::get();
    let m = l.member;
    let rec = &mut l.record;
    rec.magic = record::MAGIC;
    rec.host = host::host_id();
    rec.nonce = lease::nonce();
    rec.pid = std::process::id();
    rec.pidns = host::pid_namespace();
    rec.device = m.device;
    rec.rank = m.rank as u32;
    rec.max_blocks = cfg.dda_max_blocks;
    rec.shared_gpus = sharing.shared_gpus as u32;
    rec.grid_cap = sharing.grid_cap;
    let (lowp, codec) = crate::config::lowp_switches_now();
    let policies = Policies::for_comm(cfg, m.nranks, lowp, codec);
    rec.policies = policies;
    rec.timeout_ms = cfg.timeout_ms;
    let staging =
        cfg.dda_sendbuf_bytes.unwrap_or(if policies.any_lowp() { DEFAULT_STAGING_LOWP } else { DEFAULT_STAGING });
    rec.staging_bytes = staging;
    if !(2..=MAX_RANKS).contains(&m.nranks) {
        return; // the kernels cannot serve this communicator: nothing to learn about the GPU
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
            rec.gpu = host::gpu_id(&info.pci_bus_id);
            rec.capable = 1;
            l.kernels = Some(kernels);
        }
        Err(e) => {
            tracing::warn!("comm {:p} rank {}: rcclx kernels unavailable, forwarding every call: {e}", m.comm, m.rank)
        }
    }
}

/// Allocates this rank's buffers once the verdict holds (step 3) and puts their handles and
/// pointers in its record; `capable = 0` when that fails.
fn allocate_for(l: &mut Local) {
    let m = l.member;
    let rec = &mut l.record;
    rec.capable = 0;
    if l.fault.alloc {
        tracing::warn!("comm {:p} rank {}: RCCLX_FAULT_INJECT=alloc: allocation fails", m.comm, m.rank);
        return;
    }
    match allocate(m.device, rec.staging_bytes as usize, rec.max_blocks, rec.policies.ll_max) {
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

/// A kernel of the device's code object.
#[derive(Clone, Copy, Debug)]
pub struct Kernel {
    pub func: Function,
    /// Blocks of `THREADS` threads one multiprocessor holds at once (its registers decide).
    pub blocks_per_multiprocessor: u32,
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
fn allocate(device: i32, staging_bytes: usize, max_blocks: u64, ll_max: u64) -> Result<Slab, gpu::Error> {
    let rt = gpu::runtime()?;
    let info = rt.device_info(device)?;
    let slots = block_slots(max_blocks, info.multiprocessors as u64) as usize;
    // LL inbox: [2 parities][MAX_RANKS sources][units] x 16 bytes.
    let sizes =
        [staging_bytes, slots * FLAG_STRIDE * 4, (2 * MAX_RANKS as u64 * ll_units(ll_max) * 16) as usize, slots * 4];
    if let Some(slab) = teardown::reuse(device, sizes) {
        return Ok(slab);
    }
    let staging = rt.alloc(device, sizes[0], MemKind::Normal)?;
    let flags = rt.alloc(device, sizes[1], MemKind::Uncached)?;
    let ll = rt.alloc(device, sizes[2], MemKind::Uncached)?;
    let seq = rt.alloc(device, sizes[3], MemKind::Normal)?;
    flags.zero()?;
    ll.zero()?;
    seq.zero()?;
    let status = rt.alloc_host_mapped(device, 64)?;
    Ok(Slab { staging, flags, ll, seq, status })
}

/// Step 4, given every rank's record with its buffers: the lease and the peer mappings.
/// `None`: kernels off.
fn map_clique(l: &Local, recs: &[Record]) -> Option<Mapped> {
    let m = l.member;
    // No buffers: the verdict did not hold, or this rank's allocation failed (both logged).
    l.res.as_ref()?;
    if let Some(p) = recs.iter().position(|r| r.capable == 0) {
        tracing::info!("comm {:p} rank {}: rcclx kernels off: rank {p} could not allocate its buffers", m.comm, m.rank);
        return None;
    }
    // A peer's pid says whether it is alive only inside our pid namespace.
    let pids = record::visible_pids(recs, &recs[m.rank]);
    let lease = match Lease::join(recs[0].pid, recs[0].nonce, m.rank, pids) {
        Ok(lease) => lease,
        Err(e) => {
            tracing::info!("comm {:p} rank {}: rcclx kernels off: no lease ({e})", m.comm, m.rank);
            return None;
        }
    };
    match map_peers(l, recs) {
        Ok((peers, staging, flags, ll)) => Some(Mapped { peers, lease, staging, flags, ll }),
        Err(e) => {
            tracing::info!("comm {:p} rank {}: rcclx kernels off: {e}", m.comm, m.rank);
            lease.close();
            None
        }
    }
}

type PeerPtrs = (Vec<IpcMapping>, [u64; MAX_RANKS], [u64; MAX_RANKS], [u64; MAX_RANKS]);

/// Maps every peer's staging buffer, flags and LL inbox into this process.
fn map_peers(l: &Local, recs: &[Record]) -> Result<PeerPtrs, Error> {
    let rt = gpu::runtime()?;
    let (rank, device) = (l.member.rank, l.member.device);
    let me = &recs[rank];
    let mut maps = Vec::new();
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
                    if let Some(why) = record::same_pid_refusal(e, me, r) {
                        tracing::warn!("comm {:p} rank {rank}: {why}", l.member.comm);
                    }
                })
            };
            let s = open(r.staging_ipc)?;
            let f = open(r.flags_ipc)?;
            let i = open(r.ll_ipc)?;
            staging[p] = s.ptr().0;
            flags[p] = f.ptr().0;
            ll[p] = i.ptr().0;
            maps.extend([s, f, i]);
        }
    }
    Ok((maps, staging, flags, ll))
}

/// The clique of a rank whose every peer mapped everything.
fn assemble(l: Local, m: Mapped, r0: &Record, started: Instant) -> Clique {
    let res = l.res.expect("a rank that mapped its peers has its buffers");
    let kernels = l.kernels.expect("a rank with buffers has its kernels");
    let Member { comm, rank, nranks, device } = l.member;
    let slots = block_slots(r0.max_blocks, r0.multiprocessors);
    // Every rank's grid of a call must be the same: the cap is agreed (the verdict checked it).
    let grid_cap = r0.grid_cap;
    let max_blocks = if grid_cap > 0 { r0.max_blocks.min(u64::from(grid_cap)) } else { r0.max_blocks };
    let facts = CommFacts { nranks, dda: true, policies: r0.policies };
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
    tracing::info!(
        "comm {comm:p} rank {rank}/{nranks} device {device}: rcclx kernels on (staging {} B, {max_blocks} blocks max{}) in {:?}",
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
        owned: Mutex::new(Some(Owned { peers: m.peers, lease: Some(m.lease), slab: res })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    struct Local(Option<Vec<Vec<u8>>>, Arc<std::sync::atomic::AtomicUsize>);
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

    fn members(n: usize) -> Vec<Member> {
        // Handles no stock library made, all on device 0: the verdict turns the kernels off
        // (two ranks on one GPU), so nothing is allocated even where a GPU is present.
        (0..n)
            .map(|rank| Member { comm: (0x7100_0000 + rank * 64) as ncclComm_t, rank, nranks: n, device: 0 })
            .collect()
    }

    #[test]
    fn a_setup_whose_peers_never_answer_ends_at_its_limit() {
        let setup = Setup::with(members(2)[..1].to_vec(), Box::new(Silent), Sharing::default()).unwrap();
        let started = Instant::now();
        let outcome = establish(setup, || false, Some(Duration::from_millis(50)));
        let took = started.elapsed();
        let Err(outcome) = outcome else { panic!("a setup nobody answered succeeded") };
        assert!(outcome.iter().all(|(_, c)| c.is_none()));
        assert!(took >= Duration::from_millis(50) && took < Duration::from_secs(5), "{took:?}");
        // Stopped (the communicator was aborted): no error, every call forwards.
        let setup = Setup::with(members(2)[..1].to_vec(), Box::new(Silent), Sharing::default()).unwrap();
        assert!(establish(setup, || true, None).is_ok_and(|o| o.iter().all(|(_, c)| c.is_none())));
    }

    #[test]
    fn a_setup_whose_verdict_fails_ends_after_its_three_exchanges() {
        let rounds = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let setup = Setup::with(members(3), Box::new(Local(None, rounds.clone())), Sharing::default()).unwrap();
        let Ok(outcome) = establish(setup, || false, Some(Duration::from_secs(5))) else {
            panic!("every exchange answered, yet the setup timed out")
        };
        // Every rank takes part in all three, whatever the verdict (they are the communicator's
        // first operations on every rank: a rank that skipped one would pair the next with a
        // user's collective).
        assert_eq!(rounds.load(Ordering::Relaxed), 3);
        assert_eq!(outcome.len(), 3);
        assert!(outcome.iter().all(|(_, c)| c.is_none()), "three ranks on one GPU got kernels");
    }

    #[test]
    fn fault_spec() {
        assert_eq!(Fault::parse(None, 0), Fault::default());
        assert!(Fault::parse(Some("alloc"), 3).alloc);
        assert!(Fault::parse(Some("ipc:1"), 1).ipc);
        assert!(!Fault::parse(Some("ipc:1"), 0).ipc);
        assert!(Fault::parse(Some("peer:0"), 0).peer);
        assert_eq!(Fault::parse(Some("bogus"), 0), Fault::default());
    }
}
