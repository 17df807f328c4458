//! Layer `plan`: a call as steps over the communicator's ranks. A step is an rcclx kernel on
//! the host's clique or a stock call on this rank's rail (`clique::rail`); every rank's plan of a
//! call has the same steps in the same order, all on the caller's stream, so the stock calls
//! on the rails pair up across hosts as the kernels do inside each host. On one host a call is
//! the one-step plan of `dda::plan` / `lowp::plan`.
//!
//! An AllReduce across hosts (H hosts of L ranks, rail = one rank of each host):
//! 1. ReduceScatter in the host (DDA, exact): rank `l` holds its host's sum of shard `l`.
//! 2. The rail step on that shard, across hosts: the stock AllReduce (exact), or low precision:
//!    per window, encode the H pieces, stock all-to-all of the codes, decode and sum in FP32
//!    (this rank's own piece from its input, never coded), encode the sum, stock AllGather of
//!    the codes, decode every piece (the own one too: every rank ends with the same values).
//! 3. AllGather in the host (DDA) of the shards.
//!
//! The elements past the last whole group (`L x H x 512` with low precision, `L` exact) go
//! through an exact AllReduce in the host and the stock AllReduce on the rail.
//!
//! Layer: above `dda`, `lowp`, `clique`, `intercept`, `error`; below `comm`.

use crate::clique::{Buffers, Clique, Launch, LaunchArgs, RAIL_WINDOW, StockStep, THREADS};
use crate::config::LowpCodec;
use crate::error::Error;
use crate::intercept::{Algo, CallDesc, Coll, FamilyKey, family};

/// One step of a plan. Unboxed, as `LaunchArgs`: a plan is built per call, and a box per
/// kernel step would allocate on every call.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// An rcclx kernel on the host's clique.
    Kernel(Launch),
    /// A stock call on this rank's rail.
    Rail(StockStep),
}

/// A call's steps, and the kernel family it counts under in the statistics (its route).
#[derive(Clone, Debug)]
pub struct Plan {
    /// The first step and the others: a plan of one step (every call on one host) allocates
    /// nothing.
    first: Step,
    rest: Vec<Step>,
    pub family: usize,
}

impl Plan {
    /// The plan of one kernel: every call on one host.
    pub fn one(launch: Launch) -> Plan {
        Plan { family: launch.family, first: Step::Kernel(launch), rest: Vec::new() }
    }

    /// The steps, in order.
    pub fn steps(self) -> impl Iterator<Item = Step> {
        std::iter::once(self.first).chain(self.rest)
    }
}

/// What the rail kernels do (`hip_kernels/rail.cuh`, `RcclxArgs::root`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
enum Stage {
    /// Every host's piece of the window, to codes.
    Encode = 0,
    /// The pieces received, decoded and summed in FP32 with this rank's own, to codes.
    Reduce = 1,
    /// Every host's summed piece, from codes.
    Decode = 2,
}

/// Bytes of the codes of a piece of `elems` elements (one byte each, a 4-byte word per 128).
fn coded_bytes(elems: u64) -> u64 {
    elems / 128 * 132
}

/// Elements the low-precision rail step takes as one group: every rank's shard, each cut into
/// one piece per host of whole 512-element groups (the kernels store 4 block words at once).
fn lowp_group(hosts: u64, local: u64) -> u64 {
    hosts * local * 512
}

/// The AllReduce `call` across hosts, with `codec` on the rails (or exact).
pub fn across_hosts(clique: &Clique, call: &CallDesc, codec: Option<LowpCodec>, bufs: &Buffers) -> Result<Plan, Error> {
    let span = clique.span();
    let (hosts, local) = (span.hosts as u64, clique.nranks as u64);
    let elem = call.dtype.size().ok_or_else(|| Error::internal("a type without a size"))? as u64;
    let count = call.count as u64;
    let group = match codec {
        Some(_) => lowp_group(hosts, local),
        None => local,
    };
    let body = count - count % group;
    let shard = body / local;
    let (send, recv) = (bufs.send as u64, bufs.recv as u64);
    let mine = recv + clique.rank as u64 * shard * elem;
    let mut steps = Vec::new();
    let mut family = None;
    if body > 0 && local > 1 {
        let rs = host_step(clique, Coll::ReduceScatter, shard, call, send, mine, bufs)?;
        family = Some(rs.family);
        steps.push(Step::Kernel(rs));
    }
    // The rail step reads the host's sum of this rank's shard (or, alone on its host, its input)
    // and leaves the sum over hosts in place of it.
    let (input, output) = if local > 1 { (mine, mine) } else { (send, recv) };
    match codec {
        Some(codec) if body > 0 => {
            let f = family_of(FamilyKey::Rail(codec))?;
            family = Some(f);
            rail_lowp(clique, f, call, input, output, shard, elem, &mut steps)?;
        }
        None if body > 0 => steps.push(Step::Rail(StockStep::AllReduce {
            send: mine,
            recv: mine,
            count: shard as usize,
            dtype: call.dtype,
            op: call.op,
        })),
        _ => {}
    }
    if body > 0 && local > 1 {
        steps.push(Step::Kernel(host_step(clique, Coll::AllGather, shard, call, mine, recv, bufs)?));
    }
    let tail = count - body;
    if tail > 0 {
        let (s, r) = (send + body * elem, recv + body * elem);
        let from = if local > 1 {
            let ar = host_step(clique, Coll::AllReduce, tail, call, s, r, bufs)?;
            family.get_or_insert(ar.family);
            steps.push(Step::Kernel(ar));
            r
        } else {
            s
        };
        steps.push(Step::Rail(StockStep::AllReduce {
            send: from,
            recv: r,
            count: tail as usize,
            dtype: call.dtype,
            op: call.op,
        }));
    }
    let family = match (family, codec) {
        (Some(f), _) => f,
        (None, Some(codec)) => family_of(FamilyKey::Rail(codec))?,
        (None, None) => return Err(Error::internal("an exact plan across hosts without a kernel")),
    };
    let mut steps = steps.into_iter();
    let first = steps.next().ok_or_else(|| Error::internal("a plan without a step"))?;
    Ok(Plan { first, rest: steps.collect(), family })
}

