//! The argument struct of every rcclx kernel (`RcclxArgs` in `hip_kernels/common.cuh`) and the
//! constants both sides share.

/// Largest clique rcclx's kernels serve (`RCCLX_MAX_RANKS`).
pub const MAX_RANKS: usize = 8;
/// Largest communicator rcclx sets up (one clique of at most [`MAX_RANKS`] per host): the setup
/// exchanges every rank's record (`record::BYTES`) through one slot of `exchange.rs`.
pub const MAX_COMM_RANKS: usize = 1024;
/// Elements of one window of the low-precision rail step (every host's piece of it together,
/// each piece a whole number of 512-element groups): its codes take 33/32 bytes per element,
/// once as sent and once as received (34.6 MB of scratch). Large, because every window is two
/// stock calls and their fixed costs: on loopback sockets, messages of about 4 MB moved half as
/// fast as 30 MB ones (the multi-host design review's probe, one H100). The windows run one
/// after another: the stock calls of one rail run in issue order anyway, and the kernels take
/// microseconds against the transfers' milliseconds.
pub const RAIL_WINDOW: u64 = 16 << 20;
/// Bytes of a rank's rail scratch (low precision across hosts only).
pub const fn rail_scratch_bytes() -> usize {
    (2 * RAIL_WINDOW * 33 / 32) as usize
}
/// Threads per block of every kernel (`RCCLX_THREADS`).
pub const THREADS: u32 = 512;
/// Words per block in a flag array (`RCCLX_FLAG_STRIDE`: one 128-byte line per block).
pub const FLAG_STRIDE: usize = 32;

/// LL128 (`hip_kernels/ll128.cuh`): blocks of a call at most (`RCCLX_LL128_MAX_BLOCKS`), slots of
/// a (source, block) ring (`RCCLX_LL128_SLOTS`), bytes of a slot (`RCCLX_LL128_SLOT_BYTES`: one
/// 16-byte lane per thread), and the region after every rank's LL inbox that holds the counters
/// and the rings (`RCCLX_LL128_REGION_BYTES` with room for every source; the credits let any
/// message through a ring of fixed size).
pub const LL128_MAX_BLOCKS: u32 = 32;
pub const LL128_SLOTS: u64 = 4;
pub const LL128_SLOT_BYTES: u64 = THREADS as u64 * 16;
pub const LL128_REGION_BYTES: u64 = ll128_region_bytes(MAX_RANKS as u64);

/// The LL128 region of a clique of `nranks` ranks: the counters, then one ring per source rank
/// and block (`rcclx_ll128_lane_off` indexes the rings by the writer's clique rank).
pub const fn ll128_region_bytes(nranks: u64) -> u64 {
    LL128_MAX_BLOCKS as u64 * FLAG_STRIDE as u64 * 4 + nranks * LL128_MAX_BLOCKS as u64 * LL128_SLOTS * LL128_SLOT_BYTES
}
/// Payload bytes of an LL128 line on the smaller line (AMD's 64 bytes less the 8-byte flag;
/// NVIDIA's carries 120): what a grid function counts a step's bytes with.
pub const LL128_MIN_PAYLOAD: u64 = 56;

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
    /// The root of a rooted collective (`CallDesc::root`; 0 for the others).
    pub root: i32,
    pub pad: i32,
    /// ReduceScatter: elements between the input blocks (0: `count`).
    pub stride: u64,
    /// The rail step's reduce-out: where the sums go.
    pub aux: u64,
}
const _: () = assert!(std::mem::size_of::<KernelArgs>() == 304);

/// The caller's buffers and stream for one call.
#[derive(Clone, Copy, Debug)]
pub struct Buffers {
    pub send: *const std::ffi::c_void,
    pub recv: *mut std::ffi::c_void,
    /// The caller's `cudaStream_t` / `hipStream_t`.
    pub stream: crate::gpu::Stream,
}

