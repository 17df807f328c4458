//! The argument struct of every rcclx kernel (`RcclxArgs` in `hip_kernels/common.cuh`) and the
//! constants both sides share.

/// Largest clique rcclx's kernels serve (`RCCLX_MAX_RANKS`).
pub const MAX_RANKS: usize = 8;
/// Threads per block of every kernel (`RCCLX_THREADS`).
pub const THREADS: u32 = 512;
/// Words per block in a flag array (`RCCLX_FLAG_STRIDE`: one 128-byte line per block).
pub const FLAG_STRIDE: usize = 32;

/// Mirror of `RcclxArgs` (size asserted on both sides).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KernelArgs {
    pub send: u64,
    pub recv: u64,
    pub count: u64,
    pub window_elems: u64,
    pub half_bytes: u64,
    /// `u64::MAX`: no time limit.
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

/// The caller's buffers and stream for one call.
#[derive(Clone, Copy, Debug)]
pub struct Buffers {
    pub send: *const std::ffi::c_void,
    pub recv: *mut std::ffi::c_void,
    /// The caller's `cudaStream_t` / `hipStream_t`.
    pub stream: crate::gpu::Stream,
}

/// One kernel launch, planned by `dda` or `lowp` and run by `comm` (at once, or at the end of
/// the caller's group).
#[derive(Clone, Copy, Debug)]
pub struct Launch {
    pub func: crate::gpu::Function,
    /// (blocks, threads per block).
    pub grid: (u32, u32),
    pub args: KernelArgs,
}
