//! Layer `intercept`: the per-call decision, own kernel or stock library.
//!
//! Base layer: pure, no `unsafe`, depends only on `types`, `config` and `kernel_table`.
//!
//! [`decide`] is a pure function of the call (collective, count, type, op), the
//! communicator's facts (agreed by every rank at setup) and the configuration (rank 0's,
//! also agreed at setup). Nothing rank-local (pointers, streams, group depth, capture) enters
//! it, so every rank of a communicator reaches the same route for the same call: a rank
//! taking rcclx's kernel while a peer forwards would hang both.
#![forbid(unsafe_code)]

use crate::types::{ncclDataType_t, ncclRedOp_t};
use std::ffi::CStr;

/// The four collectives rcclx intercepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Coll {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
}

impl Coll {
    pub const ALL: [Coll; 4] = [Coll::AllReduce, Coll::AllGather, Coll::ReduceScatter, Coll::AllToAll];

    /// The collective's name in the kernel table and in statistics.
    pub fn name(self) -> &'static str {
        match self {
            Coll::AllReduce => "allreduce",
            Coll::AllGather => "allgather",
            Coll::ReduceScatter => "reducescatter",
            Coll::AllToAll => "alltoall",
        }
    }
}

/// rcclx's algorithms (a collective's algorithm is one family of the kernel table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algo {
    /// One-shot with the LL protocol (flagged words, no barrier): the smallest messages.
    Ll,
    /// One-shot through the staging buffers (copy-in, barrier, every rank reads every peer).
    Flat,
    /// Two-shot (reduce-scatter, then all-gather, through the staging buffers).
    Tree,
    /// Low precision: block-scaled FP8 on the wire, FP32 arithmetic (RCCLX's name: "lowp").
    Lowp,
    /// Low precision with the INT8 codec (`RCCLX_LOW_PRECISION_CODEC=int8`): the same kernels
    /// and bytes as `Lowp`, block-scaled INT8 on the wire.
    Int8,
}

impl Algo {
    pub fn name(self) -> &'static str {
        match self {
            Algo::Ll => "ll",
            Algo::Flat => "flat",
            Algo::Tree => "tree",
            Algo::Lowp => "lowp",
            Algo::Int8 => "int8",
        }
    }
}

/// The kernel family (index into `kernel_table::FAMILIES`) of `coll` run with `algo`.
pub fn family(coll: Coll, algo: Algo) -> Option<usize> {
    static TABLE: std::sync::OnceLock<Vec<(Coll, Algo, usize)>> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let algos = [Algo::Ll, Algo::Flat, Algo::Tree, Algo::Lowp, Algo::Int8];
        let mut v = Vec::new();
        for (i, f) in crate::kernel_table::FAMILIES.iter().enumerate() {
            let c = Coll::ALL.into_iter().find(|c| c.name() == f.coll);
            let a = algos.into_iter().find(|a| a.name() == f.algo);
            if let (Some(c), Some(a)) = (c, a) {
                v.push((c, a, i));
            }
        }
        v
    });
    table.iter().find(|e| e.0 == coll && e.1 == algo).map(|e| e.2)
}

/// One intercepted call, as every rank sees it.
#[derive(Clone, Copy, Debug)]
pub struct CallDesc {
    pub coll: Coll,
    /// The count argument of the call (per rank for AllGather/ReduceScatter/AllToAll).
    pub count: usize,
    pub dtype: ncclDataType_t,
    /// `Sum` for collectives without an op.
    pub op: ncclRedOp_t,
}

impl CallDesc {
    /// Bytes of the buffer the thresholds refer to: the AllReduce message, the whole
    /// AllGather output / ReduceScatter input / AllToAll buffer (as RCCLX counts them).
    pub fn bytes(&self, nranks: usize) -> Option<u64> {
        let elems = match self.coll {
            Coll::AllReduce => self.count,
            _ => self.count.checked_mul(nranks)?,
        };
        (elems as u64).checked_mul(self.dtype.size()? as u64)
    }
}

/// Facts about a communicator, identical on every rank (computed from gathered records).
#[derive(Clone, Copy, Debug, Default)]
pub struct CommFacts {
    pub nranks: usize,
    /// DDA verdict: one host, peer access between all pairs, same arch, kernels loaded.
    pub dda: bool,
    /// This communicator's low-precision switches, per collective.
    pub lowp: LowpSwitches,
    /// Bytes of a rank's DDA staging buffer (messages above are processed in windows).
    pub staging_bytes: u64,
}

