//! The setup's exchanges: [`Transport`], the all-gather a setup runs its three exchanges through,
//! and the library's, [`StockTransport`]: an `ncclAllGather` of a few bytes per rank through the
//! stock communicator, for a batch of communicators in one stock group, and polled, never waited
//! for: [`Exchange::poll`] returns at once, so no thread blocks on work that it must itself do
//! later (one thread may own several ranks of a clique).
//!
//! Device buffers and streams come from a per-device pool that is never freed: freeing device
//! memory waits for the whole device, which could wait for another communicator's collective,
//! which could wait for a peer that is still in this very setup.

use parking_lot::Mutex;

use crate::error::Error;
use crate::gpu::{self, DeviceBuffer, MemKind};
use crate::types::{ncclComm_t, ncclDataType_t, ncclResult_t};
use crate::upstream;

/// One rank of a batch being set up: its communicator (the side table's key; a handle the
/// stock library made, or a harness's own), rank, rank count and device.
#[derive(Clone, Copy, Debug)]
pub struct Member {
    pub comm: ncclComm_t,
    pub rank: usize,
    pub nranks: usize,
    pub device: i32,
    /// NCCL's SM budget of the communicator (`maxCTAs`, `NCCL_MAX_CTAS`): most blocks of any
    /// grid (0: none).
    pub max_ctas: u32,
}

/// The all-gather through which a setup exchanges its records, then the records with the
/// buffers' handles, then every rank's "my mappings worked", for all members of a batch at
/// once. Polled, never waited for: one thread may own several ranks of a clique, so it must be
/// able to move all of them forward.
///
/// The library's is [`StockTransport`] (the stock communicator). A test harness that puts
/// several ranks on one GPU, which the stock library refuses, brings its own (pipes, files,
/// shared memory): the setup itself is the same.
pub trait Transport: Send {
    /// Starts one all-gather: `parts[i]` is what member `i` of the batch contributes (every part
    /// the same length, at most a few hundred bytes).
    fn start(&mut self, parts: Vec<Vec<u8>>) -> Result<(), Error>;
    /// Per member, what every rank of its clique contributed (in rank order, concatenated), once
    /// all of it has arrived; `None` before. Never blocks.
    fn poll(&mut self) -> Result<Option<Vec<Vec<u8>>>, Error>;
    /// Forgets member `i` (its communicator was aborted; its handle is freed next), also in the
    /// exchange in flight; later parts and results leave it out. `false`: not supported.
    fn drop_member(&mut self, _i: usize) -> bool {
        false
    }
}

/// The stock communicators' `ncclAllGather`, one stock group per exchange.
pub struct StockTransport {
    members: Vec<Member>,
    inflight: Option<Exchange>,
}

// SAFETY: the communicator handles are used only through the stock library, whose calls may come
// from any thread; the caller (one setup) uses the transport from one thread at a time.
unsafe impl Send for StockTransport {}

impl StockTransport {
    pub fn new(members: &[Member]) -> StockTransport {
        StockTransport { members: members.to_vec(), inflight: None }
    }
}

impl Transport for StockTransport {
    fn start(&mut self, parts: Vec<Vec<u8>>) -> Result<(), Error> {
        let len = parts.first().map_or(0, Vec::len);
        let parts = self
            .members
            .iter()
            .zip(parts)
            .map(|(m, bytes)| Part { comm: m.comm, device: m.device, nranks: m.nranks, bytes })
            .collect();
        // The previous exchange has completed (its streams are idle): its slots go back first.
        self.inflight = None;
        self.inflight = Some(Exchange::start(parts, len)?);
        Ok(())
    }

    fn poll(&mut self) -> Result<Option<Vec<Vec<u8>>>, Error> {
        match &mut self.inflight {
            Some(ex) => ex.poll(),
            None => Err(Error::internal("exchange polled before it started")),
        }
    }

    fn drop_member(&mut self, i: usize) -> bool {
        if i >= self.members.len() {
            return false;
        }
        self.members.remove(i);
        if let Some(ex) = &mut self.inflight
            && i < ex.parts.len()
        {
            let (_, _, slot) = ex.parts.remove(i);
            ex.enqueued.remove(i);
            // Its all-gather may still be in flight (the abort ends it): the slot is never
            // reused.
            std::mem::forget(slot);
        }
        true
    }
}

/// Largest `len * nranks` an exchange moves (records of under 1 KiB, `MAX_COMM_RANKS` ranks at most).
const SLOT_BYTES: usize = 1 << 20;

/// A device buffer pair and a stream, reused by later exchanges on the same device.
struct Slot {
    device: i32,
    send: DeviceBuffer,
    recv: DeviceBuffer,
    stream: gpu::Stream,
}

static POOL: Mutex<Vec<Slot>> = Mutex::new(Vec::new());

/// A slot of `device`: a pooled one, or a new one. A new one whose second buffer or stream
/// cannot be made keeps what it made (never freed: a free waits for the whole device, and
/// this runs under the lock of the pending setups, which every destroy and abort takes).
fn take_slot(device: i32) -> Result<Slot, Error> {
    use std::mem::ManuallyDrop as Kept;
    let mut pool = POOL.lock();
    if let Some(i) = pool.iter().position(|s| s.device == device) {
        return Ok(pool.swap_remove(i));
    }
    drop(pool);
    let rt = gpu::runtime()?;
    let send = Kept::new(rt.alloc(device, SLOT_BYTES, MemKind::Normal)?);
    let recv = Kept::new(rt.alloc(device, SLOT_BYTES, MemKind::Normal)?);
    let stream = rt.create_stream(device)?;
    Ok(Slot { device, send: Kept::into_inner(send), recv: Kept::into_inner(recv), stream })
}

