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

/// How a kernel moves the bytes between GPUs: NCCL's protocol, kept apart from the algorithm
/// (one-shot or two-shot, `intercept::Algo`) and the codec (none, FP8, INT8), as NCCL keeps
/// its algorithms and protocols apart. One row of [`PROTOS`] each; a collective lists the ones
/// it has kernels for ([`Spec::protos`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Proto {
    /// Flagged 8-byte words (4 data bytes, 4 flag bytes) into each peer's LL inbox: no barrier,
    /// the smallest messages.
    Ll,
    /// Flagged lines through credited rings (`hip_kernels/ll128.cuh`): above the LL sizes.
    Ll128,
    /// Copy-in to the staging buffers, a barrier per window, peers read (`common.cuh`).
    #[default]
    Window,
    /// Pipelined per-block rings through the staging buffers, no barrier per window
    /// (`hip_kernels/stream.cuh`).
    Stream,
}

/// One protocol: what turns it on and what it has.
#[derive(Debug)]
pub struct ProtoSpec {
    pub proto: Proto,
    /// Its name for people and logs.
    pub name: &'static str,
    /// What chooses it for a call (variables, limits).
    pub chosen_by: &'static str,
    /// It has two-shot kernels for the collectives that run two-shot ([`Spec::two_shot`]).
    pub two_shot: bool,
    /// The device memory of its own each clique has while some collective may run it.
    pub region: &'static str,
}

/// Every protocol, in [`Proto`] order. Adding one: a row here, the collectives' [`Spec::protos`],
/// its kernels (`kernel_table`, `hip_kernels/`), its grid (`dda::grid`), where `decide` takes it
/// (`intercept`), and its region (`clique::local`): `docs/ARCHITECTURE.md` has the recipe.
pub const PROTOS: [ProtoSpec; 4] = [
    ProtoSpec {
        proto: Proto::Ll,
        name: "LL",
        chosen_by: "one rank's part up to RCCLX_DDA_LL_MAX_BYTES (by rank count)",
        two_shot: false,
        region: "the LL inbox (a part per source rank)",
    },
    ProtoSpec {
        proto: Proto::Ll128,
        name: "LL128",
        chosen_by: "above the LL sizes up to RCCLX_LL128_MAX_BYTES (0, off, by default), where one-shot would run",
        two_shot: false,
        region: "the LL128 rings (only where RCCLX_LL128_MAX_BYTES > 0)",
    },
    ProtoSpec {
        proto: Proto::Window,
        name: "window",
        chosen_by: "RCCLX_PROTO=window (the default), above the LL sizes",
        two_shot: true,
        region: "the staging buffers, flags and window counters (shared with the codecs and stream)",
    },
    ProtoSpec {
        proto: Proto::Stream,
        name: "stream",
        chosen_by: "RCCLX_PROTO=stream (per collective), from RCCLX_STREAM_MIN_BYTES",
        two_shot: true,
        region: "the staging buffers' parity halves as rings (no region of its own)",
    },
];

impl Proto {
    pub const ALL: [Proto; 4] = [Proto::Ll, Proto::Ll128, Proto::Window, Proto::Stream];

    pub fn spec(self) -> &'static ProtoSpec {
        &PROTOS[self as usize]
    }
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
    /// The protocols it has kernels for (LL and window: every collective).
    pub protos: &'static [Proto],
    /// `RCCL_ENABLE_DDA_*`: DDA switched on (default on).
    pub dda_var: &'static str,
    /// DDA up to this many bytes (as `CallDesc::bytes` counts them), the stock library above.
    pub max_var: &'static str,
    /// Two-shot collectives: one-shot up to this many bytes.
    pub one_shot_var: Option<&'static str>,
    /// Collectives with low-precision kernels: their switch (RCCLX's name).
    pub lowp_var: Option<&'static str>,
    /// Defaults per [`RANK_ROWS`] entry: DDA up to `max` bytes, low precision (when switched
    /// on) from `lowp_min`.
    pub max: [u64; 3],
    pub lowp_min: [u64; 3],
    /// Two-shot collectives: one-shot up to this many bytes by rank count and fabric
    /// ([`Spec::one_shot_default`]); the others run one-shot up to `max`.
    pub one_shot_max: Option<OneShotByRanks>,
}

/// What connects a clique's GPUs, for the defaults that depend on it: NVIDIA's NVSwitch gives
/// each GPU one bandwidth that all its peers share (one-shot's (n-1) reads per byte all go through
/// it); AMD's xGMI mesh gives every pair a link of its own (one-shot's reads run in parallel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fabric {
    /// NVIDIA (NVLink through NVSwitch).
    Switch,
    /// AMD (xGMI, one link per pair).
    Mesh,
}