/// Low-precision switches of a communicator, fixed when it was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LowpSwitches {
    pub all_reduce: bool,
    pub all_gather: bool,
    pub reduce_scatter: bool,
    pub all_to_all: bool,
    /// The INT8 codec instead of FP8 (`RCCLX_LOW_PRECISION_CODEC=int8`).
    pub int8: bool,
}

impl LowpSwitches {
    pub fn from_config(c: &crate::config::Config) -> Self {
        Self {
            all_reduce: c.lowp_enable || c.lowp_all_reduce,
            all_gather: c.lowp_enable || c.lowp_all_gather,
            reduce_scatter: c.lowp_enable || c.lowp_reduce_scatter,
            all_to_all: c.lowp_enable || c.lowp_all_to_all,
            int8: c.lowp_codec == crate::config::LowpCodec::Int8,
        }
    }
    pub fn any(&self) -> bool {
        self.all_reduce || self.all_gather || self.reduce_scatter || self.all_to_all
    }
    fn get(&self, coll: Coll) -> bool {
        match coll {
            Coll::AllReduce => self.all_reduce,
            Coll::AllGather => self.all_gather,
            Coll::ReduceScatter => self.reduce_scatter,
            Coll::AllToAll => self.all_to_all,
        }
    }
}

/// The thresholds `decide` reads (a subset of `Config`, agreed across ranks at setup).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// DDA switched on per collective (`RCCL_ENABLE_DDA_*`), in `Coll` order.
    pub dda: [bool; 4],
    /// LL one-shot up to this many bytes per rank (AllReduce: the message).
    pub ll_max_bytes: u64,
    pub flat_max_bytes: u64,
    pub tree_max_bytes: u64,
    /// DDA up to this many bytes (as `CallDesc::bytes` counts them) for AllGather,
    /// ReduceScatter, AllToAll.
    pub all_gather_max_bytes: u64,
    pub reduce_scatter_max_bytes: u64,
    pub all_to_all_max_bytes: u64,
    /// Low precision (when switched on) from this many bytes, per collective (`Coll` order).
    pub lowp_min_bytes: [u64; 4],
}

/// Default crossovers for communicators of up to `ranks` ranks, in bytes.
#[derive(Clone, Copy, Debug)]
pub struct Crossovers {
    pub ranks: usize,
    pub ll_max: u64,
    pub flat_max: u64,
    pub tree_max: u64,
    pub all_gather_max: u64,
    pub reduce_scatter_max: u64,
    pub all_to_all_max: u64,
    /// Low precision (when switched on) from this many bytes (as `CallDesc::bytes` counts
    /// them), per collective (`Coll` order).
    pub lowp_min: [u64; 4],
}

/// Default crossovers by rank count. 2 ranks, AllReduce: measured on 2x H200
/// (bench/results/2026-11-29-h200x2/tune-*): one-shot reads no more over NVLink than two-shot
/// there, so flat wins at every size up to 64 MiB. AllGather, ReduceScatter, AllToAll
/// (bench/results/2026-11-30-h200x2-v2/speed/tune): LL wins up to 512 KiB per rank, but the
/// LL limit stays 256 KiB (the inbox is 32x it, shared with AllReduce); flat beats
/// stock by 1.30x or more up to 64 MiB for AllGather and ReduceScatter, but AllToAll's margin
/// falls to 1.08-1.27x above 16 MiB (one 32 MiB sample lost), so it stops at 16 MiB. More
/// ranks: one-shot traffic grows with the rank count, so the crossovers shrink to RCCLX's
/// 8-rank values; not measured (no 4/8-GPU machine). Low precision at 2 ranks: from the
/// smallest size where FP8 and INT8 take no more time than DDA for f32, bf16 and fp16, both
/// layouts (bench/results/2026-11-30-h200x2-v6/tune/8-threshold): AllReduce from 1 MiB
/// (FP8 9.3 us against DDA's 10.0 in bf16; at 512 KiB DDA wins), ReduceScatter from 2 MiB,
/// AllGather and AllToAll from 4 MiB (at 2 MiB DDA wins for f32 and INT8). More ranks keep
/// RCCLX's 16 MiB.
pub const DEFAULT_CROSSOVERS: [Crossovers; 3] = [
    Crossovers {
        ranks: 2,
        ll_max: 256 << 10,
        flat_max: 64 << 20,
        tree_max: 64 << 20,
        all_gather_max: 64 << 20,
        reduce_scatter_max: 64 << 20,
        all_to_all_max: 16 << 20,
        lowp_min: [1 << 20, 4 << 20, 2 << 20, 4 << 20],
    },
    Crossovers {
        ranks: 4,
        ll_max: 64 << 10,
        flat_max: 1 << 20,
        tree_max: 16 << 20,
        all_gather_max: 16 << 20,
        reduce_scatter_max: 8 << 20,
        all_to_all_max: 2 << 20,
        lowp_min: [16 << 20; 4],
    },
    Crossovers {
        ranks: 8,
        ll_max: 32 << 10,
        flat_max: 256 << 10,
        tree_max: 8 << 20,
        all_gather_max: 16 << 20,
        reduce_scatter_max: 8 << 20,
        all_to_all_max: 2 << 20,
        lowp_min: [16 << 20; 4],
    },
];

