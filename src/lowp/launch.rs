//! Host side of the FP8 collectives (`hip_kernels/lowp.cuh`): window size, grid, launch.
//! They share the DDA communicator setup (staging, flags, window counters), so the only
//! per-call work is filling the argument struct.

use crate::dda::setup::{KernelArgs, Setup, THREADS};
use crate::dda::{Buffers, Error};
use crate::intercept::{CallDesc, Coll};
use crate::types::{ncclDataType_t, ncclResult_t};
use std::ffi::c_void;

/// Elements per FP8 block (one f32 scale each).
pub const BLOCK: u64 = 128;
/// Bytes on the wire per element: one code plus a quarter of a block's 4-byte scale.
const WIRE_NUM: u64 = 33;
const WIRE_DEN: u64 = 32;

pub const COLL_NAMES: [&str; 4] = ["allreduce", "allgather", "reducescatter", "alltoall"];
pub const TYPE_NAMES: [&str; 3] = ["f32", "bf16", "f16"];

/// Index of the kernel for `coll` and `dtype` in `Setup`'s FP8 kernel list.
pub fn kernel_index(coll: Coll, dtype: ncclDataType_t) -> Option<usize> {
    let t = match dtype {
        ncclDataType_t::Float32 => 0,
        ncclDataType_t::Bfloat16 => 1,
        ncclDataType_t::Float16 => 2,
        _ => return None,
    };
    Some(coll as usize * TYPE_NAMES.len() + t)
}

pub fn kernel_names() -> impl Iterator<Item = String> {
    COLL_NAMES.iter().flat_map(|c| TYPE_NAMES.iter().map(move |t| format!("rcclx_lowp_{c}_{t}")))
}

/// Windows a message is cut into at least (when that leaves windows of `MIN_WINDOW` or more):
/// the kernels overlap one window's link traffic with another's local work, which needs
/// several windows.
const PIPELINE_WINDOWS: u64 = 4;
const MIN_WINDOW: u64 = 2 << 20;

/// Window (elements per rank and window, as the kernel expects) and block count. Depends only
/// on the call and the agreed sizes, so it is identical on every rank. A staging half holds
/// `nranks` slots of a window (one per sending rank), or for AllReduce two regions of a window
/// each (incoming chunks, then reduced chunks).
pub fn grid(coll: Coll, count: u64, nranks: u64, half_bytes: u64, max_blocks: u32) -> (u64, u32) {
    let slots = match coll {
        Coll::AllReduce => 2,
        _ => nranks,
    };
    // Whole groups of 4 FP8 blocks per slot: the kernels store 4 scales at once.
    let unit = if coll == Coll::AllReduce { 4 * BLOCK * nranks } else { 4 * BLOCK };
    // AllReduce's region B starts 256-byte aligned (`rcclx_lowp_region_b`).
    let usable = if coll == Coll::AllReduce { half_bytes.saturating_sub(256) } else { half_bytes };
    let per_slot = usable * WIRE_DEN / WIRE_NUM / slots;
    let largest = (per_slot / unit).max(1) * unit;
    let pipelined = count.div_ceil(PIPELINE_WINDOWS).max(MIN_WINDOW).next_multiple_of(unit);
    let window = largest.min(pipelined);
    let blocks_per_phase = match coll {
        Coll::AllReduce => count.min(window).div_ceil(BLOCK).div_ceil(nranks),
        _ => count.min(window).div_ceil(BLOCK),
    };
    // Eight lanes per FP8 block, THREADS lanes per GPU block.
    let groups_per_block = THREADS as u64 / 8;
    let blocks = blocks_per_phase.div_ceil(groups_per_block).clamp(1, max_blocks as u64);
    (window, blocks as u32)
}

/// Launches the FP8 kernel for `call`.
pub fn run(setup: &Setup, call: &CallDesc, bufs: &Buffers) -> Result<(), Error> {
    let internal = |what: String| Error { code: ncclResult_t::InternalError, what };
    let func = kernel_index(call.coll, call.dtype)
        .and_then(|i| setup.lowp_kernels.get(i).copied())
        .ok_or_else(|| internal(format!("no FP8 kernel for {:?} {:?}", call.coll, call.dtype)))?;
    let rt = crate::gpu::runtime().map_err(gpu_err)?;
    let mut args: KernelArgs = setup.args;
    let (window, blocks) =
        grid(call.coll, call.count as u64, setup.facts.nranks as u64, args.half_bytes, setup.max_blocks);
    args.send = bufs.send as u64;
    args.recv = bufs.recv as u64;
    args.count = call.count as u64;
    args.window_elems = window;
    let _guard = rt.device_guard(setup.device).map_err(gpu_err)?;
    let mut arg_ptr = &mut args as *mut KernelArgs as *mut c_void;
    // SAFETY: the FP8 kernels take one `RcclxDdaArgs` by value, mirrored by `KernelArgs`
    // (size asserted on both sides); buffers are this communicator's and the caller's.
    unsafe {
        // SAFETY: `stream` is the caller's cudaStream_t/hipStream_t.
        let stream = crate::gpu::Stream::from_raw(bufs.stream);
        rt.launch(func, (blocks, 1, 1), (THREADS, 1, 1), 0, stream, std::slice::from_mut(&mut arg_ptr))
    }
    .map_err(gpu_err)
}

fn gpu_err(e: crate::gpu::Error) -> Error {
    Error { code: ncclResult_t(e.nccl_code()), what: e.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_fits_the_staging_half() {
        for coll in [Coll::AllReduce, Coll::AllGather, Coll::ReduceScatter, Coll::AllToAll] {
            for n in 2..=8u64 {
                let half = 8u64 << 20;
                let (w, b) = grid(coll, 1 << 30, n, half, 64);
                let (small, _) = grid(coll, 1 << 22, n, half, 64);
                assert!(small <= w && small * PIPELINE_WINDOWS >= (1 << 22).min(w), "{coll:?} n={n}: pipelined");
                assert!(n > 2 || small < w, "{coll:?} n={n}: 4 Mi elements are cut into more windows");
                let slots = if coll == Coll::AllReduce { 2 } else { n };
                let region = w + w / BLOCK * 4;
                let used = if coll == Coll::AllReduce { region.next_multiple_of(256) + region } else { slots * region };
                assert!(used <= half, "{coll:?} n={n} w={w}");
                assert_eq!(w % (4 * BLOCK), 0);
                if coll == Coll::AllReduce {
                    assert_eq!(w % (4 * BLOCK * n), 0);
                }
                assert!((1..=64).contains(&b));
            }
        }
    }

    #[test]
    fn kernel_table_is_complete() {
        assert_eq!(kernel_names().count(), 12);
        let names: Vec<String> = kernel_names().collect();
        assert_eq!(names[kernel_index(Coll::AllToAll, ncclDataType_t::Float16).unwrap()], "rcclx_lowp_alltoall_f16");
        assert_eq!(
            names[kernel_index(Coll::AllReduce, ncclDataType_t::Bfloat16).unwrap()],
            "rcclx_lowp_allreduce_bf16"
        );
        assert!(kernel_index(Coll::AllReduce, ncclDataType_t::Int32).is_none());
    }
}
