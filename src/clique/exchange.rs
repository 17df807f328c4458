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
            let enqueued = ex.enqueued.remove(i);
            // Its all-gather may still be in flight (the abort ends it).
            if let Some(slot) = slot {
                settle(slot, true, enqueued);
            }
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
/// Slots whose all-gather was still on their stream when their exchange ended (a peer never
/// came; the communicator is then aborted, which ends it): pooled once the stream is idle.
static ON_STREAM: Mutex<Vec<Slot>> = Mutex::new(Vec::new());

/// What becomes of an ended exchange's slot: `enqueued`, its all-gather is on its stream (a
/// non-blocking communicator may enqueue it later, into the slot, until then); `idle`, the
/// stream has nothing left.
#[derive(Debug, PartialEq, Eq)]
enum Fate {
    Pool,
    /// Pooled once its stream is idle.
    OnStream,
    /// Never reused: the stock library may still write into it (nor freed: a free waits for the
    /// whole device).
    Kept,
}

fn fate(submitted: bool, enqueued: bool, idle: bool) -> Fate {
    match (submitted, enqueued, idle) {
        (false, _, _) => Fate::Pool,
        (true, false, _) => Fate::Kept,
        (true, true, true) => Fate::Pool,
        (true, true, false) => Fate::OnStream,
    }
}

/// Puts a slot out of an ended exchange where its [`Fate`] says.
fn settle(slot: Slot, submitted: bool, enqueued: bool) {
    let idle = || {
        let rt = gpu::runtime().ok()?;
        rt.device_guard(slot.device).and_then(|_g| rt.query_stream(slot.stream)).ok()
    };
    match fate(submitted, enqueued, submitted && enqueued && idle() == Some(true)) {
        Fate::Pool => POOL.lock().push(slot),
        Fate::OnStream => ON_STREAM.lock().push(slot),
        Fate::Kept => std::mem::forget(slot),
    }
}

/// A slot of `device`: a pooled one (slots set aside whose stream is idle now first go back),
/// or a new one. A new one whose second buffer or stream cannot be made keeps what it made
/// (never freed: a free waits for the whole device, and this runs under the lock of the pending
/// setups, which every destroy and abort takes).
fn take_slot(device: i32) -> Result<Slot, Error> {
    use std::mem::ManuallyDrop as Kept;
    let rt = gpu::runtime()?;
    let idle = |s: &Slot| rt.device_guard(s.device).and_then(|_g| rt.query_stream(s.stream)).unwrap_or(false);
    let done: Vec<Slot> = {
        let mut on_stream = ON_STREAM.lock();
        let (done, busy) = std::mem::take(&mut *on_stream).into_iter().partition(idle);
        *on_stream = busy;
        done
    };
    let mut pool = POOL.lock();
    pool.extend(done);
    if let Some(i) = pool.iter().position(|s| s.device == device) {
        return Ok(pool.swap_remove(i));
    }
    drop(pool);
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
    /// The all-gathers were handed to the stock library.
    submitted: bool,
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
        let mut ex = Exchange { parts: Vec::new(), enqueued: vec![false; parts.len()], submitted: false, len };
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
        ex.submitted = true;
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
}

impl Drop for Exchange {
    /// Each slot goes back to the pool once its stream is idle, unless the stock library may
    /// still enqueue its all-gather (`Fate`).
    fn drop(&mut self) {
        for ((_, _, slot), &enqueued) in self.parts.iter_mut().zip(&self.enqueued) {
            if let Some(s) = slot.take() {
                settle(s, self.submitted, enqueued);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Fate, fate};

    /// Audit N9, N10: a slot is reused only where no all-gather can write into it any more; one
    /// still on its stream waits for the stream instead of being lost.
    #[test]
    fn a_slot_is_reused_only_once_nothing_can_write_into_it() {
        // Never handed to the stock library: nothing in flight.
        assert_eq!(fate(false, false, true), Fate::Pool);
        assert_eq!(fate(false, false, false), Fate::Pool);
        // Handed over but not enqueued yet (a non-blocking communicator): the stock library may
        // still enqueue it, however idle the stream is now.
        assert_eq!(fate(true, false, true), Fate::Kept);
        assert_eq!(fate(true, false, false), Fate::Kept);
        // Enqueued: reused once the stream is idle, set aside (not lost) until then.
        assert_eq!(fate(true, true, true), Fate::Pool);
        assert_eq!(fate(true, true, false), Fate::OnStream);
    }
}
