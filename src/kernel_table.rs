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
    /// `allreduce`, `allgather`, `reducescatter`, `alltoall`, `alltoallv`, `broadcast`, `reduce`.
    pub coll: &'static str,
    /// `ll`, `flat`, `tree`, `lowp` (FP8), `int8`, `lowp_pair` / `int8_pair` (2-rank
    /// low-precision AllReduce), `dynamic`, `stream`, `stream_tree`, `ll128`.
    pub algo: &'static str,
    /// The device function template in `hip_kernels/` (`template <typename T[, int OP]>`).
    pub device_fn: &'static str,
    pub types: &'static [Ty],
    pub ops: &'static [Op],
    /// The struct the kernels take by value ([`COLL_ARGS`] or [`ALLTOALLV_ARGS`]); a launch
    /// must pass the same (`Clique::launch` checks it).
    pub args: Args,
    /// The family's route number: its statistics route (`RCCLX_ROUTE_*` in `include/rcclx.h`,
    /// `rcclxRouteName`). Explicit and stable, not the row's position: set with
    /// [`Family::route`], never changed, never reused by another family (route 0 is
    /// "forwarded"); checked at compile time and by the tests below.
    pub route: u8,
    /// Blocks per multiprocessor the compiler must leave registers for (`__launch_bounds__`'s
    /// second argument on NVIDIA): 2 caps a thread at 64 registers, so that two blocks run per
    /// SM. Only where that measured faster and spills (almost) nothing.
    pub min_blocks: u32,
}

/// The argument struct a family's kernels take by value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Args {
    /// `RcclxArgs` (`hip_kernels/common.cuh`; Rust: `clique::KernelArgs`): every collective kernel.
    Coll,
    /// `RcclxA2avArgs` (`hip_kernels/alltoallv.cuh`; Rust: `clique::AllToAllvArgs`).
    AllToAllv,
}

impl Args {
    /// The C++ struct's name.
    pub const fn cxx(self) -> &'static str {
        match self {
            Args::Coll => "RcclxArgs",
            Args::AllToAllv => "RcclxA2avArgs",
        }
    }
}

/// The `args` of the collective families (short for the rows).
pub const COLL_ARGS: Args = Args::Coll;
/// The `args` of the GPU-resident AllToAllv families.
pub const ALLTOALLV_ARGS: Args = Args::AllToAllv;

impl Family {
    /// A family of one block per multiprocessor at least (`min_blocks` 1).
    pub const fn new(
        coll: &'static str,
        algo: &'static str,
        device_fn: &'static str,
        types: &'static [Ty],
        ops: &'static [Op],
        args: Args,
    ) -> Family {
        Family { coll, algo, device_fn, types, ops, args, route: 0, min_blocks: 1 }
    }

