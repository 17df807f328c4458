//! The `a2av` suite: rcclx's GPU-resident AllToAllv through its three C forms
//! (`rcclxAllToAllvDynamic`: a buffer per peer; `...Split`: one packed send buffer;
//! `...Packed`: both packed, counts in rows), with counts in device memory: random, skewed (one
//! peer gets segments longer than a staging window: several windows), all-to-one, all-zero,
//! exact-capacity and over-capacity splits (and a passed-back `RCCLX_COUNT_INVALID`). Every
//! received byte, every untouched byte around and between the segments, and the received counts
//! are checked against a CPU model of the kernel's rules ([`model`]).

use std::ffi::c_void;

use rcclx::abi::own::{
    RCCLX_COUNT_INVALID, rcclxAllToAllvDynamic, rcclxAllToAllvDynamicPacked, rcclxAllToAllvDynamicSplit,
};
use rcclx::dda::alltoallv::window_bytes;
use rcclx::gpu::DevicePtr;
use rcclx::types::{ncclDataType_t, ncclResult_t};
use rcclx_gpu_tests::reduce::{Rng, Ty};
use rcclx_gpu_tests::{Fail, watchdog};

use crate::device::{self, GUARD, Ranks, grown, report, route_calls};
use crate::opts::Opts;

/// The three C forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// `rcclxAllToAllvDynamic`: one send and one receive buffer per peer.
    PerPeer,
    /// `rcclxAllToAllvDynamicSplit`: the send segments back to back, a receive buffer per peer.
    Split,
    /// `rcclxAllToAllvDynamicPacked`: both sides back to back, counts in rows of `row` elements.
    Packed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    Random,
    /// Rank r sends its peer r+1 a full segment (`cap` units), the others little.
    Skewed,
    /// Every rank sends everything to rank 0.
    AllToOne,
    Zero,
    /// Every segment exactly the capacity.
    Exact,
    /// Some segments over a capacity (dropped), one count `RCCLX_COUNT_INVALID` (sends nothing).
    Over,
}

impl Pattern {
    const ALL: [Pattern; 6] =
        [Pattern::Random, Pattern::Skewed, Pattern::AllToOne, Pattern::Zero, Pattern::Exact, Pattern::Over];
}

/// One call.
#[derive(Clone, Debug)]
pub struct Case {
    pub form: Form,
    pub pattern: Pattern,
    pub ty: Ty,
    /// Elements per count unit (1 except for the packed form's rows).
    pub row: usize,
    /// Per peer (PerPeer, Split's receive side): units a segment buffer holds. Packed sides: the
    /// buffer holds `n * cap` units.
    pub cap: u64,
}

impl Case {
    pub fn name(&self) -> String {
        format!("alltoallv {:?} {:?} {} row {} cap {}", self.form, self.pattern, self.ty.name(), self.row, self.cap)
    }

    pub fn unit_bytes(&self) -> usize {
        self.ty.size() * self.row
    }

    /// (send side packed, receive side packed).
    fn packed(&self) -> (bool, bool) {
        match self.form {
            Form::PerPeer => (false, false),
            Form::Split => (true, false),
            Form::Packed => (true, true),
        }
    }

    /// Capacities in units: (max_send, max_recv) as the C call declares them.
    fn capacities(&self, n: usize) -> (u64, u64) {
        let (sp, rp) = self.packed();
        let side = |packed: bool| if packed { self.cap * n as u64 } else { self.cap };
        (side(sp), side(rp))
    }

    /// Every rank's send counts (units), `counts[r][q]`: from r to q.
    fn counts(&self, n: usize, seed: u64) -> Vec<Vec<u64>> {
        let mut rng = Rng::new(seed);
        let cap = self.cap;
        (0..n)
            .map(|r| {
                (0..n)
                    .map(|q| match self.pattern {
                        Pattern::Random => rng.below(cap + 1),
                        Pattern::Skewed => {
                            if q == (r + 1) % n {
                                cap
                            } else {
                                rng.below(cap / 8 + 1)
                            }
                        }
                        Pattern::AllToOne => {
                            if q == 0 {
                                cap
                            } else {
                                0
                            }
                        }
                        Pattern::Zero => 0,
                        Pattern::Exact => cap,
                        Pattern::Over => match (r + 2 * q) % 5 {
                            0 => cap + 1 + rng.below(7),
                            1 => RCCLX_COUNT_INVALID,
                            _ => rng.below(cap + 1),
                        },
                    })
                    .collect()
            })
            .collect()
    }
}

