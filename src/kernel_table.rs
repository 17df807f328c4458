//! THE table of rcclx's GPU kernels: collective x algorithm x element type x reduction op.
//!
//! Layer: base (plain data, `core` only). `build/main.rs` includes this very file to emit one
//! `extern "C"` kernel per entry into the code objects it compiles; [`crate::kernels`] uses it
//! to name and index those kernels, and [`crate::comm::stats`] to count calls per family. So a new
//! kernel family is one row of [`FAMILIES`] plus its device function in `hip_kernels/`.
//!
//! A kernel is named `ncclKernel_rcclx_<coll>_<algo>_<type>[_<op>]`, e.g.
//! `ncclKernel_rcclx_allreduce_ll_bf16_max`, `ncclKernel_rcclx_allgather_flat_bytes`; its index
//! in the module's kernel list is its position in [`kernel_names`] order. The `ncclKernel`
//! prefix is what trace tools take for communication kernels (HTA's `is_comm_kernel`:
//! `"ncclKernel" in name`; Chakra's PyTorch converter: `ncclKernel` or `ncclDevKernel`), so
//! overlap and communication time count rcclx's kernels; `rcclx` tells them from the stock
//! library's (`ncclDevKernel_AllReduce_Sum_bf16_RING_LL`). [`KERNEL_PREFIX`] is the one place.

/// An element type of the kernels: its short name, its C++ type in `hip_kernels/`, its
/// `ncclDataType_t` value and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ty {
    pub name: &'static str,
    pub cxx: &'static str,
    pub nccl: i32,
    pub bytes: usize,
}

/// Every type the reducing DDA kernels take, in `ncclDataType_t` order (0..=9). The FP8 types of
/// NCCL (10, 11) are not reduced by rcclx: those calls go to the stock library.
pub const REDUCE_TYPES: &[Ty] = &[
    Ty { name: "i8", cxx: "int8_t", nccl: 0, bytes: 1 },
    Ty { name: "u8", cxx: "uint8_t", nccl: 1, bytes: 1 },
    Ty { name: "i32", cxx: "int32_t", nccl: 2, bytes: 4 },
    Ty { name: "u32", cxx: "uint32_t", nccl: 3, bytes: 4 },
    Ty { name: "i64", cxx: "int64_t", nccl: 4, bytes: 8 },
    Ty { name: "u64", cxx: "uint64_t", nccl: 5, bytes: 8 },
    Ty { name: "f16", cxx: "rcclx_half", nccl: 6, bytes: 2 },
    Ty { name: "f32", cxx: "float", nccl: 7, bytes: 4 },
    Ty { name: "f64", cxx: "double", nccl: 8, bytes: 8 },
    Ty { name: "bf16", cxx: "rcclx_bf16", nccl: 9, bytes: 2 },
];

/// Input types of the low-precision (FP8 or INT8 on the wire) kernels.
pub const LOWP_TYPES: &[Ty] = &[
    Ty { name: "f32", cxx: "float", nccl: 7, bytes: 4 },
    Ty { name: "bf16", cxx: "rcclx_bf16", nccl: 9, bytes: 2 },
    Ty { name: "f16", cxx: "rcclx_half", nccl: 6, bytes: 2 },
];

/// Data-movement kernels (AllGather, AllToAll, Broadcast) move bytes: one instance serves every
/// type.
pub const BYTES: &[Ty] = &[Ty { name: "bytes", cxx: "uint8_t", nccl: -1, bytes: 1 }];

/// A reduction op: short name, the `RCCLX_<OP>` constant of `hip_kernels/common.cuh`, its
/// `ncclRedOp_t` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    pub name: &'static str,
    pub cxx: &'static str,
    pub nccl: i32,
}

/// `ncclSum` .. `ncclAvg`, in `ncclRedOp_t` order.
pub const REDUCE_OPS: &[Op] = &[
    Op { name: "sum", cxx: "RCCLX_SUM", nccl: 0 },
    Op { name: "prod", cxx: "RCCLX_PROD", nccl: 1 },
    Op { name: "max", cxx: "RCCLX_MAX", nccl: 2 },
    Op { name: "min", cxx: "RCCLX_MIN", nccl: 3 },
    Op { name: "avg", cxx: "RCCLX_AVG", nccl: 4 },
];

/// Kernels without an op argument (data movement; the low-precision kernels, which sum).
pub const NO_OP: &[Op] = &[];

/// One family of kernels: a collective's algorithm, instantiated for every type x op listed.
#[derive(Clone, Copy, Debug)]
pub struct Family {
    /// `allreduce`, `allgather`, `reducescatter`, `alltoall`, `alltoallv`, `broadcast`.
    pub coll: &'static str,
    /// `ll`, `flat`, `tree`, `lowp` (FP8), `int8`, `lowp_pair` / `int8_pair` (2-rank
    /// low-precision AllReduce), `dynamic`, `stream`, `stream_tree`.
    pub algo: &'static str,
    /// The device function template in `hip_kernels/` (`template <typename T[, int OP]>`).
    pub device_fn: &'static str,
    pub types: &'static [Ty],
    pub ops: &'static [Op],
    /// The C++ struct the kernel takes by value: [`COLL_ARGS`] or [`ALLTOALLV_ARGS`].
    pub args: &'static str,
    /// Blocks per multiprocessor the compiler must leave registers for (`__launch_bounds__`'s
    /// second argument on NVIDIA): 2 caps a thread at 64 registers, so that two blocks run per
    /// SM. Only where that measured faster and spills (almost) nothing.
    pub min_blocks: u32,
}

