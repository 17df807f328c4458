//! Communicator setup for DDA (and the FP8 path, which shares it): buffers, the record
//! exchange through the upstream communicator, one verdict on every rank, peer mappings.
//!
//! Steps (ARCHITECTURE.md "Communicator state and setup"):
//! 1. Each rank allocates its staging buffer, flag array, window counters and a host-mapped
//!    status word, and fills a [`Record`] (host, pid, device, arch, IPC handles, raw pointers,
//!    rank 0's thresholds). A rank that cannot (no kernels for its arch, no memory) still
//!    takes part, with `capable = 0`.
//! 2. `ncclAllGather` of the records through the upstream communicator, for all communicators
//!    this thread set up at once, inside one group (one thread may own several ranks).
//! 3. From the records every rank computes the same first verdict (one host, all capable,
//!    same arch and sizes, 2..=8 ranks), then maps its peers: raw pointers plus peer access
//!    for peers in its own process (IPC cannot open a handle in the process that made it),
//!    IPC for the others.
//! 4. A second exchange of "my mappings worked": DDA is on iff it worked on every rank.
//!
//! Anything failing makes the communicator forward every call; it never fails the user's call.

use super::{Algo, Error};
use crate::gpu::{self, DeviceBuffer, Function, HostMapped, IpcMapping, MemKind};
use crate::intercept::{CommFacts, LowpSwitches, Thresholds};
use crate::types::{ncclComm_t, ncclDataType_t, ncclResult_t};
use crate::upstream;
use std::ffi::c_int;
use std::time::{Duration, Instant};

/// Kernel argument layout shared with `hip_kernels/dda.cuh` (`RcclxDdaArgs`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KernelArgs {
    pub send: u64,
    pub recv: u64,
    pub count: u64,
    pub window_elems: u64,
    pub half_bytes: u64,
    pub timeout_ns: u64,
    pub staging: [u64; MAX_RANKS],
    pub flags: [u64; MAX_RANKS],
    pub ll: [u64; MAX_RANKS],
    pub seq: u64,
    pub status: u64,
    pub ll_units: u64,
    /// Entries of `seq` (the largest grid).
    pub seq_slots: u64,
    pub rank: i32,
    pub nranks: i32,
}
const _: () = assert!(std::mem::size_of::<KernelArgs>() == 280);

/// Words per block in a flag array (`RCCLX_FLAG_STRIDE`: one 128-byte line per block).
const FLAG_STRIDE: usize = 32;

pub const MAX_RANKS: usize = 8;
/// Threads per block of every DDA kernel (`RCCLX_DDA_THREADS`).
pub const THREADS: u32 = 512;

/// The agreed facts of one communicator and its resources. Dropping it releases them.
pub struct Setup {
    pub rank: usize,
    pub device: i32,
    pub facts: CommFacts,
    pub thresholds: Thresholds,
    pub max_blocks: u32,
    /// Largest AllReduce (bytes) the LL inbox holds.
    pub ll_max_bytes: u64,
    /// Arguments with every per-communicator field filled; per call only buffers and counts change.
    pub args: KernelArgs,
    kernels: Vec<Function>,
    /// FP8 kernels, indexed by `lowp::launch::kernel_index`.
    pub lowp_kernels: Vec<Function>,
    // Drop order matters: peer mappings and buffers first (freeing waits for kernels in
    // flight), the status words last (kernels write them until they end).
    _peers: Vec<IpcMapping>,
    _staging: DeviceBuffer,
    _flags: DeviceBuffer,
    _ll: DeviceBuffer,
    _seq: DeviceBuffer,
    status: HostMapped,
}

impl Setup {
    /// The kernel for `algo`, `dtype`, `op` (all checked by `intercept::decide`).
    pub fn kernel(&self, algo: Algo, dtype: ncclDataType_t, op: i32) -> Function {
        self.kernels[kernel_index(algo, dtype.0 as usize, op as usize)]
    }

    /// The first error a kernel reported (timeout or abort), as an `ncclResult_t`.
    pub fn kernel_error(&self) -> ncclResult_t {
        match self.status.words()[0].load(std::sync::atomic::Ordering::Acquire) {
            0 => ncclResult_t::Success,
            _ => ncclResult_t::RemoteError,
        }
    }

