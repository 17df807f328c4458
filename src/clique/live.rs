//! An established clique: one communicator's share of the peer resources, with what every rank
//! agreed at setup (`setup.rs` builds it). Launches its kernels, reports their errors and, once
//! released, hands its memory to `teardown.rs`.

use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;

use crate::error::Error;
use crate::gpu::{self, Function};
use crate::intercept::CommFacts;
use crate::types::ncclResult_t;

use super::args::{AllToAllvArgs, KernelArgs, Launch, LaunchArgs};
use super::rail::Rail;
use super::teardown::{self, Fence, GraphRefs, Owned};

/// Where a clique sits in its communicator: the whole of it on one host, or one host's ranks of
/// a communicator spanning hosts, with this rank's rail (`rail.rs`).
pub struct Span {
    /// This rank and the rank count in the communicator (the clique's are its host's).
    pub comm_rank: usize,
    pub comm_nranks: usize,
    /// Hosts (1: the clique is the communicator) and this rank's host index (its rail rank).
    pub hosts: usize,
    pub host: usize,
    /// Each host's lowest rank, by host index.
    pub firsts: Vec<usize>,
    /// The rail, until the communicator ends ([`Clique::end_rail`] takes it under the write
    /// lock, so no reader holds its handle while it is freed).
    pub rail: parking_lot::RwLock<Option<Rail>>,
    /// The rail scratch (low precision across hosts): device address and bytes; (0, 0): none.
    pub scratch: (u64, u64),
}

/// One communicator's established clique. Dropping it releases it ([`Clique::release`]).
pub struct Clique {
    /// This rank and the rank count of the clique (its host's ranks, by local index).
    pub rank: usize,
    pub nranks: usize,
    pub device: i32,
    /// Agreed by every rank (rank 0's values): the input of `intercept::decide`.
    pub facts: CommFacts,
    pub max_blocks: u32,
    /// Arguments with every per-communicator field filled; per call only buffers and counts change.
    pub(super) base_args: KernelArgs,
    /// Multiprocessors (SMs or CUs) of each rank's GPU (agreed: equal on every rank).
    pub(super) multiprocessors: u32,
    /// Entries of the per-block flag and window-counter arrays: the largest grid of any kernel.
    pub(super) block_slots: u32,
    /// Most blocks of any kernel (0: none beyond the GPU's; see `Sharing::grid_cap`).
    pub(super) grid_cap: u32,
    pub(super) kernels: Arc<Vec<Kernel>>,
    pub(super) owned: Mutex<Option<Owned>>,
    /// The graphs that captured its kernels and still live: its memory outlives them.
    pub(super) graphs: Arc<GraphRefs>,
    /// A kernel was launched (eagerly or into a graph).
    pub(super) launched: std::sync::atomic::AtomicBool,
    pub(super) span: Span,
}

impl Clique {
    /// Where the clique sits in its communicator.
    pub fn span(&self) -> &Span {
        &self.span
    }

    /// `f` of the rail, until it has ended (`None` after).
    pub fn with_rail<R>(&self, f: impl FnOnce(&Rail) -> R) -> Option<R> {
        self.span.rail.read().as_ref().map(f)
    }

    /// The rail's asynchronous error (`ncclSuccess` without one): a peer that died mid-rail.
    pub fn rail_error(&self) -> ncclResult_t {
        self.with_rail(Rail::async_error).unwrap_or(ncclResult_t::Success)
    }

    /// Ends the rail, before the communicator's own end is forwarded (`abort`: aborted, as the
    /// communicator is). Once only; nothing is launched on it afterwards (the caller stopped
    /// this communicator's launches first).
    pub fn end_rail(&self, abort: bool) {
        let rail = self.span.rail.write().take();
        if let Some(rail) = rail {
            rail.end(abort);
        }
    }

    /// Most blocks of any kernel of this clique (0: no cap beyond the GPU's; `Sharing`).
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

