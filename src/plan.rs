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
//! A ReduceScatter across hosts (low precision only; [`rs_layout`]), per window of this rank's
//! output: for each other host, an exact ReduceScatter in the host of that host's blocks (a
//! host's blocks are evenly spaced in rank order: `RankMap::step`) into the scratch, encoded
//! into that host's slot; the same for this host's blocks into the output; the stock
//! all-to-all of the codes on the rail; every host's codes of this rank's block decoded and
//! summed in FP32 with its own (never coded) into the output. One quantization per element.
//! The tail of each block past the last whole 512 goes exact: the host's ReduceScatter, then
//! the stock Reduce on the rail to that host.
//!
//! An AllGather across hosts (low precision only; [`ag_layout`]), per window of this rank's
//! block: its codes, the stock AllGather of the codes on the rail, every other host's piece
//! decoded into its place in the output; then, per host, rcclx's exact AllGather in the host of
//! that host's blocks (a host's blocks `RankMap::step` blocks apart). A block is exact on its own
//! host and decoded once everywhere else, so every rank holds the same values (as the one-host
//! low-precision AllGather keeps a rank's own block exact). Block tails past the last whole 512
//! go exact: the stock Broadcast on the rail from each host.
//!
//! Layer: above `dda`, `lowp`, `clique`, `intercept`, `error`; below `comm`.

use crate::clique::{Buffers, Clique, Launch, LaunchArgs, RAIL_WINDOW, StockStep, THREADS};
use crate::config::LowpCodec;
use crate::error::Error;
use crate::intercept::{CallDesc, Coll, FamilyKey, Kernel, family};
use crate::types::ncclRedOp_t;

/// One step of a plan. Unboxed, as `LaunchArgs`: a plan is built per call, and a box per
/// kernel step would allocate on every call.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// An rcclx kernel on the host's clique.
    Kernel(Launch),
    /// A stock call on this rank's rail.
    Rail(StockStep),
    /// A copy of `bytes` bytes between the call's buffers on the stream (`dst` and `src` apart).
    Copy { dst: u64, src: u64, bytes: usize },
}

impl Step {
    /// Enqueues the step on `stream` (`captured`: inside the application's graph capture).
    /// A new kind of step is a variant and its arm here.
    pub fn enqueue(self, clique: &Clique, stream: crate::gpu::Stream, captured: bool) -> Result<(), Error> {
        match self {
            Step::Kernel(launch) => clique.launch(launch, stream, captured),
            Step::Rail(call) => clique
                .with_rail(|rail| call.run(rail, stream))
                .unwrap_or_else(|| Err(Error::internal("a rail step after the rail ended"))),
            Step::Copy { dst, src, bytes } => clique.copy(dst, src, bytes, stream),
        }
    }
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
    /// As `Reduce`, the sum decoded to the output instead (ReduceScatter).
    ReduceOut = 3,
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

/// A buffer of the call and an element offset in it (the send and receive buffers may be one),
/// or of the rail scratch's first part (`Temp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum At {
    Send(u64),
    Recv(u64),
    Temp(u64),
}

impl At {
    /// Its address, with the call's buffers at `send` and `recv`, the scratch at `temp` and
    /// `elem`-byte elements.
    fn address(self, [send, recv, temp]: [u64; 3], elem: u64) -> u64 {
        match self {
            At::Send(i) => send + i * elem,
            At::Recv(i) => recv + i * elem,
            At::Temp(i) => temp + i * elem,
        }
    }

    fn shift(self, by: u64) -> At {
        match self {
            At::Send(i) => At::Send(i + by),
            At::Recv(i) => At::Recv(i + by),
            At::Temp(i) => At::Temp(i + by),
        }
    }
}

/// One step of an AllReduce across hosts, in elements of the call: what [`across_hosts`]
/// launches, and what the tests run on the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// An exact rcclx collective in the host: `coll` of `count` elements as `coll` counts them.
    Host { coll: Coll, count: u64, from: At, to: At },
    /// The stock AllReduce of `count` elements on the rail.
    RailSum { count: u64, from: At, to: At },
    /// One window of the low-precision rail step: `hosts` pieces of `piece` elements at `from`,
    /// their sums over hosts at `to`.
    RailWindow { piece: u64, from: At, to: At },
}

/// The steps of an AllReduce of `count` elements on this rank, local rank `rank` of a host of
/// `local` ranks, `hosts` hosts; low precision on the rails (`lowp`) or exact. The same list on
/// every rank but for the offsets of its own shard.
pub fn layout(count: u64, hosts: u64, local: u64, rank: u64, lowp: bool) -> Vec<Layout> {
    layout_in_windows(count, hosts, local, rank, lowp, RAIL_WINDOW)
}

/// [`layout`] with low-precision windows of at most `window_max` elements.
fn layout_in_windows(count: u64, hosts: u64, local: u64, rank: u64, lowp: bool, window_max: u64) -> Vec<Layout> {
    let group = if lowp { lowp_group(hosts, local) } else { local };
    let body = count - count % group;
    let shard = body / local;
    let mine = At::Recv(rank * shard);
    let mut steps = Vec::new();
    if body > 0 && local > 1 {
        steps.push(Layout::Host { coll: Coll::ReduceScatter, count: shard, from: At::Send(0), to: mine });
    }
    // The rail step reads the host's sum of this rank's shard (or, alone on its host, its input)
    // and leaves the sum over hosts in place of it.
    let (from, to) = if local > 1 { (mine, mine) } else { (At::Send(0), At::Recv(0)) };
    if body > 0 && lowp {
        let unit = hosts * 512;
        let window = (window_max / unit).max(1) * unit;
        let mut at = 0;
        while at < shard {
            let n = window.min(shard - at);
            steps.push(Layout::RailWindow { piece: n / hosts, from: from.shift(at), to: to.shift(at) });
            at += n;
        }
    } else if body > 0 {
        steps.push(Layout::RailSum { count: shard, from, to });
    }
    if body > 0 && local > 1 {
        steps.push(Layout::Host { coll: Coll::AllGather, count: shard, from: mine, to: At::Recv(0) });
    }
    let tail = count - body;
    if tail > 0 {
        let from = if local > 1 {
            steps.push(Layout::Host { coll: Coll::AllReduce, count: tail, from: At::Send(body), to: At::Recv(body) });
            At::Recv(body)
        } else {
            At::Send(body)
        };
        steps.push(Layout::RailSum { count: tail, from, to: At::Recv(body) });
    }
    steps
}