    /// Asks running kernels of this communicator to stop waiting (`ncclCommAbort`).
    pub fn request_abort(&self) {
        self.status.words()[1].store(1, std::sync::atomic::Ordering::Release);
    }
}

const TYPE_NAMES: [&str; 10] = ["i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32", "f64", "bf16"];
const OP_NAMES: [&str; 5] = ["sum", "prod", "max", "min", "avg"];
/// In `Algo` discriminant order (the kernel table's index).
const ALGOS: [Algo; 3] = [Algo::Flat, Algo::Tree, Algo::Ll];

fn kernel_index(algo: Algo, dtype: usize, op: usize) -> usize {
    (algo as usize * TYPE_NAMES.len() + dtype) * OP_NAMES.len() + op
}

fn kernel_name(algo: Algo, dtype: usize, op: usize) -> String {
    let a = match algo {
        Algo::Flat => "flat",
        Algo::Tree => "tree",
        Algo::Ll => "ll",
    };
    format!("rcclx_allreduce_{a}_{}_{}", TYPE_NAMES[dtype], OP_NAMES[op])
}

/// What each rank tells the others (plain bytes on the wire; identical layout everywhere
/// because every rank runs the same rcclx build).
#[repr(C)]
#[derive(Clone, Copy)]
struct Record {
    magic: u64,
    host: u64,
    pid: u32,
    device: i32,
    capable: u32,
    rank: u32,
    arch: [u8; 32],
    staging_ipc: [u8; 64],
    flags_ipc: [u8; 64],
    ll_ipc: [u8; 64],
    staging_ptr: u64,
    flags_ptr: u64,
    ll_ptr: u64,
    ll_max: u64,
    staging_bytes: u64,
    max_blocks: u64,
    // Rank 0's values are adopted by everyone, so all ranks decide alike.
    flat_max: u64,
    tree_max: u64,
    lp_min: u64,
    timeout_ms: u64,
    dda_all_reduce: u32,
    lowp_bits: u32,
}
const RECORD_MAGIC: u64 = 0x7263_636c_785f_7632; // "rcclx_v2"
const RECORD_BYTES: usize = std::mem::size_of::<Record>();

impl Record {
    fn zeroed() -> Self {
        // SAFETY: Record is plain integers and byte arrays; all-zero is a valid value.
        unsafe { std::mem::zeroed() }
    }
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: plain data without padding (all fields are 8/4-byte multiples in order).
        unsafe { std::slice::from_raw_parts(self as *const Self as *const u8, RECORD_BYTES) }
    }
    fn from_bytes(b: &[u8]) -> Self {
        let mut r = Self::zeroed();
        // SAFETY: copies exactly RECORD_BYTES into a plain-data value.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), &mut r as *mut Self as *mut u8, RECORD_BYTES) };
        r
    }
}
const _: () = assert!(RECORD_BYTES.is_multiple_of(8));

/// Local resources of one rank before the verdict.
struct Local {
    comm: ncclComm_t,
    rank: usize,
    nranks: usize,
    device: i32,
    res: Option<Resources>,
    record: Record,
}

struct Resources {
    kernels: Vec<Function>,
    lowp_kernels: Vec<Function>,
    staging: DeviceBuffer,
    flags: DeviceBuffer,
    ll: DeviceBuffer,
    seq: DeviceBuffer,
    status: HostMapped,
}