/// `RcclxArgs` (`hip_kernels/common.cuh`; Rust: `clique::KernelArgs`): every collective kernel.
pub const COLL_ARGS: &str = "RcclxArgs";
/// `RcclxA2avArgs` (`hip_kernels/alltoallv.cuh`; Rust: `clique::AllToAllvArgs`).
pub const ALLTOALLV_ARGS: &str = "RcclxA2avArgs";

impl Family {
    /// A family of one block per multiprocessor at least (`min_blocks` 1).
    pub const fn new(
        coll: &'static str,
        algo: &'static str,
        device_fn: &'static str,
        types: &'static [Ty],
        ops: &'static [Op],
        args: &'static str,
    ) -> Family {
        Family { coll, algo, device_fn, types, ops, args, min_blocks: 1 }
    }

    /// The same family with registers left for `n` blocks per multiprocessor.
    pub const fn min_blocks(self, n: u32) -> Family {
        Family { min_blocks: n, ..self }
    }

    /// Kernels of this family: one per type, times one per op if it has ops.
    pub const fn kernel_count(&self) -> usize {
        self.types.len() * if self.ops.is_empty() { 1 } else { self.ops.len() }
    }
}

/// Every kernel family, in module order. `coll` and `algo` name the statistics route too.
pub const FAMILIES: &[Family] = &[
    Family::new("allreduce", "ll", "rcclx_allreduce_ll", REDUCE_TYPES, REDUCE_OPS, COLL_ARGS),
    Family::new("allreduce", "flat", "rcclx_allreduce_flat", REDUCE_TYPES, REDUCE_OPS, COLL_ARGS),
    Family::new("allreduce", "tree", "rcclx_allreduce_tree", REDUCE_TYPES, REDUCE_OPS, COLL_ARGS),
    Family::new("allgather", "ll", "rcclx_allgather_ll", BYTES, NO_OP, COLL_ARGS),
    Family::new("allgather", "flat", "rcclx_allgather_flat", BYTES, NO_OP, COLL_ARGS),
    Family::new("reducescatter", "ll", "rcclx_reducescatter_ll", REDUCE_TYPES, REDUCE_OPS, COLL_ARGS),
    Family::new("reducescatter", "flat", "rcclx_reducescatter_flat", REDUCE_TYPES, REDUCE_OPS, COLL_ARGS),
    Family::new("alltoall", "ll", "rcclx_alltoall_ll", BYTES, NO_OP, COLL_ARGS),
    Family::new("alltoall", "flat", "rcclx_alltoall_flat", BYTES, NO_OP, COLL_ARGS),
    Family::new("allreduce", "lowp", "rcclx_allreduce_lowp", LOWP_TYPES, NO_OP, COLL_ARGS),
    Family::new("allgather", "lowp", "rcclx_allgather_lowp", LOWP_TYPES, NO_OP, COLL_ARGS),
    Family::new("reducescatter", "lowp", "rcclx_reducescatter_lowp", LOWP_TYPES, NO_OP, COLL_ARGS),
    Family::new("alltoall", "lowp", "rcclx_alltoall_lowp", LOWP_TYPES, NO_OP, COLL_ARGS),
    // GPU-resident AllToAllv (counts in device memory): rcclx's own API, not an NCCL collective.
    Family::new("alltoallv", "dynamic", "rcclx_alltoallv_dynamic", BYTES, NO_OP, ALLTOALLV_ARGS),
    // The low-precision kernels again with the INT8 codec (`RCCLX_LOW_PRECISION_CODEC=int8`).
    Family::new("allreduce", "int8", "rcclx_allreduce_int8", LOWP_TYPES, NO_OP, COLL_ARGS),
    Family::new("allgather", "int8", "rcclx_allgather_int8", LOWP_TYPES, NO_OP, COLL_ARGS),
    Family::new("reducescatter", "int8", "rcclx_reducescatter_int8", LOWP_TYPES, NO_OP, COLL_ARGS),
    // AllReduce's 2-rank form (a gather of codes, `rcclx_allreduce_pair_coded`), one kernel per codec.
    Family::new("allreduce", "lowp_pair", "rcclx_allreduce_lowp_pair", LOWP_TYPES, NO_OP, COLL_ARGS).min_blocks(2),
    Family::new("allreduce", "int8_pair", "rcclx_allreduce_int8_pair", LOWP_TYPES, NO_OP, COLL_ARGS).min_blocks(2),
    Family::new("alltoall", "int8", "rcclx_alltoall_int8", LOWP_TYPES, NO_OP, COLL_ARGS),
    // DDA Broadcast (`hip_kernels/broadcast.cuh`; the root is `KernelArgs::root`).
    Family::new("broadcast", "ll", "rcclx_broadcast_ll", BYTES, NO_OP, COLL_ARGS),
    Family::new("broadcast", "flat", "rcclx_broadcast_flat", BYTES, NO_OP, COLL_ARGS),
    // The GPU-resident AllToAllv with FP8 / INT8 on the wire (`rcclxAllToAllvOptions::wire`).
    Family::new("alltoallv", "lowp", "rcclx_alltoallv_lowp", LOWP_TYPES, NO_OP, ALLTOALLV_ARGS),
    Family::new("alltoallv", "int8", "rcclx_alltoallv_int8", LOWP_TYPES, NO_OP, ALLTOALLV_ARGS),
    // The stream protocol (`hip_kernels/stream.cuh`, `RCCLX_PROTO=stream`): pipelined rings.
    Family::new("allreduce", "stream", "rcclx_allreduce_stream", REDUCE_TYPES, REDUCE_OPS, COLL_ARGS),
    Family::new("allgather", "stream", "rcclx_allgather_stream", BYTES, NO_OP, COLL_ARGS),
    Family::new("reducescatter", "stream", "rcclx_reducescatter_stream", REDUCE_TYPES, REDUCE_OPS, COLL_ARGS),
    Family::new("alltoall", "stream", "rcclx_alltoall_stream", BYTES, NO_OP, COLL_ARGS),
    Family::new("allreduce", "stream_tree", "rcclx_allreduce_stream_tree", REDUCE_TYPES, REDUCE_OPS, COLL_ARGS),
];