/// The AllReduce `call` across hosts, with `codec` on the rails (or exact): its [`layout`],
/// launched. Counted under the rail kernels' family with low precision, else under its first
/// kernel (`exact_counted_as`).
pub fn across_hosts(clique: &Clique, call: &CallDesc, codec: Option<LowpCodec>, bufs: &Buffers) -> Result<Plan, Error> {
    if call.coll == Coll::ReduceScatter {
        let codec = codec.ok_or_else(|| Error::internal("an exact ReduceScatter across hosts"))?;
        return reduce_scatter_across_hosts(clique, call, codec, bufs);
    }
    if call.coll == Coll::AllGather {
        let codec = codec.ok_or_else(|| Error::internal("an exact AllGather across hosts"))?;
        return all_gather_across_hosts(clique, call, codec, bufs);
    }
    let span = clique.span();
    let (hosts, local) = (span.hosts as u64, clique.nranks as u64);
    let elem = call.dtype.size().ok_or_else(|| Error::internal("a type without a size"))? as u64;
    let bases = [bufs.send as u64, bufs.recv as u64, 0];
    let addr = |x: At| x.address(bases, elem);
    let rail_family = codec.map(|c| family_of(FamilyKey::Rail(Coll::AllReduce, c))).transpose()?;
    let mut steps = Vec::new();
    let mut first_kernel = None;
    for step in layout(call.count as u64, hosts, local, clique.rank as u64, codec.is_some()) {
        match step {
            Layout::Host { coll, count, from, to } => {
                let launch = host_step(clique, coll, count, 0, call, addr(from), addr(to), bufs)?;
                first_kernel.get_or_insert(launch.family);
                steps.push(Step::Kernel(launch));
            }
            Layout::RailSum { count, from, to } => steps.push(Step::Rail(StockStep::AllReduce {
                send: addr(from),
                recv: addr(to),
                count: count as usize,
                dtype: call.dtype,
                op: call.op,
            })),
            Layout::RailWindow { piece, from, to } => {
                let family = rail_family.ok_or_else(|| Error::internal("a low-precision window, exact"))?;
                rail_window(clique, family, call, addr(from), addr(to), piece, &mut steps)?;
            }
        }
    }
    let family =
        rail_family.or(first_kernel).ok_or_else(|| Error::internal("an exact plan across hosts without a kernel"))?;
    let mut steps = steps.into_iter();
    let first = steps.next().ok_or_else(|| Error::internal("a plan without a step"))?;
    Ok(Plan { first, rest: steps.collect(), family })
}

fn family_of(key: FamilyKey) -> Result<usize, Error> {
    family(key).ok_or_else(|| Error::internal(format!("no kernel family {:?}", key.names())))
}

/// The kernel of an exact step in the host whose rank's part is `per_rank` bytes: LL where the
/// inbox holds it, else the windowed one-shot.
fn host_kernel(per_rank: u64, ll_max: u64) -> Kernel {
    if per_rank <= ll_max { Kernel::LL } else { Kernel::FLAT }
}

/// What an exact AllReduce of `count` elements of `elem` bytes across hosts of `local` ranks
/// counts under in the statistics (its first kernel): the ReduceScatter of the shards, or, with
/// less than one element per rank of a host, the AllReduce in the host.
pub fn exact_counted_as(count: usize, elem: usize, local: usize, ll_max: u64) -> (Coll, Kernel) {
    let shard = count / local;
    let (coll, part) = if shard > 0 { (Coll::ReduceScatter, shard) } else { (Coll::AllReduce, count) };
    (coll, host_kernel((part * elem) as u64, ll_max))
}

/// An exact DDA kernel in the host: `coll` of `count` (as `coll` counts) from `send` to `recv`
/// ([`host_kernel`]); a ReduceScatter's input blocks, an AllGather's output blocks `stride`
/// elements apart (0: `count`).
#[allow(clippy::too_many_arguments)]
fn host_step(
    clique: &Clique,
    coll: Coll,
    count: u64,
    stride: u64,
    call: &CallDesc,
    send: u64,
    recv: u64,
    bufs: &Buffers,
) -> Result<Launch, Error> {
    let step = CallDesc { coll, count: count as usize, ..*call };
    let per_rank = count.saturating_mul(call.dtype.size().unwrap_or(1) as u64);
    let kernel = host_kernel(per_rank, clique.facts.policies.ll_max);
    let b = Buffers { send: send as usize as *const _, recv: recv as usize as *mut _, stream: bufs.stream };
    let mut launch = crate::dda::plan(clique, kernel, &step, &b)?;
    if let LaunchArgs::Collective(args) = &mut launch.args {
        // The data-movement kernels count bytes (`dda::plan`), the reducing ones elements.
        args.stride = if coll.spec().reduces { stride } else { stride * call.dtype.size().unwrap_or(1) as u64 };
    }
    Ok(launch)
}