/// Sets up `comms` (all created by this thread). Communicators that cannot use rcclx's
/// kernels stay without a `Setup` and forward every call.
pub fn run(comms: &[ncclComm_t]) {
    if comms.is_empty() {
        return;
    }
    let started = Instant::now();
    let mut locals: Vec<Local> = Vec::new();
    for &c in comms {
        match query(c) {
            Ok(l) => locals.push(l),
            Err(e) => {
                // Without rank/size/device this rank cannot even take part in the exchange.
                tracing::warn!("comm {c:p}: rcclx setup skipped: {e}");
                return;
            }
        }
    }
    for l in &mut locals {
        prepare(l);
    }
    let records = match exchange(&locals, |_, l| l.record.as_bytes().to_vec(), RECORD_BYTES) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("rcclx setup exchange failed ({e}); these communicators forward every call");
            return;
        }
    };
    // First verdict and peer mappings.
    let mut mapped: Vec<Option<PeerPtrs>> = Vec::new();
    for (l, recs) in locals.iter().zip(&records) {
        let recs: Vec<Record> = recs.chunks(RECORD_BYTES).map(Record::from_bytes).collect();
        let m = match verdict(l, &recs) {
            Ok(()) => map_peers(l, &recs)
                .map_err(|e| tracing::info!("comm {:p} rank {}: rcclx kernels off: {e}", l.comm, l.rank))
                .ok(),
            Err(why) => {
                tracing::info!("comm {:p} rank {}: rcclx kernels off: {why}", l.comm, l.rank);
                None
            }
        };
        mapped.push(m);
    }
    // Second exchange: on only if every rank mapped all its peers.
    let oks = match exchange(&locals, |i, _| (mapped[i].is_some() as u64).to_ne_bytes().to_vec(), 8) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("rcclx setup exchange failed ({e}); these communicators forward every call");
            return;
        }
    };
    for (((l, m), ok), recs) in locals.into_iter().zip(mapped).zip(oks).zip(&records) {
        let all_ok = ok.chunks(8).all(|c| c.iter().any(|&b| b != 0));
        let (Some(res), Some((peers, staging, flags, ll)), true) = (l.res, m, all_ok) else {
            continue;
        };
        let r0 = Record::from_bytes(&recs[..RECORD_BYTES]);
        let ll_ptrs = (ll, ll_units(r0.ll_max));
        let thresholds = Thresholds {
            dda_all_reduce: r0.dda_all_reduce != 0,
            ll_max_bytes: r0.ll_max,
            flat_max_bytes: r0.flat_max,
            tree_max_bytes: r0.tree_max,
            lp_min_bytes: r0.lp_min,
        };
        let lowp = LowpSwitches {
            all_reduce: r0.lowp_bits & 1 != 0,
            all_gather: r0.lowp_bits & 2 != 0,
            reduce_scatter: r0.lowp_bits & 4 != 0,
            all_to_all: r0.lowp_bits & 8 != 0,
        };
        let half_bytes = r0.staging_bytes / 2;
        let (ll, ll_units) = ll_ptrs;
        let facts = CommFacts { nranks: l.nranks, dda: true, lowp, staging_bytes: r0.staging_bytes };
        let args = KernelArgs {
            send: 0,
            recv: 0,
            count: 0,
            window_elems: 0,
            half_bytes,
            timeout_ns: r0.timeout_ms.saturating_mul(1_000_000),
            staging,
            flags,
            ll,
            seq: res.seq.ptr().0,
            status: res.status.device_ptr().0,
            ll_units,
            seq_slots: r0.max_blocks,
            rank: l.rank as i32,
            nranks: l.nranks as i32,
        };
        let setup = Setup {
            rank: l.rank,
            device: l.device,
            facts,
            thresholds,
            max_blocks: r0.max_blocks as u32,
            ll_max_bytes: r0.ll_max,
            args,
            kernels: res.kernels,
            lowp_kernels: res.lowp_kernels,
            _peers: peers,
            _staging: res.staging,
            _flags: res.flags,
            _ll: res.ll,
            _seq: res.seq,
            status: res.status,
        };
        match crate::comm::lookup(l.comm) {
            Some(state) => {
                tracing::info!(
                    "comm {:p} rank {}/{} device {}: rcclx DDA on (staging {} B, {} blocks max) in {:?}",
                    l.comm,
                    l.rank,
                    l.nranks,
                    l.device,
                    r0.staging_bytes,
                    r0.max_blocks,
                    started.elapsed()
                );
                state.set_setup(setup);
            }
            None => tracing::warn!("comm {:p} vanished during setup", l.comm),
        }
    }
}

fn call(name: &str, r: ncclResult_t) -> Result<(), Error> {
    if r.is_ok() { Ok(()) } else { Err(Error { code: r, what: format!("{name} returned {}", r.0) }) }
}