/// What the kernel does with the counts (`hip_kernels/alltoallv.cuh`): per sender, the bytes it
/// sends each destination (or `None`: dropped) and where each segment starts in its send area;
/// per receiver, where each incoming segment goes and what it reads back as its count.
pub struct Model {
    /// `out[r][q]`: bytes r sends q (None: not sent); `soff[r][q]`: byte offset in r's area.
    pub out: Vec<Vec<Option<u64>>>,
    pub soff: Vec<Vec<u64>>,
}

impl Model {
    /// The senders' side, from the counts, capacities and layout.
    pub fn new(counts: &[Vec<u64>], max_send: u64, send_packed: bool, unit: u64) -> Model {
        let mut out = Vec::new();
        let mut soff = Vec::new();
        for row in counts {
            let (mut end, mut over) = (0u64, false);
            let (mut o, mut s) = (Vec::new(), Vec::new());
            for &c in row {
                let c = if c == RCCLX_COUNT_INVALID { 0 } else { c };
                if send_packed {
                    over = over || c > max_send - end;
                    s.push(end * unit);
                    if !over {
                        end += c;
                    }
                } else {
                    over = c > max_send;
                    s.push(0);
                }
                o.push(if over { None } else { Some(c * unit) });
            }
            out.push(o);
            soff.push(s);
        }
        Model { out, soff }
    }

    /// Receiver `p`: per source, (byte offset in its receive area, bytes) of what lands, or
    /// `None` (dropped: its count reads `RCCLX_COUNT_INVALID`).
    pub fn receive(&self, p: usize, max_recv: u64, recv_packed: bool, unit: u64) -> Vec<Option<(u64, u64)>> {
        let (mut end, mut over) = (0u64, false);
        (0..self.out.len())
            .map(|s| {
                let len = self.out[s][p]?;
                let units = len / unit;
                if recv_packed {
                    over = over || units > max_recv - end;
                    let off = end * unit;
                    if !over {
                        end += units;
                    }
                    (!over).then_some((off, len))
                } else {
                    (units <= max_recv).then_some((0, len))
                }
            })
            .collect()
    }
}

/// One rank's arena for a case: [guard][send area][guard][receive area (per peer: n buffers with
/// guards between)][guard][send counts][receive counts][guard].
struct Arena {
    send: usize,
    /// Start of each send segment buffer (per peer) or of the packed buffer.
    send_bufs: Vec<usize>,
    recv: usize,
    recv_bufs: Vec<usize>,
    recv_end: usize,
    send_counts: usize,
    recv_counts: usize,
    total: usize,
}

fn arena(case: &Case, n: usize) -> Arena {
    let ub = case.unit_bytes();
    let seg = case.cap as usize * ub;
    let (sp, rp) = case.packed();
    let send = GUARD;
    let send_bufs: Vec<usize> = if sp { vec![send] } else { (0..n).map(|q| send + q * (seg + GUARD)).collect() };
    let send_end = if sp { send + n * seg } else { send + n * (seg + GUARD) };
    let recv = (send_end + GUARD).next_multiple_of(256);
    let recv_bufs: Vec<usize> = if rp { vec![recv] } else { (0..n).map(|p| recv + p * (seg + GUARD)).collect() };
    let recv_end = if rp { recv + n * seg } else { recv + n * (seg + GUARD) };
    let send_counts = (recv_end + GUARD).next_multiple_of(256);
    let recv_counts = send_counts + 8 * n;
    Arena { send, send_bufs, recv, recv_bufs, recv_end, send_counts, recv_counts, total: recv_counts + 8 * n + GUARD }
}