/// One communicator's part of an exchange.
struct Part {
    comm: ncclComm_t,
    device: i32,
    nranks: usize,
    bytes: Vec<u8>,
}

/// An all-gather in flight.
struct Exchange {
    parts: Vec<(ncclComm_t, usize, Option<Slot>)>,
    /// Per part: the stock library has enqueued the operation (a non-blocking communicator
    /// reports `ncclInProgress` until then).
    enqueued: Vec<bool>,
    len: usize,
}

impl Exchange {
    /// Issues one all-gather of `len` bytes per rank on each part's communicator, all in one
    /// stock group. The parts' byte strings must all be `len` long.
    fn start(parts: Vec<Part>, len: usize) -> Result<Exchange, Error> {
        let u = upstream::get().map_err(|code| Error::new(code, "no stock library"))?;
        let (Some(all_gather), Some(group_start), Some(group_end)) =
            (u.fns.ncclAllGather, u.fns.ncclGroupStart, u.fns.ncclGroupEnd)
        else {
            return Err(Error::new(ncclResult_t::InvalidUsage, "stock library lacks ncclAllGather"));
        };
        let mut ex = Exchange { parts: Vec::new(), enqueued: vec![false; parts.len()], len };
        for p in &parts {
            if p.bytes.len() != len || len * p.nranks > SLOT_BYTES {
                return Err(Error::internal(format!("exchange of {} x {} bytes", p.nranks, p.bytes.len())));
            }
            let slot = take_slot(p.device)?;
            if let Err(e) = slot.send.copy_from_host(&p.bytes) {
                // Nothing of it is in flight: back to the pool, not freed.
                POOL.lock().push(slot);
                return Err(e.into());
            }
            ex.parts.push((p.comm, p.nranks, Some(slot)));
        }
        let uint8 = ncclDataType_t::Uint8;
        // SAFETY: plain stock calls with valid communicators, device buffers large enough for
        // `len` and `len * nranks` bytes, and streams of the communicators' devices.
        let r = upstream::guarded(|| unsafe {
            let mut r = group_start();
            for (comm, _, slot) in &ex.parts {
                let s = slot.as_ref().expect("slot present until drop");
                if r.is_ok_or_in_progress() {
                    r = all_gather(s.send.ptr().as_raw(), s.recv.ptr().as_raw(), len, uint8, *comm, s.stream.as_raw());
                }
            }
            let e = group_end();
            if r.is_ok_or_in_progress() { e } else { r }
        });
        if !r.is_ok_or_in_progress() {
            return Err(Error::upstream("ncclAllGather (rcclx setup exchange)", r));
        }
        Ok(ex)
    }

    /// The gathered bytes of every part (`nranks * len` each) once all have arrived; `None`
    /// while any is still in flight. Never blocks.
    fn poll(&mut self) -> Result<Option<Vec<Vec<u8>>>, Error> {
        let u = upstream::get().map_err(|code| Error::new(code, "no stock library"))?;
        let get_async = u.fns.ncclCommGetAsyncError.ok_or_else(|| Error::internal("no ncclCommGetAsyncError"))?;
        let rt = gpu::runtime()?;
        for (i, (comm, _, slot)) in self.parts.iter().enumerate() {
            if !self.enqueued[i] {
                let mut state = ncclResult_t::InProgress;
                // SAFETY: valid communicator and out-pointer to a local.
                let r = upstream::guarded(|| unsafe { get_async(*comm, &mut state) });
                Error::check("ncclCommGetAsyncError", r)?;
                match state {
                    ncclResult_t::Success => self.enqueued[i] = true,
                    ncclResult_t::InProgress => return Ok(None),
                    other => return Err(Error::new(other, "communicator error during rcclx setup")),
                }
            }
            let s = slot.as_ref().expect("slot present until drop");
            let _g = rt.device_guard(s.device)?;
            if !rt.query_stream(s.stream)? {
                return Ok(None);
            }
        }
        let mut out = Vec::new();
        for (_, nranks, slot) in &self.parts {
            let s = slot.as_ref().expect("slot present until drop");
            let mut v = vec![0u8; self.len * nranks];
            s.recv.copy_to_host(&mut v)?;
            out.push(v);
        }
        Ok(Some(out))
    }

    /// Whether the exchange's streams are idle (then its buffers may be reused).
    fn idle(&self) -> bool {
        let Ok(rt) = gpu::runtime() else { return true };
        self.parts.iter().all(|(_, _, slot)| {
            slot.as_ref()
                .is_none_or(|s| rt.device_guard(s.device).and_then(|_g| rt.query_stream(s.stream)).unwrap_or(true))
        })
    }
}

impl Drop for Exchange {
    /// Slots go back to the pool once idle; a slot whose all-gather never completed (a peer
    /// never came, the communicator was aborted) is kept out of the pool and never freed.
    fn drop(&mut self) {
        let idle = self.idle();
        let mut pool = POOL.lock();
        for (_, _, slot) in &mut self.parts {
            if let Some(s) = slot.take() {
                if idle {
                    pool.push(s);
                } else {
                    std::mem::forget(s);
                }
            }
        }
    }
}