/// Mirror of `RcclxA2avArgs` (`hip_kernels/alltoallv.cuh`): the argument of the GPU-resident
/// AllToAllv kernel, the common fields plus the segments and the device-side counts.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AllToAllvArgs {
    /// `send`, `recv` and `count` unused; `window_elems`: bytes per destination per window.
    pub base: KernelArgs,
    /// Start of each outgoing / incoming segment (packed: only `[0]`, the buffer).
    pub send: [u64; MAX_RANKS],
    pub recv: [u64; MAX_RANKS],
    /// Device pointers: `[nranks]` counts sent (read) and received (written).
    pub send_counts: u64,
    pub recv_counts: u64,
    /// Capacities, in units (see `hip_kernels/alltoallv.cuh` for per-peer and packed meaning).
    pub max_send: u64,
    pub max_recv: u64,
    /// Bytes per count unit.
    pub unit_bytes: u64,
    /// `A2AV_SEND_PACKED` | `A2AV_RECV_PACKED` | `A2AV_CODED`.
    pub packed: u32,
    pub pad: u32,
    /// Low precision: elements per row (blocks of 128 start at each row).
    pub row_elems: u64,
    /// `A2AV_CODED`: the f32 scale buffers (per source; packed receive side: only `[0]`).
    pub scales: [u64; MAX_RANKS],
}
const _: () = assert!(std::mem::size_of::<AllToAllvArgs>() == 552);

/// `RCCLX_A2AV_SEND_PACKED` / `RCCLX_A2AV_RECV_PACKED`: the segments lie back to back in one buffer.
pub const A2AV_SEND_PACKED: u32 = 1;
pub const A2AV_RECV_PACKED: u32 = 2;
/// `RCCLX_A2AV_CODED`: low precision delivered as FP8 codes and f32 scales, not decoded.
pub const A2AV_CODED: u32 = 4;
/// `RCCLX_A2AV_HDR`: bytes at the start of a staging half that carry the counts.
pub const A2AV_HEADER_BYTES: u64 = 128;

/// The one argument of a kernel: which struct depends on its family. Unboxed: built once per
/// call and copied into the launch (a box would allocate on every call).
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug)]
pub enum LaunchArgs {
    Collective(KernelArgs),
    AllToAllv(AllToAllvArgs),
}

impl LaunchArgs {
    /// The kernel table's name for this struct (a family's `args`).
    pub fn kind(&self) -> crate::kernel_table::Args {
        match self {
            LaunchArgs::Collective(_) => crate::kernel_table::Args::Coll,
            LaunchArgs::AllToAllv(_) => crate::kernel_table::Args::AllToAllv,
        }
    }
}

/// One kernel launch, planned by `dda` or `lowp` and run by `comm` (at once, or at the end of
/// the caller's group).
#[derive(Clone, Copy, Debug)]
pub struct Launch {
    /// The kernel's family (index in `kernel_table::FAMILIES`): its statistics route.
    pub family: usize,
    pub func: crate::gpu::Function,
    /// (blocks, threads per block).
    pub grid: (u32, u32),
    pub args: LaunchArgs,
}

/// What a kernel is given to do, as the grid functions of `dda` and `lowp` read it. Identical on every rank: it
/// depends only on the call, the rank count and the agreed sizes (the per-block barriers rely
/// on that).
#[derive(Clone, Copy, Debug)]
pub struct Work {
    /// Units of the kernel's count: elements for the reducing kernels, bytes for the others.
    pub count: u64,
    /// Bytes per unit.
    pub unit_bytes: u64,
    pub nranks: u64,
    /// Bytes of one parity half of a staging buffer.
    pub half_bytes: u64,
    pub max_blocks: u32,
}

/// A kernel's grid: units per window (see each kernel), blocks, threads per block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    pub window: u64,
    pub blocks: u32,
    pub threads: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The LL128 constants are the kernels' (`hip_kernels/ll128.cuh`, `common.cuh`).
    #[test]
    fn ll128_constants_mirror_the_kernels() {
        let header = include_str!("../../hip_kernels/ll128.cuh");
        let common = include_str!("../../hip_kernels/common.cuh");
        let define = |text: &str, name: &str| -> String {
            let head = format!("#define {name} ");
            let line = text.lines().find(|l| l.starts_with(&head)).unwrap_or_else(|| panic!("{name}"));
            line[head.len()..].split("//").next().unwrap().trim().to_string()
        };
        assert_eq!(define(header, "RCCLX_LL128_MAX_BLOCKS"), LL128_MAX_BLOCKS.to_string());
        assert_eq!(define(header, "RCCLX_LL128_SLOTS"), LL128_SLOTS.to_string());
        assert_eq!(define(header, "RCCLX_LL128_SLOT_BYTES"), "(RCCLX_THREADS * 16)");
        assert_eq!(define(common, "RCCLX_THREADS"), THREADS.to_string());
        assert_eq!(define(common, "RCCLX_FLAG_STRIDE"), FLAG_STRIDE.to_string());
        assert_eq!(define(common, "RCCLX_MAX_RANKS"), MAX_RANKS.to_string());
        assert_eq!(LL128_REGION_BYTES, (32 * 128) + 8 * 32 * 4 * 8192);
    }
}