/// Rank, size and device of `comm`, from the stock library.
fn query(comm: ncclComm_t) -> Result<Local, Error> {
    let u = upstream::get().map_err(|code| Error { code, what: "no stock library".into() })?;
    let (Some(count), Some(user_rank), Some(cu_device)) =
        (u.fns.ncclCommCount, u.fns.ncclCommUserRank, u.fns.ncclCommCuDevice)
    else {
        return Err(Error { code: ncclResult_t::InvalidUsage, what: "stock library lacks comm queries".into() });
    };
    let (mut n, mut r, mut d): (c_int, c_int, c_int) = (0, 0, 0);
    // SAFETY: valid communicator handle and out-pointers to locals.
    call("ncclCommCount", upstream::guarded(|| unsafe { count(comm, &mut n) }))?;
    // SAFETY: as above.
    call("ncclCommUserRank", upstream::guarded(|| unsafe { user_rank(comm, &mut r) }))?;
    // SAFETY: as above.
    call("ncclCommCuDevice", upstream::guarded(|| unsafe { cu_device(comm, &mut d) }))?;
    Ok(Local { comm, rank: r as usize, nranks: n as usize, device: d, res: None, record: Record::zeroed() })
}

/// Allocates this rank's resources and fills its record (capable = 0 on any failure).
fn prepare(l: &mut Local) {
    let cfg = crate::config::get();
    let rec = &mut l.record;
    rec.magic = RECORD_MAGIC;
    rec.host = gpu::host_id();
    rec.pid = std::process::id();
    rec.device = l.device;
    rec.rank = l.rank as u32;
    rec.max_blocks = cfg.dda_max_blocks.clamp(1, 1024);
    let th = Thresholds::for_ranks(cfg, l.nranks);
    rec.ll_max = th.ll_max_bytes.min(MAX_LL_BYTES).next_multiple_of(8);
    rec.flat_max = th.flat_max_bytes;
    rec.tree_max = th.tree_max_bytes;
    rec.lp_min = th.lp_min_bytes;
    rec.timeout_ms = cfg.timeout_ms;
    rec.dda_all_reduce = cfg.dda_all_reduce as u32;
    // The FP8 switches are read again for each communicator, so they can differ between
    // communicators of one process (RCCLX reads them at every call; per communicator keeps
    // every rank's decision fixed and graph capture safe).
    let lp = LowpSwitches::from_config(&crate::config::Config::from_lookup(|k| std::env::var(k).ok()).0);
    rec.lowp_bits = lp.all_reduce as u32
        | (lp.all_gather as u32) << 1
        | (lp.reduce_scatter as u32) << 2
        | (lp.all_to_all as u32) << 3;
    // FP8 windows twice as large halve the barriers per byte (measured: +6-7 % at 256 MiB on
    // 2x H200); DDA does not gain from them, so the extra 16 MiB only comes with FP8.
    let staging = cfg.dda_sendbuf_bytes.unwrap_or(if lp.any() { DEFAULT_STAGING_LOWP } else { DEFAULT_STAGING });
    rec.staging_bytes = staging.max(64 * 1024) & !4095;
    if !(2..=MAX_RANKS).contains(&l.nranks) {
        return; // no buffers for communicators DDA cannot serve
    }
    match allocate(l.device, rec.staging_bytes as usize, rec.max_blocks as usize, rec.ll_max) {
        Ok((res, arch)) => {
            let n = arch.len().min(31);
            rec.arch[..n].copy_from_slice(&arch.as_bytes()[..n]);
            match (res.staging.ipc_handle(), res.flags.ipc_handle(), res.ll.ipc_handle()) {
                (Ok(s), Ok(f), Ok(ll)) => {
                    rec.staging_ipc = s.0;
                    rec.flags_ipc = f.0;
                    rec.ll_ipc = ll.0;
                }
                (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                    tracing::info!("rank {}: no IPC handle ({e}); peers in other processes cannot map it", l.rank);
                }
            }
            rec.staging_ptr = res.staging.ptr().0;
            rec.flags_ptr = res.flags.ptr().0;
            rec.ll_ptr = res.ll.ptr().0;
            rec.capable = 1;
            l.res = Some(res);
        }
        Err(e) => {
            tracing::warn!("comm {:p} rank {}: rcclx kernels unavailable, forwarding every call: {e}", l.comm, l.rank)
        }
    }
}

/// Default staging buffer per rank (`RCCL_DDA_SENDBUF_BYTES`), without and with FP8 switched on.
pub const DEFAULT_STAGING: u64 = 16 << 20;
pub const DEFAULT_STAGING_LOWP: u64 = 32 << 20;

/// Largest `RCCLX_DDA_LL_MAX_BYTES` honoured (the inbox takes 32 bytes per message byte).
const MAX_LL_BYTES: u64 = 1 << 20;