impl Thresholds {
    /// The thresholds of a communicator of `nranks` ranks: set variables win, else
    /// [`DEFAULT_CROSSOVERS`] for the smallest listed rank count >= `nranks`.
    pub fn for_ranks(c: &crate::config::Config, nranks: usize) -> Self {
        let row = DEFAULT_CROSSOVERS.iter().find(|r| nranks <= r.ranks).unwrap_or(&DEFAULT_CROSSOVERS[2]);
        Self {
            dda: [c.dda_all_reduce, c.dda_all_gather, c.dda_reduce_scatter, c.dda_all_to_all],
            ll_max_bytes: c.dda_ll_max_bytes.unwrap_or(row.ll_max),
            flat_max_bytes: c.dda_flat_max_bytes.unwrap_or(row.flat_max),
            tree_max_bytes: c.dda_tree_max_bytes.unwrap_or(row.tree_max),
            all_gather_max_bytes: c.dda_all_gather_max_bytes.unwrap_or(row.all_gather_max),
            reduce_scatter_max_bytes: c.dda_reduce_scatter_max_bytes.unwrap_or(row.reduce_scatter_max),
            all_to_all_max_bytes: c.dda_all_to_all_max_bytes.unwrap_or(row.all_to_all_max),
            lowp_min_bytes: c.lowp_min_bytes.map_or(row.lowp_min, |b| [b; 4]),
        }
    }
}

/// Where a call goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    Upstream(Reason),
    Own(Algo),
}

macro_rules! reasons {
    ( $( $name:ident = $text:literal, )* ) => {
        /// Why a call was forwarded to the stock library (index = statistics slot).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum Reason { $( $name, )* }
        impl Reason {
            pub const ALL: &'static [Reason] = &[ $( Reason::$name, )* ];
            /// Stable name for logs and `rcclxForwardReasonName`.
            pub fn c_name(self) -> &'static CStr {
                match self { $( Reason::$name => $text, )* }
            }
        }
    };
}

reasons! {
    NotSetUp = c"comm-not-eligible",
    Disabled = c"disabled",
    Dtype = c"datatype",
    Op = c"op",
    Size = c"size",
    Empty = c"zero-count",
    // Reserved (index kept stable): every collective has kernels now.
    Collective = c"collective-not-accelerated",
    Failed = c"launch-failed",
    NullBuffer = c"null-buffer",
    CommError = c"comm-in-error",
}
const _: () = assert!(Reason::ALL.len() <= 16, "rcclxCommStats has 16 reason slots");

/// Types the DDA kernels reduce.
pub fn dda_dtype(t: ncclDataType_t) -> bool {
    matches!(t.0, 0..=9)
}

/// Ops the DDA kernels implement (no PreMulSum or other user ops).
pub fn dda_op(op: ncclRedOp_t) -> bool {
    (0..ncclRedOp_t::NumOps).contains(&op.0)
}

/// Input types of the low-precision path.
pub fn lowp_dtype(t: ncclDataType_t) -> bool {
    matches!(t, ncclDataType_t::Float32 | ncclDataType_t::Bfloat16 | ncclDataType_t::Float16)
}

