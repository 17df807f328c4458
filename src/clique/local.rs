//! This rank's part of a setup ([`Local`]) and what it brings to each step: its record
//! ([`describe`]), its buffers ([`allocate_for`]), its mappings of its host's peers
//! ([`map_clique`]), its rail ([`start_rails`]) and the clique it ends with ([`assemble`]).
//! `setup.rs` runs the steps; this file does one rank's work in each.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use crate::collective::Fabric;
use crate::error::Error;
use crate::gpu::{self, IpcMapping, MemKind};
use crate::intercept::{CommFacts, Policies};

use super::args::{
    FLAG_STRIDE, KernelArgs, MAX_COMM_RANKS, MAX_RANKS, THREADS, ll128_region_bytes, rail_scratch_bytes,
};
use super::exchange::Member;
use super::host;
use super::lease::{self, Lease};
use super::live::{Clique, Kernel, Span};
use super::rail::{self, Rail};
use super::rankmap::RankMap;
use super::record::{self, Record};
use super::teardown::{self, Fence, Owned, Slab};

use super::fault::Fault;

/// Default staging buffer per rank (`RCCL_DDA_SENDBUF_BYTES`), without and with a
/// low-precision switch on (larger windows halve its barriers per byte: +6-7 % at 256 MiB on
/// 2x H200; DDA gains nothing from them).
pub const DEFAULT_STAGING: u64 = 16 << 20;
pub const DEFAULT_STAGING_LOWP: u64 = 32 << 20;

/// 16-byte LL units per (parity, source) slot of an inbox for messages up to `ll_max` bytes.
pub(super) fn ll_units(ll_max: u64) -> u64 {
    ll_max.div_ceil(8).max(1)
}