/// One window of the low-precision rail step (`hosts` pieces of `piece` elements at `input`,
/// their sums over hosts to `output`) through the rail scratch: encode, all-to-all of the codes,
/// reduce, AllGather of the codes, decode.
fn rail_window(
    clique: &Clique,
    family: usize,
    call: &CallDesc,
    input: u64,
    output: u64,
    piece: u64,
    steps: &mut Vec<Step>,
) -> Result<(), Error> {
    let span = clique.span();
    let (hosts, me) = (span.hosts as u64, span.host);
    let (scratch, scratch_bytes) = span.scratch;
    let kernel = clique
        .kernel(family, call.dtype.0, 0)
        .ok_or_else(|| Error::internal(format!("no rail kernel for {}", call.dtype.name())))?;
    let piece_bytes = coded_bytes(piece);
    if scratch == 0 || 2 * hosts * piece_bytes > scratch_bytes {
        return Err(Error::internal("no rail scratch for the low-precision step"));
    }
    let rail = RailKernel { clique, family, func: kernel.func, cap: clique.resident_blocks(kernel), piece };
    let launch = |stage: Stage, send: u64, recv: u64| rail.launch(stage, send, recv, (me, hosts));
    let (sent, received) = (scratch, scratch + hosts * piece_bytes);
    let bytes = piece_bytes as usize;
    steps.push(launch(Stage::Encode, input, sent));
    steps.push(Step::Rail(StockStep::AllToAll { send: sent, recv: received, bytes, nranks: hosts as usize, rank: me }));
    steps.push(launch(Stage::Reduce, input, sent));
    steps.push(Step::Rail(StockStep::AllGather { send: sent + me as u64 * piece_bytes, recv: received, bytes }));
    steps.push(launch(Stage::Decode, received, output));
    Ok(())
}

/// A rail kernel of one window (`hip_kernels/rail.cuh`): pieces of `piece` elements.
struct RailKernel<'a> {
    clique: &'a Clique,
    family: usize,
    func: crate::gpu::Function,
    /// Most blocks resident at once.
    cap: u32,
    piece: u64,
}

impl RailKernel<'_> {
    /// `stage` from `send` to `recv` as host `me` of `hosts` (an encode of one piece: host 0 of 1).
    fn launch(&self, stage: Stage, send: u64, recv: u64, (me, hosts): (usize, u64)) -> Step {
        let mut args = self.clique.args();
        (args.send, args.recv, args.count, args.window_elems) = (send, recv, self.piece, 0);
        (args.rank, args.nranks, args.root) = (me as i32, hosts as i32, stage as i32);
        // Four blocks of 128 per warp, 16 warps per GPU block.
        let blocks =
            (hosts * self.piece / 128).div_ceil(4 * u64::from(THREADS / 32)).clamp(1, u64::from(self.cap)) as u32;
        Step::Kernel(Launch {
            family: self.family,
            func: self.func,
            grid: (blocks, THREADS),
            args: LaunchArgs::Collective(args),
        })
    }
}

/// One step of a ReduceScatter across hosts with low precision ([`rs_layout`]), in elements of
/// the call; pieces of whole 512-element groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RsLayout {
    /// An exact ReduceScatter in the host of `count` elements per rank, from blocks `stride`
    /// elements apart starting at `from` (the host's local rank `l` takes the block at
    /// `from + l x stride`).
    Host { count: u64, stride: u64, from: At, to: At },
    /// The codes of the piece of `piece` elements at `from` into the rail scratch's slot `slot`
    /// (the host the piece goes to).
    Encode { piece: u64, from: At, slot: u64 },
    /// The stock all-to-all of the slots on the rail, then every other host's codes of this
    /// rank's piece decoded and summed in FP32 with `own` (never coded) into `to`.
    ReduceOut { piece: u64, own: At, to: At },
    /// The stock Reduce on the rail of `count` elements at `from` into rail rank `root`'s `to`.
    RailReduce { count: u64, from: At, to: At, root: u64 },
}

/// The steps of a ReduceScatter of `count` elements per rank on a rank of host `host` of
/// `hosts` of `local` ranks each, host `h`'s ranks being `firsts[h] + l x step`; windows of at
/// most `window` elements (a multiple of 512). The same list on every rank of a host; across
/// hosts the same rail steps in the same order.
pub fn rs_layout(
    count: u64,
    hosts: u64,
    local: u64,
    host: u64,
    firsts: &[usize],
    step: u64,
    window: u64,
) -> Vec<RsLayout> {
    let body = count - count % 512;
    let stride = step * count;
    // Host h's blocks from element `at` of each (its local rank 0's block first).
    let blocks = |h: u64, at: u64| At::Send(firsts[h as usize] as u64 * count + at);
    let mut steps = Vec::new();
    let mut at = 0;
    while at < body {
        let w = window.min(body - at);
        for h in (0..hosts).filter(|&h| h != host) {
            if local > 1 {
                steps.push(RsLayout::Host { count: w, stride, from: blocks(h, at), to: At::Temp(0) });
                steps.push(RsLayout::Encode { piece: w, from: At::Temp(0), slot: h });
            } else {
                steps.push(RsLayout::Encode { piece: w, from: blocks(h, at), slot: h });
            }
        }
        // This host's blocks last: in place, the output is this rank's input block.
        let own = if local > 1 {
            steps.push(RsLayout::Host { count: w, stride, from: blocks(host, at), to: At::Recv(at) });
            At::Recv(at)
        } else {
            blocks(host, at)
        };
        steps.push(RsLayout::ReduceOut { piece: w, own, to: At::Recv(at) });
        at += w;
    }
    let tail = count - body;
    if tail > 0 {
        for h in 0..hosts {
            let from = if local > 1 {
                steps.push(RsLayout::Host { count: tail, stride, from: blocks(h, body), to: At::Temp(0) });
                At::Temp(0)
            } else {
                blocks(h, body)
            };
            steps.push(RsLayout::RailReduce { count: tail, from, to: At::Recv(body), root: h });
        }
    }
    steps
}

/// Elements of a ReduceScatter window across hosts (a multiple of 512) whose host sum
/// (`elem`-byte elements, rounded up to 256 bytes) and slots sent and received fit `scratch`
/// bytes; 0 where none does.
fn rs_window(hosts: u64, elem: u64, scratch: u64) -> u64 {
    let fits = |w: u64| (w * elem).next_multiple_of(256) + 2 * hosts * coded_bytes(w) <= scratch;
    // Codes take 33/32 bytes per element: start at the bound, step down past the roundings.
    let mut w = (scratch * 32 / (elem * 32 + 2 * hosts * 33)) / 512 * 512;
    while w > 0 && !fits(w) {
        w -= 512;
    }
    w
}