/// The suite's cases for `n` ranks with staging halves of `half` bytes.
pub fn cases(n: usize, half: u64, quick: bool) -> Vec<Case> {
    let w = window_bytes(half, n as u64);
    let mut out = Vec::new();
    let units = [
        (Form::PerPeer, Ty::Bf16, 1),
        (Form::Split, Ty::F32, 1),
        (Form::Packed, Ty::I8, 33),
        (Form::Packed, Ty::Bf16, 7),
    ];
    let patterns: &[Pattern] = if quick { &[Pattern::Random, Pattern::Over, Pattern::Zero] } else { &Pattern::ALL };
    for &(form, ty, row) in &units {
        for &pattern in patterns {
            out.push(Case { form, pattern, ty, row, cap: 37 });
        }
        // Segments longer than a window (several windows), not a whole number of 16-byte vectors.
        let ub = (ty.size() * row) as u64;
        let long = (w + w / 2).div_ceil(ub) | 1;
        out.push(Case { form, pattern: Pattern::Skewed, ty, row, cap: long });
        if !quick {
            out.push(Case { form, pattern: Pattern::Random, ty, row, cap: long });
        }
    }
    out
}

/// The random send area of rank `r` (deterministic: every process can compute any rank's).
fn send_data(a: &Arena, seed: u64, index: usize, r: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed ^ (index as u64) << 16 ^ r as u64);
    (0..a.recv - a.send).map(|_| rng.next_u64() as u8).collect()
}

/// The poison of every byte the call must not write (and of the receive area before it runs).
pub const POISON: u8 = 0xC3;

/// One case laid out for one rank: the arena and the bytes to upload.
pub struct Prepared {
    a: Arena,
    counts: Vec<Vec<u64>>,
    seed: u64,
    index: usize,
}

impl Prepared {
    pub fn new(case: &Case, n: usize, seed: u64, index: usize) -> Prepared {
        Prepared { a: arena(case, n), counts: case.counts(n, seed ^ index as u64), seed, index }
    }

    /// Bytes of the arena.
    pub fn total(&self) -> usize {
        self.a.total
    }

    /// Rank r's image: guard, send data, poison, its send counts.
    pub fn image(&self, r: usize) -> Vec<u8> {
        let a = &self.a;
        let mut img = vec![POISON; a.total];
        img[..a.send].fill(0xFF);
        img[a.send..a.recv].copy_from_slice(&send_data(a, self.seed, self.index, r));
        for (q, &c) in self.counts[r].iter().enumerate() {
            img[a.send_counts + 8 * q..a.send_counts + 8 * q + 8].copy_from_slice(&c.to_le_bytes());
        }
        img
    }

    /// What the call writes: the receive area and the received counts (byte ranges of the arena).
    pub fn written(&self) -> [std::ops::Range<usize>; 2] {
        [self.a.recv..self.a.recv_end, self.a.recv_counts..self.a.recv_counts + 8 * self.counts.len()]
    }

    /// Issues local rank k's call of `case` on the arena at `base`.
    pub fn issue(&self, dev: &Ranks, k: usize, case: &Case, base: DevicePtr) -> ncclResult_t {
        let (a, n) = (&self.a, self.counts.len());
        let (max_send, max_recv) = case.capacities(n);
        let p = |off: usize| base.offset(off).as_raw();
        let send_bufs: Vec<*const c_void> = a.send_bufs.iter().map(|&o| p(o) as *const c_void).collect();
        let recv_bufs: Vec<*mut c_void> = a.recv_bufs.iter().map(|&o| p(o)).collect();
        let sc = p(a.send_counts) as *const usize;
        let rc = p(a.recv_counts) as *mut usize;
        let (comm, stream, dt) = (dev.world.comms[k], dev.stream(k).as_raw(), ncclDataType_t(case.ty.nccl()));
        let (ms, mr) = (max_send as usize, max_recv as usize);
        // SAFETY: the buffers lie in this rank's arena with the declared capacities (per-peer
        // buffers of `cap` units, packed ones of `n * cap`), the counts are `n` device words,
        // the host arrays hold `n` pointers, and the stream is this rank's.
        unsafe {
            match case.form {
                Form::PerPeer => {
                    rcclxAllToAllvDynamic(send_bufs.as_ptr(), sc, recv_bufs.as_ptr(), ms, mr, rc, dt, comm, stream)
                }
                Form::Split => {
                    rcclxAllToAllvDynamicSplit(send_bufs[0], sc, recv_bufs.as_ptr(), ms, mr, rc, dt, comm, stream)
                }
                Form::Packed => {
                    rcclxAllToAllvDynamicPacked(send_bufs[0], sc, recv_bufs[0], ms, mr, rc, case.row, dt, comm, stream)
                }
            }
        }
    }