/// A two-shot collective's default one-shot limit in bytes for 2..=8 ranks (index n - 2), per
/// [`Fabric`].
#[derive(Debug)]
pub struct OneShotByRanks {
    pub switch: [u64; 7],
    pub mesh: [u64; 7],
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
/// staging) and the other ranks only copy in, so it keeps the one-shot limits AllReduce had
/// before the model below (64 MiB; 1 MiB at 3-4 ranks, 256 KiB at 5-8).
///
/// AllReduce one-shot -> two-shot at 3-8 ranks: a model, not a measurement (no machine with more
/// than 2 GPUs was lent; `bench/model.py`, docs/RESULTS.md). Two-shot moves 2(n-1)/n of the
/// message per GPU instead of one-shot's n-1 (NVSwitch: all through one GPU's bandwidth B =
/// 325 GB/s) or 1 (xGMI: per link, B_l = 48 GB/s) and pays one more flag hop h (1.2 us H200,
/// 2.0 us MI300X, assumed), so it wins above h B / ((n-1)(1 - 2/n)) on NVSwitch and
/// h B_l / (1 - 2/n) on xGMI: [`AR_ONE_SHOT_MAX`], rounded to 8 KiB (`bench/model.py --check`
/// keeps them equal). 2 ranks: one-shot moves no more bytes than two-shot, so 64 MiB stays.
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
        protos: &[Proto::Ll, Proto::Ll128, Proto::Window, Proto::Stream],
        dda_var: "RCCL_ENABLE_DDA_ALL_REDUCE",
        max_var: "RCCL_DDA_ALL_REDUCE_TREE_MAX_BYTES",
        one_shot_var: Some("RCCL_DDA_ALL_REDUCE_FLAT_MAX_BYTES"),
        lowp_var: Some("RCCL_LOW_PRECISION_ENABLE_ALLREDUCE"),
        max: [64 * MIB, 16 * MIB, 8 * MIB],
        lowp_min: [MIB, 16 * MIB, 16 * MIB],
        one_shot_max: Some(AR_ONE_SHOT_MAX),
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
        protos: &[Proto::Ll, Proto::Ll128, Proto::Window, Proto::Stream],
        dda_var: "RCCL_ENABLE_DDA_ALL_GATHER",
        max_var: "RCCL_DDA_ALL_GATHER_MAX_BYTES",
        one_shot_var: None,
        lowp_var: Some("RCCL_LOW_PRECISION_ENABLE_ALLGATHER"),
        max: [64 * MIB, 16 * MIB, 16 * MIB],
        lowp_min: [4 * MIB, 16 * MIB, 16 * MIB],
        one_shot_max: None,
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
        protos: &[Proto::Ll, Proto::Window, Proto::Stream],
        dda_var: "RCCL_ENABLE_DDA_REDUCE_SCATTER",
        max_var: "RCCL_DDA_REDUCE_SCATTER_MAX_BYTES",
        one_shot_var: None,
        lowp_var: Some("RCCL_LOW_PRECISION_ENABLE_REDUCESCATTER"),
        max: [64 * MIB, 8 * MIB, 8 * MIB],
        lowp_min: [2 * MIB, 16 * MIB, 16 * MIB],
        one_shot_max: None,
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
        protos: &[Proto::Ll, Proto::Window, Proto::Stream],
        dda_var: "RCCL_ENABLE_DDA_ALL_TO_ALL",
        max_var: "RCCL_DDA_ALL_TO_ALL_MAX_BYTES",
        one_shot_var: None,
        lowp_var: Some("RCCL_LOW_PRECISION_ENABLE_ALLTOALL"),
        max: [16 * MIB, 2 * MIB, 2 * MIB],
        lowp_min: [4 * MIB, 16 * MIB, 16 * MIB],
        one_shot_max: None,
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
        protos: &[Proto::Ll, Proto::Window],
        dda_var: "RCCL_ENABLE_DDA_BROADCAST",
        max_var: "RCCL_DDA_BROADCAST_MAX_BYTES",
        one_shot_var: None,
        lowp_var: None,
        max: [256 * KIB; 3],
        lowp_min: [u64::MAX; 3],
        one_shot_max: None,
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
        protos: &[Proto::Ll, Proto::Window],
        dda_var: "RCCL_ENABLE_DDA_REDUCE",
        max_var: "RCCL_DDA_REDUCE_MAX_BYTES",
        one_shot_var: None,
        lowp_var: None,
        max: [64 * MIB, MIB, 256 * KIB],
        lowp_min: [u64::MAX; 3],
        one_shot_max: None,
    },
];