/// The decision. Pure; see the module doc for why only rank-independent inputs enter.
pub fn decide(call: &CallDesc, comm: &CommFacts, th: &Thresholds) -> Route {
    use Route::Upstream as Up;
    if call.count == 0 {
        return Up(Reason::Empty);
    }
    let Some(bytes) = call.bytes(comm.nranks) else { return Up(Reason::Dtype) };
    if !comm.dda || comm.nranks < 2 {
        return Up(Reason::NotSetUp);
    }
    // Low precision first (as RCCLX): large messages of float types, op sum.
    if comm.lowp.get(call.coll)
        && lowp_dtype(call.dtype)
        && call.op == ncclRedOp_t::Sum
        && bytes >= th.lowp_min_bytes[call.coll as usize]
    {
        return Route::Own(if comm.lowp.int8 { Algo::Int8 } else { Algo::Lowp });
    }
    if !th.dda[call.coll as usize] {
        return Up(Reason::Disabled);
    }
    let reduces = matches!(call.coll, Coll::AllReduce | Coll::ReduceScatter);
    if reduces && !dda_dtype(call.dtype) {
        return Up(Reason::Dtype);
    }
    if reduces && !dda_op(call.op) {
        return Up(Reason::Op);
    }
    // Bytes of one rank's part: the LL inbox holds that much per source rank.
    let per_rank = (call.count as u64).saturating_mul(call.dtype.size().unwrap_or(0) as u64);
    let max = match call.coll {
        Coll::AllReduce => th.tree_max_bytes,
        Coll::AllGather => th.all_gather_max_bytes,
        Coll::ReduceScatter => th.reduce_scatter_max_bytes,
        Coll::AllToAll => th.all_to_all_max_bytes,
    };
    if per_rank <= th.ll_max_bytes {
        Route::Own(Algo::Ll)
    } else if bytes > max {
        Up(Reason::Size)
    } else if call.coll != Coll::AllReduce || bytes <= th.flat_max_bytes {
        Route::Own(Algo::Flat)
    } else {
        Route::Own(Algo::Tree)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COLLS: [Coll; 4] = [Coll::AllReduce, Coll::AllGather, Coll::ReduceScatter, Coll::AllToAll];

    fn th() -> Thresholds {
        Thresholds::for_ranks(&crate::config::Config::default(), 8)
    }

    #[test]
    fn crossovers_by_rank_count() {
        let c = crate::config::Config::default();
        assert_eq!(Thresholds::for_ranks(&c, 2).flat_max_bytes, 64 << 20);
        assert_eq!(Thresholds::for_ranks(&c, 3).ll_max_bytes, 64 << 10);
        assert_eq!(Thresholds::for_ranks(&c, 8).tree_max_bytes, 8 << 20);
        let set = crate::config::Config { dda_flat_max_bytes: Some(5), ..c.clone() };
        assert_eq!(Thresholds::for_ranks(&set, 2).flat_max_bytes, 5);
        for n in 1..=8 {
            let t = Thresholds::for_ranks(&c, n);
            assert!(t.ll_max_bytes <= t.flat_max_bytes && t.flat_max_bytes <= t.tree_max_bytes);
        }
    }

    fn facts(nranks: usize, lowp: bool) -> CommFacts {
        let s =
            LowpSwitches { all_reduce: lowp, all_gather: lowp, reduce_scatter: lowp, all_to_all: lowp, int8: false };
        CommFacts { nranks, dda: true, lowp: s, staging_bytes: 16 << 20 }
    }

    /// Sizes around every threshold, primes and extremes.
    fn counts(th: &Thresholds) -> Vec<usize> {
        let mut v = vec![0, 1, 2, 3, 7, 31, 127, 255, 1023, 4099, 65_537, 1 << 20, (1 << 20) + 5, usize::MAX / 16];
        for t in [th.ll_max_bytes, th.flat_max_bytes, th.tree_max_bytes].into_iter().chain(th.lowp_min_bytes) {
            for d in [-9i64, -1, 0, 1, 9] {
                v.push((t as i64 + d).max(0) as usize);
                v.push(((t as i64 + d).max(0) / 2) as usize);
                v.push(((t as i64 + d).max(0) / 4) as usize);
            }
        }
        v
    }

    fn all_calls(th: &Thresholds) -> impl Iterator<Item = CallDesc> {
        let counts = counts(th);
        COLLS.into_iter().flat_map(move |coll| {
            let counts = counts.clone();
            (-1..=13).flat_map(move |t| {
                let counts = counts.clone();
                (-1..=7).flat_map(move |op| {
                    counts.clone().into_iter().map(move |count| CallDesc {
                        coll,
                        count,
                        dtype: ncclDataType_t(t),
                        op: ncclRedOp_t(op),
                    })
                })
            })
        })
    }

    #[test]
    fn never_routes_unsupported_types_or_ops_to_rcclx() {
        let th = th();
        for nranks in 1..=8 {
            for lowp in [false, true] {
                for call in all_calls(&th) {
                    let r = decide(&call, &facts(nranks, lowp), &th);
                    match r {
                        Route::Own(algo @ (Algo::Ll | Algo::Flat | Algo::Tree)) => {
                            assert!(call.count > 0 && nranks >= 2, "{call:?} -> {r:?}");
                            assert!(call.dtype.size().is_some(), "{call:?} -> {r:?}");
                            if matches!(call.coll, Coll::AllReduce | Coll::ReduceScatter) {
                                assert!(dda_dtype(call.dtype) && dda_op(call.op), "{call:?} -> {r:?}");
                            }
                            assert!(algo != Algo::Tree || call.coll == Coll::AllReduce, "{call:?} -> {r:?}");
                        }
                        Route::Own(Algo::Lowp | Algo::Int8) => {
                            assert!(lowp && lowp_dtype(call.dtype) && call.op == ncclRedOp_t::Sum, "{call:?}");
                            assert!(call.bytes(nranks).unwrap() >= th.lowp_min_bytes[call.coll as usize]);
                        }
                        Route::Upstream(_) => {}
                    }
                }
            }
        }
    }

    #[test]
    fn comm_without_dda_always_forwards() {
        let th = th();
        let f = CommFacts { dda: false, ..facts(2, true) };
        for call in all_calls(&th) {
            assert!(matches!(decide(&call, &f, &th), Route::Upstream(_)));
        }
    }

    #[test]
    fn deterministic_and_monotone_in_size() {
        let th = th();
        let rank = |r: Route| match r {
            Route::Own(Algo::Ll) => -1,
            Route::Own(Algo::Flat) => 0,
            Route::Own(Algo::Tree) => 1,
            Route::Own(Algo::Lowp | Algo::Int8) => 2,
            Route::Upstream(_) => 3,
        };
        for nranks in 2..=8 {
            let f = facts(nranks, false);
            for t in [ncclDataType_t::Float32, ncclDataType_t::Bfloat16, ncclDataType_t::Int32] {
                let mut last = -1;
                let mut cs = counts(&th);
                cs.retain(|&c| c > 0);
                cs.sort();
                for c in cs {
                    let call = CallDesc { coll: Coll::AllReduce, count: c, dtype: t, op: ncclRedOp_t::Sum };
                    let r = decide(&call, &f, &th);
                    assert_eq!(r, decide(&call, &f, &th));
                    assert!(rank(r) >= last, "route went back at count {c}: {r:?}");
                    last = rank(r);
                }
            }
        }
    }

    #[test]
    fn thresholds_are_inclusive() {
        let th = th();
        let f = facts(2, true);
        let route = |dtype, bytes: u64| {
            decide(
                &CallDesc { coll: Coll::AllReduce, count: (bytes / 4) as usize, dtype, op: ncclRedOp_t::Sum },
                &f,
                &th,
            )
        };
        let ar = |bytes| route(ncclDataType_t::Int32, bytes);
        assert_eq!(ar(th.ll_max_bytes), Route::Own(Algo::Ll));
        assert_eq!(ar(th.ll_max_bytes + 4), Route::Own(Algo::Flat));
        assert_eq!(ar(th.flat_max_bytes), Route::Own(Algo::Flat));
        assert_eq!(ar(th.flat_max_bytes + 4), Route::Own(Algo::Tree));
        assert_eq!(ar(th.tree_max_bytes), Route::Own(Algo::Tree));
        assert_eq!(ar(th.tree_max_bytes + 4), Route::Upstream(Reason::Size));
        let lp = |bytes| route(ncclDataType_t::Float32, bytes);
        let lp_min = th.lowp_min_bytes[Coll::AllReduce as usize];
        assert_eq!(lp(lp_min), Route::Own(Algo::Lowp));
        assert_ne!(lp(lp_min - 4), Route::Own(Algo::Lowp));
    }

    #[test]
    fn lowp_for_every_collective_and_float_type_when_switched_on() {
        let th = th();
        let call = |coll, dtype, op| CallDesc { coll, count: 64 << 20, dtype, op };
        for coll in [Coll::AllReduce, Coll::AllGather, Coll::ReduceScatter, Coll::AllToAll] {
            for dtype in [ncclDataType_t::Float32, ncclDataType_t::Bfloat16, ncclDataType_t::Float16] {
                assert_eq!(decide(&call(coll, dtype, ncclRedOp_t::Sum), &facts(2, true), &th), Route::Own(Algo::Lowp));
                assert_ne!(decide(&call(coll, dtype, ncclRedOp_t::Sum), &facts(2, false), &th), Route::Own(Algo::Lowp));
            }
            assert_ne!(
                decide(&call(coll, ncclDataType_t::Int32, ncclRedOp_t::Sum), &facts(2, true), &th),
                Route::Own(Algo::Lowp)
            );
        }
        assert_ne!(
            decide(&call(Coll::AllReduce, ncclDataType_t::Float32, ncclRedOp_t::Max), &facts(2, true), &th),
            Route::Own(Algo::Lowp)
        );
        // The INT8 codec takes the same calls, on its own kernels.
        let int8 = CommFacts { lowp: LowpSwitches { int8: true, ..facts(2, true).lowp }, ..facts(2, true) };
        for coll in Coll::ALL {
            assert_eq!(
                decide(&call(coll, ncclDataType_t::Bfloat16, ncclRedOp_t::Sum), &int8, &th),
                Route::Own(Algo::Int8)
            );
            assert!(crate::intercept::family(coll, Algo::Int8).is_some(), "{coll:?}");
        }
    }

    #[test]
    fn zero_count_and_overflow_forward() {
        let th = th();
        let f = facts(8, true);
        let c =
            CallDesc { coll: Coll::AllGather, count: usize::MAX, dtype: ncclDataType_t::Float32, op: ncclRedOp_t::Sum };
        assert!(matches!(decide(&c, &f, &th), Route::Upstream(_)));
        let z = CallDesc { count: 0, ..c };
        assert_eq!(decide(&z, &f, &th), Route::Upstream(Reason::Empty));
    }

    #[test]
    fn every_collective_takes_dda_up_to_its_limit_and_can_be_switched_off() {
        let th = th();
        let f = facts(2, false);
        for (coll, max) in [
            (Coll::AllGather, th.all_gather_max_bytes),
            (Coll::ReduceScatter, th.reduce_scatter_max_bytes),
            (Coll::AllToAll, th.all_to_all_max_bytes),
        ] {
            // count is per rank: bytes() = 2 ranks x count x 4.
            let call = |bytes: u64| CallDesc {
                coll,
                count: (bytes / 8) as usize,
                dtype: ncclDataType_t::Float32,
                op: ncclRedOp_t::Max,
            };
            assert_eq!(decide(&call(16), &f, &th), Route::Own(Algo::Ll));
            assert_eq!(decide(&call(2 * th.ll_max_bytes), &f, &th), Route::Own(Algo::Ll));
            assert_eq!(decide(&call(2 * th.ll_max_bytes + 8), &f, &th), Route::Own(Algo::Flat));
            assert_eq!(decide(&call(max), &f, &th), Route::Own(Algo::Flat));
            assert_eq!(decide(&call(max + 8), &f, &th), Route::Upstream(Reason::Size));
            let mut off = th;
            off.dda[coll as usize] = false;
            assert_eq!(decide(&call(16), &f, &off), Route::Upstream(Reason::Disabled));
        }
        // Data movement takes any type, ReduceScatter only the ones it reduces.
        let fp8 = |coll| CallDesc { coll, count: 64, dtype: ncclDataType_t::Float8e4m3, op: ncclRedOp_t::Sum };
        assert_eq!(decide(&fp8(Coll::AllGather), &f, &th), Route::Own(Algo::Ll));
        assert_eq!(decide(&fp8(Coll::AllToAll), &f, &th), Route::Own(Algo::Ll));
        assert_eq!(decide(&fp8(Coll::ReduceScatter), &f, &th), Route::Upstream(Reason::Dtype));
    }

    #[test]
    fn reason_names_are_unique() {
        let mut n: Vec<_> = Reason::ALL.iter().map(|r| r.c_name()).collect();
        n.sort();
        n.dedup();
        assert_eq!(n.len(), Reason::ALL.len());
    }

    #[test]
    fn every_own_route_has_a_kernel_family() {
        for coll in Coll::ALL {
            for algo in [Algo::Ll, Algo::Flat, Algo::Tree, Algo::Lowp] {
                let th = th();
                let f = facts(2, true);
                for call in all_calls(&th).filter(|c| c.coll == coll) {
                    if decide(&call, &f, &th) == Route::Own(algo) {
                        let fam =
                            family(coll, algo).unwrap_or_else(|| panic!("{coll:?} {algo:?} has no kernel family"));
                        assert!(
                            crate::kernel_table::kernel_index(fam, call.dtype.0, call.op.0).is_some(),
                            "{call:?}: no kernel"
                        );
                    }
                }
            }
        }
    }
}