    /// Launches `launch` on `stream`; `captured`: the stream is being captured into a graph,
    /// which then keeps this clique's memory alive until it is destroyed (`teardown.rs`).
    pub fn launch(&self, launch: Launch, stream: gpu::Stream, captured: bool) -> Result<(), Error> {
        // The kernel reads the struct its family declares: any other would be read as garbage.
        if !crate::kernel_table::takes(launch.family, launch.args.kind()) {
            let (family, args) = (launch.family, launch.args.kind());
            return Err(Error::internal(format!("kernel family {family} does not take {args:?} arguments")));
        }
        let rt = gpu::runtime()?;
        let _guard = rt.device_guard(self.device)?;
        self.launched.store(true, Ordering::Release);
        if captured {
            self.graphs.retain(stream);
        }
        let mut args = launch.args;
        let mut arg_ptr = match &mut args {
            LaunchArgs::Collective(a) => a as *mut KernelArgs as *mut c_void,
            LaunchArgs::AllToAllv(a) => a as *mut AllToAllvArgs as *mut c_void,
        };
        let (blocks, threads) = launch.grid;
        // The cap is the user's SM budget (NCCL_MAX_CTAS, maxCTAs) or the GPU's share: never over it.
        if self.grid_cap > 0 && blocks > self.grid_cap {
            return Err(Error::internal(format!("a grid of {blocks} blocks over the cap of {}", self.grid_cap)));
        }
        // SAFETY: every rcclx kernel takes one argument struct by value, `RcclxArgs` or (the
        // AllToAllv families) `RcclxA2avArgs`, whose layouts the two variants mirror (sizes
        // asserted on both sides); the variant is the one of the kernel's family (checked
        // above). Its pointers are this clique's buffers and the caller's buffers of the
        // declared sizes, on the stream's device.
        unsafe {
            rt.launch(launch.func, (blocks, 1, 1), (threads, 1, 1), 0, stream, std::slice::from_mut(&mut arg_ptr))
        }
        .map_err(Error::from)
    }

    /// Enqueues a copy of `bytes` bytes from `src` to `dst` on `stream` (a plan's copy step).
    pub fn copy(&self, dst: u64, src: u64, bytes: usize, stream: gpu::Stream) -> Result<(), Error> {
        let rt = gpu::runtime()?;
        let _guard = rt.device_guard(self.device)?;
        // SAFETY: a plan copies only between the call's buffers, inside their declared sizes and
        // apart (`plan::ag_layout`), on the stream's device.
        unsafe { rt.memcpy_async(gpu::DevicePtr(dst), gpu::DevicePtr(src), bytes, stream) }.map_err(Error::from)
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

    /// Ends the clique: its memory goes back to the pool once no kernel, no graph and no peer
    /// can touch it (`teardown.rs`). Never waits. `fence`: what says this rank's last kernel
    /// has ended (the communicator's order event). An abort has told the kernels to stop
    /// first ([`Clique::request_abort`]).
    pub fn release(&self, fence: Fence) {
        if let Some(owned) = self.owned.lock().take() {
            teardown::bury(owned, self.device, fence, self.graphs.clone());
        } else if let Fence::Event(e) = fence
            && let Ok(rt) = gpu::runtime()
        {
            // SAFETY: the caller handed the event over and uses it no more.
            let _ = unsafe { rt.destroy_event(e) };
        }
    }
}

impl Drop for Clique {
    /// A clique dropped without [`Clique::release`]: one that never launched is known quiet;
    /// otherwise nothing says when its kernels end, and its memory is kept.
    fn drop(&mut self) {
        let launched = self.launched.load(Ordering::Acquire);
        self.release(if launched { Fence::Unknown } else { Fence::Ended });
    }
}

/// A kernel of the device's code object.
#[derive(Clone, Copy, Debug)]
pub struct Kernel {
    pub func: Function,
    /// Blocks of `THREADS` threads one multiprocessor holds at once (its registers decide).
    pub blocks_per_multiprocessor: u32,
}
