//! Rails: the hidden stock communicators of a clique whose communicator spans hosts. Rail `l`
//! holds the ranks of local index `l` of every host (rank = host index), made by
//! `ncclCommSplit` of the user's communicator on every rank at the same point of its setup
//! (every rank or none: the verdict decides, from the gathered records). The child is blocking,
//! so that rcclx's steps on it never return `ncclInProgress`; it shares the parent's resources
//! only where the parent's own configuration says so (NCCL decides sharing from the parent's
//! `splitShare`). It is destroyed (or aborted) before its parent.

use std::ffi::c_int;

use crate::error::Error;
use crate::gpu;
use crate::types::{NCCL_API_MAGIC, NCCL_CONFIG_UNDEF_INT, NCCL_SPLIT_NOCOLOR, ncclComm_t, ncclConfig_t, ncclResult_t};
use crate::upstream;

/// NCCL's version the config struct below is filled for (`NCCL_VERSION(2, 18, 0)`: the first
/// with `splitShare`).
const CONFIG_VERSION: u32 = 21800;

/// One rank's rail: a stock communicator of the ranks of its local index, one per host.
#[derive(Debug)]
pub struct Rail {
    pub comm: ncclComm_t,
}

// SAFETY: a stock communicator handle, used only through the stock library, whose calls may come
// from any thread; the clique's callers order its calls (as the user orders the parent's).
unsafe impl Send for Rail {}
// SAFETY: as for Send: `&Rail` only reads the handle.
unsafe impl Sync for Rail {}

fn stock() -> Result<&'static upstream::Upstream, Error> {
    upstream::get().map_err(|code| Error::new(code, "no stock library"))
}

fn missing(name: &str) -> Error {
    Error::new(ncclResult_t::InvalidUsage, format!("stock library lacks {name}"))
}

/// The child's configuration: blocking. Sized and versioned as NCCL 2.18's struct (the fields up
/// to `splitShare`), as a program built against its header passes it: every later stock library
/// reads the rest as unset.
fn config() -> ncclConfig_t {
    // SAFETY: ncclConfig_t is plain integers and pointers; all-zero is a valid value.
    let mut c: ncclConfig_t = unsafe { std::mem::zeroed() };
    c.size = std::mem::offset_of!(ncclConfig_t, trafficClass).next_multiple_of(8);
    c.magic = NCCL_API_MAGIC;
    c.version = CONFIG_VERSION;
    for f in [&mut c.cgaClusterSize, &mut c.minCTAs, &mut c.maxCTAs] {
        *f = NCCL_CONFIG_UNDEF_INT;
    }
    c.blocking = 1;
    c.splitShare = NCCL_CONFIG_UNDEF_INT;
    c
}

/// Issues the split of every parent in `splits` (parent, color, key; color
/// `NCCL_SPLIT_NOCOLOR`: this rank takes no rail), in one stock group: one thread may own
/// several ranks. Blocking parents return when every child exists; a non-blocking parent's
/// child appears once the parent reports ready ([`Pending::poll`]).
pub fn split(splits: &[(ncclComm_t, Option<usize>, usize)]) -> Result<Vec<Pending>, Error> {
    let u = stock()?;
    let (Some(start), Some(end), Some(split)) = (u.fns.ncclGroupStart, u.fns.ncclGroupEnd, u.fns.ncclCommSplit) else {
        return Err(missing("ncclCommSplit"));
    };
    let mut pending: Vec<Pending> = splits
        .iter()
        .map(|&(parent, color, _)| Pending {
            parent,
            child: Box::into_raw(Box::new(std::ptr::null_mut())),
            wanted: color.is_some(),
        })
        .collect();
    let mut configs: Vec<ncclConfig_t> = splits.iter().map(|_| config()).collect();
    // SAFETY: stock communicators that are ready; out-pointers and configs that live until the
    // group ends (boxed: a non-blocking parent writes the child later).
    let r = upstream::guarded(|| unsafe {
        let mut first = start();
        for ((p, &(parent, color, key)), cfg) in pending.iter_mut().zip(splits).zip(&mut configs) {
            let color = color.map_or(NCCL_SPLIT_NOCOLOR, |c| c as c_int);
            let r = split(parent, color, key as c_int, p.child, cfg);
            if first.is_ok() && !r.is_ok_or_in_progress() {
                first = r;
            }
        }
        let e = end();
        if first.is_ok() { e } else { first }
    });
    if !r.is_ok_or_in_progress() {
        return Err(Error::new(r, "ncclCommSplit of the rails failed"));
    }
    Ok(pending)
}