    /// Checks rank p's downloaded arena against the model: (problems, bytes received, counts).
    pub fn check(&self, case: &Case, p: usize, got: &[u8]) -> (Vec<String>, u64, Vec<u64>) {
        let (a, n) = (&self.a, self.counts.len());
        let ub = case.unit_bytes() as u64;
        let (sp, rp) = case.packed();
        let (max_send, max_recv) = case.capacities(n);
        let model = Model::new(&self.counts, max_send, sp, ub);
        // The whole receive area as it must be: poison (the gaps between per-peer buffers too)
        // except where segments land.
        let mut want = vec![POISON; a.recv_end - a.recv];
        let lands = model.receive(p, max_recv, rp, ub);
        let mut want_counts = Vec::new();
        for (s, l) in lands.iter().enumerate() {
            match l {
                Some((off, len)) => {
                    let src = send_data(a, self.seed, self.index, s);
                    let start = (a.send_bufs[if sp { 0 } else { p }] - a.send) as u64 + model.soff[s][p];
                    let dst = (a.recv_bufs[if rp { 0 } else { s }] - a.recv) as u64 + off;
                    want[dst as usize..(dst + len) as usize]
                        .copy_from_slice(&src[start as usize..(start + len) as usize]);
                    want_counts.push(len / ub);
                }
                None => want_counts.push(RCCLX_COUNT_INVALID),
            }
        }
        let got_counts: Vec<u64> = got[a.recv_counts..a.recv_counts + 8 * n]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let area = &got[a.recv..a.recv_end];
        let mut problems = Vec::new();
        if got_counts != want_counts {
            problems.push(format!("received counts {got_counts:?}, want {want_counts:?}"));
        }
        if let Some(i) = area.iter().zip(&want).position(|(x, y)| x != y) {
            let bad = area.iter().zip(&want).filter(|(x, y)| x != y).count();
            problems.push(format!("{bad} received bytes wrong, first at receive-area byte {i}"));
        }
        if got[..a.send].iter().any(|&b| b != 0xFF) || got[a.send..a.recv] != send_data(a, self.seed, self.index, p)[..]
        {
            problems.push("the send area or its guard changed".into());
        }
        if got[a.recv_counts + 8 * n..].iter().any(|&b| b != POISON) {
            problems.push("a write past the received counts".into());
        }
        (problems, lands.iter().flatten().map(|(_, l)| l).sum(), want_counts)
    }
}