/// 16-byte LL units per (parity, source) slot of an inbox for messages up to `ll_max` bytes.
fn ll_units(ll_max: u64) -> u64 {
    ll_max.div_ceil(8).max(1)
}

fn allocate(
    device: i32,
    staging_bytes: usize,
    max_blocks: usize,
    ll_max: u64,
) -> Result<(Resources, String), gpu::Error> {
    let rt = gpu::runtime()?;
    let arch = rt.device_info(device)?.arch;
    let module = rt.load_rcclx_module(device)?;
    let mut kernels = Vec::new();
    for algo in ALGOS {
        for t in 0..TYPE_NAMES.len() {
            for o in 0..OP_NAMES.len() {
                kernels.push(rt.function(module, &kernel_name(algo, t, o))?);
            }
        }
    }
    let lowp_kernels =
        crate::lowp::launch::kernel_names().map(|n| rt.function(module, &n)).collect::<Result<Vec<_>, _>>()?;
    let staging = rt.alloc(device, staging_bytes, MemKind::Normal)?;
    let flags = rt.alloc(device, max_blocks * FLAG_STRIDE * 4, MemKind::Uncached)?;
    // LL inbox: [2 parities][MAX_RANKS sources][units] x 16 bytes.
    let ll = rt.alloc(device, (2 * MAX_RANKS as u64 * ll_units(ll_max) * 16) as usize, MemKind::Uncached)?;
    let seq = rt.alloc(device, max_blocks * 4, MemKind::Normal)?;
    flags.zero()?;
    ll.zero()?;
    seq.zero()?;
    let status = rt.alloc_host_mapped(device, 64)?;
    Ok((Resources { kernels, lowp_kernels, staging, flags, ll, seq, status }, arch))
}

/// The first verdict, from the gathered records only (so identical on every rank).
fn verdict(l: &Local, recs: &[Record]) -> Result<(), String> {
    let me = &recs[l.rank];
    if recs.len() != l.nranks || !(2..=MAX_RANKS).contains(&l.nranks) {
        return Err(format!("{} ranks (rcclx kernels serve 2..={MAX_RANKS})", l.nranks));
    }
    for (p, r) in recs.iter().enumerate() {
        if r.magic != RECORD_MAGIC {
            return Err(format!("rank {p} runs another rcclx version"));
        }
        if r.capable == 0 {
            return Err(format!("rank {p} could not prepare (no kernels for its GPU or no memory)"));
        }
        if r.host != me.host {
            return Err("ranks on more than one host".into());
        }
        if r.arch != recs[0].arch
            || r.staging_bytes != recs[0].staging_bytes
            || r.max_blocks != recs[0].max_blocks
            || r.ll_max != recs[0].ll_max
        {
            return Err(format!("rank {p} differs in GPU arch or buffer sizes"));
        }
    }
    Ok(())
}

type PeerPtrs = (Vec<IpcMapping>, [u64; MAX_RANKS], [u64; MAX_RANKS], [u64; MAX_RANKS]);

/// Maps every peer's staging buffer and flags into this process.
fn map_peers(l: &Local, recs: &[Record]) -> Result<PeerPtrs, gpu::Error> {
    let rt = gpu::runtime()?;
    let me = &recs[l.rank];
    let mut maps = Vec::new();
    let (mut staging, mut flags, mut ll) = ([0u64; MAX_RANKS], [0u64; MAX_RANKS], [0u64; MAX_RANKS]);
    for (p, r) in recs.iter().enumerate() {
        if p == l.rank || r.pid == me.pid {
            // Same process (ncclCommInitAll, threads, nccl-tests -g N): raw pointers.
            if r.device != l.device {
                rt.enable_peer_access(l.device, r.device)?;
            }
            staging[p] = r.staging_ptr;
            flags[p] = r.flags_ptr;
            ll[p] = r.ll_ptr;
        } else {
            let s = rt.open_ipc(l.device, &gpu::IpcHandle(r.staging_ipc))?;
            let f = rt.open_ipc(l.device, &gpu::IpcHandle(r.flags_ipc))?;
            let i = rt.open_ipc(l.device, &gpu::IpcHandle(r.ll_ipc))?;
            staging[p] = s.ptr().0;
            flags[p] = f.ptr().0;
            ll[p] = i.ptr().0;
            maps.extend([s, f, i]);
        }
    }
    Ok((maps, staging, flags, ll))
}