/// The algorithms of the low-precision families (both codecs, both AllReduce forms).
pub const LOW_PRECISION_ALGOS: &[&str] = &["lowp", "int8", "lowp_pair", "int8_pair"];

/// The index in [`FAMILIES`] of the family `coll`.`algo`.
pub fn family_index(coll: &str, algo: &str) -> Option<usize> {
    FAMILIES.iter().position(|f| f.coll == coll && f.algo == algo)
}

/// Index of the first kernel of family `f` in the module's kernel list.
pub const fn family_start(f: usize) -> usize {
    let mut i = 0;
    let mut start = 0;
    while i < f {
        start += FAMILIES[i].kernel_count();
        i += 1;
    }
    start
}

/// Number of kernels in all.
pub const KERNEL_COUNT: usize = family_start(FAMILIES.len());

/// Index of the kernel of family `f` for `ncclDataType_t` `dtype` and `ncclRedOp_t` `op`
/// (ignored by families without ops; any type for byte families), or `None` if the family has
/// no such kernel.
pub fn kernel_index(f: usize, dtype: i32, op: i32) -> Option<usize> {
    let fam = FAMILIES.get(f)?;
    let t = if fam.types.len() == 1 && fam.types[0].nccl < 0 {
        0
    } else {
        fam.types.iter().position(|t| t.nccl == dtype)?
    };
    let within = if fam.ops.is_empty() { t } else { t * fam.ops.len() + fam.ops.iter().position(|o| o.nccl == op)? };
    Some(family_start(f) + within)
}

/// Every kernel as (family index, type, op), in index order.
pub fn kernels() -> impl Iterator<Item = (usize, &'static Ty, Option<&'static Op>)> {
    FAMILIES.iter().enumerate().flat_map(|(f, fam)| {
        fam.types.iter().flat_map(move |t| {
            let ops: Vec<Option<&'static Op>> =
                if fam.ops.is_empty() { vec![None] } else { fam.ops.iter().map(Some).collect() };
            ops.into_iter().map(move |o| (f, t, o))
        })
    })
}

/// The start of every kernel's name (see the module doc).
pub const KERNEL_PREFIX: &str = "ncclKernel_rcclx_";

/// The `extern "C"` name of a kernel.
pub fn kernel_name(f: usize, t: &Ty, op: Option<&Op>) -> String {
    let fam = &FAMILIES[f];
    match op {
        Some(op) => format!("{KERNEL_PREFIX}{}_{}_{}_{}", fam.coll, fam.algo, t.name, op.name),
        None => format!("{KERNEL_PREFIX}{}_{}_{}", fam.coll, fam.algo, t.name),
    }
}

/// Every kernel name, in index order.
pub fn kernel_names() -> impl Iterator<Item = String> {
    kernels().map(|(f, t, o)| kernel_name(f, t, o))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trace tools classify rcclx's kernels as communication (HTA: `"ncclKernel" in name`;
    /// Chakra: `ncclKernel` or `ncclDevKernel`), and every name is unique.
    #[test]
    fn names_are_communication_kernels_to_trace_tools() {
        let names: Vec<String> = kernel_names().collect();
        assert_eq!(names.len(), KERNEL_COUNT);
        let hta = |n: &str| n.contains("ncclKernel");
        let chakra = |n: &str| n.contains("ncclKernel") || n.contains("ncclDevKernel");
        assert!(names.iter().all(|n| hta(n) && chakra(n) && n.starts_with(KERNEL_PREFIX)), "{names:?}");
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len());
        assert_eq!(names[0], "ncclKernel_rcclx_allreduce_ll_i8_sum");
    }
}
