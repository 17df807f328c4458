//! Layer `dda`: Direct Data Access collectives (flat = one-shot, tree = two-shot) and the
//! communicator setup they need. Host-side orchestration only; the kernels are in
//! `hip_kernels/dda.cuh`.

use crate::intercept::{CallDesc, Route};
use crate::types::{Stream, ncclResult_t};

use std::ffi::c_void;
use std::fmt;

pub mod setup;

/// The caller's buffers and stream for one call.
#[derive(Clone, Copy, Debug)]
pub struct Buffers {
    pub send: *const c_void,
    pub recv: *mut c_void,
    pub stream: Stream,
}

/// An error of an rcclx algorithm, with the `ncclResult_t` it maps to.
#[derive(Debug)]
pub struct Error {
    pub code: ncclResult_t,
    pub what: String,
}

impl Error {
    pub fn code(&self) -> ncclResult_t {
        self.code
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (nccl result {})", self.what, self.code.0)
    }
}

/// The two DDA AllReduce kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algo {
    Flat = 0,
    Tree = 1,
    Ll = 2,
}

/// Grid of one call: identical on every rank, since it depends only on the count, the type,
/// the rank count and the agreed sizes (the per-block barriers rely on that).
pub fn grid(algo: Algo, count: u64, elem_bytes: u64, nranks: u64, half_bytes: u64, max_blocks: u32) -> (u64, u32, u32) {
    let vec = 16 / elem_bytes;
    if algo == Algo::Ll {
        // One pass of 8-byte units (the inbox holds the whole message).
        let units = (count * elem_bytes).div_ceil(8);
        let threads = setup::THREADS as u64;
        let blocks = units.div_ceil(threads).clamp(1, max_blocks as u64);
        let block_threads = if blocks == 1 { units.next_multiple_of(64).clamp(64, threads) } else { threads };
        return (count, blocks as u32, block_threads as u32);
    }
    let unit = match algo {
        Algo::Tree => vec * nranks,
        _ => vec,
    };
    let window = (half_bytes / elem_bytes / unit).max(1) * unit;
    let per_window = count.min(window);
    let vectors = match algo {
        Algo::Tree => per_window.div_ceil(nranks).div_ceil(vec),
        _ => per_window.div_ceil(vec),
    };
    let threads = setup::THREADS as u64;
    let blocks = vectors.div_ceil(threads).clamp(1, max_blocks as u64);
    let block_threads = if blocks == 1 { vectors.next_multiple_of(64).clamp(64, threads) } else { threads };
    (window, blocks as u32, block_threads as u32)
}

/// Runs `call` on the DDA kernel of `route` (LL, flat or tree; FP8 is `lowp::launch::run`).
pub fn run(setup: &setup::Setup, route: Route, call: &CallDesc, bufs: &Buffers) -> Result<(), Error> {
    let algo = match route {
        Route::DdaLl => Algo::Ll,
        Route::DdaFlat => Algo::Flat,
        Route::DdaTree => Algo::Tree,
        Route::Lowp | Route::Upstream(_) => {
            return Err(Error {
                code: ncclResult_t::InternalError,
                what: format!("route {route:?} is not a DDA route"),
            });
        }
    };
    let rt = crate::gpu::runtime().map_err(|e| Error { code: ncclResult_t(e.nccl_code()), what: e.to_string() })?;
    let elem = call.dtype.size().unwrap_or(1) as u64;
    let mut args = setup.args;
    let (window, blocks, threads) =
        grid(algo, call.count as u64, elem, setup.facts.nranks as u64, args.half_bytes, setup.max_blocks);
    args.send = bufs.send as u64;
    args.recv = bufs.recv as u64;
    args.count = call.count as u64;
    args.window_elems = window;
    let func = setup.kernel(algo, call.dtype, call.op.0);
    let gpu_err = |e: crate::gpu::Error| Error { code: ncclResult_t(e.nccl_code()), what: e.to_string() };
    let _guard = rt.device_guard(setup.device).map_err(gpu_err)?;
    let mut arg_ptr = &mut args as *mut setup::KernelArgs as *mut c_void;
    // SAFETY: the kernel takes one `RcclxDdaArgs` by value, whose layout `KernelArgs` mirrors
    // (size asserted on both sides); its pointers are this communicator's buffers and the
    // caller's send/recv buffers of `count` elements, on the stream's device.
    unsafe {
        // SAFETY: `stream` is the caller's cudaStream_t/hipStream_t.
        let stream = crate::gpu::Stream::from_raw(bufs.stream);
        rt.launch(func, (blocks, 1, 1), (threads, 1, 1), 0, stream, std::slice::from_mut(&mut arg_ptr))
    }
    .map_err(gpu_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_is_bounded_and_covers_the_message() {
        for algo in [Algo::Flat, Algo::Tree] {
            for n in [2u64, 3, 4, 7, 8] {
                for es in [1u64, 2, 4, 8] {
                    for count in [1u64, 7, 255, 1023, 4099, 1 << 20, (1 << 20) + 5, 3 << 22] {
                        let (window, blocks, threads) = grid(algo, count, es, n, 8 << 20, 64);
                        assert!((1..=64).contains(&blocks));
                        assert!((64..=512).contains(&threads) && threads % 64 == 0);
                        assert!(window * es <= 8 << 20 || window == 16 / es * if algo == Algo::Tree { n } else { 1 });
                        assert_eq!(window % (16 / es), 0);
                        if algo == Algo::Tree {
                            assert_eq!(window % (16 / es * n), 0);
                        }
                    }
                }
            }
        }
    }
}
