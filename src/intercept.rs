//! Layer `intercept`: the per-call decision, own kernel or stock library.
//!
//! Pure, no `unsafe`; depends only on `types`, `collective`, `config` and `kernel_table`.
//!
//! [`decide`] is a pure function of the call (collective, count, type, op) and the
//! communicator's facts (its [`Policies`], agreed by every rank at setup: rank 0's
//! configuration). Nothing rank-local (pointers, streams, group depth, capture) enters it, so
//! every rank of a communicator reaches the same route for the same call: a rank taking
//! rcclx's kernel while a peer forwards would hang both.
#![forbid(unsafe_code)]

pub use crate::collective::Coll;
use crate::collective::{COLLS, COUNT, Fabric, LL_MAX, RootOnly, Shape, rank_row};
use crate::config::{Config, LowpCodec, Proto};
use crate::types::{ncclDataType_t, ncclRedOp_t};
use std::ffi::CStr;

/// How a kernel shares the work among the ranks: NCCL's algorithm, apart from the protocol
/// ([`Proto`]) and the codec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algo {
    /// Every rank reads (or writes) every peer's whole part.
    OneShot,
    /// A reduce-scatter, then an all-gather of the owners' results (`Spec::two_shot`
    /// collectives above their one-shot limit).
    TwoShot,
}

/// What runs a call on rcclx's kernels: an algorithm, a protocol and a codec (none: exact). Each
/// combination that has kernels is one family of the kernel table per collective, named by
/// [`Kernel::name`] (the names are stable: they name kernels and statistics routes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Kernel {
    pub algo: Algo,
    pub proto: Proto,
    pub codec: Option<LowpCodec>,
}

impl Kernel {
    const fn exact(algo: Algo, proto: Proto) -> Kernel {
        Kernel { algo, proto, codec: None }
    }

    /// One-shot with the LL protocol: the smallest messages.
    pub const LL: Kernel = Kernel::exact(Algo::OneShot, Proto::Ll);
    /// One-shot with the LL128 protocol: above the LL sizes up to `RCCLX_LL128_MAX_BYTES`.
    pub const LL128: Kernel = Kernel::exact(Algo::OneShot, Proto::Ll128);
    /// One-shot through the staging buffers (copy-in, barrier, every rank reads every peer).
    pub const FLAT: Kernel = Kernel::exact(Algo::OneShot, Proto::Window);
    /// Two-shot through the staging buffers.
    pub const TWO_SHOT: Kernel = Kernel::exact(Algo::TwoShot, Proto::Window);
    /// One-shot on the stream protocol (`RCCLX_PROTO=stream`).
    pub const STREAM: Kernel = Kernel::exact(Algo::OneShot, Proto::Stream);
    /// Two-shot on the stream protocol: a reduce-scatter ring whose owners' results every rank
    /// pulls.
    pub const STREAM_TWO_SHOT: Kernel = Kernel::exact(Algo::TwoShot, Proto::Stream);

    /// Low precision with `codec` on the wire, FP32 arithmetic, through the staging buffers
    /// (two-shot where the collective is: an AllReduce's owners re-quantize their sums).
    pub fn coded(coll: Coll, codec: LowpCodec) -> Kernel {
        let algo = if coll.spec().two_shot { Algo::TwoShot } else { Algo::OneShot };
        Kernel { algo, proto: Proto::Window, codec: Some(codec) }
    }

    /// Every kernel with a name (the codecs as a one-shot collective has them), in the order
    /// the benchmark lists families.
    pub const ALL: [Kernel; 8] = [
        Kernel::LL,
        Kernel::FLAT,
        Kernel::TWO_SHOT,
        Kernel { algo: Algo::OneShot, proto: Proto::Window, codec: Some(LowpCodec::Fp8) },
        Kernel { algo: Algo::OneShot, proto: Proto::Window, codec: Some(LowpCodec::Int8) },
        Kernel::STREAM,
        Kernel::STREAM_TWO_SHOT,
        Kernel::LL128,
    ];

    /// Its family's name in the kernel table and statistics (`tree` is the two-shot, `lowp` the
    /// FP8 codec: RCCLX's names); `none` for a combination without kernels.
    pub fn name(self) -> &'static str {
        match (self.codec, self.algo, self.proto) {
            (Some(LowpCodec::Fp8), ..) => "lowp",
            (Some(LowpCodec::Int8), ..) => "int8",
            (None, Algo::OneShot, Proto::Ll) => "ll",
            (None, Algo::OneShot, Proto::Ll128) => "ll128",
            (None, Algo::OneShot, Proto::Window) => "flat",
            (None, Algo::TwoShot, Proto::Window) => "tree",
            (None, Algo::OneShot, Proto::Stream) => "stream",
            (None, Algo::TwoShot, Proto::Stream) => "stream_tree",
            (None, Algo::TwoShot, Proto::Ll | Proto::Ll128) => "none",
        }
    }

    /// A low-precision codec.
    pub fn is_low_precision(self) -> bool {
        self.codec.is_some()
    }

    /// The same kernel of a collective as `coll` has it: a codec's algorithm follows the
    /// collective (so that `FamilyKey`s compare equal however the kernel was made).
    fn of(self, coll: Coll) -> Kernel {
        match self.codec {
            Some(codec) => Kernel::coded(coll, codec),
            None => self,
        }
    }
}

/// What a kernel family runs: the one key by which the library finds a family of
/// `kernel_table::FAMILIES` ([`family`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FamilyKey {
    /// `coll` on a kernel: `allreduce.ll`, `broadcast.flat`, `alltoall.lowp`, ...
    Coll(Coll, Kernel),
    /// The 2-rank low-precision AllReduce, a gather of codes: `allreduce.lowp_pair` (FP8),
    /// `allreduce.int8_pair`.
    AllReducePair(LowpCodec),
    /// The GPU-resident AllToAllv: `alltoallv.dynamic` (plain), `.lowp` (FP8), `.int8`.
    AllToAllv(Option<LowpCodec>),
    /// The low-precision rail step of an AllReduce, a ReduceScatter or an AllGather across
    /// hosts: `allreduce.hier_lowp` (FP8), `reducescatter.hier_int8`, ...
    Rail(Coll, LowpCodec),
}

impl FamilyKey {
    /// Every key: each collective on each algorithm (most have no family), then the others.
    pub fn all() -> impl Iterator<Item = FamilyKey> {
        let codecs = [LowpCodec::Fp8, LowpCodec::Int8];
        COLLS
            .iter()
            .flat_map(|c| Kernel::ALL.map(|k| FamilyKey::Coll(c.coll, k.of(c.coll))))
            .chain(codecs.map(FamilyKey::AllReducePair))
            .chain([None, Some(LowpCodec::Fp8), Some(LowpCodec::Int8)].map(FamilyKey::AllToAllv))
            .chain(
                [Coll::AllReduce, Coll::ReduceScatter, Coll::AllGather]
                    .into_iter()
                    .flat_map(move |c| codecs.map(|k| FamilyKey::Rail(c, k))),
            )
    }

    /// The family's `coll` and `algo` in the kernel table.
    pub fn names(self) -> (&'static str, &'static str) {
        match self {
            FamilyKey::Coll(coll, kernel) => (coll.name(), kernel.name()),
            FamilyKey::AllReducePair(LowpCodec::Fp8) => ("allreduce", "lowp_pair"),
            FamilyKey::AllReducePair(LowpCodec::Int8) => ("allreduce", "int8_pair"),
            FamilyKey::AllToAllv(None) => ("alltoallv", "dynamic"),
            FamilyKey::AllToAllv(Some(codec)) => ("alltoallv", Kernel::coded(Coll::AllToAll, codec).name()),
            FamilyKey::Rail(coll, LowpCodec::Fp8) => (coll.name(), "hier_lowp"),
            FamilyKey::Rail(coll, LowpCodec::Int8) => (coll.name(), "hier_int8"),
        }
    }
}

