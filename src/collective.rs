//! The collectives rcclx intercepts, as data: one [`Spec`] per collective gives its name, what
//! its count means, its variables and its default crossovers. `config` parses the variables
//! from this table, `intercept` decides from it, `clique` carries the resulting [`Policy`] in
//! the setup record as it is. Adding a collective is one row of [`COLLS`], its kernels
//! (`kernel_table`, `hip_kernels/`), its grid (`dda`) and its line in the export list
//! (`nccl_api`): `docs/ARCHITECTURE.md` has the recipe.
//!
//! Layer: base (plain data).
#![forbid(unsafe_code)]

use std::ffi::CStr;

/// A collective rcclx intercepts (index into [`COLLS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Coll {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Broadcast,
    Reduce,
}

/// Number of collectives (rows of [`COLLS`]).
pub const COUNT: usize = 6;

impl Coll {
    pub const ALL: [Coll; COUNT] =
        [Coll::AllReduce, Coll::AllGather, Coll::ReduceScatter, Coll::AllToAll, Coll::Broadcast, Coll::Reduce];

    pub fn spec(self) -> &'static Spec {
        &COLLS[self as usize]
    }

    /// The collective's name in the kernel table and in statistics (`allreduce`).
    pub fn name(self) -> &'static str {
        self.spec().name
    }
}

/// What a call's count counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// The whole message (AllReduce, Broadcast, Reduce).
    Whole,
    /// One rank's block: the message is `count * nranks` elements (the AllGather output, the
    /// ReduceScatter input, the AllToAll buffer).
    PerRank,
}

/// The buffer a rooted collective uses on its root only; off the root it may be NULL. NCCL's
/// argument checks tell the two kinds apart (`src/misc/argcheck.cc`), and so must rcclx: a rank
/// that took a NULL buffer it does not use for an error would forward alone while its peers run
/// rcclx's kernel, and every rank would hang.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RootOnly {
    /// Only the root sends (Broadcast, Scatter).
    Send,
    /// Only the root receives (Reduce, Gather).
    Recv,
}

/// One collective.
#[derive(Debug)]
pub struct Spec {
    pub coll: Coll,
    /// Its name in the kernel table and in statistics.
    pub name: &'static str,
    /// Its name for people (`AllReduce`).
    pub title: &'static str,
    /// The stock library's function (`ncclAllReduce`): the NVTX range of a call rcclx runs.
    pub api: &'static CStr,
    pub shape: Shape,
    /// Takes a reduction op (only the types and ops the reducing kernels have).
    pub reduces: bool,
    /// Rooted collectives (`CallDesc::root`): the buffer only the root uses.
    pub root_only: Option<RootOnly>,
    /// Runs two-shot above its one-shot limit (else one-shot up to its limit).
    pub two_shot: bool,
    /// `RCCL_ENABLE_DDA_*`: DDA switched on (default on).
    pub dda_var: &'static str,
    /// DDA up to this many bytes (as `CallDesc::bytes` counts them), the stock library above.
    pub max_var: &'static str,
    /// Two-shot collectives: one-shot up to this many bytes.
    pub one_shot_var: Option<&'static str>,
    /// Collectives with low-precision kernels: their switch (RCCLX's name).
    pub lowp_var: Option<&'static str>,
    /// Defaults per [`RANK_ROWS`] entry: DDA up to `max` bytes, one-shot up to
    /// `one_shot_max`, low precision (when switched on) from `lowp_min`.
    pub max: [u64; 3],
    pub one_shot_max: [u64; 3],
    pub lowp_min: [u64; 3],
}