    /// The same family with route number `n` (every row needs its own, see [`Family::route`]).
    pub const fn route(self, n: u8) -> Family {
        Family { route: n, ..self }
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

/// Every kernel family, in module order (the order of the kernels in the code objects, nothing
/// else). `coll` and `algo` name the family's kernels and its statistics route; `route` numbers
/// it. A new family is a row appended with the next free route number.
pub const FAMILIES: &[Family] = &[
    Family::new("allreduce", "ll", "rcclx_allreduce_ll", REDUCE_TYPES, REDUCE_OPS, COLL_ARGS).route(1),
    Family::new("allreduce", "flat", "rcclx_allreduce_flat", REDUCE_TYPES, REDUCE_OPS, COLL_ARGS).route(2),
    Family::new("allreduce", "tree", "rcclx_allreduce_tree", REDUCE_TYPES, REDUCE_OPS, COLL_ARGS).route(3),
    Family::new("allgather", "ll", "rcclx_allgather_ll", BYTES, NO_OP, COLL_ARGS).route(4),
    Family::new("allgather", "flat", "rcclx_allgather_flat", BYTES, NO_OP, COLL_ARGS).route(5),
    Family::new("reducescatter", "ll", "rcclx_reducescatter_ll", REDUCE_TYPES, REDUCE_OPS, COLL_ARGS).route(6),
    Family::new("reducescatter", "flat", "rcclx_reducescatter_flat", REDUCE_TYPES, REDUCE_OPS, COLL_ARGS).route(7),
    Family::new("alltoall", "ll", "rcclx_alltoall_ll", BYTES, NO_OP, COLL_ARGS).route(8),
    Family::new("alltoall", "flat", "rcclx_alltoall_flat", BYTES, NO_OP, COLL_ARGS).route(9),
    Family::new("allreduce", "lowp", "rcclx_allreduce_lowp", LOWP_TYPES, NO_OP, COLL_ARGS).route(10),
    Family::new("allgather", "lowp", "rcclx_allgather_lowp", LOWP_TYPES, NO_OP, COLL_ARGS).route(11),
    Family::new("reducescatter", "lowp", "rcclx_reducescatter_lowp", LOWP_TYPES, NO_OP, COLL_ARGS).route(12),
    Family::new("alltoall", "lowp", "rcclx_alltoall_lowp", LOWP_TYPES, NO_OP, COLL_ARGS).route(13),
    // GPU-resident AllToAllv (counts in device memory): rcclx's own API, not an NCCL collective.
    Family::new("alltoallv", "dynamic", "rcclx_alltoallv_dynamic", BYTES, NO_OP, ALLTOALLV_ARGS).route(14),
    // The low-precision kernels again with the INT8 codec (`RCCLX_LOW_PRECISION_CODEC=int8`).
    Family::new("allreduce", "int8", "rcclx_allreduce_int8", LOWP_TYPES, NO_OP, COLL_ARGS).route(15),
    Family::new("allgather", "int8", "rcclx_allgather_int8", LOWP_TYPES, NO_OP, COLL_ARGS).route(16),
    Family::new("reducescatter", "int8", "rcclx_reducescatter_int8", LOWP_TYPES, NO_OP, COLL_ARGS).route(17),
    // AllReduce's 2-rank form (a gather of codes, `rcclx_allreduce_pair_coded`), one kernel per codec.
    Family::new("allreduce", "lowp_pair", "rcclx_allreduce_lowp_pair", LOWP_TYPES, NO_OP, COLL_ARGS)
        .route(18)
        .min_blocks(2),
    Family::new("allreduce", "int8_pair", "rcclx_allreduce_int8_pair", LOWP_TYPES, NO_OP, COLL_ARGS)
        .route(19)
        .min_blocks(2),
    Family::new("alltoall", "int8", "rcclx_alltoall_int8", LOWP_TYPES, NO_OP, COLL_ARGS).route(20),
    // DDA Broadcast (`hip_kernels/broadcast.cuh`; the root is `KernelArgs::root`).
    Family::new("broadcast", "ll", "rcclx_broadcast_ll", BYTES, NO_OP, COLL_ARGS).route(21),
    Family::new("broadcast", "flat", "rcclx_broadcast_flat", BYTES, NO_OP, COLL_ARGS).route(22),
    // The GPU-resident AllToAllv with FP8 / INT8 on the wire (`rcclxAllToAllvOptions::wire`).
    Family::new("alltoallv", "lowp", "rcclx_alltoallv_lowp", LOWP_TYPES, NO_OP, ALLTOALLV_ARGS).route(23),
    Family::new("alltoallv", "int8", "rcclx_alltoallv_int8", LOWP_TYPES, NO_OP, ALLTOALLV_ARGS).route(24),
    // DDA Reduce (`hip_kernels/reduce.cuh`; the root is `KernelArgs::root`).
    Family::new("reduce", "ll", "rcclx_reduce_ll", REDUCE_TYPES, REDUCE_OPS, COLL_ARGS).route(25),
    Family::new("reduce", "flat", "rcclx_reduce_flat", REDUCE_TYPES, REDUCE_OPS, COLL_ARGS).route(26),
    // The stream protocol (`hip_kernels/stream.cuh`, `RCCLX_PROTO=stream`): pipelined rings.
    Family::new("allreduce", "stream", "rcclx_allreduce_stream", REDUCE_TYPES, REDUCE_OPS, COLL_ARGS).route(27),
    Family::new("allgather", "stream", "rcclx_allgather_stream", BYTES, NO_OP, COLL_ARGS).route(28),
    Family::new("reducescatter", "stream", "rcclx_reducescatter_stream", REDUCE_TYPES, REDUCE_OPS, COLL_ARGS).route(29),
    Family::new("alltoall", "stream", "rcclx_alltoall_stream", BYTES, NO_OP, COLL_ARGS).route(30),
    Family::new("allreduce", "stream_tree", "rcclx_allreduce_stream_tree", REDUCE_TYPES, REDUCE_OPS, COLL_ARGS)
        .route(31),
    // The LL128 protocol (`hip_kernels/ll128.cuh`, `RCCLX_LL128_MAX_BYTES`): flagged lines, credited rings.
    Family::new("allreduce", "ll128", "rcclx_allreduce_ll128", REDUCE_TYPES, REDUCE_OPS, COLL_ARGS).route(32),
    Family::new("allgather", "ll128", "rcclx_allgather_ll128", BYTES, NO_OP, COLL_ARGS).route(33),
    // The low-precision rail step of an AllReduce across hosts (`hip_kernels/rail.cuh`, `src/plan.rs`):
    // encode, reduce or decode a window's pieces (`RcclxArgs::root`); the stock library moves the codes.
    Family::new("allreduce", "hier_lowp", "rcclx_allreduce_hier_lowp", LOWP_TYPES, NO_OP, COLL_ARGS).route(34),
    Family::new("allreduce", "hier_int8", "rcclx_allreduce_hier_int8", LOWP_TYPES, NO_OP, COLL_ARGS).route(35),
    // The same steps in a ReduceScatter across hosts (its reduce-out ends the plan).
    Family::new("reducescatter", "hier_lowp", "rcclx_reducescatter_hier_lowp", LOWP_TYPES, NO_OP, COLL_ARGS).route(36),
    Family::new("reducescatter", "hier_int8", "rcclx_reducescatter_hier_int8", LOWP_TYPES, NO_OP, COLL_ARGS).route(37),
    // And in an AllGather across hosts (encode this rank's piece, decode every other host's).
    Family::new("allgather", "hier_lowp", "rcclx_allgather_hier_lowp", LOWP_TYPES, NO_OP, COLL_ARGS).route(38),
    Family::new("allgather", "hier_int8", "rcclx_allgather_hier_int8", LOWP_TYPES, NO_OP, COLL_ARGS).route(39),
];

/// The algorithms of the low-precision families (both codecs, both AllReduce forms, the rail
/// step across hosts).
pub const LOW_PRECISION_ALGOS: &[&str] = &["lowp", "int8", "lowp_pair", "int8_pair", "hier_lowp", "hier_int8"];

/// The index in [`FAMILIES`] of the family `coll`.`algo` (`intercept::family` looks families
/// up by this, once, for the typed keys the rest of the library uses).
pub fn family_index(coll: &str, algo: &str) -> Option<usize> {
    FAMILIES.iter().position(|f| f.coll == coll && f.algo == algo)
}

/// Whether the kernels of family `f` take the struct `args` (`Clique::launch` refuses any other
/// launch: the kernel would read it as its own struct).
pub fn takes(f: usize, args: Args) -> bool {
    FAMILIES.get(f).is_some_and(|fam| fam.args == args)
}

/// One more than the highest route number: statistics routes are `0..route_count()`.
pub const fn route_count() -> usize {
    let mut i = 0;
    let mut max = 0;
    while i < FAMILIES.len() {
        if FAMILIES[i].route > max {
            max = FAMILIES[i].route;
        }
        i += 1;
    }
    max as usize + 1
}

/// The index in [`FAMILIES`] of the family with route number `route`.
pub fn family_of_route(route: usize) -> Option<usize> {
    FAMILIES.iter().position(|f| f.route as usize == route)
}

// Every family has a route number of its own, so a row appended without `.route(n)`, or with a
// number already taken, stops the build (the library's and the build script's) here.
const _: () = {
    let mut i = 0;
    while i < FAMILIES.len() {
        assert!(FAMILIES[i].route != 0, "a kernel family has no route number: append `.route(n)`, n the next free one");
        let mut j = i + 1;
        while j < FAMILIES.len() {
            assert!(FAMILIES[i].route != FAMILIES[j].route, "two kernel families have the same route number");
            j += 1;
        }
        i += 1;
    }
};

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

    /// Route numbers are public (`RCCLX_ROUTE_*` in `include/rcclx.h`, `rcclxRouteName`): a
    /// number once given keeps its family. Append a new family's line; never edit one.
    const PUBLISHED: &[(u8, &str)] = &[
        (1, "allreduce.ll"),
        (2, "allreduce.flat"),
        (3, "allreduce.tree"),
        (4, "allgather.ll"),
        (5, "allgather.flat"),
        (6, "reducescatter.ll"),
        (7, "reducescatter.flat"),
        (8, "alltoall.ll"),
        (9, "alltoall.flat"),
        (10, "allreduce.lowp"),
        (11, "allgather.lowp"),
        (12, "reducescatter.lowp"),
        (13, "alltoall.lowp"),
        (14, "alltoallv.dynamic"),
        (15, "allreduce.int8"),
        (16, "allgather.int8"),
        (17, "reducescatter.int8"),
        (18, "allreduce.lowp_pair"),
        (19, "allreduce.int8_pair"),
        (20, "alltoall.int8"),
        (21, "broadcast.ll"),
        (22, "broadcast.flat"),
        (23, "alltoallv.lowp"),
        (24, "alltoallv.int8"),
        (25, "reduce.ll"),
        (26, "reduce.flat"),
        (27, "allreduce.stream"),
        (28, "allgather.stream"),
        (29, "reducescatter.stream"),
        (30, "alltoall.stream"),
        (31, "allreduce.stream_tree"),
        (32, "allreduce.ll128"),
        (33, "allgather.ll128"),
        (34, "allreduce.hier_lowp"),
        (35, "allreduce.hier_int8"),
        (36, "reducescatter.hier_lowp"),
        (37, "reducescatter.hier_int8"),
        (38, "allgather.hier_lowp"),
        (39, "allgather.hier_int8"),
    ];

    #[test]
    fn route_numbers_are_unique_and_never_reused() {
        let mut routes: Vec<u8> = FAMILIES.iter().map(|f| f.route).collect();
        routes.sort();
        routes.dedup();
        assert_eq!(routes.len(), FAMILIES.len(), "a route number is taken twice");
        assert!(!routes.contains(&0), "route 0 is \"forwarded\"");
        for &(route, name) in PUBLISHED {
            let f = family_of_route(route as usize).unwrap_or_else(|| panic!("route {route} ({name}) is gone"));
            assert_eq!(format!("{}.{}", FAMILIES[f].coll, FAMILIES[f].algo), name, "route {route} was reused");
        }
        // Dense for now: `rcclxRouteName` and `include/rcclx.h` list the routes by position.
        assert_eq!(route_count(), FAMILIES.len() + 1);
        for (f, fam) in FAMILIES.iter().enumerate() {
            assert_eq!(family_of_route(fam.route as usize), Some(f));
        }
    }

    /// Every family names a device function of its collective and takes the argument struct of
    /// its kind (the AllToAllv families, and only they, take `RcclxA2avArgs`).
    #[test]
    fn families_take_their_argument_struct() {
        for f in FAMILIES {
            assert!(f.device_fn.starts_with(&format!("rcclx_{}_", f.coll)), "{f:?}");
            let a2av = f.coll == "alltoallv";
            assert_eq!(f.args, if a2av { Args::AllToAllv } else { Args::Coll }, "{f:?}");
        }
        let a2av = family_index("alltoallv", "dynamic").unwrap();
        let ll = family_index("allreduce", "ll").unwrap();
        assert!(takes(a2av, Args::AllToAllv) && takes(ll, Args::Coll));
        assert!(!takes(a2av, Args::Coll) && !takes(ll, Args::AllToAllv) && !takes(FAMILIES.len(), Args::Coll));
    }

    /// Trace tools classify rcclx's kernels as communication (HTA: `"ncclKernel" in name`;
    /// Chakra: `ncclKernel` or `ncclDevKernel`), and every name is unique.
    #[test]
    fn names_are_communication_kernels_to_trace_tools() {
        let names: Vec<String> = kernel_names().collect();
        assert_eq!(names.len(), FAMILIES.iter().map(Family::kernel_count).sum::<usize>());
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