/// The kernel family (index into `kernel_table::FAMILIES`) of `key`, if the table has one.
pub fn family(key: FamilyKey) -> Option<usize> {
    let key = match key {
        FamilyKey::Coll(coll, kernel) => FamilyKey::Coll(coll, kernel.of(coll)),
        other => other,
    };
    // Resolved by the table's names once; every call asks (statistics, planning).
    static TABLE: std::sync::OnceLock<Vec<(FamilyKey, usize)>> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        FamilyKey::all()
            .filter_map(|k| {
                let (coll, algo) = k.names();
                crate::kernel_table::family_index(coll, algo).map(|f| (k, f))
            })
            .collect()
    });
    table.iter().find(|(k, _)| *k == key).map(|&(_, f)| f)
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
    /// The root rank of rooted collectives (`Spec::root_only`); 0 for the others.
    pub root: i32,
}

impl CallDesc {
    /// A call of a collective without op or root.
    pub fn new(coll: Coll, count: usize, dtype: ncclDataType_t) -> CallDesc {
        CallDesc { coll, count, dtype, op: ncclRedOp_t::Sum, root: 0 }
    }

    /// Bytes of the buffer the limits refer to: the message where the count counts it
    /// (`Shape::Whole`), the whole AllGather output / ReduceScatter input / AllToAll buffer
    /// (as RCCLX counts them).
    pub fn bytes(&self, nranks: usize) -> Option<u64> {
        let elems = match self.coll.spec().shape {
            Shape::Whole => self.count,
            Shape::PerRank => self.count.checked_mul(nranks)?,
        };
        (elems as u64).checked_mul(self.dtype.size()? as u64)
    }
}

/// How one collective is routed on one communicator (plain `u64`s: carried in the setup
/// record as it is, rank 0's adopted by every rank).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// 1: DDA switched on.
    pub dda: u64,
    /// 1: low precision switched on.
    pub lowp: u64,
    /// One-shot up to this many bytes (as `CallDesc::bytes` counts them); two-shot above, for
    /// collectives that have one.
    pub one_shot_max: u64,
    /// DDA up to this many bytes, the stock library above.
    pub max: u64,
    /// Low precision (when switched on) from this many bytes.
    pub lowp_min: u64,
    /// 1: the stream protocol instead of the windowed kernels (`RCCLX_PROTO=stream`, where the
    /// collective has stream kernels) ...
    pub stream: u64,
    /// ... from this many bytes (`RCCLX_STREAM_MIN_BYTES`), the windowed kernels below.
    pub stream_min: u64,
    /// LL128 one-shot above the LL sizes up to this many bytes (`RCCLX_LL128_MAX_BYTES`, where
    /// the collective has LL128 kernels; 0: none), where the one-shot would run.
    pub ll128_max: u64,
}

/// Every collective's [`Policy`] on one communicator, and what they share.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policies {
    pub colls: [Policy; COUNT],
    /// LL one-shot up to this many bytes per rank (the LL inbox holds that much per source).
    pub ll_max: u64,
    /// The codec (`RCCLX_LOW_PRECISION_CODEC`): [`CODEC_DEFAULT`] (unset: FP8 on one host,
    /// INT8 across hosts), [`CODEC_INT8`] or [`CODEC_FP8`] ([`Policies::codec`]).
    pub codec: u64,
    /// 1: across hosts, AllReduce runs the exact hierarchy where low precision does not apply
    /// (`RCCLX_HIER_EXACT`).
    pub hier_exact: u64,
    /// 1: across hosts, ReduceScatter with low precision runs its plan (`RCCLX_HIER_RS`).
    pub hier_rs: u64,
    /// 1: across hosts, AllGather with low precision runs its plan (`RCCLX_HIER_AG`).
    pub hier_ag: u64,
}

impl Default for Policies {
    fn default() -> Self {
        Policies {
            colls: [Policy::default(); COUNT],
            ll_max: 0,
            codec: CODEC_DEFAULT,
            hier_exact: 0,
            hier_rs: 0,
            hier_ag: 0,
        }
    }
}

/// [`Policies::codec`]: no codec set (FP8 on one host, INT8 across hosts), INT8, FP8.
pub const CODEC_DEFAULT: u64 = 0;
pub const CODEC_INT8: u64 = 1;
pub const CODEC_FP8: u64 = 2;

impl Policies {
    /// The codec of low-precision calls on a communicator of `hosts` hosts: the one set, else
    /// FP8 on one host (RCCLX's default) and INT8 across hosts, where it was measured at a
    /// quarter of FP8's error and as fast or faster (simulated hosts, 2x2: 0.80 % against
    /// 3.16 % relative error for bf16; 64 MiB AllReduce 7.15 ms against 7.83 ms).
    pub fn codec(&self, hosts: usize) -> LowpCodec {
        match self.codec {
            CODEC_INT8 => LowpCodec::Int8,
            CODEC_FP8 => LowpCodec::Fp8,
            _ if hosts > 1 => LowpCodec::Int8,
            _ => LowpCodec::Fp8,
        }
    }

    /// A communicator of `nranks` ranks on `fabric` under configuration `c`: set variables win,
    /// else the collectives' defaults for the first [`crate::collective::RANK_ROWS`] entry with
    /// at least `nranks` (AllReduce's one-shot limit: by rank count and fabric,
    /// `Spec::one_shot_default`). The library passes the configuration with the low-precision
    /// switches as they are at the communicator's setup (`Config::with_lowp_now`) and its
    /// GPUs' fabric (`clique::local_fabric`); tests pass theirs.
    pub fn for_comm(c: &Config, nranks: usize, fabric: Fabric) -> Policies {
        let row = rank_row(nranks);
        let p = &c.per_coll;
        Policies {
            colls: std::array::from_fn(|i| {
                let s = &COLLS[i];
                let max = p.max_bytes[i].unwrap_or(s.max[row]);
                Policy {
                    dda: p.dda[i] as u64,
                    lowp: c.lowp_on(s.coll) as u64,
                    one_shot_max: if s.two_shot {
                        p.one_shot_max_bytes[i].unwrap_or(s.one_shot_default(nranks, fabric))
                    } else {
                        max
                    },
                    max,
                    lowp_min: c.lowp_min_bytes.unwrap_or(s.lowp_min[row]),
                    stream: (c.proto.of(s.coll) == Proto::Stream && s.has(Proto::Stream)) as u64,
                    stream_min: c.stream_min_bytes,
                    ll128_max: if s.has(Proto::Ll128) { c.ll128_max_bytes } else { 0 },
                }
            }),
            ll_max: c.dda_ll_max_bytes.unwrap_or(LL_MAX[row]),
            codec: match c.lowp_codec {
                None => CODEC_DEFAULT,
                Some(LowpCodec::Int8) => CODEC_INT8,
                Some(LowpCodec::Fp8) => CODEC_FP8,
            },
            hier_exact: c.hier_exact as u64,
            hier_rs: c.hier_rs as u64,
            hier_ag: c.hier_ag as u64,
        }
    }

    /// The policies with the DDA limits of the tuning file (`tuned`, in `Coll` order) where no
    /// variable sets them: a tuned limit replaces the default as `Spec::max_var` would, and a
    /// one-shot limit the variable does not set stays at most the DDA limit.
    pub fn tuned(mut self, c: &Config, tuned: &[Option<u64>; COUNT]) -> Policies {
        let p = &c.per_coll;
        for (i, q) in self.colls.iter_mut().enumerate() {
            let Some(max) = tuned[i].filter(|_| p.max_bytes[i].is_none()) else { continue };
            q.max = max;
            if !COLLS[i].two_shot || p.one_shot_max_bytes[i].is_none() {
                q.one_shot_max = q.one_shot_max.min(max);
            }
        }
        self
    }