/// All-gathers `bytes_of(local)` (`len` bytes each) over each local communicator, all in one
/// upstream group; returns, per communicator, the `nranks * len` gathered bytes.
fn exchange(locals: &[Local], bytes_of: impl Fn(usize, &Local) -> Vec<u8>, len: usize) -> Result<Vec<Vec<u8>>, Error> {
    let u = upstream::get().map_err(|code| Error { code, what: "no stock library".into() })?;
    let (Some(all_gather), Some(group_start), Some(group_end)) =
        (u.fns.ncclAllGather, u.fns.ncclGroupStart, u.fns.ncclGroupEnd)
    else {
        return Err(Error { code: ncclResult_t::InvalidUsage, what: "stock library lacks ncclAllGather".into() });
    };
    let rt = gpu::runtime().map_err(gpu_err)?;
    struct Slot {
        send: DeviceBuffer,
        recv: DeviceBuffer,
        stream: gpu::Stream,
        device: i32,
    }
    let mut slots = Vec::new();
    for (i, l) in locals.iter().enumerate() {
        let send = rt.alloc(l.device, len, MemKind::Normal).map_err(gpu_err)?;
        let recv = rt.alloc(l.device, len * l.nranks, MemKind::Normal).map_err(gpu_err)?;
        send.copy_from_host(&bytes_of(i, l)).map_err(gpu_err)?;
        let stream = rt.create_stream(l.device).map_err(gpu_err)?;
        slots.push(Slot { send, recv, stream, device: l.device });
    }
    let uint8 = ncclDataType_t::Uint8;
    // SAFETY: plain upstream calls with valid communicators, device buffers of the right
    // sizes and streams of the communicators' devices.
    let r = upstream::guarded(|| unsafe {
        let mut r = group_start();
        for (l, s) in locals.iter().zip(&slots) {
            if r.is_ok_or_in_progress() {
                r = all_gather(s.send.ptr().as_raw(), s.recv.ptr().as_raw(), len, uint8, l.comm, s.stream.as_raw());
            }
        }
        let e = group_end();
        if r.is_ok_or_in_progress() { e } else { r }
    });
    if r == ncclResult_t::InProgress {
        for l in locals {
            wait_comm_ready(l.comm)?;
        }
    } else {
        call("ncclAllGather (setup exchange)", r)?;
    }
    let timeout = Duration::from_millis(crate::config::get().timeout_ms);
    let mut out = Vec::new();
    for (l, s) in locals.iter().zip(slots) {
        let _g = rt.device_guard(s.device).map_err(gpu_err)?;
        if !rt.wait_stream(s.stream, timeout).map_err(gpu_err)? {
            return Err(Error {
                code: ncclResult_t::RemoteError,
                what: "setup exchange did not complete (a peer is missing)".into(),
            });
        }
        let mut v = vec![0u8; len * l.nranks];
        s.recv.copy_to_host(&mut v).map_err(gpu_err)?;
        // SAFETY: the stream is idle and not used again.
        let _ = unsafe { rt.destroy_stream(s.stream) };
        out.push(v);
    }
    Ok(out)
}

/// Polls a non-blocking communicator until its pending operations are enqueued.
fn wait_comm_ready(comm: ncclComm_t) -> Result<(), Error> {
    let u = upstream::get().map_err(|code| Error { code, what: "no stock library".into() })?;
    let Some(get) = u.fns.ncclCommGetAsyncError else {
        return Err(Error { code: ncclResult_t::InvalidUsage, what: "no ncclCommGetAsyncError".into() });
    };
    let deadline = Instant::now() + Duration::from_millis(crate::config::get().timeout_ms);
    loop {
        let mut state = ncclResult_t::InProgress;
        // SAFETY: valid communicator and out-pointer.
        call("ncclCommGetAsyncError", upstream::guarded(|| unsafe { get(comm, &mut state) }))?;
        match state {
            ncclResult_t::InProgress if Instant::now() < deadline => std::thread::yield_now(),
            ncclResult_t::Success => return Ok(()),
            other => return Err(Error { code: other, what: "communicator error during setup".into() }),
        }
    }
}

fn gpu_err(e: gpu::Error) -> Error {
    Error { code: ncclResult_t(e.nccl_code()), what: e.to_string() }
}