/// The ReduceScatter `call` across hosts with `codec` on the rails: its [`rs_layout`], launched.
fn reduce_scatter_across_hosts(
    clique: &Clique,
    call: &CallDesc,
    codec: LowpCodec,
    bufs: &Buffers,
) -> Result<Plan, Error> {
    let span = clique.span();
    let (hosts, local) = (span.hosts as u64, clique.nranks as u64);
    let me = span.host;
    let elem = call.dtype.size().ok_or_else(|| Error::internal("a type without a size"))? as u64;
    let family = family_of(FamilyKey::Rail(Coll::ReduceScatter, codec))?;
    let kernel = clique
        .kernel(family, call.dtype.0, 0)
        .ok_or_else(|| Error::internal(format!("no rail kernel for {}", call.dtype.name())))?;
    let (scratch, scratch_bytes) = span.scratch;
    let window = rs_window(hosts, elem, scratch_bytes);
    if scratch == 0 || window == 0 {
        return Err(Error::internal("no rail scratch for the low-precision step"));
    }
    let step = clique.facts.rank_step as u64;
    if step == 0 {
        return Err(Error::internal("a ReduceScatter across hosts whose ranks are unevenly spaced"));
    }
    let sent = scratch + (window * elem).next_multiple_of(256);
    let bases = [bufs.send as u64, bufs.recv as u64, scratch];
    let addr = |x: At| x.address(bases, elem);
    let cap = clique.resident_blocks(kernel);
    let rail = |piece| RailKernel { clique, family, func: kernel.func, cap, piece };
    let mut steps = Vec::new();
    for s in rs_layout(call.count as u64, hosts, local, me as u64, &span.firsts, step, window) {
        match s {
            RsLayout::Host { count, stride, from, to } => steps.push(Step::Kernel(host_step(
                clique,
                Coll::ReduceScatter,
                count,
                stride,
                call,
                addr(from),
                addr(to),
                bufs,
            )?)),
            RsLayout::Encode { piece, from, slot } => {
                steps.push(rail(piece).launch(Stage::Encode, addr(from), sent + slot * coded_bytes(piece), (0, 1)))
            }
            RsLayout::ReduceOut { piece, own, to } => {
                let bytes = coded_bytes(piece);
                let received = sent + hosts * bytes;
                steps.push(Step::Rail(StockStep::AllToAll {
                    send: sent,
                    recv: received,
                    bytes: bytes as usize,
                    nranks: hosts as usize,
                    rank: me,
                }));
                let mut out = rail(piece).launch(Stage::ReduceOut, addr(own), sent, (me, hosts));
                if let Step::Kernel(Launch { args: LaunchArgs::Collective(args), .. }) = &mut out {
                    args.aux = addr(to);
                }
                steps.push(out);
            }
            RsLayout::RailReduce { count, from, to, root } => steps.push(Step::Rail(StockStep::Reduce {
                send: addr(from),
                recv: addr(to),
                count: count as usize,
                dtype: call.dtype,
                op: ncclRedOp_t::Sum,
                root: root as usize,
            })),
        }
    }
    let mut steps = steps.into_iter();
    let first = steps.next().ok_or_else(|| Error::internal("a plan without a step"))?;
    Ok(Plan { first, rest: steps.collect(), family })
}

/// One step of an AllGather across hosts with low precision ([`ag_layout`]), in elements of
/// the call; pieces of whole 512-element groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgLayout {
    /// The codes of this rank's piece of `piece` elements at `from` into the rail scratch.
    Encode { piece: u64, from: At },
    /// The stock AllGather of the codes on the rail: every host's piece, in host order.
    Gather { piece: u64 },
    /// Host `slot`'s codes of the last [`AgLayout::Gather`] decoded into `to`.
    Decode { piece: u64, slot: u64, to: At },
    /// The stock Broadcast on the rail of `count` elements at rail rank `root`'s `from` into
    /// every rail rank's `to`.
    RailBroadcast { count: u64, from: At, to: At, root: u64 },
    /// An exact AllGather in the host of `count` elements per rank from `from`, local rank `l`'s
    /// block to `to + l x stride`.
    Host { count: u64, stride: u64, from: At, to: At },
    /// A copy of `count` elements (this rank's own block, alone on its host).
    Copy { count: u64, from: At, to: At },
}

/// The steps of an AllGather of `count` elements per rank on local rank `local_rank` of host
/// `host` of `hosts` of `local` ranks each, host `h`'s ranks being `firsts[h] + l x step`;
/// windows of at most `window` elements (a multiple of 512). The same rail steps in the same
/// order on every rank of a rail; the same host steps on every rank of a host.
#[allow(clippy::too_many_arguments)]
pub fn ag_layout(
    count: u64,
    hosts: u64,
    local: u64,
    host: u64,
    local_rank: u64,
    firsts: &[usize],
    step: u64,
    window: u64,
) -> Vec<AgLayout> {
    let body = count - count % 512;
    let rank = |h: u64, l: u64| firsts[h as usize] as u64 + l * step;
    // Where host h's block of this rank's rail (local rank `local_rank`) goes, from element `at`.
    let block = |h: u64, at: u64| At::Recv(rank(h, local_rank) * count + at);
    let mut steps = Vec::new();
    let mut at = 0;
    while at < body {
        let w = window.min(body - at);
        steps.push(AgLayout::Encode { piece: w, from: At::Send(at) });
        steps.push(AgLayout::Gather { piece: w });
        for h in (0..hosts).filter(|&h| h != host) {
            steps.push(AgLayout::Decode { piece: w, slot: h, to: block(h, at) });
        }
        at += w;
    }
    if count > body {
        for h in 0..hosts {
            steps.push(AgLayout::RailBroadcast {
                count: count - body,
                from: At::Send(body),
                to: block(h, body),
                root: h,
            });
        }
    }
    if local > 1 {
        // Each host's blocks, this host's from the input (exact: never coded).
        for h in 0..hosts {
            let from = if h == host { At::Send(0) } else { block(h, 0) };
            let to = At::Recv(rank(h, 0) * count);
            steps.push(AgLayout::Host { count, stride: step * count, from, to });
        }
    } else if body > 0 {
        steps.push(AgLayout::Copy { count: body, from: At::Send(0), to: block(host, 0) });
    }
    steps
}