    pub fn of(&self, coll: Coll) -> &Policy {
        &self.colls[coll as usize]
    }

    /// Some collective may run LL128: the clique then has an LL128 region (none otherwise).
    pub fn ll128_on(&self) -> bool {
        self.colls.iter().any(|q| q.ll128_max > 0)
    }

    /// Some collective has low precision switched on.
    pub fn any_lowp(&self) -> bool {
        self.colls.iter().any(|p| p.lowp != 0)
    }

    /// Whether anything runs across hosts (`decide_across_hosts`): a communicator spanning
    /// hosts gets a clique per host and rails only then.
    pub fn across_hosts(&self) -> bool {
        self.hier_exact != 0 || self.lowp_across_hosts()
    }

    /// Some collective runs with low precision across hosts (AllReduce; ReduceScatter with
    /// `RCCLX_HIER_RS`, AllGather with `RCCLX_HIER_AG`): the ranks then have the rail scratch.
    pub fn lowp_across_hosts(&self) -> bool {
        self.of(Coll::AllReduce).lowp != 0
            || (self.hier_rs != 0 && self.of(Coll::ReduceScatter).lowp != 0)
            || (self.hier_ag != 0 && self.of(Coll::AllGather).lowp != 0)
    }
}

/// Facts about a communicator, identical on every rank (computed from gathered records).
#[derive(Clone, Copy, Debug, Default)]
pub struct CommFacts {
    /// Ranks of the clique: the communicator's on one host, one host's where it spans hosts.
    pub nranks: usize,
    /// Hosts of the communicator (the same number of ranks on each).
    pub hosts: usize,
    /// The step between consecutive ranks of a host, the same on every host (`RankMap::step`;
    /// 0: none such).
    pub rank_step: usize,
    pub policies: Policies,
}

/// Where a call goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    Upstream(Reason),
    Own(Kernel),
    /// A communicator spanning hosts: the hierarchy (rcclx in each host, the stock library on
    /// the rails), with this codec on the rails, or exact (`None`).
    AcrossHosts(Option<LowpCodec>),
}

