//! The cases of `lowp_accuracy`: collective x type x count x placement x distribution, their
//! run order, the seeds of their input data, which path (low precision or not, and which
//! codec) rcclx should take, and the kernels' window sizes.

use rcclx::clique::Work;
use rcclx::config::{Config, LowpCodec};
use rcclx::intercept::{CallDesc, Coll, CommFacts, Kernel, Policies, Route};
use rcclx::types::ncclDataType_t;
use rcclx_gpu_tests::codec::Io;
use rcclx_gpu_tests::codec::synth::Dist;
use rcclx_gpu_tests::fnv::Fnv;

const MI: usize = 1024 * 1024;

/// rcclx's configuration as a communicator created now would read it (the environment,
/// through rcclx's own parser).
fn env_config() -> Config {
    Config::from_lookup(rcclx::config::env).0
}

/// The low-precision codec a communicator created now would use (`RCCLX_LOW_PRECISION_CODEC`).
pub fn env_codec() -> LowpCodec {
    env_config().lowp_codec.unwrap_or_default()
}

/// The route name of rcclx's low-precision calls with `codec`: `lowp` (FP8) or `int8`.
pub fn lowp_algo(codec: LowpCodec) -> &'static str {
    Kernel::coded(Coll::AllGather, codec).name()
}

/// `fp8` or `int8` (the values of `RCCLX_LOW_PRECISION_CODEC`).
pub fn codec_name(codec: LowpCodec) -> &'static str {
    match codec {
        LowpCodec::Fp8 => "fp8",
        LowpCodec::Int8 => "int8",
    }
}

/// Bytes of one staging half of a low-precision communicator created now (as the clique
/// sizes it: `RCCL_DDA_SENDBUF_BYTES`, default 32 MiB with a low-precision switch on).
fn half_bytes() -> u64 {
    let c = env_config();
    let staging = c.dda_sendbuf_bytes.unwrap_or(rcclx::clique::DEFAULT_STAGING_LOWP);
    (staging.max(64 * 1024) & !4095) / 2
}

/// rcclx's grid cap (`RCCL_DDA_MAX_BLOCKS`; the window does not depend on it).
fn max_blocks() -> u32 {
    env_config().dda_max_blocks.clamp(1, u64::from(u32::MAX)) as u32
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    AllReduce,
    ReduceScatter,
    AllGather,
    /// `ncclAlltoAll` (NCCL's name).
    AlltoAll,
    /// `ncclAllToAll` (RCCL's name).
    AllToAllRccl,
}

impl Op {
    pub const ALL: [Op; 5] = [Op::AllReduce, Op::ReduceScatter, Op::AllGather, Op::AlltoAll, Op::AllToAllRccl];

    pub fn name(self) -> &'static str {
        match self {
            Op::AllReduce => "allreduce",
            Op::ReduceScatter => "reducescatter",
            Op::AllGather => "allgather",
            Op::AlltoAll => "alltoall",
            Op::AllToAllRccl => "alltoall-rccl",
        }
    }

    /// The collective as rcclx sees it (both AllToAll spellings are one).
    pub fn coll(self) -> Coll {
        match self {
            Op::AllReduce => Coll::AllReduce,
            Op::ReduceScatter => Coll::ReduceScatter,
            Op::AllGather => Coll::AllGather,
            Op::AlltoAll | Op::AllToAllRccl => Coll::AllToAll,
        }
    }

    /// Elements of each rank's input / output for the call's `count`.
    pub fn in_len(self, count: usize, n: usize) -> usize {
        match self {
            Op::AllReduce | Op::AllGather => count,
            _ => count * n,
        }
    }
    pub fn out_len(self, count: usize, n: usize) -> usize {
        match self {
            Op::AllReduce | Op::ReduceScatter => count,
            _ => count * n,
        }
    }

    /// Every rank's output is the same tensor (AllGather's differ: a rank's own chunk is exact,
    /// the others carry the codec's error).
    pub fn shared_output(self) -> bool {
        matches!(self, Op::AllReduce)
    }
}

pub fn dtype_of(io: Io) -> ncclDataType_t {
    match io {
        Io::F32 => ncclDataType_t::Float32,
        Io::Bf16 => ncclDataType_t::Bfloat16,
        Io::F16 => ncclDataType_t::Float16,
    }
}

/// Everything of a case except the placement (the host data is shared by both placements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    pub op: Op,
    pub io: Io,
    pub count: usize,
    pub dist: Dist,
}