/// A rail being made.
pub struct Pending {
    parent: ncclComm_t,
    /// Where the stock library writes the child (a leaked box: it may do so after `split`
    /// returned, so it is freed only once the split has ended, and leaked otherwise).
    child: *mut ncclComm_t,
    /// This rank asked for a rail (not `NCCL_SPLIT_NOCOLOR`).
    wanted: bool,
}

// SAFETY: as `Rail`.
unsafe impl Send for Pending {}

impl Pending {
    /// `None` while the parent is still splitting; then the rail, or `Some(None)` when this
    /// rank took none or the split failed (logged).
    pub fn poll(&mut self) -> Option<Option<Rail>> {
        if self.child.is_null() {
            return Some(None); // polled to its end before
        }
        let Some(get) = upstream::get().ok().and_then(|u| u.fns.ncclCommGetAsyncError) else {
            self.child = std::ptr::null_mut(); // leaked: nothing says the split has ended
            return Some(None);
        };
        let mut state = ncclResult_t::InProgress;
        // SAFETY: the parent is a live stock communicator; the out-pointer is a local.
        let r = upstream::guarded(|| unsafe { get(self.parent, &mut state) });
        match (r, state) {
            (ncclResult_t::Success, ncclResult_t::InProgress) => return None,
            (ncclResult_t::Success, ncclResult_t::Success) => {}
            _ => {
                // The box stays leaked: nothing says the stock library is done with it.
                tracing::warn!("comm {:p}: the rail's split failed ({} {})", self.parent, r.0, state.0);
                self.child = std::ptr::null_mut();
                return Some(None);
            }
        }
        // SAFETY: the split has ended: the stock library wrote the child (or nothing) and
        // never touches the box again; it came from `Box::into_raw` and is taken once.
        let child = *unsafe { Box::from_raw(std::mem::replace(&mut self.child, std::ptr::null_mut())) };
        if child.is_null() {
            if self.wanted {
                tracing::warn!("comm {:p}: ncclCommSplit gave no rail", self.parent);
            }
            return Some(None);
        }
        Some(Some(Rail { comm: child }))
    }
}

impl Rail {
    /// The rail's asynchronous error (a peer that died mid-rail: `ncclRemoteError`, ...).
    pub fn async_error(&self) -> ncclResult_t {
        upstream::async_error(self.comm)
    }

    /// Ends the rail before its parent: `abort` as `ncclCommAbort` (its kernels may wait on a
    /// dead peer), else `ncclCommDestroy`. The caller ends it once and uses it no more.
    pub fn end(&self, abort: bool) {
        let Ok(u) = upstream::get() else { return };
        let f = if abort { u.fns.ncclCommAbort } else { u.fns.ncclCommDestroy };
        if let Some(f) = f {
            // SAFETY: the rail's handle, used no more after this.
            let r = upstream::guarded(|| unsafe { f(self.comm) });
            if !r.is_ok() {
                tracing::warn!("rail {:p}: {} returned {}", self.comm, if abort { "abort" } else { "destroy" }, r.0);
            }
        }
    }
}