fn family_of(key: FamilyKey) -> Result<usize, Error> {
    family(key).ok_or_else(|| Error::internal(format!("no kernel family {:?}", key.names())))
}

/// The algorithm of an exact step in the host whose rank's part is `per_rank` bytes: LL where
/// the inbox holds it, else the windowed one-shot.
fn host_algo(per_rank: u64, ll_max: u64) -> Algo {
    if per_rank <= ll_max { Algo::Ll } else { Algo::Flat }
}

/// What an exact AllReduce of `count` elements of `elem` bytes across hosts of `local` ranks
/// counts under in the statistics (its first kernel): the ReduceScatter of the shards, or, with
/// less than one element per rank of a host, the AllReduce in the host.
pub fn exact_counted_as(count: usize, elem: usize, local: usize, ll_max: u64) -> (Coll, Algo) {
    let shard = count / local;
    let (coll, part) = if shard > 0 { (Coll::ReduceScatter, shard) } else { (Coll::AllReduce, count) };
    (coll, host_algo((part * elem) as u64, ll_max))
}

/// An exact DDA kernel in the host: `coll` of `count` (as `coll` counts) from `send` to `recv`
/// ([`host_algo`]).
fn host_step(
    clique: &Clique,
    coll: Coll,
    count: u64,
    call: &CallDesc,
    send: u64,
    recv: u64,
    bufs: &Buffers,
) -> Result<Launch, Error> {
    let step = CallDesc { coll, count: count as usize, ..*call };
    let per_rank = count.saturating_mul(call.dtype.size().unwrap_or(1) as u64);
    let algo = host_algo(per_rank, clique.facts.policies.ll_max);
    let b = Buffers { send: send as usize as *const _, recv: recv as usize as *mut _, stream: bufs.stream };
    crate::dda::plan(clique, algo, &step, &b)
}

/// The low-precision rail step over the shard at `input` (`shard` elements, a whole number of
/// groups), its sum over hosts to `output`, window by window through the rail scratch.
#[allow(clippy::too_many_arguments)]
fn rail_lowp(
    clique: &Clique,
    family: usize,
    call: &CallDesc,
    input: u64,
    output: u64,
    shard: u64,
    elem: u64,
    steps: &mut Vec<Step>,
) -> Result<(), Error> {
    let span = clique.span();
    let (hosts, me) = (span.hosts as u64, span.host);
    let (scratch, scratch_bytes) = span.scratch;
    let kernel = clique
        .kernel(family, call.dtype.0, 0)
        .ok_or_else(|| Error::internal(format!("no rail kernel for {}", call.dtype.name())))?;
    let unit = hosts * 512;
    let window = (RAIL_WINDOW / unit).max(1) * unit;
    if scratch == 0 || 2 * coded_bytes(window) > scratch_bytes {
        return Err(Error::internal("no rail scratch for the low-precision step"));
    }
    let cap = clique.resident_blocks(kernel);
    let launch = |stage: Stage, send: u64, recv: u64, piece: u64| {
        let mut args = clique.args();
        (args.send, args.recv, args.count, args.window_elems) = (send, recv, piece, 0);
        (args.rank, args.nranks, args.root) = (me as i32, hosts as i32, stage as i32);
        // Four blocks of 128 per warp, 16 warps per GPU block.
        let blocks = (hosts * piece / 128).div_ceil(4 * u64::from(THREADS / 32)).clamp(1, u64::from(cap)) as u32;
        Step::Kernel(Launch { family, func: kernel.func, grid: (blocks, THREADS), args: LaunchArgs::Collective(args) })
    };
    let mut at = 0;
    while at < shard {
        let n = window.min(shard - at);
        let piece = n / hosts;
        let piece_bytes = coded_bytes(piece);
        let (sent, received) = (scratch, scratch + hosts * piece_bytes);
        let (inp, out) = (input + at * elem, output + at * elem);
        steps.push(launch(Stage::Encode, inp, sent, piece));
        let bytes = piece_bytes as usize;
        steps.push(Step::Rail(StockStep::AllToAll {
            send: sent,
            recv: received,
            bytes,
            nranks: hosts as usize,
            rank: me,
        }));
        steps.push(launch(Stage::Reduce, inp, sent, piece));
        steps.push(Step::Rail(StockStep::AllGather { send: sent + me as u64 * piece_bytes, recv: received, bytes }));
        steps.push(launch(Stage::Decode, received, out, piece));
        at += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_of_whole_groups_fit_the_scratch() {
        for hosts in 1..=16u64 {
            let unit = hosts * 512;
            let window = (RAIL_WINDOW / unit).max(1) * unit;
            assert_eq!(window % unit, 0);
            assert!(2 * coded_bytes(window) <= crate::clique::args::rail_scratch_bytes() as u64, "{hosts}");
            for local in 1..=8 {
                assert_eq!(lowp_group(hosts, local) % (hosts * 512), 0);
            }
        }
        assert_eq!(coded_bytes(512), 528);
    }
}