/// Bytes of the LL inbox of a clique of `nranks`: [2 parities][nranks sources][units] x 16
/// (`rcclx_ll_parity` in `hip_kernels/common.cuh`).
pub(super) fn ll_inbox_bytes(nranks: u64, ll_max: u64) -> u64 {
    2 * nranks * ll_units(ll_max) * 16
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
pub fn per_rank_cap(multiprocessors: u32, nranks: usize) -> u32 {
    (multiprocessors / (2 * nranks as u32)).max(1)
}

/// The grid cap `cap` (0: none) within NCCL's SM budget `max_ctas` (0: none).
pub(super) fn within_budget(cap: u32, max_ctas: u32) -> u32 {
    match (cap, max_ctas) {
        (0, m) | (m, 0) => m,
        (c, m) => c.min(m),
    }
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
pub(super) struct Local {
    pub(super) member: Member,
    /// The kernels of its GPU (step 1), then its buffers (step 3).
    pub(super) kernels: Option<Arc<Vec<Kernel>>>,
    pub(super) res: Option<Slab>,
    /// Joined before this rank's handles were published (step 3).
    pub(super) lease: Option<Lease>,
    /// Peers mapped so far (step 4).
    pub(super) peers: Vec<IpcMapping>,
    /// Its buffers' handles went out with `capable = 1` and a peer may map them: they can only
    /// be buried (`teardown.rs`), never freed or pooled at once.
    pub(super) published: bool,
    pub(super) record: Record,
    pub(super) fault: Fault,
    /// Where this rank sits once the first verdict held: its host's ranks form its clique.
    pub(super) place: Option<Place>,
    /// Its rail (a communicator spanning hosts), being made, then made.
    pub(super) splitting: Option<rail::Pending>,
    pub(super) rail: Option<Rail>,
}

/// A rank's place in a communicator's [`RankMap`].
pub(super) struct Place {
    pub(super) map: RankMap,
    pub(super) host: usize,
    pub(super) local: usize,
}

impl Place {
    /// The records of this rank's host, by local index.
    pub(super) fn host_records(&self, recs: &[Record]) -> Vec<Record> {
        self.map.host(self.host).iter().map(|&r| recs[r]).collect()
    }
}

impl Local {
    /// A rank at the start of its setup: nothing loaded, allocated, joined or mapped yet.
    pub(super) fn new(member: Member, fault: Fault) -> Local {
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
pub(super) struct Mapped {
    pub(super) staging: [u64; MAX_RANKS],
    pub(super) flags: [u64; MAX_RANKS],
    pub(super) ll: [u64; MAX_RANKS],
}

/// The fabric between this process's GPUs, as the default crossovers see it: NVLink through
/// NVSwitch on NVIDIA, AMD's point-to-point xGMI mesh on HIP (`collective::Fabric`).
pub fn local_fabric() -> Fabric {
    match gpu::runtime().map(|rt| rt.vendor()) {
        Ok(gpu::Vendor::Hip) => Fabric::Mesh,
        _ => Fabric::Switch,
    }
}

/// Fills this rank's record (step 1; capable = 0 when it cannot take part). Allocates nothing.
pub(super) fn describe(l: &mut Local, identity: host::Identity, sharing: Sharing) {
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
            let n = info.pci_bus_id.len().min(rec.pci_bus.len() - 1);
            rec.pci_bus[..n].copy_from_slice(&info.pci_bus_id.as_bytes()[..n]);
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
pub(super) fn allocate_for(l: &mut Local, recs: &[Record]) {
    let m = l.member;
    l.record.capable = 0;
    let Some(place) = &l.place else { return };
    let host = place.host_records(recs);
    let local = place.local;
    // Where the stock library would not go peer to peer between two of the host's GPUs.
    if let Some(why) = super::p2p::refusal(&host, crate::config::get().p2p_level) {
        tracing::info!("comm {:p} rank {}: rcclx kernels off, every call forwards: {why}", m.comm, m.rank);
        return;
    }
    // Low precision across hosts stages its codes in a buffer of its own.
    let scratch = if place.map.hosts() > 1 && recs[0].policies.lowp_across_hosts() { rail_scratch_bytes() } else { 0 };
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
    // The LL inbox for the clique's ranks, LL128's region only where it may run (rank 0's
    // policies, which every rank adopts).
    let nranks = host.len() as u64;
    let ll128 = if recs[0].policies.ll128_on() { ll128_region_bytes(nranks) } else { 0 };
    let sizes = Sizes {
        staging: rec.staging_bytes as usize,
        max_blocks: rec.max_blocks,
        ll: ll_inbox_bytes(nranks, rec.policies.ll_max) + ll128,
        scratch,
    };
    match allocate(m.device, &sizes) {
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
pub(super) const MAX_BLOCKS_PER_MULTIPROCESSOR: u64 = 4;

/// Entries of the per-block arrays: room for the DDA grid cap and for every multiprocessor full.
pub(super) fn block_slots(max_blocks: u64, multiprocessors: u64) -> u64 {
    max_blocks.max(multiprocessors * MAX_BLOCKS_PER_MULTIPROCESSOR)
}

/// The kernels of the device's code object, resolved once per device.
pub(super) fn device_kernels(device: i32) -> Result<Arc<Vec<Kernel>>, gpu::Error> {
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

/// What a rank's buffers hold (bytes unless said).
pub(super) struct Sizes {
    pub staging: usize,
    /// The largest grid of any kernel (sizes the per-block arrays).
    pub max_blocks: u64,
    /// The LL inbox, then the LL128 region (none when LL128 is off).
    pub ll: u64,
    /// Low precision across hosts: the rail scratch (0: none).
    pub scratch: usize,
}

/// This rank's buffers: an ended clique's of the same sizes, or new ones.
pub(super) fn allocate(device: i32, s: &Sizes) -> Result<Slab, gpu::Error> {
    let rt = gpu::runtime()?;
    let info = rt.device_info(device)?;
    let slots = block_slots(s.max_blocks, info.multiprocessors as u64) as usize;
    let scratch_bytes = s.scratch;
    let sizes = [s.staging, slots * FLAG_STRIDE * 4, s.ll as usize, slots * 4, scratch_bytes];
    if let Some(slab) = teardown::reuse(device, sizes) {
        return Ok(slab);
    }
    tracing::debug!(
        "device {device}: new buffers (staging, flags, LL, counters, scratch: {sizes:?} bytes); pooled there: {:?}",
        teardown::pooled_sizes(device)
    );
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
pub(super) fn map_clique(l: &mut Local, recs: &[Record]) -> Option<Mapped> {
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
pub(super) fn map_peers(
    l: &Local,
    recs: &[Record],
    rank: usize,
    maps: &mut Vec<IpcMapping>,
) -> Result<PeerPtrs, Error> {
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
pub(super) fn start_rails(locals: &mut [Local], recs: &[Vec<Record>]) {
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
pub(super) fn assemble(mut l: Local, m: Mapped, r0: &Record, started: Instant) -> Clique {
    let res = l.res.take().expect("a rank that mapped its peers has its buffers");
    let kernels = l.kernels.take().expect("a rank with buffers has its kernels");
    let (peers, lease) = (std::mem::take(&mut l.peers), l.lease.take());
    let place = l.place.take().expect("a rank with buffers has its place");
    let span = Span {
        comm_rank: l.member.rank,
        comm_nranks: l.member.nranks,
        hosts: place.map.hosts(),
        host: place.host,
        firsts: (0..place.map.hosts()).map(|h| place.map.host(h)[0]).collect(),
        rail: parking_lot::RwLock::new(l.rail.take()),
        scratch: res.scratch.as_ref().map_or((0, 0), |b| (b.ptr().0, b.len() as u64)),
    };
    let (comm, device) = (l.member.comm, l.member.device);
    let (rank, nranks) = (place.local, place.map.host(place.host).len());
    let slots = block_slots(r0.max_blocks, r0.multiprocessors);
    // Every rank's grid of a call must be the same: the cap is agreed (the verdict checked it).
    let grid_cap = r0.grid_cap;
    let max_blocks = if grid_cap > 0 { r0.max_blocks.min(u64::from(grid_cap)) } else { r0.max_blocks };
    let facts =
        CommFacts { nranks, hosts: span.hosts, rank_step: place.map.step().unwrap_or(0), policies: r0.policies };
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
        stride: 0,
        aux: 0,
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
mod tests {
    use super::*;

    #[test]
    fn the_sm_budget_caps_the_grid_cap() {
        assert_eq!(within_budget(0, 0), 0);
        assert_eq!(within_budget(0, 24), 24);
        assert_eq!(within_budget(16, 0), 16);
        assert_eq!(within_budget(16, 24), 16);
        assert_eq!(within_budget(16, 8), 8);
    }
}