/// The stock steps a plan takes on a rail (or another stock communicator), on the caller's
/// stream.
#[derive(Clone, Copy, Debug)]
pub enum StockStep {
    /// `ncclAllReduce` of `count` elements.
    AllReduce { send: u64, recv: u64, count: usize, dtype: crate::types::ncclDataType_t, op: crate::types::ncclRedOp_t },
    /// `ncclReduce` of `count` elements to rail rank `root`.
    Reduce {
        send: u64,
        recv: u64,
        count: usize,
        dtype: crate::types::ncclDataType_t,
        op: crate::types::ncclRedOp_t,
        root: usize,
    },
    /// `ncclAllGather` of `bytes` per rank.
    AllGather { send: u64, recv: u64, bytes: usize },
    /// `ncclBroadcast` of `count` elements from rail rank `root`.
    Broadcast { send: u64, recv: u64, count: usize, dtype: crate::types::ncclDataType_t, root: usize },
    /// An all-to-all of `bytes` per peer as grouped `ncclSend`/`ncclRecv` (every stock
    /// version has them): block `p` of `send` goes to rank `p`, block `p` of `recv` comes
    /// from it; this rank's own block is not moved.
    AllToAll { send: u64, recv: u64, bytes: usize, nranks: usize, rank: usize },
}

impl StockStep {
    /// Enqueues the step on `rail` and `stream`.
    pub fn run(&self, rail: &Rail, stream: gpu::Stream) -> Result<(), Error> {
        let comm = rail.comm;
        use crate::types::ncclDataType_t;
        let u = stock()?;
        let f = &u.fns;
        let ok = |r: ncclResult_t, what: &str| {
            if r.is_ok() { Ok(()) } else { Err(Error::new(r, format!("stock {what} on a rail failed"))) }
        };
        let p = |a: u64| a as usize as *mut std::ffi::c_void;
        let stream = stream.as_raw();
        match *self {
            StockStep::AllReduce { send, recv, count, dtype, op } => {
                let g = f.ncclAllReduce.ok_or_else(|| missing("ncclAllReduce"))?;
                // SAFETY: device buffers of `count` elements the plan owns or was given; a live
                // stock communicator and the caller's stream.
                ok(upstream::guarded(|| unsafe { g(p(send), p(recv), count, dtype, op, comm, stream) }), "AllReduce")
            }
            StockStep::Reduce { send, recv, count, dtype, op, root } => {
                let g = f.ncclReduce.ok_or_else(|| missing("ncclReduce"))?;
                // SAFETY: as above; only the root writes `recv`.
                let code =
                    upstream::guarded(|| unsafe { g(p(send), p(recv), count, dtype, op, root as c_int, comm, stream) });
                ok(code, "Reduce")
            }
            StockStep::AllGather { send, recv, bytes } => {
                let g = f.ncclAllGather.ok_or_else(|| missing("ncclAllGather"))?;
                // SAFETY: as above, `bytes` and `bytes x ranks` bytes.
                ok(
                    upstream::guarded(|| unsafe { g(p(send), p(recv), bytes, ncclDataType_t::Uint8, comm, stream) }),
                    "AllGather",
                )
            }
            StockStep::Broadcast { send, recv, count, dtype, root } => {
                let g = f.ncclBroadcast.ok_or_else(|| missing("ncclBroadcast"))?;
                // SAFETY: as above; only the root reads `send`.
                ok(
                    upstream::guarded(|| unsafe { g(p(send), p(recv), count, dtype, root as c_int, comm, stream) }),
                    "Broadcast",
                )
            }
            StockStep::AllToAll { send, recv, bytes, nranks, rank } => {
                let (Some(start), Some(end), Some(s), Some(r)) =
                    (f.ncclGroupStart, f.ncclGroupEnd, f.ncclSend, f.ncclRecv)
                else {
                    return Err(missing("ncclSend/ncclRecv"));
                };
                // SAFETY: as above, `bytes x ranks` bytes each.
                let code = upstream::guarded(|| unsafe {
                    let mut first = start();
                    for peer in (0..nranks).filter(|&q| q != rank) {
                        let off = (peer * bytes) as u64;
                        for c in [
                            s(p(send + off), bytes, ncclDataType_t::Uint8, peer as c_int, comm, stream),
                            r(p(recv + off), bytes, ncclDataType_t::Uint8, peer as c_int, comm, stream),
                        ] {
                            if first.is_ok() {
                                first = c;
                            }
                        }
                    }
                    let e = end();
                    if first.is_ok() { e } else { first }
                });
                ok(code, "Send/Recv")
            }
        }
    }
}