#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub g: Group,
    pub inplace: bool,
}

impl Case {
    /// `allreduce bf16 127 in-place gaussian` (what `--filter` matches).
    pub fn name(&self) -> String {
        format!(
            "{} {} {} {} {}",
            self.g.op.name(),
            self.g.io.name(),
            self.g.count,
            if self.inplace { "in-place" } else { "out-of-place" },
            self.g.dist.name()
        )
    }
}

/// Elements per window of `op`'s low-precision kernel for a call of `count` elements on `n`
/// ranks with the staging size of the environment (rcclx's own grid).
pub fn window_for(op: Op, count: usize, n: usize) -> usize {
    lowp_window(op, count as u64, n) as usize
}

/// rcclx's low-precision window for a call of `count` elements (the element size does not
/// enter it).
fn lowp_window(op: Op, count: u64, n: usize) -> u64 {
    let work = Work { count, unit_bytes: 2, nranks: n as u64, half_bytes: half_bytes(), max_blocks: max_blocks() };
    rcclx::lowp::grid(op.coll(), &work).window
}

/// Elements of the largest window of `op`'s low-precision kernel (staging size of the
/// environment).
pub fn window_elems(op: Op, n: usize) -> u64 {
    lowp_window(op, u64::MAX, n)
}

/// Element count that spans 3 of the largest LP windows and one element more.
fn windows_count(op: Op, n: usize) -> usize {
    3 * window_elems(op, n) as usize + 1
}

/// The groups in run order (each group runs out-of-place then in-place).
fn groups(n: usize, quick: bool) -> Vec<Group> {
    let mut out = Vec::new();
    for op in Op::ALL {
        for io in Io::ALL {
            let big = if op == Op::AllReduce && io != Io::F16 && !quick { 16 * MI + 3 } else { MI + 3 };
            let mut counts = vec![(1, false), (127, false), (129, false), (128 * n + 1, false), (big, false)];
            if !quick {
                // Multi-window: AllReduce (f32, bf16, every distribution) as specified; the
                // others once (f32, gaussian) since they window per chunk too.
                if op == Op::AllReduce && io != Io::F16 {
                    counts.push((windows_count(op, n), false));
                } else if op != Op::AllReduce && io == Io::F32 {
                    counts.push((windows_count(op, n), true));
                }
            }
            for (count, gaussian_only) in counts {
                for dist in Dist::ALL.into_iter().chain([Dist::Specials]) {
                    if (quick && !matches!(dist, Dist::Gaussian | Dist::BigAndSmall | Dist::Specials))
                        || (gaussian_only && dist != Dist::Gaussian)
                    {
                        continue;
                    }
                    out.push(Group { op, io, count, dist });
                }
            }
        }
    }
    out
}

/// The case list of `n` ranks, in run order; `filter` keeps only cases whose name contains it.
pub fn cases(n: usize, quick: bool, filter: Option<&str>) -> Vec<Case> {
    groups(n, quick)
        .into_iter()
        .flat_map(|g| [false, true].map(|inplace| Case { g, inplace }))
        .filter(|c| filter.is_none_or(|f| c.name().contains(f)))
        .collect()
}

/// Seed of rank `r`'s input of a group (the two AllToAll spellings share data).
pub fn seed(g: &Group, r: usize, base: u64) -> u64 {
    let op = if g.op.coll() == Coll::AllToAll { Op::AlltoAll } else { g.op };
    let mut h = Fnv::new();
    for v in [base, op as u64, g.io as u64, g.count as u64, g.dist as u64, r as u64] {
        h.write(&v.to_le_bytes());
    }
    h.0
}

/// Whether rcclx should run the call on the low-precision path (FP8 or INT8: `Algo::Fp8` or
/// `Algo::Int8`): its own decision (`intercept::decide`) on a clique of `n` ranks with working
/// DDA, with the switches a communicator created now would read (the environment, through
/// rcclx's own config parser).
pub fn expect_lowp(op: Op, io: Io, count: usize, n: usize) -> bool {
    let config = env_config();
    let call = CallDesc::new(op.coll(), count, dtype_of(io));
    let facts = CommFacts {
        nranks: n,
        hosts: 1,
        rank_step: 1,
        policies: Policies::for_comm(&config, n, rcclx::clique::local_fabric()),
    };
    !config.disable && matches!(rcclx::intercept::decide(&call, &facts), Route::Own(Kernel { codec: Some(_), .. }))
}