/// Elements of an AllGather window across hosts (a multiple of 512) whose codes sent and
/// received (`hosts` + 1 slots) fit `scratch` bytes; 0 where none does.
fn ag_window(hosts: u64, scratch: u64) -> u64 {
    // Codes take 33/32 bytes per element: the bound, rounded down to whole groups.
    let w = (scratch * 32 / ((hosts + 1) * 33)) / 512 * 512;
    debug_assert!(w == 0 || (hosts + 1) * coded_bytes(w) <= scratch);
    w
}

/// The AllGather `call` across hosts with `codec` on the rails: its [`ag_layout`], launched.
fn all_gather_across_hosts(clique: &Clique, call: &CallDesc, codec: LowpCodec, bufs: &Buffers) -> Result<Plan, Error> {
    let span = clique.span();
    let (hosts, local) = (span.hosts as u64, clique.nranks as u64);
    let me = span.host;
    let elem = call.dtype.size().ok_or_else(|| Error::internal("a type without a size"))? as u64;
    let family = family_of(FamilyKey::Rail(Coll::AllGather, codec))?;
    let kernel = clique
        .kernel(family, call.dtype.0, 0)
        .ok_or_else(|| Error::internal(format!("no rail kernel for {}", call.dtype.name())))?;
    let (scratch, scratch_bytes) = span.scratch;
    let window = ag_window(hosts, scratch_bytes);
    if scratch == 0 || window == 0 {
        return Err(Error::internal("no rail scratch for the low-precision step"));
    }
    let step = clique.facts.rank_step as u64;
    if step == 0 {
        return Err(Error::internal("an AllGather across hosts whose ranks are unevenly spaced"));
    }
    let bases = [bufs.send as u64, bufs.recv as u64, 0];
    let addr = |x: At| x.address(bases, elem);
    let cap = clique.resident_blocks(kernel);
    let rail = |piece| RailKernel { clique, family, func: kernel.func, cap, piece };
    // The scratch: this rank's codes, then every host's.
    let (sent, received) = (scratch, scratch + coded_bytes(window));
    let layout = ag_layout(call.count as u64, hosts, local, me as u64, clique.rank as u64, &span.firsts, step, window);
    let mut steps = Vec::new();
    for s in layout {
        steps.push(match s {
            AgLayout::Encode { piece, from } => rail(piece).launch(Stage::Encode, addr(from), sent, (0, 1)),
            AgLayout::Gather { piece } => {
                Step::Rail(StockStep::AllGather { send: sent, recv: received, bytes: coded_bytes(piece) as usize })
            }
            AgLayout::Decode { piece, slot, to } => {
                rail(piece).launch(Stage::Decode, received + slot * coded_bytes(piece), addr(to), (0, 1))
            }
            AgLayout::RailBroadcast { count, from, to, root } => Step::Rail(StockStep::Broadcast {
                send: addr(from),
                recv: addr(to),
                count: count as usize,
                dtype: call.dtype,
                root: root as usize,
            }),
            AgLayout::Host { count, stride, from, to } => {
                Step::Kernel(host_step(clique, Coll::AllGather, count, stride, call, addr(from), addr(to), bufs)?)
            }
            AgLayout::Copy { count, from, to } => {
                if addr(from) == addr(to) {
                    continue; // in place
                }
                Step::Copy { dst: addr(to), src: addr(from), bytes: (count * elem) as usize }
            }
        });
    }
    let mut steps = steps.into_iter();
    let first = steps.next().ok_or_else(|| Error::internal("a plan without a step"))?;
    Ok(Plan { first, rest: steps.collect(), family })
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

    /// One rank's call buffers: send and receive, or one buffer for both (in place).
    struct Mem {
        send: Vec<f64>,
        recv: Vec<f64>,
        in_place: bool,
    }

    impl Mem {
        fn buf(&mut self, at: At) -> (&mut Vec<f64>, u64) {
            match at {
                At::Send(i) if !self.in_place => (&mut self.send, i),
                At::Send(i) | At::Recv(i) => (&mut self.recv, i),
                At::Temp(_) => unreachable!("an AllReduce has no scratch"),
            }
        }
        fn get(&mut self, at: At, j: u64) -> f64 {
            let (b, i) = self.buf(at);
            b[(i + j) as usize]
        }
        fn set(&mut self, at: At, j: u64, v: f64) {
            let (b, i) = self.buf(at);
            b[(i + j) as usize] = v;
        }
    }

    /// Runs every rank's layout on the CPU, all ranks step by step (each step reads everything
    /// it reads before anything is written, as the staged kernels and the stock calls do), with
    /// exact values; every rank's output, the sum of every rank's input.
    fn simulate(count: u64, hosts: u64, local: u64, lowp: bool, window: u64, in_place: bool) {
        let n = hosts * local;
        let input = |r: u64, i: u64| ((r * 131 + i * 7) % 17) as f64 - 8.0;
        let mut mem: Vec<Mem> = (0..n)
            .map(|r| {
                let x: Vec<f64> = (0..count).map(|i| input(r, i)).collect();
                Mem { send: x.clone(), recv: if in_place { x } else { vec![f64::NAN; count as usize] }, in_place }
            })
            .collect();
        // Rank h * local + l: hosts contiguous (a plan sees local indices only).
        let plans: Vec<Vec<Layout>> =
            (0..n).map(|r| layout_in_windows(count, hosts, local, r % local, lowp, window)).collect();
        let what = format!("count {count} {hosts}x{local} lowp {lowp} window {window} in place {in_place}");
        for p in &plans {
            assert_eq!(p.len(), plans[0].len(), "{what}: ranks with different step counts");
        }
        let host = |h: u64| (0..local).map(move |l| h * local + l);
        let rail = |l: u64| (0..hosts).map(move |h| h * local + l);
        for (k, &step) in plans[0].iter().enumerate() {
            let mut writes: Vec<(u64, At, u64, f64)> = Vec::new();
            match step {
                Layout::Host { coll, count: c, .. } => {
                    for h in 0..hosts {
                        let ranks: Vec<u64> = host(h).collect();
                        for (l, &r) in ranks.iter().enumerate() {
                            let Layout::Host { coll: c2, count: c3, to, .. } = plans[r as usize][k] else { panic!() };
                            assert_eq!((c2, c3), (coll, c), "{what}");
                            for j in 0..if coll == Coll::AllGather { c * local } else { c } {
                                let v = match coll {
                                    Coll::ReduceScatter => ranks
                                        .iter()
                                        .map(|&m| {
                                            let Layout::Host { from, .. } = plans[m as usize][k] else { panic!() };
                                            mem[m as usize].get(from, l as u64 * c + j)
                                        })
                                        .sum(),
                                    Coll::AllReduce => ranks
                                        .iter()
                                        .map(|&m| {
                                            let Layout::Host { from, .. } = plans[m as usize][k] else { panic!() };
                                            mem[m as usize].get(from, j)
                                        })
                                        .sum(),
                                    Coll::AllGather => {
                                        let m = ranks[(j / c) as usize];
                                        let Layout::Host { from, .. } = plans[m as usize][k] else { panic!() };
                                        mem[m as usize].get(from, j % c)
                                    }
                                    _ => panic!("{coll:?} in a plan"),
                                };
                                writes.push((r, to, j, v));
                            }
                        }
                    }
                }
                Layout::RailSum { count: c, .. } | Layout::RailWindow { piece: c, .. } => {
                    let per = if matches!(step, Layout::RailWindow { .. }) { hosts } else { 1 };
                    for l in 0..local {
                        for j in 0..c * per {
                            let v: f64 = rail(l)
                                .map(|m| {
                                    let (Layout::RailSum { from, .. } | Layout::RailWindow { from, .. }) =
                                        plans[m as usize][k]
                                    else {
                                        panic!()
                                    };
                                    mem[m as usize].get(from, j)
                                })
                                .sum();
                            for r in rail(l) {
                                let (Layout::RailSum { to, .. } | Layout::RailWindow { to, .. }) = plans[r as usize][k]
                                else {
                                    panic!()
                                };
                                writes.push((r, to, j, v));
                            }
                        }
                    }
                }
            }
            for (r, to, j, v) in writes {
                mem[r as usize].set(to, j, v);
            }
        }
        for i in 0..count {
            let want: f64 = (0..n).map(|r| input(r, i)).sum();
            for (r, m) in mem.iter().enumerate() {
                assert_eq!(m.recv[i as usize], want, "{what}: rank {r} element {i}");
            }
        }
    }

    #[test]
    fn every_layout_sums_every_element_on_every_rank() {
        for hosts in 2..=4u64 {
            for local in 1..=4u64 {
                for lowp in [false, true] {
                    if !lowp && local < 2 {
                        continue; // the exact hierarchy needs ranks to reduce over in the host
                    }
                    let group = if lowp { lowp_group(hosts, local) } else { local };
                    let unit = hosts * 512;
                    for count in [1, group - 1, group, group + 1, 3 * group + 7, 5 * group] {
                        for window in [unit, 2 * unit, RAIL_WINDOW] {
                            for in_place in [false, true] {
                                simulate(count.max(1), hosts, local, lowp, window, in_place);
                            }
                        }
                    }
                }
            }
        }
    }

    /// The ranks of `hosts` hosts of `local` each in rank order: hosts contiguous, or dealt
    /// round-robin (`interleaved`); host `h`'s ranks are `firsts[h] + l x step`.
    struct HostMap {
        hosts: u64,
        local: u64,
        firsts: Vec<usize>,
        step: u64,
    }

    impl HostMap {
        fn new(hosts: u64, local: u64, interleaved: bool) -> HostMap {
            let (firsts, step) = if interleaved {
                ((0..hosts as usize).collect(), hosts)
            } else {
                ((0..hosts as usize).map(|h| h * local as usize).collect(), 1)
            };
            HostMap { hosts, local, firsts, step }
        }

        fn rank(&self, h: u64, l: u64) -> u64 {
            self.firsts[h as usize] as u64 + l * self.step
        }

        /// Rank `r`'s host and local index.
        fn place(&self, r: u64) -> (u64, u64) {
            (0..self.hosts)
                .flat_map(|h| (0..self.local).map(move |l| (h, l)))
                .find(|&(h, l)| self.rank(h, l) == r)
                .unwrap()
        }
    }

    /// Every case of the layout tests: 2-4 hosts of each of `locals` ranks, counts around the
    /// 512-element groups, windows of 512 and 1024, hosts contiguous and interleaved, in place
    /// and out of place.
    fn every_case(locals: &[u64], f: impl Fn(u64, u64, u64, bool, u64, bool)) {
        for hosts in 2..=4u64 {
            for &local in locals {
                for count in [1, 511, 512, 513, 1024 + 7, 5 * 512] {
                    for window in [512, 1024] {
                        for interleaved in [false, true] {
                            for in_place in [false, true] {
                                f(count, hosts, local, interleaved, window, in_place);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Runs every rank's ReduceScatter layout on the CPU as [`simulate`] does (codes carry exact
    /// values here), for host `h`'s ranks `firsts[h] + l x step`: every rank's output, its block
    /// summed over every rank.
    fn simulate_rs(count: u64, hosts: u64, local: u64, interleaved: bool, window: u64, in_place: bool) {
        let n = hosts * local;
        let map = HostMap::new(hosts, local, interleaved);
        let (firsts, step) = (&map.firsts, map.step);
        let (rank, place) = (|h, l| map.rank(h, l), |r| map.place(r));
        let input = |r: u64, i: u64| ((r * 131 + i * 7) % 17) as f64 - 8.0;
        // Per rank: the input (n blocks), the output (in place: the own block of the input), the
        // scratch's host sum and its slots (one per host).
        struct Rank {
            send: Vec<f64>,
            recv: Vec<f64>,
            temp: Vec<f64>,
            slots: Vec<Vec<f64>>,
        }
        let what =
            format!("count {count} {hosts}x{local} interleaved {interleaved} window {window} in place {in_place}");
        let mut mem: Vec<Rank> = (0..n)
            .map(|r| Rank {
                send: (0..n * count).map(|i| input(r, i)).collect(),
                recv: vec![f64::NAN; count as usize],
                temp: vec![f64::NAN; window as usize],
                slots: vec![Vec::new(); hosts as usize],
            })
            .collect();
        let get = |m: &Rank, r: u64, at: At, j: u64| -> f64 {
            match at {
                At::Send(i) => m.send[(i + j) as usize],
                At::Recv(i) if in_place => m.send[(r * count + i + j) as usize],
                At::Recv(i) => m.recv[(i + j) as usize],
                At::Temp(i) => m.temp[(i + j) as usize],
            }
        };
        let plans: Vec<Vec<RsLayout>> =
            (0..n).map(|r| rs_layout(count, hosts, local, place(r).0, firsts, step, window)).collect();
        for p in &plans {
            assert_eq!(p.len(), plans[0].len(), "{what}: ranks with different step counts");
        }
        enum Write {
            At(u64, At, u64, f64),
            Slot(u64, u64, Vec<f64>),
        }
        for (k, _) in plans[0].iter().enumerate() {
            let mut writes = Vec::new();
            for r in 0..n {
                let (h, l) = place(r);
                match plans[r as usize][k] {
                    RsLayout::Host { count: c, stride, from, to } => {
                        for m in (0..local).map(|q| rank(h, q)) {
                            let RsLayout::Host { count: c2, stride: s2, .. } = plans[m as usize][k] else {
                                panic!("{what}: step {k} differs in host {h}")
                            };
                            assert_eq!((c2, s2), (c, stride), "{what}");
                        }
                        for j in 0..c {
                            let v = (0..local)
                                .map(|q| {
                                    let m = rank(h, q);
                                    let RsLayout::Host { from: f, .. } = plans[m as usize][k] else { panic!() };
                                    get(&mem[m as usize], m, f, l * stride + j)
                                })
                                .sum();
                            writes.push(Write::At(r, to, j, v));
                        }
                        let _ = from;
                    }
                    RsLayout::Encode { piece, from, slot } => {
                        let v = (0..piece).map(|j| get(&mem[r as usize], r, from, j)).collect();
                        writes.push(Write::Slot(r, slot, v));
                    }
                    RsLayout::ReduceOut { piece, own, to } => {
                        for j in 0..piece {
                            let mut v = get(&mem[r as usize], r, own, j);
                            for g in (0..hosts).filter(|&g| g != h) {
                                let peer = rank(g, l);
                                assert!(
                                    matches!(plans[peer as usize][k], RsLayout::ReduceOut { piece: p, .. } if p == piece)
                                );
                                v += mem[peer as usize].slots[h as usize][j as usize];
                            }
                            writes.push(Write::At(r, to, j, v));
                        }
                    }
                    RsLayout::RailReduce { count: c, to, root, .. } => {
                        if h == root {
                            for j in 0..c {
                                let v = (0..hosts)
                                    .map(|g| {
                                        let peer = rank(g, l);
                                        let RsLayout::RailReduce { from, root: r2, .. } = plans[peer as usize][k]
                                        else {
                                            panic!("{what}: step {k} differs on rail {l}")
                                        };
                                        assert_eq!(r2, root, "{what}");
                                        get(&mem[peer as usize], peer, from, j)
                                    })
                                    .sum();
                                writes.push(Write::At(r, to, j, v));
                            }
                        }
                    }
                }
            }
            for w in writes {
                match w {
                    Write::At(r, at, j, v) => {
                        let m = &mut mem[r as usize];
                        let cell = match at {
                            At::Recv(i) if in_place => &mut m.send[(r * count + i + j) as usize],
                            At::Recv(i) => &mut m.recv[(i + j) as usize],
                            At::Temp(i) => &mut m.temp[(i + j) as usize],
                            At::Send(_) => panic!("{what}: a step writes the input"),
                        };
                        *cell = v;
                    }
                    Write::Slot(r, slot, v) => mem[r as usize].slots[slot as usize] = v,
                }
            }
        }
        for (r, m) in mem.iter().enumerate() {
            let r = r as u64;
            for j in 0..count {
                let want: f64 = (0..n).map(|q| input(q, r * count + j)).sum();
                let got = if in_place { m.send[(r * count + j) as usize] } else { m.recv[j as usize] };
                assert_eq!(got, want, "{what}: rank {r} element {j}");
            }
        }
    }

    /// Runs every rank's [`ag_layout`] of an AllGather across `hosts` hosts of `local` ranks on
    /// the CPU (codes as a mark on the value) and checks every rank's output: each block its
    /// rank's input, exact on its own host, decoded once elsewhere (whole groups; tails exact).
    fn simulate_ag(count: u64, hosts: u64, local: u64, interleaved: bool, window: u64, in_place: bool) {
        let n = hosts * local;
        let map = HostMap::new(hosts, local, interleaved);
        let (firsts, step) = (&map.firsts, map.step);
        let (rank, place) = (|h, l| map.rank(h, l), |r| map.place(r));
        let input = |r: u64, i: u64| (r * 1000 + i) as f64;
        let what =
            format!("count {count} {hosts}x{local} interleaved {interleaved} window {window} in place {in_place}");
        // (value, decoded) per element; in place, the input is the rank's block of the output.
        type Cell = (f64, bool);
        struct Rank {
            send: Vec<Cell>,
            recv: Vec<Cell>,
            sent: Vec<Cell>,
            received: Vec<Vec<Cell>>,
        }
        let mut mem: Vec<Rank> = (0..n)
            .map(|r| {
                let mine: Vec<Cell> = (0..count).map(|i| (input(r, i), false)).collect();
                let mut recv = vec![(f64::NAN, false); (n * count) as usize];
                if in_place {
                    recv[(r * count) as usize..((r + 1) * count) as usize].copy_from_slice(&mine);
                }
                Rank { send: mine, recv, sent: Vec::new(), received: Vec::new() }
            })
            .collect();
        let get = |m: &Rank, r: u64, at: At, j: u64| -> Cell {
            match at {
                At::Send(i) if in_place => m.recv[(r * count + i + j) as usize],
                At::Send(i) => m.send[(i + j) as usize],
                At::Recv(i) => m.recv[(i + j) as usize],
                At::Temp(_) => panic!("{what}: an AllGather has no temp"),
            }
        };
        let plans: Vec<Vec<AgLayout>> = (0..n)
            .map(|r| {
                let (h, l) = place(r);
                ag_layout(count, hosts, local, h, l, firsts, step, window)
            })
            .collect();
        for p in &plans {
            assert_eq!(p.len(), plans[0].len(), "{what}: ranks with different step counts");
        }
        for k in 0..plans[0].len() {
            // Every rank's step k is of the same kind with the same sizes (rail and host steps pair up).
            for p in &plans {
                assert_eq!(std::mem::discriminant(&p[k]), std::mem::discriminant(&plans[0][k]), "{what}: step {k}");
            }
            let mut writes: Vec<(u64, At, Vec<Cell>)> = Vec::new();
            for r in 0..n {
                let (h, l) = place(r);
                let m = &mem[r as usize];
                match plans[r as usize][k] {
                    AgLayout::Encode { piece, from } => {
                        let v = (0..piece).map(|j| get(m, r, from, j)).collect();
                        mem[r as usize].sent = v;
                        continue;
                    }
                    AgLayout::Gather { piece } => {
                        let got: Vec<Vec<Cell>> = (0..hosts)
                            .map(|g| {
                                let peer = &mem[rank(g, l) as usize];
                                assert_eq!(peer.sent.len() as u64, piece, "{what}: rail pieces differ");
                                peer.sent.clone()
                            })
                            .collect();
                        mem[r as usize].received = got;
                        continue;
                    }
                    AgLayout::Decode { piece, slot, to } => {
                        assert_ne!(slot, h, "{what}: a host decodes its own codes");
                        let v = m.received[slot as usize][..piece as usize].iter().map(|c| (c.0, true)).collect();
                        writes.push((r, to, v));
                    }
                    AgLayout::RailBroadcast { count: c, from, to, root } => {
                        let src = rank(root, l);
                        let v = (0..c).map(|j| get(&mem[src as usize], src, from, j)).collect();
                        writes.push((r, to, v));
                    }
                    AgLayout::Host { count: c, stride, from, to } => {
                        for q in 0..local {
                            let peer = rank(h, q);
                            let AgLayout::Host { count: c2, stride: s2, from: f, .. } = plans[peer as usize][k] else {
                                panic!("{what}: step {k} differs in host {h}")
                            };
                            assert_eq!((c2, s2), (c, stride), "{what}");
                            let v = (0..c).map(|j| get(&mem[peer as usize], peer, f, j)).collect();
                            writes.push((r, to.shift(q * stride), v));
                        }
                        let _ = from;
                    }
                    AgLayout::Copy { count: c, from, to } => {
                        let v = (0..c).map(|j| get(m, r, from, j)).collect();
                        writes.push((r, to, v));
                    }
                }
            }
            for (r, at, v) in writes {
                let At::Recv(i) = at else { panic!("{what}: a write to {at:?}") };
                let m = &mut mem[r as usize];
                m.recv[i as usize..i as usize + v.len()].copy_from_slice(&v);
            }
        }
        let body = count - count % 512;
        for r in 0..n {
            for q in 0..n {
                for i in 0..count {
                    let (v, decoded) = mem[r as usize].recv[(q * count + i) as usize];
                    let coded = place(q).0 != place(r).0 && i < body;
                    assert!(
                        v == input(q, i) && decoded == coded,
                        "{what}: rank {r}, block {q}, element {i}: {v} {decoded}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_all_gather_layout_gives_every_block_once_coded_at_most() {
        every_case(&[1, 2, 3, 4], simulate_ag);
    }

    #[test]
    fn all_gather_windows_fit_the_scratch() {
        let scratch = crate::clique::args::rail_scratch_bytes() as u64;
        for hosts in 2..=64u64 {
            let w = ag_window(hosts, scratch);
            assert!(w >= 512 && w.is_multiple_of(512), "{hosts}");
            assert!((hosts + 1) * coded_bytes(w) <= scratch && (hosts + 1) * coded_bytes(w + 512) > scratch, "{hosts}");
        }
        assert_eq!(ag_window(2, 1000), 0);
    }

    #[test]
    fn every_reduce_scatter_layout_sums_each_block_on_its_rank() {
        every_case(&[1, 2, 3, 4, 8], simulate_rs);
    }

    #[test]
    fn reduce_scatter_windows_fit_the_scratch() {
        let scratch = crate::clique::args::rail_scratch_bytes() as u64;
        for hosts in 2..=64u64 {
            for elem in [2u64, 4] {
                let w = rs_window(hosts, elem, scratch);
                assert!(w >= 512 && w.is_multiple_of(512), "{hosts} {elem}");
                assert!((w * elem).next_multiple_of(256) + 2 * hosts * coded_bytes(w) <= scratch);
                let next = w + 512;
                assert!(
                    (next * elem).next_multiple_of(256) + 2 * hosts * coded_bytes(next) > scratch,
                    "{hosts} {elem}"
                );
            }
        }
        assert_eq!(rs_window(2, 4, 1000), 0);
    }

    #[test]
    fn low_precision_pieces_are_whole_groups_of_512() {
        for (hosts, local) in [(2, 2), (3, 2), (4, 1), (2, 8)] {
            for count in [5 * lowp_group(hosts, local) + 3, 1 << 26] {
                let steps = layout(count, hosts, local, 1 % local, true);
                let pieces: Vec<u64> = steps
                    .iter()
                    .filter_map(|s| if let Layout::RailWindow { piece, .. } = s { Some(*piece) } else { None })
                    .collect();
                assert!(!pieces.is_empty() && pieces.iter().all(|p| p % 512 == 0 && hosts * p <= RAIL_WINDOW));
            }
        }
    }
}