/// The rank counts the default crossovers are given for: a communicator takes the first row
/// with at least its ranks.
pub const RANK_ROWS: [usize; 3] = [2, 4, 8];
/// LL one-shot up to this many bytes per rank, per [`RANK_ROWS`] entry (every collective: the
/// LL inbox holds that much per source rank).
pub const LL_MAX: [u64; 3] = [256 << 10, 64 << 10, 32 << 10];

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// Every collective rcclx intercepts, in [`Coll`] order.
///
/// Default crossovers. 2 ranks, AllReduce: measured on 2x H200 (design notes 18-19): one-shot
/// reads no more over NVLink than two-shot there, so one-shot wins at every size up to 64 MiB.
/// AllGather, ReduceScatter, AllToAll (design note 20): flat beats stock by 1.30x or more up to
/// 64 MiB for AllGather and ReduceScatter; AllToAll's margin falls to 1.08-1.27x above 16 MiB,
/// so it stops there. More ranks: one-shot traffic grows with the rank count, so the limits
/// shrink to RCCLX's 8-rank values (not measured: no 4/8-GPU machine). Low precision at 2
/// ranks: from the smallest size where FP8 and INT8 take no more time than DDA for f32, bf16
/// and fp16 (design note 22): AllReduce from 1 MiB, ReduceScatter from 2 MiB, AllGather and
/// AllToAll from 4 MiB; more ranks keep RCCLX's 16 MiB. Broadcast: not measured yet; it stays
/// at 256 KiB, the sizes per-step metadata and small parameter broadcasts use. Reduce: not
/// measured yet; its root reads what one rank of a one-shot AllReduce reads (every peer's
/// staging) and the other ranks only copy in, so it takes AllReduce's one-shot limits.
pub const COLLS: [Spec; COUNT] = [
    Spec {
        coll: Coll::AllReduce,
        name: "allreduce",
        title: "AllReduce",
        api: c"ncclAllReduce",
        shape: Shape::Whole,
        reduces: true,
        root_only: None,
        two_shot: true,
        dda_var: "RCCL_ENABLE_DDA_ALL_REDUCE",
        max_var: "RCCL_DDA_ALL_REDUCE_TREE_MAX_BYTES",
        one_shot_var: Some("RCCL_DDA_ALL_REDUCE_FLAT_MAX_BYTES"),
        lowp_var: Some("RCCL_LOW_PRECISION_ENABLE_ALLREDUCE"),
        max: [64 * MIB, 16 * MIB, 8 * MIB],
        one_shot_max: [64 * MIB, MIB, 256 * KIB],
        lowp_min: [MIB, 16 * MIB, 16 * MIB],
    },
    Spec {
        coll: Coll::AllGather,
        name: "allgather",
        title: "AllGather",
        api: c"ncclAllGather",
        shape: Shape::PerRank,
        reduces: false,
        root_only: None,
        two_shot: false,
        dda_var: "RCCL_ENABLE_DDA_ALL_GATHER",
        max_var: "RCCL_DDA_ALL_GATHER_MAX_BYTES",
        one_shot_var: None,
        lowp_var: Some("RCCL_LOW_PRECISION_ENABLE_ALLGATHER"),
        max: [64 * MIB, 16 * MIB, 16 * MIB],
        one_shot_max: [64 * MIB, 16 * MIB, 16 * MIB],
        lowp_min: [4 * MIB, 16 * MIB, 16 * MIB],
    },
    Spec {
        coll: Coll::ReduceScatter,
        name: "reducescatter",
        title: "ReduceScatter",
        api: c"ncclReduceScatter",
        shape: Shape::PerRank,
        reduces: true,
        root_only: None,
        two_shot: false,
        dda_var: "RCCL_ENABLE_DDA_REDUCE_SCATTER",
        max_var: "RCCL_DDA_REDUCE_SCATTER_MAX_BYTES",
        one_shot_var: None,
        lowp_var: Some("RCCL_LOW_PRECISION_ENABLE_REDUCESCATTER"),
        max: [64 * MIB, 8 * MIB, 8 * MIB],
        one_shot_max: [64 * MIB, 8 * MIB, 8 * MIB],
        lowp_min: [2 * MIB, 16 * MIB, 16 * MIB],
    },
    Spec {
        coll: Coll::AllToAll,
        name: "alltoall",
        title: "AllToAll",
        api: c"ncclAlltoAll",
        shape: Shape::PerRank,
        reduces: false,
        root_only: None,
        two_shot: false,
        dda_var: "RCCL_ENABLE_DDA_ALL_TO_ALL",
        max_var: "RCCL_DDA_ALL_TO_ALL_MAX_BYTES",
        one_shot_var: None,
        lowp_var: Some("RCCL_LOW_PRECISION_ENABLE_ALLTOALL"),
        max: [16 * MIB, 2 * MIB, 2 * MIB],
        one_shot_max: [16 * MIB, 2 * MIB, 2 * MIB],
        lowp_min: [4 * MIB, 16 * MIB, 16 * MIB],
    },
    Spec {
        coll: Coll::Broadcast,
        name: "broadcast",
        title: "Broadcast",
        api: c"ncclBroadcast",
        shape: Shape::Whole,
        reduces: false,
        root_only: Some(RootOnly::Send),
        two_shot: false,
        dda_var: "RCCL_ENABLE_DDA_BROADCAST",
        max_var: "RCCL_DDA_BROADCAST_MAX_BYTES",
        one_shot_var: None,
        lowp_var: None,
        max: [256 * KIB; 3],
        one_shot_max: [256 * KIB; 3],
        lowp_min: [u64::MAX; 3],
    },
    Spec {
        coll: Coll::Reduce,
        name: "reduce",
        title: "Reduce",
        api: c"ncclReduce",
        shape: Shape::Whole,
        reduces: true,
        root_only: Some(RootOnly::Recv),
        two_shot: false,
        dda_var: "RCCL_ENABLE_DDA_REDUCE",
        max_var: "RCCL_DDA_REDUCE_MAX_BYTES",
        one_shot_var: None,
        lowp_var: None,
        max: [64 * MIB, MIB, 256 * KIB],
        one_shot_max: [64 * MIB, MIB, 256 * KIB],
        lowp_min: [u64::MAX; 3],
    },
];

impl Spec {
    /// Has a rooted argument (`CallDesc::root`).
    pub fn rooted(&self) -> bool {
        self.root_only.is_some()
    }
}

/// The [`RANK_ROWS`] entry of a communicator of `nranks` ranks.
pub fn rank_row(nranks: usize) -> usize {
    RANK_ROWS.iter().position(|&r| nranks <= r).unwrap_or(RANK_ROWS.len() - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_in_coll_order_and_consistent() {
        for (i, s) in COLLS.iter().enumerate() {
            assert_eq!(s.coll as usize, i, "{}", s.name);
            assert_eq!(s.two_shot, s.one_shot_var.is_some(), "{}", s.name);
            for r in 0..RANK_ROWS.len() {
                assert!(s.one_shot_max[r] <= s.max[r], "{}", s.name);
                assert!(s.two_shot || s.one_shot_max[r] == s.max[r], "{}", s.name);
            }
        }
        let mut vars: Vec<&str> = COLLS
            .iter()
            .flat_map(|s| [Some(s.dda_var), Some(s.max_var), s.one_shot_var, s.lowp_var])
            .flatten()
            .collect();
        let n = vars.len();
        vars.sort();
        vars.dedup();
        assert_eq!(vars.len(), n, "a variable named twice");
        assert_eq!(rank_row(1), 0);
        assert_eq!(rank_row(3), 1);
        assert_eq!(rank_row(8), 2);
        assert_eq!(rank_row(64), 2);
    }
}