impl Route {
    /// In words, for the logs: `rcclx allreduce.ll`, or `stock library (size)`.
    pub fn describe(self, coll: Coll) -> String {
        match self {
            Route::Own(kernel) => format!("rcclx {}.{}", coll.name(), kernel.name()),
            Route::AcrossHosts(Some(codec)) => {
                let (c, a) = FamilyKey::Rail(coll, codec).names();
                format!("rcclx {c}.{a} (across hosts)")
            }
            Route::AcrossHosts(None) => format!("rcclx {} across hosts, exact", coll.name()),
            Route::Upstream(why) => format!("stock library ({})", why.c_name().to_string_lossy()),
        }
    }
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
    NotEligible = c"comm-not-eligible",
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
    // A root outside the communicator: the stock library reports the error.
    Root = c"invalid-root",
    // A communicator spanning hosts: only AllReduce runs across hosts.
    MultiHost = c"multi-host",
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
pub fn decide(call: &CallDesc, comm: &CommFacts) -> Route {
    use Route::Upstream as Up;
    if call.count == 0 {
        return Up(Reason::Empty);
    }
    let Some(bytes) = call.bytes(comm.nranks * comm.hosts) else { return Up(Reason::Dtype) };
    if comm.hosts > 1 {
        return across_hosts(call, comm, bytes);
    }
    if comm.nranks < 2 {
        return Up(Reason::NotEligible);
    }
    let spec = call.coll.spec();
    let policy = comm.policies.of(call.coll);
    // Low precision first (as RCCLX): large messages of float types, op sum.
    if takes_lowp(call, policy, bytes) {
        return Route::Own(Kernel::coded(call.coll, comm.policies.codec(comm.hosts)));
    }
    if policy.dda == 0 {
        return Up(Reason::Disabled);
    }
    if spec.reduces && !dda_dtype(call.dtype) {
        return Up(Reason::Dtype);
    }
    if spec.reduces && !dda_op(call.op) {
        return Up(Reason::Op);
    }
    if spec.rooted() && !(0..comm.nranks as i64).contains(&(call.root as i64)) {
        return Up(Reason::Root);
    }
    // Bytes of one rank's part: the LL inbox holds that much per source rank.
    let per_rank = (call.count as u64).saturating_mul(call.dtype.size().unwrap_or(0) as u64);
    if per_rank <= comm.policies.ll_max {
        return Route::Own(Kernel::LL);
    }
    if bytes > policy.max {
        return Up(Reason::Size);
    }
    // The algorithm by size, then the protocol: LL128 (one-shot only) in its sizes, else the
    // stream protocol where it is on, else the windowed kernels.
    let algo = if spec.two_shot && bytes > policy.one_shot_max { Algo::TwoShot } else { Algo::OneShot };
    let has = |p: Proto| spec.has(p) && (algo == Algo::OneShot || p.spec().two_shot);
    let proto = if bytes <= policy.ll128_max && has(Proto::Ll128) {
        Proto::Ll128
    } else if policy.stream != 0 && bytes >= policy.stream_min && has(Proto::Stream) {
        Proto::Stream
    } else {
        Proto::Window
    };
    Route::Own(Kernel { algo, proto, codec: None })
}

/// Whether `call` of `bytes` takes low precision under `policy`: switched on, a float type, a
/// sum, from the policy's size up (on one host and across hosts alike).
fn takes_lowp(call: &CallDesc, policy: &Policy, bytes: u64) -> bool {
    policy.lowp != 0 && lowp_dtype(call.dtype) && call.op == ncclRedOp_t::Sum && bytes >= policy.lowp_min
}

/// [`decide`] on a communicator spanning hosts: AllReduce takes the hierarchy, with low
/// precision on the rails where it would take it on one host, else exact where
/// `RCCLX_HIER_EXACT` asks for it (and each host has ranks to reduce over); ReduceScatter and
/// AllGather take theirs with low precision only, where `RCCLX_HIER_RS` / `RCCLX_HIER_AG` ask for
/// it and every host's ranks are evenly spaced alike (a host's blocks are then a strided
/// window); everything else forwards.
fn across_hosts(call: &CallDesc, comm: &CommFacts, bytes: u64) -> Route {
    use Route::Upstream as Up;
    let policy = comm.policies.of(call.coll);
    let codec = comm.policies.codec(comm.hosts);
    match call.coll {
        Coll::AllReduce => {}
        Coll::ReduceScatter if comm.policies.hier_rs != 0 && comm.rank_step != 0 && takes_lowp(call, policy, bytes) => {
            return Route::AcrossHosts(Some(codec));
        }
        Coll::AllGather if comm.policies.hier_ag != 0 && comm.rank_step != 0 && takes_lowp(call, policy, bytes) => {
            return Route::AcrossHosts(Some(codec));
        }
        _ => return Up(Reason::MultiHost),
    }
    if takes_lowp(call, policy, bytes) {
        return Route::AcrossHosts(Some(codec));
    }
    if comm.policies.hier_exact == 0 || comm.nranks < 2 {
        return Up(Reason::MultiHost);
    }
    if !dda_dtype(call.dtype) {
        return Up(Reason::Dtype);
    }
    // An integer average divides in each step (truncating): across hosts it would divide twice.
    if !dda_op(call.op) || (call.op == ncclRedOp_t::Avg && call.dtype.0 <= ncclDataType_t::Uint64.0) {
        return Up(Reason::Op);
    }
    Route::AcrossHosts(None)
}

/// Whether a call passes a NULL buffer that this rank uses: such a call goes to the stock
/// library, which reports the error code it always does. A rooted collective's root-only buffer
/// ([`RootOnly`]) may be NULL off the root, and then the rank runs the call like its peers. Pure,
/// like [`decide`]. Buffers are rank-local, so this rule must never reject a buffer that the
/// collective lets a rank leave NULL: that rank would forward alone.
pub fn null_buffer(root_only: Option<RootOnly>, is_root: bool, send_null: bool, recv_null: bool) -> bool {
    let (uses_send, uses_recv) = match root_only {
        None => (true, true),
        Some(RootOnly::Send) => (is_root, true),
        Some(RootOnly::Recv) => (true, is_root),
    };
    (uses_send && send_null) || (uses_recv && recv_null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Protos;

    fn policies(nranks: usize, lowp: bool) -> Policies {
        Policies::for_comm(&Config { lowp_enable: lowp, ..Config::default() }, nranks, Fabric::Switch)
    }

    fn facts(nranks: usize, lowp: bool) -> CommFacts {
        CommFacts { nranks, hosts: 1, rank_step: 1, policies: policies(nranks, lowp) }
    }

    #[test]
    fn tuning_file_limits_apply_unless_a_variable_is_set() {
        use crate::collective::Coll::*;
        let mut tuned = [None; COUNT];
        tuned[AllReduce as usize] = Some(8 << 20);
        tuned[AllGather as usize] = Some(128 << 20);
        let c = Config::default();
        let base = Policies::for_comm(&c, 2, Fabric::Switch);
        let t = base.tuned(&c, &tuned);
        assert_eq!((t.of(AllReduce).max, t.of(AllReduce).one_shot_max), (8 << 20, 8 << 20));
        assert_eq!((t.of(AllGather).max, t.of(AllGather).one_shot_max), (128 << 20, 64 << 20));
        assert_eq!(t.of(AllToAll), base.of(AllToAll), "not in the file: the default");
        // Set variables win over the file.
        let mut set = Config::default();
        set.per_coll.max_bytes[AllReduce as usize] = Some(32 << 20);
        let t = Policies::for_comm(&set, 2, Fabric::Switch).tuned(&set, &tuned);
        assert_eq!((t.of(AllReduce).max, t.of(AllReduce).one_shot_max), (32 << 20, 64 << 20));
        set.per_coll.max_bytes[AllReduce as usize] = None;
        set.per_coll.one_shot_max_bytes[AllReduce as usize] = Some(16 << 20);
        let t = Policies::for_comm(&set, 2, Fabric::Switch).tuned(&set, &tuned);
        assert_eq!((t.of(AllReduce).max, t.of(AllReduce).one_shot_max), (8 << 20, 16 << 20));
        // A tuned limit routes exactly like the variable with the same value.
        let mut var = Config::default();
        var.per_coll.max_bytes[AllGather as usize] = Some(128 << 20);
        let by_var = Policies::for_comm(&var, 2, Fabric::Switch);
        let by_file = Policies::for_comm(&c, 2, Fabric::Switch).tuned(&c, &tuned);
        assert_eq!(by_var.of(AllGather).max, by_file.of(AllGather).max);
        let facts = |p| CommFacts { nranks: 2, hosts: 1, rank_step: 1, policies: p };
        for count in [1usize << 24, 1 << 25, (1 << 25) + 1] {
            let call = CallDesc::new(AllGather, count, ncclDataType_t::Float32);
            assert_eq!(decide(&call, &facts(by_var)), decide(&call, &facts(by_file)), "{count}");
        }
    }

    #[test]
    fn crossovers_by_rank_count() {
        let c = Config::default();
        let ar = |c: &Config, n| *Policies::for_comm(c, n, Fabric::Switch).of(Coll::AllReduce);
        assert_eq!(ar(&c, 2).one_shot_max, 64 << 20);
        assert_eq!(Policies::for_comm(&c, 3, Fabric::Switch).ll_max, 64 << 10);
        assert_eq!(ar(&c, 8).max, 8 << 20);
        let mut set = c.clone();
        set.per_coll.one_shot_max_bytes[Coll::AllReduce as usize] = Some(5);
        assert_eq!(ar(&set, 2).one_shot_max, 5);
        for n in 1..=8 {
            let p = Policies::for_comm(&c, n, Fabric::Switch);
            for coll in Coll::ALL {
                let q = p.of(coll);
                assert!(p.ll_max <= q.one_shot_max && q.one_shot_max <= q.max, "{coll:?} at {n}");
            }
        }
        // Collectives without low-precision kernels never switch it on.
        assert_eq!(policies(2, true).of(Coll::Broadcast).lowp, 0);
        assert_eq!(policies(2, true).of(Coll::AllToAll).lowp, 1);
    }

    /// Sizes around every threshold, primes and extremes.
    fn counts(p: &Policies) -> Vec<usize> {
        let mut v = vec![0, 1, 2, 3, 7, 31, 127, 255, 1023, 4099, 65_537, 1 << 20, (1 << 20) + 5, usize::MAX / 16];
        let limits = p.colls.iter().flat_map(|q| [q.one_shot_max, q.max, q.lowp_min.min(1 << 40)]);
        for t in limits.chain([p.ll_max]) {
            for d in [-9i64, -1, 0, 1, 9] {
                v.push((t as i64 + d).max(0) as usize);
                v.push(((t as i64 + d).max(0) / 2) as usize);
                v.push(((t as i64 + d).max(0) / 4) as usize);
            }
        }
        v
    }

    fn all_calls(p: &Policies) -> impl Iterator<Item = CallDesc> {
        let counts = counts(p);
        Coll::ALL.into_iter().flat_map(move |coll| {
            let counts = counts.clone();
            (-1..=13).flat_map(move |t| {
                let counts = counts.clone();
                (-1..=7).flat_map(move |op| {
                    counts.clone().into_iter().flat_map(move |count| {
                        [-1, 0, 1, 7, 8].map(|root| CallDesc {
                            coll,
                            count,
                            dtype: ncclDataType_t(t),
                            op: ncclRedOp_t(op),
                            root,
                        })
                    })
                })
            })
        })
    }

    #[test]
    fn never_routes_unsupported_calls_to_rcclx() {
        for nranks in 1..=8 {
            for lowp in [false, true] {
                let f = facts(nranks, lowp);
                for call in all_calls(&f.policies) {
                    let r = decide(&call, &f);
                    let spec = call.coll.spec();
                    match r {
                        Route::Own(algo) if !algo.is_low_precision() => {
                            assert!(call.count > 0 && nranks >= 2, "{call:?} -> {r:?}");
                            assert!(call.dtype.size().is_some(), "{call:?} -> {r:?}");
                            if spec.reduces {
                                assert!(dda_dtype(call.dtype) && dda_op(call.op), "{call:?} -> {r:?}");
                            }
                            if spec.rooted() {
                                assert!((0..nranks as i32).contains(&call.root), "{call:?} -> {r:?}");
                            }
                            let two_shot = algo.algo == Algo::TwoShot;
                            assert!(!two_shot || spec.two_shot, "{call:?} -> {r:?}");
                        }
                        Route::Own(_) => {
                            assert!(lowp && lowp_dtype(call.dtype) && call.op == ncclRedOp_t::Sum, "{call:?}");
                            assert!(spec.lowp_var.is_some(), "{call:?}");
                            assert!(call.bytes(nranks).unwrap() >= f.policies.of(call.coll).lowp_min);
                        }
                        Route::Upstream(_) => {}
                        Route::AcrossHosts(_) => panic!("{call:?}: across hosts on one host"),
                    }
                }
            }
        }
    }

    /// A communicator spanning hosts: AllReduce takes the hierarchy (low precision where it
    /// would on one host, the exact one only where asked), ReduceScatter and AllGather with low
    /// precision where asked, every other collective forwards.
    #[test]
    fn across_hosts_allreduce_and_low_precision_reduce_scatter_and_all_gather_run() {
        let across = |local: usize, lowp: bool, exact: bool, int8: bool| {
            let mut p = policies(2 * local, lowp);
            let codec = if int8 { CODEC_INT8 } else { CODEC_FP8 };
            (p.hier_exact, p.codec, p.hier_rs, p.hier_ag) = (exact as u64, codec, 1, 1);
            CommFacts { nranks: local, hosts: 2, rank_step: 1, policies: p }
        };
        let call = |coll, count, dtype, op| CallDesc { coll, count, dtype, op: ncclRedOp_t(op), root: 0 };
        let big = call(Coll::AllReduce, 64 << 20, ncclDataType_t::Bfloat16, 0);
        let Route::AcrossHosts(Some(LowpCodec::Fp8)) = decide(&big, &across(2, true, false, false)) else { panic!() };
        let Route::AcrossHosts(Some(LowpCodec::Int8)) = decide(&big, &across(2, true, true, true)) else { panic!() };
        // No codec set: INT8 across hosts, FP8 (RCCLX's) on one host.
        let unset = |hosts| CommFacts { hosts, nranks: 2, ..facts(2, true) };
        assert_eq!(unset(1).policies.codec, CODEC_DEFAULT);
        let Route::AcrossHosts(Some(LowpCodec::Int8)) = decide(&big, &unset(2)) else { panic!() };
        assert_eq!(decide(&big, &unset(1)), Route::Own(Kernel::coded(Coll::AllReduce, LowpCodec::Fp8)));
        // Alone on its host, a rank has nothing to reduce exactly: only low precision runs.
        let Route::AcrossHosts(Some(_)) = decide(&big, &across(1, true, true, false)) else { panic!() };
        assert_eq!(decide(&big, &across(1, false, true, false)), Route::Upstream(Reason::MultiHost));
        assert_eq!(decide(&big, &across(2, false, false, false)), Route::Upstream(Reason::MultiHost));
        assert_eq!(decide(&big, &across(2, false, true, false)), Route::AcrossHosts(None));
        // Below the low-precision size, another op or an integer type: exact only where asked.
        for c in [
            call(Coll::AllReduce, 1000, ncclDataType_t::Bfloat16, 0),
            call(Coll::AllReduce, 64 << 20, ncclDataType_t::Float32, 2),
            call(Coll::AllReduce, 64 << 20, ncclDataType_t::Int32, 0),
            call(Coll::AllReduce, 64 << 20, ncclDataType_t::Float32, 4),
        ] {
            assert_eq!(decide(&c, &across(2, true, true, false)), Route::AcrossHosts(None), "{c:?}");
            assert_eq!(decide(&c, &across(2, true, false, false)), Route::Upstream(Reason::MultiHost), "{c:?}");
        }
        let int_avg = call(Coll::AllReduce, 4096, ncclDataType_t::Int32, 4);
        assert_eq!(decide(&int_avg, &across(2, true, true, false)), Route::Upstream(Reason::Op));
        let fp8 = call(Coll::AllReduce, 64 << 20, ncclDataType_t(10), 0);
        assert_eq!(decide(&fp8, &across(2, true, true, false)), Route::Upstream(Reason::Dtype));
        // ReduceScatter: low precision only, and only where a host's blocks are evenly spaced.
        let rs = call(Coll::ReduceScatter, 16 << 20, ncclDataType_t::Bfloat16, 0);
        let Route::AcrossHosts(Some(LowpCodec::Int8)) = decide(&rs, &across(1, true, false, true)) else { panic!() };
        let Route::AcrossHosts(Some(LowpCodec::Fp8)) = decide(&rs, &across(2, true, true, false)) else { panic!() };
        let uneven = CommFacts { rank_step: 0, ..across(2, true, true, false) };
        assert_eq!(decide(&rs, &uneven), Route::Upstream(Reason::MultiHost));
        let mut off = across(2, true, true, false);
        off.policies.hier_rs = 0;
        assert_eq!(decide(&rs, &off), Route::Upstream(Reason::MultiHost), "RCCLX_HIER_RS unset");
        assert!(!off.policies.lowp_across_hosts() || off.policies.of(Coll::AllReduce).lowp != 0);
        assert_eq!(decide(&rs, &across(2, false, true, false)), Route::Upstream(Reason::MultiHost));
        let rs_max = call(Coll::ReduceScatter, 16 << 20, ncclDataType_t::Bfloat16, 3);
        assert_eq!(decide(&rs_max, &across(2, true, true, false)), Route::Upstream(Reason::MultiHost));
        // AllGather likewise (its op is the export's Sum).
        let ag = call(Coll::AllGather, 4 << 20, ncclDataType_t::Float32, 0);
        let Route::AcrossHosts(Some(LowpCodec::Int8)) = decide(&ag, &across(1, true, false, true)) else { panic!() };
        let Route::AcrossHosts(Some(LowpCodec::Fp8)) = decide(&ag, &across(2, true, true, false)) else { panic!() };
        assert_eq!(decide(&ag, &uneven), Route::Upstream(Reason::MultiHost));
        let mut off = across(2, true, true, false);
        off.policies.hier_ag = 0;
        assert_eq!(decide(&ag, &off), Route::Upstream(Reason::MultiHost), "RCCLX_HIER_AG unset");
        assert_eq!(decide(&ag, &across(2, false, true, false)), Route::Upstream(Reason::MultiHost));
        let ag_int = call(Coll::AllGather, 4 << 20, ncclDataType_t::Int32, 0);
        assert_eq!(decide(&ag_int, &across(2, true, true, false)), Route::Upstream(Reason::MultiHost));
        let ag_small = call(Coll::AllGather, 1000, ncclDataType_t::Float32, 0);
        assert_eq!(decide(&ag_small, &across(2, true, true, false)), Route::Upstream(Reason::MultiHost));
        // The rail scratch is there for either alone.
        let mut p = policies(4, true);
        p.colls.iter_mut().filter(|q| q.lowp != 0).for_each(|q| q.lowp = 0);
        p.colls[Coll::AllGather as usize].lowp = 1;
        assert!(!p.lowp_across_hosts());
        p.hier_ag = 1;
        assert!(p.lowp_across_hosts());
        let forwarded = [Coll::AllReduce, Coll::ReduceScatter, Coll::AllGather];
        for coll in Coll::ALL.into_iter().filter(|c| !forwarded.contains(c)) {
            let c = call(coll, 64 << 20, ncclDataType_t::Bfloat16, 0);
            assert_eq!(decide(&c, &across(2, true, true, false)), Route::Upstream(Reason::MultiHost), "{c:?}");
        }
    }

    #[test]
    fn a_comm_of_one_rank_always_forwards() {
        let f = CommFacts { nranks: 1, ..facts(2, true) };
        for call in all_calls(&f.policies) {
            assert!(matches!(decide(&call, &f), Route::Upstream(_)));
        }
    }

    #[test]
    fn deterministic_and_monotone_in_size() {
        let rank = |r: Route| match r {
            Route::Own(Kernel { codec: Some(_), .. }) | Route::AcrossHosts(_) => 2,
            Route::Own(Kernel::LL) => -1,
            Route::Own(Kernel { algo: Algo::OneShot, .. }) => 0,
            Route::Own(Kernel { algo: Algo::TwoShot, .. }) => 1,
            Route::Upstream(_) => 3,
        };
        for nranks in 2..=8 {
            let f = facts(nranks, false);
            for coll in Coll::ALL {
                for t in [ncclDataType_t::Float32, ncclDataType_t::Bfloat16, ncclDataType_t::Int32] {
                    let mut last = -1;
                    let mut cs = counts(&f.policies);
                    cs.retain(|&c| c > 0);
                    cs.sort();
                    for c in cs {
                        let call = CallDesc::new(coll, c, t);
                        let r = decide(&call, &f);
                        assert_eq!(r, decide(&call, &f));
                        assert!(rank(r) >= last, "{coll:?}: route went back at count {c}: {r:?}");
                        last = rank(r);
                    }
                }
            }
        }
    }

    /// `RCCLX_PROTO` per collective: the named collectives' calls go to their stream kernels,
    /// the others stay on the windowed kernels.
    #[test]
    fn stream_protocol_per_collective() {
        let lookup = |v: &str| (v == "RCCLX_PROTO").then(|| "allreduce=stream,alltoall=stream".to_string());
        let (c, warnings) = Config::from_lookup(lookup);
        assert!(warnings.is_empty(), "{warnings:?}");
        for nranks in [2, 5] {
            let p = Policies::for_comm(&c, nranks, Fabric::Switch);
            for coll in Coll::ALL {
                assert_eq!(p.of(coll).stream != 0, matches!(coll, Coll::AllReduce | Coll::AllToAll), "{coll:?}");
            }
        }
    }

    /// `RCCLX_PROTO=stream` takes every call the windowed kernels would take, of every
    /// collective with stream kernels (all but Broadcast and Reduce), and nothing else: LL, the size limit
    /// and low precision stay.
    #[test]
    fn stream_protocol_replaces_the_windowed_kernels() {
        for nranks in 2..=8 {
            let window = facts(nranks, false);
            let c = Config { proto: Protos::all(Proto::Stream), ..Config::default() };
            let stream =
                CommFacts { nranks, hosts: 1, rank_step: 1, policies: Policies::for_comm(&c, nranks, Fabric::Switch) };
            for coll in Coll::ALL {
                let has_stream = !matches!(coll, Coll::Broadcast | Coll::Reduce);
                assert_eq!(stream.policies.of(coll).stream != 0, has_stream, "{coll:?}");
            }
            assert!(Coll::ALL.iter().all(|&coll| window.policies.of(coll).stream == 0));
            let mut streamed = 0;
            for call in all_calls(&stream.policies) {
                let (w, s) = (decide(&call, &window), decide(&call, &stream));
                match w {
                    Route::Own(Kernel::FLAT) if !matches!(call.coll, Coll::Broadcast | Coll::Reduce) => {
                        assert_eq!(s, Route::Own(Kernel::STREAM), "{call:?}");
                        streamed += 1;
                    }
                    Route::Own(Kernel::TWO_SHOT) => assert_eq!(s, Route::Own(Kernel::STREAM_TWO_SHOT), "{call:?}"),
                    _ => assert_eq!(s, w, "{call:?}"),
                }
            }
            assert!(streamed > 0, "n={nranks}");
            // With a lower bound: the windowed kernels below it, the stream protocol from it.
            let min = 3 << 20;
            let c = Config { proto: Protos::all(Proto::Stream), stream_min_bytes: min, ..Config::default() };
            let above =
                CommFacts { nranks, hosts: 1, rank_step: 1, policies: Policies::for_comm(&c, nranks, Fabric::Switch) };
            for call in all_calls(&above.policies) {
                let (w, s) = (decide(&call, &window), decide(&call, &above));
                let big = call.bytes(nranks).is_some_and(|b| b >= min);
                match w {
                    Route::Own(Kernel::FLAT) if !matches!(call.coll, Coll::Broadcast | Coll::Reduce) && big => {
                        assert_eq!(s, Route::Own(Kernel::STREAM), "{call:?}")
                    }
                    Route::Own(Kernel::TWO_SHOT) if big => {
                        assert_eq!(s, Route::Own(Kernel::STREAM_TWO_SHOT), "{call:?}")
                    }
                    _ => assert_eq!(s, w, "{call:?}"),
                }
            }
        }
        let c = Config { proto: Protos::all(Proto::Stream), ..Config::default() };
        let lowp = Policies::for_comm(&Config { lowp_enable: true, ..c }, 2, Fabric::Switch);
        let f = CommFacts { nranks: 2, hosts: 1, rank_step: 1, policies: lowp };
        let big =
            CallDesc::new(Coll::AllReduce, (lowp.of(Coll::AllReduce).lowp_min / 2) as usize, ncclDataType_t::Bfloat16);
        assert_eq!(decide(&big, &f), Route::Own(Kernel::coded(Coll::AllReduce, LowpCodec::Fp8)));
    }

    /// `RCCLX_LL128_MAX_BYTES` takes, of the collectives with LL128 kernels (AllReduce, AllGather), the calls
    /// above the LL sizes up to it where the one-shot would run (flat, or the stream protocol's
    /// one-shot), and nothing else; 0 (the default) takes none.
    #[test]
    fn ll128_takes_the_one_shot_calls_up_to_its_limit() {
        for nranks in 2..=8 {
            let base = facts(nranks, false);
            assert!(base.policies.colls.iter().all(|q| q.ll128_max == 0));
            for proto in [Protos::all(Proto::Window), Protos::all(Proto::Stream)] {
                let limit = 4 << 20;
                let c = Config { proto, ll128_max_bytes: limit, ..Config::default() };
                let before = CommFacts {
                    hosts: 1,
                    rank_step: 1,
                    nranks,
                    policies: Policies::for_comm(&Config { proto, ..Config::default() }, nranks, Fabric::Switch),
                };
                let after = CommFacts {
                    nranks,
                    hosts: 1,
                    rank_step: 1,
                    policies: Policies::for_comm(&c, nranks, Fabric::Switch),
                };
                let mut taken = 0;
                for call in all_calls(&after.policies) {
                    let (was, now) = (decide(&call, &before), decide(&call, &after));
                    let has = family(FamilyKey::Coll(call.coll, Kernel::LL128)).is_some();
                    let small = call.bytes(nranks).is_some_and(|b| b <= limit);
                    match was {
                        Route::Own(Kernel::FLAT | Kernel::STREAM) if has && small => {
                            assert_eq!(now, Route::Own(Kernel::LL128), "{call:?}");
                            taken += 1;
                        }
                        _ => assert_eq!(now, was, "{call:?}"),
                    }
                }
                assert!(taken > 0, "n={nranks}");
                assert_eq!(after.policies.of(Coll::AllReduce).ll128_max, limit);
                assert_eq!(after.policies.of(Coll::AllGather).ll128_max, limit);
                assert_eq!(after.policies.of(Coll::AllToAll).ll128_max, 0, "no LL128 kernels");
            }
        }
        // The boundaries: LL up to ll_max, LL128 above it up to the limit, then the one-shot.
        let c = Config { ll128_max_bytes: 1 << 20, ..Config::default() };
        let f = CommFacts { nranks: 2, hosts: 1, rank_step: 1, policies: Policies::for_comm(&c, 2, Fabric::Switch) };
        let ar =
            |bytes: u64| decide(&CallDesc::new(Coll::AllReduce, (bytes / 4) as usize, ncclDataType_t::Float32), &f);
        assert_eq!(ar(f.policies.ll_max), Route::Own(Kernel::LL));
        assert_eq!(ar(f.policies.ll_max + 4), Route::Own(Kernel::LL128));
        assert_eq!(ar(1 << 20), Route::Own(Kernel::LL128));
        assert_eq!(ar((1 << 20) + 4), Route::Own(Kernel::FLAT));
        // Above the one-shot limit the two-shot stays, whatever the LL128 limit.
        let mut c = Config { ll128_max_bytes: 8 << 20, ..Config::default() };
        c.per_coll.one_shot_max_bytes[Coll::AllReduce as usize] = Some(1 << 20);
        let f = CommFacts { nranks: 4, hosts: 1, rank_step: 1, policies: Policies::for_comm(&c, 4, Fabric::Switch) };
        let ar =
            |bytes: u64| decide(&CallDesc::new(Coll::AllReduce, (bytes / 4) as usize, ncclDataType_t::Float32), &f);
        assert_eq!(ar(1 << 20), Route::Own(Kernel::LL128));
        assert_eq!(ar((1 << 20) + 4), Route::Own(Kernel::TWO_SHOT));
    }

    #[test]
    fn thresholds_are_inclusive() {
        let f = facts(4, true);
        let p = f.policies;
        let q = *p.of(Coll::AllReduce);
        let route = |dtype, bytes: u64| decide(&CallDesc::new(Coll::AllReduce, (bytes / 4) as usize, dtype), &f);
        let ar = |bytes| route(ncclDataType_t::Int32, bytes);
        assert_eq!(ar(p.ll_max), Route::Own(Kernel::LL));
        assert_eq!(ar(p.ll_max + 4), Route::Own(Kernel::FLAT));
        assert_eq!(ar(q.one_shot_max), Route::Own(Kernel::FLAT));
        assert_eq!(ar(q.one_shot_max + 4), Route::Own(Kernel::TWO_SHOT));
        assert_eq!(ar(q.max), Route::Own(Kernel::TWO_SHOT));
        assert_eq!(ar(q.max + 4), Route::Upstream(Reason::Size));
        let lp = |bytes| route(ncclDataType_t::Float32, bytes);
        assert_eq!(lp(q.lowp_min), Route::Own(Kernel::coded(Coll::AllReduce, LowpCodec::Fp8)));
        assert_ne!(lp(q.lowp_min - 4), Route::Own(Kernel::coded(Coll::AllReduce, LowpCodec::Fp8)));
    }

    #[test]
    fn lowp_for_every_collective_that_has_it_and_float_type_when_switched_on() {
        let call = |coll, dtype, op| CallDesc { op, ..CallDesc::new(coll, 64 << 20, dtype) };
        let fp8 = |coll| Route::Own(Kernel::coded(coll, LowpCodec::Fp8));
        for coll in Coll::ALL {
            let has = coll.spec().lowp_var.is_some();
            for dtype in [ncclDataType_t::Float32, ncclDataType_t::Bfloat16, ncclDataType_t::Float16] {
                let on = decide(&call(coll, dtype, ncclRedOp_t::Sum), &facts(2, true));
                assert_eq!(on == fp8(coll), has, "{coll:?} {dtype:?}: {on:?}");
                assert_ne!(decide(&call(coll, dtype, ncclRedOp_t::Sum), &facts(2, false)), fp8(coll));
            }
            assert_ne!(decide(&call(coll, ncclDataType_t::Int32, ncclRedOp_t::Sum), &facts(2, true)), fp8(coll));
        }
        assert_ne!(
            decide(&call(Coll::AllReduce, ncclDataType_t::Float32, ncclRedOp_t::Max), &facts(2, true)),
            fp8(Coll::AllReduce)
        );
        // The INT8 codec takes the same calls, on its own kernels.
        let int8 = CommFacts { policies: Policies { codec: CODEC_INT8, ..policies(2, true) }, ..facts(2, true) };
        for coll in Coll::ALL.into_iter().filter(|c| c.spec().lowp_var.is_some()) {
            assert_eq!(
                decide(&call(coll, ncclDataType_t::Bfloat16, ncclRedOp_t::Sum), &int8),
                Route::Own(Kernel::coded(coll, LowpCodec::Int8))
            );
            assert!(family(FamilyKey::Coll(coll, Kernel::coded(coll, LowpCodec::Int8))).is_some(), "{coll:?}");
            assert!(family(FamilyKey::Coll(coll, Kernel::coded(coll, LowpCodec::Fp8))).is_some(), "{coll:?}");
        }
    }

    /// The protocols each collective lists (`Spec::protos`, `ProtoSpec::two_shot`) are exactly
    /// its exact kernel families: what `decide` may route to has kernels, and none sit unlisted.
    #[test]
    fn listed_protocols_are_the_kernel_families() {
        for coll in Coll::ALL {
            let spec = coll.spec();
            for proto in Proto::ALL {
                for algo in [Algo::OneShot, Algo::TwoShot] {
                    let listed = spec.has(proto) && (algo == Algo::OneShot || (spec.two_shot && proto.spec().two_shot));
                    let k = Kernel { algo, proto, codec: None };
                    assert_eq!(family(FamilyKey::Coll(coll, k)).is_some(), listed, "{coll:?} {k:?}");
                }
            }
        }
    }

    #[test]
    fn zero_count_and_overflow_forward() {
        let f = facts(8, true);
        let c = CallDesc::new(Coll::AllGather, usize::MAX, ncclDataType_t::Float32);
        assert!(matches!(decide(&c, &f), Route::Upstream(_)));
        let z = CallDesc { count: 0, ..c };
        assert_eq!(decide(&z, &f), Route::Upstream(Reason::Empty));
    }

    #[test]
    fn every_collective_takes_dda_up_to_its_limit_and_can_be_switched_off() {
        let f = facts(2, false);
        for coll in Coll::ALL.into_iter().filter(|c| !c.spec().two_shot) {
            let q = *f.policies.of(coll);
            // Bytes as the limits count them: 2 ranks x count x 4 for per-rank shapes.
            let per = if coll.spec().shape == Shape::PerRank { 8 } else { 4 };
            let ll_bytes = f.policies.ll_max * per / 4;
            let call = |bytes: u64| CallDesc {
                op: ncclRedOp_t::Max,
                ..CallDesc::new(coll, (bytes / per) as usize, ncclDataType_t::Float32)
            };
            assert_eq!(decide(&call(16), &f), Route::Own(Kernel::LL));
            assert_eq!(decide(&call(ll_bytes), &f), Route::Own(Kernel::LL), "{coll:?}");
            if q.max > ll_bytes {
                assert_eq!(decide(&call(ll_bytes + per), &f), Route::Own(Kernel::FLAT), "{coll:?}");
                assert_eq!(decide(&call(q.max), &f), Route::Own(Kernel::FLAT), "{coll:?}");
            }
            let beyond = q.max.max(ll_bytes) + per;
            assert_eq!(decide(&call(beyond), &f), Route::Upstream(Reason::Size), "{coll:?}");
            let mut off = f;
            off.policies.colls[coll as usize].dda = 0;
            assert_eq!(decide(&call(16), &off), Route::Upstream(Reason::Disabled));
        }
        // Data movement takes any type, ReduceScatter only the ones it reduces.
        let fp8 = |coll| CallDesc::new(coll, 64, ncclDataType_t::Float8e4m3);
        assert_eq!(decide(&fp8(Coll::AllGather), &f), Route::Own(Kernel::LL));
        assert_eq!(decide(&fp8(Coll::AllToAll), &f), Route::Own(Kernel::LL));
        assert_eq!(decide(&fp8(Coll::Broadcast), &f), Route::Own(Kernel::LL));
        assert_eq!(decide(&fp8(Coll::ReduceScatter), &f), Route::Upstream(Reason::Dtype));
    }

    #[test]
    fn rooted_collectives_take_their_root_from_the_call() {
        let f = facts(4, false);
        for coll in Coll::ALL.into_iter().filter(|c| c.spec().rooted()) {
            let call =
                |root| CallDesc { root, op: ncclRedOp_t::Prod, ..CallDesc::new(coll, 1000, ncclDataType_t::Float32) };
            for root in 0..4 {
                assert_eq!(decide(&call(root), &f), Route::Own(Kernel::LL), "{coll:?}");
            }
            assert_eq!(decide(&call(4), &f), Route::Upstream(Reason::Root), "{coll:?}");
            assert_eq!(decide(&call(-1), &f), Route::Upstream(Reason::Root), "{coll:?}");
        }
    }

    /// Reduce: a row of its own (root-only receive buffer, every reducing type and op, LL then
    /// flat up to its limit, no low precision), and the kernels of both algorithms for each.
    #[test]
    fn reduce_row_routes_like_a_rooted_one_shot_reduction() {
        let spec = Coll::Reduce.spec();
        assert_eq!((spec.name, spec.shape, spec.root_only), ("reduce", Shape::Whole, Some(RootOnly::Recv)));
        assert!(spec.reduces && !spec.two_shot && spec.lowp_var.is_none());
        for n in 2..=8 {
            let f = facts(n, true);
            let q = *f.policies.of(Coll::Reduce);
            assert_eq!(q.lowp, 0);
            for t in 0..=9 {
                for op in 0..5 {
                    let s = ncclDataType_t(t).size().unwrap() as u64;
                    let call = |count: u64| CallDesc {
                        op: ncclRedOp_t(op),
                        root: (n - 1) as i32,
                        ..CallDesc::new(Coll::Reduce, count as usize, ncclDataType_t(t))
                    };
                    assert_eq!(decide(&call(1), &f), Route::Own(Kernel::LL));
                    assert_eq!(decide(&call(f.policies.ll_max / s), &f), Route::Own(Kernel::LL));
                    if q.max > f.policies.ll_max {
                        assert_eq!(decide(&call(f.policies.ll_max / s + 1), &f), Route::Own(Kernel::FLAT));
                        assert_eq!(decide(&call(q.max / s), &f), Route::Own(Kernel::FLAT));
                    }
                    assert_eq!(decide(&call(q.max / s + 1), &f), Route::Upstream(Reason::Size), "n={n}");
                    for algo in [Kernel::LL, Kernel::FLAT] {
                        let fam = family(FamilyKey::Coll(Coll::Reduce, algo)).expect("reduce family");
                        assert!(crate::kernel_table::kernel_index(fam, t, op).is_some(), "{algo:?} {t} {op}");
                    }
                }
            }
            // FP8 and user ops go to the stock library.
            let fp8 = CallDesc::new(Coll::Reduce, 64, ncclDataType_t::Float8e4m3);
            assert_eq!(decide(&fp8, &f), Route::Upstream(Reason::Dtype));
            let premul = CallDesc {
                op: ncclRedOp_t(ncclRedOp_t::NumOps),
                ..CallDesc::new(Coll::Reduce, 64, ncclDataType_t::Float32)
            };
            assert_eq!(decide(&premul, &f), Route::Upstream(Reason::Op));
        }
    }

    /// The route each rank takes (`decide`, then the NULL rule as `comm::collective` applies it)
    /// for a rooted call whose root-only buffer is NULL off the root: every rank the same, so
    /// none forwards alone while its peers wait in rcclx's kernel.
    #[test]
    fn null_root_only_buffer_off_the_root_takes_one_route_on_every_rank() {
        for coll in Coll::ALL.into_iter().filter(|c| c.spec().rooted()) {
            let root_only = coll.spec().root_only;
            for n in 2..=8 {
                let f = facts(n, false);
                for root in 0..n {
                    for count in [1usize, 4099, 1 << 16] {
                        let call =
                            CallDesc { root: root as i32, ..CallDesc::new(coll, count, ncclDataType_t::Float32) };
                        let routes: Vec<Route> = (0..n)
                            .map(|rank| {
                                let off = rank != root;
                                let (send_null, recv_null) = match root_only {
                                    Some(RootOnly::Send) => (off, false),
                                    Some(RootOnly::Recv) => (false, off),
                                    None => unreachable!(),
                                };
                                if null_buffer(root_only, !off, send_null, recv_null) {
                                    Route::Upstream(Reason::NullBuffer)
                                } else {
                                    decide(&call, &f)
                                }
                            })
                            .collect();
                        assert!(matches!(routes[0], Route::Own(_)), "{coll:?} n={n}: {routes:?}");
                        assert!(routes.iter().all(|r| *r == routes[0]), "{coll:?} n={n} root {root}: {routes:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn reason_names_are_unique() {
        let mut n: Vec<_> = Reason::ALL.iter().map(|r| r.c_name()).collect();
        n.sort();
        n.dedup();
        assert_eq!(n.len(), Reason::ALL.len());
    }

    /// Each family of the kernel table is found by exactly one key, and every key that is not a
    /// collective on an algorithm finds one.
    #[test]
    fn every_family_has_one_key() {
        let found: Vec<usize> = FamilyKey::all().filter_map(family).collect();
        for (f, fam) in crate::kernel_table::FAMILIES.iter().enumerate() {
            let n = found.iter().filter(|&&g| g == f).count();
            assert_eq!(n, 1, "{fam:?} is found by {n} keys");
        }
        for key in FamilyKey::all().filter(|k| !matches!(k, FamilyKey::Coll(..))) {
            let f = family(key).unwrap_or_else(|| panic!("{key:?} has no family"));
            assert_eq!(crate::kernel_table::FAMILIES[f].coll, key.names().0);
        }
    }

    #[test]
    fn every_own_route_has_a_kernel() {
        let f = facts(2, true);
        for call in all_calls(&f.policies) {
            if let Route::Own(algo) = decide(&call, &f) {
                let fam = family(FamilyKey::Coll(call.coll, algo))
                    .unwrap_or_else(|| panic!("{call:?} {algo:?} has no kernel family"));
                assert!(
                    crate::kernel_table::kernel_index(fam, call.dtype.0, call.op.0).is_some(),
                    "{call:?}: no kernel"
                );
            }
        }
    }

    #[test]
    fn null_buffer_rule_per_root_kind() {
        use crate::collective::RootOnly::{Recv, Send};
        // (root_only, is_root, send_null, recv_null) -> forwarded
        let cases = [
            (None, false, false, false, false),
            (None, false, true, false, true),
            (None, false, false, true, true),
            (Some(Send), false, true, false, false), // Broadcast: no send buffer off the root
            (Some(Send), true, true, false, true),
            (Some(Send), false, false, true, true),
            (Some(Recv), false, false, true, false), // Reduce: no receive buffer off the root
            (Some(Recv), true, false, true, true),
            (Some(Recv), false, true, false, true),
        ];
        for (root_only, is_root, send_null, recv_null, want) in cases {
            assert_eq!(
                null_buffer(root_only, is_root, send_null, recv_null),
                want,
                "{root_only:?} {is_root} {send_null} {recv_null}"
            );
        }
    }

    #[test]
    fn null_buffer_rule_over_every_collective() {
        for coll in Coll::ALL {
            let spec = coll.spec();
            for is_root in [false, true] {
                // Both buffers set: never forwarded; both NULL: always.
                assert!(!null_buffer(spec.root_only, is_root, false, false), "{}", spec.name);
                assert!(null_buffer(spec.root_only, is_root, true, true), "{}", spec.name);
                // The buffer a collective lets a non-root leave NULL is the only one it may.
                let off_root_ok = |send_null, recv_null| !null_buffer(spec.root_only, false, send_null, recv_null);
                match spec.root_only {
                    None => assert!(!off_root_ok(true, false) && !off_root_ok(false, true), "{}", spec.name),
                    Some(RootOnly::Send) => {
                        assert!(off_root_ok(true, false) && !off_root_ok(false, true), "{}", spec.name)
                    }
                    Some(RootOnly::Recv) => {
                        assert!(!off_root_ok(true, false) && off_root_ok(false, true), "{}", spec.name)
                    }
                }
            }
        }
    }
}