/// Runs one case on every local rank.
fn run_case(dev: &mut Ranks, index: usize, case: &Case, seed: u64) -> Result<(), Fail> {
    let n = dev.nranks();
    let name = case.name();
    if dev.announcer {
        rcclx_gpu_tests::children::say(&format!("CASE {index} {name}"));
    }
    watchdog::progress(&name);
    let prep = Prepared::new(case, n, seed, index);
    let before: Vec<Vec<u64>> = (0..dev.local()).map(|k| route_calls(dev.world.comms[k])).collect();
    // Every rank's memory first: growing an arena frees the old one, which waits for the whole
    // device, so it must not happen while a peer's kernel waits for this rank.
    let mut bases = Vec::new();
    for k in 0..dev.local() {
        bases.push(dev.arena(k, prep.total())?);
        dev.upload(k, 0, &prep.image(dev.world.ranks[k]))?;
    }
    let rets: Vec<_> = bases.iter().enumerate().map(|(k, &base)| prep.issue(dev, k, case, base)).collect();
    dev.wait_all(&|_| format!("case {index} {name}, kernel rcclx_alltoallv_dynamic_bytes"))?;
    for k in 0..dev.local() {
        let p = dev.world.ranks[k];
        let got = dev.download(k, 0, prep.total())?;
        let (mut problems, moved, counts) = prep.check(case, p, &got);
        if rets[k] != ncclResult_t::Success {
            problems.push(format!("returned {}", rets[k].0));
        }
        let route = grown(&before[k], &route_calls(dev.world.comms[k]));
        let ok = problems.is_empty() && route == "alltoallv.dynamic";
        let detail = if problems.is_empty() {
            format!("{moved} bytes received, counts {counts:?}")
        } else {
            problems.join("; ")
        };
        report(index, p, ok, p, &device::hash(&got[prep.written()[0].clone()]), &route, &detail);
    }
    Ok(())
}

pub fn run(dev: &mut Ranks, opts: &Opts) -> Result<(), Fail> {
    let half = dev.world.cliques[0].args().half_bytes;
    for (i, c) in cases(dev.nranks(), half, opts.quick).iter().enumerate() {
        run_case(dev, i, c, opts.seed)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const INV: u64 = RCCLX_COUNT_INVALID;

    #[test]
    fn per_peer_drops_only_the_segments_over_a_capacity() {
        // 3 ranks, capacity 5 units of 2 bytes.
        let counts = vec![vec![1, 6, 5], vec![INV, 0, 2], vec![5, 5, 5]];
        let m = Model::new(&counts, 5, false, 2);
        assert_eq!(m.out[0], [Some(2), None, Some(10)]);
        assert_eq!(m.out[1], [Some(0), Some(0), Some(4)], "INVALID sends nothing");
        // Receiver 1 with a receive capacity of 4: rank 2's 5 units are dropped.
        assert_eq!(m.receive(1, 4, false, 2), [None, Some((0, 0)), None]);
        assert_eq!(m.receive(2, 5, false, 2), [Some((0, 10)), Some((0, 4)), Some((0, 10))]);
    }

    #[test]
    fn packed_sides_drop_a_segment_past_the_end_and_every_later_one() {
        // Sender packed, capacity 6: segments 4, 3 (ends at 7 > 6: dropped), 1 (dropped too).
        let m = Model::new(&[vec![4, 3, 1]], 6, true, 1);
        assert_eq!(m.out[0], [Some(4), None, None]);
        assert_eq!(m.soff[0], [0, 4, 4]);
        // Receiver packed, capacity 5: 2 + 2 fit, the third (2) ends at 6: dropped, as is the
        // zero-length one after it.
        let m = Model::new(&[vec![2], vec![2], vec![2], vec![0]], 10, false, 1);
        assert_eq!(m.receive(0, 5, true, 1), [Some((0, 2)), Some((2, 2)), None, None]);
    }

    #[test]
    fn cases_cover_every_form_and_pattern_and_several_windows() {
        for n in 3..=8 {
            let half = 8 << 20;
            let cs = cases(n, half, false);
            for form in [Form::PerPeer, Form::Split, Form::Packed] {
                for p in Pattern::ALL {
                    assert!(cs.iter().any(|c| c.form == form && c.pattern == p), "{form:?} {p:?}");
                }
                let w = window_bytes(half, n as u64);
                assert!(
                    cs.iter().any(|c| c.form == form && c.cap * c.unit_bytes() as u64 > w),
                    "{form:?}: one window only"
                );
            }
            let a = arena(&cs[0], n);
            assert!(
                a.send_counts.is_multiple_of(8) && a.recv_counts == a.send_counts + 8 * n && a.total > a.recv_counts
            );
        }
    }
}