/// AllReduce's one-shot limit (see [`COLLS`]): the model's crossovers, in bytes.
pub const AR_ONE_SHOT_MAX: OneShotByRanks = OneShotByRanks {
    // 2 ranks, then 571, 254, 159, 114, 89, 73 KiB (H200).
    switch: [64 * MIB, 568 * KIB, 256 * KIB, 160 * KIB, 112 * KIB, 88 * KIB, 72 * KIB],
    // 2 ranks, then 281, 188, 156, 141, 131, 125 KiB (MI300X).
    mesh: [64 * MIB, 280 * KIB, 184 * KIB, 160 * KIB, 144 * KIB, 128 * KIB, 128 * KIB],
};

impl Spec {
    /// Has kernels of protocol `proto`.
    pub fn has(&self, proto: Proto) -> bool {
        self.protos.contains(&proto)
    }

    /// Has a rooted argument (`CallDesc::root`).
    pub fn rooted(&self) -> bool {
        self.root_only.is_some()
    }

    /// The default one-shot limit of a clique of `nranks` ranks on `fabric`: two-shot collectives
    /// by rank count ([`OneShotByRanks`]; below 2 ranks as 2, above 8 as 8), never above `max`; the
    /// others one-shot up to `max`.
    pub fn one_shot_default(&self, nranks: usize, fabric: Fabric) -> u64 {
        let max = self.max[rank_row(nranks)];
        match &self.one_shot_max {
            None => max,
            Some(t) => {
                let i = nranks.clamp(2, 8) - 2;
                let v = match fabric {
                    Fabric::Switch => t.switch[i],
                    Fabric::Mesh => t.mesh[i],
                };
                v.min(max)
            }
        }
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
            assert_eq!(s.two_shot, s.one_shot_max.is_some(), "{}", s.name);
            for n in 2..=8 {
                for fabric in [Fabric::Switch, Fabric::Mesh] {
                    let v = s.one_shot_default(n, fabric);
                    assert!(v <= s.max[rank_row(n)], "{} at {n}", s.name);
                    // LL stays below one-shot: the routes go LL, one-shot, two-shot.
                    assert!(v >= LL_MAX[rank_row(n)], "{} at {n}", s.name);
                    assert!(s.two_shot || v == s.max[rank_row(n)], "{}", s.name);
                }
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
        for (i, p) in PROTOS.iter().enumerate() {
            assert_eq!(p.proto as usize, i, "{}", p.name);
        }
        for s in &COLLS {
            assert!(s.has(Proto::Ll) && s.has(Proto::Window), "{}: LL and window are every collective's", s.name);
        }
    }

    /// AllReduce's one-shot limit: unchanged at 2 ranks (64 MiB), the model's crossovers from 3,
    /// falling with the rank count on NVSwitch, never rising on xGMI, where one-shot keeps more
    /// (each pair has its own link): at 8 ranks 72 KiB against 128 KiB.
    #[test]
    fn allreduce_one_shot_by_ranks_and_fabric() {
        let ar = Coll::AllReduce.spec();
        for fabric in [Fabric::Switch, Fabric::Mesh] {
            assert_eq!(ar.one_shot_default(2, fabric), 64 * MIB);
            assert_eq!(ar.one_shot_default(1, fabric), 64 * MIB);
            for n in 3..=8 {
                assert!(ar.one_shot_default(n, fabric) <= ar.one_shot_default(n - 1, fabric), "{fabric:?} {n}");
            }
            assert_eq!(ar.one_shot_default(64, fabric), ar.one_shot_default(8, fabric));
        }
        assert_eq!(ar.one_shot_default(3, Fabric::Switch), 568 * KIB);
        assert_eq!(ar.one_shot_default(4, Fabric::Switch), 256 * KIB);
        assert_eq!(ar.one_shot_default(8, Fabric::Switch), 72 * KIB);
        assert_eq!(ar.one_shot_default(4, Fabric::Mesh), 184 * KIB);
        assert_eq!(ar.one_shot_default(8, Fabric::Mesh), 128 * KIB);
        for n in 3..=7 {
            assert!(ar.one_shot_default(n, Fabric::Switch) > ar.one_shot_default(n + 1, Fabric::Switch));
        }
        assert!(ar.one_shot_default(8, Fabric::Mesh) > ar.one_shot_default(8, Fabric::Switch));
    }
}
