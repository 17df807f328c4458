//! The `a2av` suite: rcclx's GPU-resident AllToAllv through its three C forms
//! (`rcclxAllToAllvDynamic`: a buffer per peer; `...Split`: one packed send buffer;
//! `...Packed`: both packed, counts in rows), with counts in device memory: random, skewed (one
//! peer gets segments longer than a staging window: several windows), all-to-one, all-zero,
//! exact-capacity and over-capacity splits (and a passed-back `RCCLX_COUNT_INVALID`); each form
//! also with FP8 and INT8 on the wire (`rcclxAllToAllvOptions`: decoded, or FP8 codes and scales
//! delivered; rows whose length is not a multiple of 128; segments that are not whole rows).
//! Every received byte, every untouched byte around and between the segments, and the received
//! counts are checked against a CPU model of the kernel's rules ([`Model`]); quantized segments
//! bit for bit against the codec reference (`rcclx_gpu_tests::codec`), NaN for NaN.

use std::ffi::{c_int, c_void};

use rcclx::abi::own::{
    RCCLX_COUNT_INVALID, RCCLX_WIRE_FP8, RCCLX_WIRE_INT8, RCCLX_WIRE_PLAIN, rcclxAllToAllvDynamicEx,
    rcclxAllToAllvDynamicPackedEx, rcclxAllToAllvDynamicSplitEx, rcclxAllToAllvOptions,
};
use rcclx::dda::alltoallv::window_bytes;
use rcclx::gpu::DevicePtr;
use rcclx::types::{ncclDataType_t, ncclResult_t};
use rcclx_gpu_tests::codec::{BLOCK, Codec, Fp8Format, Io, quantize_block, roundtrip};
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

/// What travels (`rcclxAllToAllvOptions`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// The bytes as they are (the forms without options).
    Plain,
    /// FP8 (in the device's format), decoded by the receiver.
    Fp8(Fp8Format),
    /// INT8, decoded by the receiver.
    Int8,
    /// FP8, delivered as codes (one byte per element) and f32 scales.
    Fp8Codes(Fp8Format),
}

impl Wire {
    pub fn codec(self) -> Option<Codec> {
        match self {
            Wire::Plain => None,
            Wire::Fp8(f) | Wire::Fp8Codes(f) => Some(Codec::Fp8(f)),
            Wire::Int8 => Some(Codec::Int8),
        }
    }

    fn c_wire(self) -> c_int {
        match self {
            Wire::Plain => RCCLX_WIRE_PLAIN,
            Wire::Fp8(_) | Wire::Fp8Codes(_) => RCCLX_WIRE_FP8,
            Wire::Int8 => RCCLX_WIRE_INT8,
        }
    }

    fn codes(self) -> bool {
        matches!(self, Wire::Fp8Codes(_))
    }

    /// The statistics route a call takes.
    pub fn route(self) -> &'static str {
        match self {
            Wire::Plain => "alltoallv.dynamic",
            Wire::Fp8(_) | Wire::Fp8Codes(_) => "alltoallv.lowp",
            Wire::Int8 => "alltoallv.int8",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Wire::Plain => "plain",
            Wire::Fp8(_) => "fp8",
            Wire::Int8 => "int8",
            Wire::Fp8Codes(_) => "fp8-codes",
        }
    }
}

/// The FP8 format of the device's code object (the kernels' native E4M3).
pub fn fp8_format(dev: &Ranks) -> Fp8Format {
    let arch = dev.rt.device_info(0).map(|i| i.arch).unwrap_or_default();
    rcclx::kernels::for_arch(&arch).map_or(Fp8Format::E4m3fn, |co| co.fp8_format())
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
    pub wire: Wire,
    /// With a codec: elements per row of blocks (`rowElements`; the call passes 0 when it equals
    /// `row`, the default).
    pub scale_row: usize,
}

impl Case {
    /// A case with the bytes as they are.
    pub fn plain(form: Form, pattern: Pattern, ty: Ty, row: usize, cap: u64) -> Case {
        Case { form, pattern, ty, row, cap, wire: Wire::Plain, scale_row: 0 }
    }

    pub fn name(&self) -> String {
        let wire = match self.wire {
            Wire::Plain => String::new(),
            w => format!(" {} rows of {}", w.name(), self.scale_row),
        };
        format!(
            "alltoallv {:?} {:?} {} row {} cap {}{wire}",
            self.form,
            self.pattern,
            self.ty.name(),
            self.row,
            self.cap
        )
    }

    fn io(&self) -> Io {
        match self.ty {
            Ty::F32 => Io::F32,
            Ty::F16 => Io::F16,
            Ty::Bf16 => Io::Bf16,
            t => panic!("{t:?} does not travel quantized"),
        }
    }

    /// Bytes of a row of blocks (None: no codec).
    fn row_bytes(&self) -> Option<u64> {
        self.wire.codec().map(|_| (self.scale_row * self.ty.size()) as u64)
    }

    /// Scales a receive buffer holds: those of the whole rows of its capacity (`side_cap` units).
    fn scale_capacity(&self, side_cap: u64) -> usize {
        if !self.wire.codes() {
            return 0;
        }
        (side_cap as usize * self.row / self.scale_row) * self.scale_row.div_ceil(BLOCK)
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

    /// Every rank's send counts (units), `counts[r][q]`: from r to q. With a codec, counts in
    /// elements are whole rows (`scale_row` divides `cap`), but for one segment per rank of the
    /// `Over` pattern that is a row short of whole (not sent: its receiver reads INVALID).
    fn counts(&self, n: usize, seed: u64) -> Vec<Vec<u64>> {
        let raw = self.raw_counts(n, seed);
        let quantum = if self.wire == Wire::Plain { 1 } else { (self.scale_row / self.row) as u64 };
        if quantum == 1 {
            return raw;
        }
        (0..n)
            .map(|r| {
                (0..n)
                    .map(|q| {
                        let c = raw[r][q];
                        if c == RCCLX_COUNT_INVALID || c > self.cap {
                            return c;
                        }
                        let whole = c / quantum * quantum;
                        let ragged = self.pattern == Pattern::Over && (r + 2 * q) % 5 == 2 && whole > 0;
                        if ragged { whole - 1 } else { whole }
                    })
                    .collect()
            })
            .collect()
    }

    fn raw_counts(&self, n: usize, seed: u64) -> Vec<Vec<u64>> {
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
    /// The senders' side, from the counts, capacities and layout. With a codec, a segment that
    /// is not a whole number of rows (`row_bytes`) is not sent.
    pub fn new(counts: &[Vec<u64>], max_send: u64, send_packed: bool, unit: u64, row_bytes: Option<u64>) -> Model {
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
                let ragged = row_bytes.is_some_and(|b| !(c * unit).is_multiple_of(b));
                o.push(if over || ragged { None } else { Some(c * unit) });
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
/// guards between)][guard][scales (codes delivered: as the receive buffers)][guard][send
/// counts][receive counts][guard].
struct Arena {
    send: usize,
    /// Start of each send segment buffer (per peer) or of the packed buffer.
    send_bufs: Vec<usize>,
    recv: usize,
    recv_bufs: Vec<usize>,
    recv_end: usize,
    scales: usize,
    scale_bufs: Vec<usize>,
    scales_end: usize,
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
    let scales = (recv_end + GUARD).next_multiple_of(256);
    let (scale_bufs, scales_end) = if !case.wire.codes() {
        (Vec::new(), scales)
    } else if rp {
        (vec![scales], scales + 4 * case.scale_capacity(case.cap * n as u64))
    } else {
        let each = 4 * case.scale_capacity(case.cap) + GUARD;
        ((0..n).map(|p| scales + p * each).collect(), scales + n * each)
    };
    let send_counts = (scales_end + GUARD).next_multiple_of(256);
    let recv_counts = send_counts + 8 * n;
    Arena {
        send,
        send_bufs,
        recv,
        recv_bufs,
        recv_end,
        scales,
        scale_bufs,
        scales_end,
        send_counts,
        recv_counts,
        total: recv_counts + 8 * n + GUARD,
    }
}

/// The suite's cases for `n` ranks with staging halves of `half` bytes; FP8 in format `fmt`.
pub fn cases(n: usize, half: u64, quick: bool, fmt: Fp8Format) -> Vec<Case> {
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
            out.push(Case::plain(form, pattern, ty, row, 37));
        }
        // Segments longer than a window (several windows), not a whole number of 16-byte vectors.
        let ub = (ty.size() * row) as u64;
        let long = (w + w / 2).div_ceil(ub) | 1;
        out.push(Case::plain(form, Pattern::Skewed, ty, row, long));
        if !quick {
            out.push(Case::plain(form, Pattern::Random, ty, row, long));
        }
    }
    // Low precision: (form, type, wire, elements per row of blocks). Rows of 300 and 129 end
    // in a short block; the packed form counts in rows (the default row of blocks).
    let coded = [
        (Form::PerPeer, Ty::Bf16, Wire::Fp8(fmt), 300),
        (Form::Split, Ty::F16, Wire::Fp8(fmt), 129),
        (Form::Packed, Ty::F32, Wire::Fp8(fmt), 1024),
        (Form::PerPeer, Ty::Bf16, Wire::Int8, 512),
        (Form::Split, Ty::F32, Wire::Int8, 256),
        (Form::Packed, Ty::F16, Wire::Int8, 129),
        (Form::PerPeer, Ty::F32, Wire::Fp8Codes(fmt), 200),
        (Form::Split, Ty::Bf16, Wire::Fp8Codes(fmt), 512),
        (Form::Packed, Ty::Bf16, Wire::Fp8Codes(fmt), 300),
    ];
    // A window carries (W / 132) & !3 blocks per source: a long segment spans about 1.5.
    let window_rows = |scale_row: usize| ((w / 132) & !3) as usize / scale_row.div_ceil(BLOCK);
    for &(form, ty, wire, scale_row) in &coded {
        let row = if form == Form::Packed { scale_row } else { 1 };
        let units = |rows: usize| (rows * scale_row / row) as u64;
        let case = |pattern, cap| Case { form, pattern, ty, row, cap, wire, scale_row };
        for &pattern in patterns {
            out.push(case(pattern, units(5)));
        }
        let long = units(window_rows(scale_row) * 3 / 2 + 1);
        out.push(case(Pattern::Skewed, long));
        if !quick {
            out.push(case(Pattern::Random, long));
        }
    }
    out
}

/// The random send area of rank `r` (deterministic: every process can compute any rank's):
/// bytes, or with a codec values of the case's type: each run of 128 elements with its own
/// magnitude (2^-8 .. 2^8), some runs zero or below the codec's amax floor, and scattered NaN
/// and infinities.
fn send_data(case: &Case, a: &Arena, seed: u64, index: usize, r: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed ^ (index as u64) << 16 ^ r as u64);
    let len = a.recv - a.send;
    if case.wire == Wire::Plain {
        return (0..len).map(|_| rng.next_u64() as u8).collect();
    }
    let io = case.io();
    let mut out = Vec::with_capacity(len);
    let mut scale = 1.0f32;
    for i in 0..len / io.size() {
        if i % BLOCK == 0 {
            scale = match rng.below(16) {
                0 => 0.0,
                1 => 1e-35,
                k => 2f32.powi(rng.below(17) as i32 - 8) * (k as f32 / 15.0),
            };
        }
        let x = match rng.below(4096) {
            0 => f32::NAN,
            1 => f32::INFINITY,
            2 => f32::NEG_INFINITY,
            _ => ((rng.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * scale,
        };
        match io {
            Io::F32 => out.extend_from_slice(&x.to_le_bytes()),
            _ => out.extend_from_slice(&io.to_bits16(x).to_le_bytes()),
        }
    }
    out.resize(len, 0);
    out
}

/// Element `i` of `bytes` as `io` holds it, in f32.
fn value(io: Io, bytes: &[u8], i: usize) -> f32 {
    match io {
        Io::F32 => f32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap()),
        _ => io.from_bits16(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])),
    }
}

/// The poison of every byte the call must not write (and of the receive area before it runs).
pub const POISON: u8 = 0xC3;

/// One case laid out for one rank: the arena and the bytes to upload.
pub struct Prepared {
    a: Arena,
    counts: Vec<Vec<u64>>,
    seed: u64,
    index: usize,
    /// Every rank's send area, made once (the checks of n ranks read n of them each).
    sent: Vec<std::sync::OnceLock<Vec<u8>>>,
}

impl Prepared {
    pub fn new(case: &Case, n: usize, seed: u64, index: usize) -> Prepared {
        let sent = (0..n).map(|_| std::sync::OnceLock::new()).collect();
        Prepared { a: arena(case, n), counts: case.counts(n, seed ^ index as u64), seed, index, sent }
    }

    /// Rank r's send area.
    fn sent(&self, case: &Case, r: usize) -> &[u8] {
        self.sent[r].get_or_init(|| send_data(case, &self.a, self.seed, self.index, r))
    }

    /// Bytes of the arena.
    pub fn total(&self) -> usize {
        self.a.total
    }

    /// Rank r's image: guard, send data, poison, its send counts.
    pub fn image(&self, case: &Case, r: usize) -> Vec<u8> {
        let a = &self.a;
        let mut img = vec![POISON; a.total];
        img[..a.send].fill(0xFF);
        img[a.send..a.recv].copy_from_slice(self.sent(case, r));
        for (q, &c) in self.counts[r].iter().enumerate() {
            img[a.send_counts + 8 * q..a.send_counts + 8 * q + 8].copy_from_slice(&c.to_le_bytes());
        }
        img
    }

    /// What the call writes: the receive area, the scales and the received counts (byte ranges
    /// of the arena).
    pub fn written(&self) -> [std::ops::Range<usize>; 3] {
        let a = &self.a;
        [a.recv..a.recv_end, a.scales..a.scales_end, a.recv_counts..a.recv_counts + 8 * self.counts.len()]
    }

    /// Issues local rank k's call of `case` on the arena at `base`.
    pub fn issue(&self, dev: &Ranks, k: usize, case: &Case, base: DevicePtr) -> ncclResult_t {
        let (a, n) = (&self.a, self.counts.len());
        let (max_send, max_recv) = case.capacities(n);
        let p = |off: usize| base.offset(off).as_raw();
        let send_bufs: Vec<*const c_void> = a.send_bufs.iter().map(|&o| p(o) as *const c_void).collect();
        let recv_bufs: Vec<*mut c_void> = a.recv_bufs.iter().map(|&o| p(o)).collect();
        let scale_bufs: Vec<*mut f32> = a.scale_bufs.iter().map(|&o| p(o).cast::<f32>()).collect();
        let sc = p(a.send_counts) as *const usize;
        let rc = p(a.recv_counts) as *mut usize;
        let (comm, stream, dt) = (dev.world.comms[k], dev.stream(k).as_raw(), ncclDataType_t(case.ty.nccl()));
        let (ms, mr) = (max_send as usize, max_recv as usize);
        let options = rcclxAllToAllvOptions {
            wire: case.wire.c_wire(),
            // The packed form's rows of blocks are its count unit: the default, 0.
            rowElements: if case.scale_row == case.row { 0 } else { case.scale_row },
            recvScales: if scale_bufs.is_empty() { std::ptr::null() } else { scale_bufs.as_ptr().cast() },
        };
        let o: *const rcclxAllToAllvOptions = if case.wire == Wire::Plain { std::ptr::null() } else { &options };
        // SAFETY: the buffers lie in this rank's arena with the declared capacities (per-peer
        // buffers of `cap` units, packed ones of `n * cap`, scale buffers of the scales of
        // their whole rows), the counts are `n` device words, the host arrays hold `n` pointers
        // (one for the packed side), and the stream is this rank's.
        unsafe {
            match case.form {
                Form::PerPeer => {
                    rcclxAllToAllvDynamicEx(send_bufs.as_ptr(), sc, recv_bufs.as_ptr(), ms, mr, rc, dt, comm, stream, o)
                }
                Form::Split => {
                    rcclxAllToAllvDynamicSplitEx(send_bufs[0], sc, recv_bufs.as_ptr(), ms, mr, rc, dt, comm, stream, o)
                }
                Form::Packed => rcclxAllToAllvDynamicPackedEx(
                    send_bufs[0],
                    sc,
                    recv_bufs[0],
                    ms,
                    mr,
                    rc,
                    case.row,
                    dt,
                    comm,
                    stream,
                    o,
                ),
            }
        }
    }

    /// Checks rank p's downloaded arena against the model: (problems, bytes received, counts).
    pub fn check(&self, case: &Case, p: usize, got: &[u8]) -> (Vec<String>, u64, Vec<u64>) {
        let (a, n) = (&self.a, self.counts.len());
        let ub = case.unit_bytes() as u64;
        let (sp, rp) = case.packed();
        let (max_send, max_recv) = case.capacities(n);
        let model = Model::new(&self.counts, max_send, sp, ub, case.row_bytes());
        // The whole receive area and scales as they must be: poison (the gaps between per-peer
        // buffers too) except where segments land.
        let mut want = vec![POISON; a.recv_end - a.recv];
        let mut want_scales = vec![POISON; a.scales_end - a.scales];
        // Elements (offset in the receive area, size) where any NaN is right.
        let mut any_nan = Vec::new();
        let lands = model.receive(p, max_recv, rp, ub);
        let mut want_counts = Vec::new();
        for (s, l) in lands.iter().enumerate() {
            let Some((off, len)) = *l else {
                want_counts.push(RCCLX_COUNT_INVALID);
                continue;
            };
            let src = self.sent(case, s);
            let start = ((a.send_bufs[if sp { 0 } else { p }] - a.send) as u64 + model.soff[s][p]) as usize;
            let dst = (a.recv_bufs[if rp { 0 } else { s }] - a.recv) as u64;
            let seg = &src[start..start + len as usize];
            match case.wire.codec() {
                // Bytes as they are; a decoded rank's own segment too (it never crosses a link).
                None => want[(dst + off) as usize..(dst + off + len) as usize].copy_from_slice(seg),
                Some(_) if s == p && !case.wire.codes() => {
                    want[(dst + off) as usize..(dst + off + len) as usize].copy_from_slice(seg)
                }
                Some(codec) => {
                    let io = case.io();
                    let (h, esz) = (case.scale_row, io.size());
                    let bpr = h.div_ceil(BLOCK);
                    let rows = len as usize / (h * esz);
                    let first_row = off as usize / (h * esz); // packed: rows before this segment
                    for r in 0..rows {
                        let xs: Vec<f32> = (0..h).map(|i| value(io, seg, r * h + i)).collect();
                        if let Codec::Fp8(fmt) = codec
                            && case.wire.codes()
                        {
                            let codes_at = (dst + off / esz as u64) as usize + r * h;
                            let scales_at = a.scale_bufs[if rp { 0 } else { s }] - a.scales;
                            for (b, x) in xs.chunks(BLOCK).enumerate() {
                                let c = &mut want[codes_at + b * BLOCK..codes_at + b * BLOCK + x.len()];
                                let scale = quantize_block(fmt, x, c);
                                let at = scales_at + 4 * ((first_row + r) * bpr + b);
                                want_scales[at..at + 4].copy_from_slice(&scale.to_le_bytes());
                            }
                        } else {
                            let ys = roundtrip(codec, io, &xs);
                            let at = (dst + off) as usize + r * h * esz;
                            for (i, y) in ys.iter().enumerate() {
                                let e = at + i * esz;
                                match io {
                                    Io::F32 => want[e..e + 4].copy_from_slice(&y.to_le_bytes()),
                                    _ => want[e..e + 2].copy_from_slice(&io.to_bits16(*y).to_le_bytes()),
                                }
                                if y.is_nan() {
                                    any_nan.push(e);
                                }
                            }
                        }
                    }
                }
            }
            want_counts.push(len / ub);
        }
        let got_counts: Vec<u64> = got[a.recv_counts..a.recv_counts + 8 * n]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let area = &got[a.recv..a.recv_end];
        // Any NaN stands for a NaN (the model's bits are not the kernels' canonical ones).
        if case.wire.codec().is_some() {
            let io = case.io();
            for &e in &any_nan {
                if value(io, &area[e..e + io.size()], 0).is_nan() {
                    want[e..e + io.size()].copy_from_slice(&area[e..e + io.size()]);
                }
            }
        }
        let mut problems = Vec::new();
        if got_counts != want_counts {
            problems.push(format!("received counts {got_counts:?}, want {want_counts:?}"));
        }
        for (what, got, want) in
            [("received bytes", area, &want), ("scale bytes", &got[a.scales..a.scales_end], &want_scales)]
        {
            if let Some(i) = got.iter().zip(want.iter()).position(|(x, y)| x != y) {
                let bad = got.iter().zip(want.iter()).filter(|(x, y)| x != y).count();
                problems.push(format!(
                    "{bad} {what} wrong, first at byte {i}: got {:02x?}, want {:02x?}",
                    &got[i..(i + 8).min(got.len())],
                    &want[i..(i + 8).min(want.len())]
                ));
            }
        }
        if got[..a.send].iter().any(|&b| b != 0xFF) || got[a.send..a.recv] != *self.sent(case, p) {
            problems.push("the send area or its guard changed".into());
        }
        let gaps = [a.recv_end..a.scales, a.scales_end..a.send_counts, a.recv_counts + 8 * n..a.total];
        if gaps.into_iter().any(|g| got[g].iter().any(|&b| b != POISON)) {
            problems.push("a write outside the receive area, scales and received counts".into());
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
        dev.upload(k, 0, &prep.image(case, dev.world.ranks[k]))?;
    }
    let rets: Vec<_> = bases.iter().enumerate().map(|(k, &base)| prep.issue(dev, k, case, base)).collect();
    dev.wait_all(&|_| format!("case {index} {name}, route {}", case.wire.route()))?;
    for k in 0..dev.local() {
        let p = dev.world.ranks[k];
        let got = dev.download(k, 0, prep.total())?;
        let (mut problems, moved, counts) = prep.check(case, p, &got);
        if rets[k] != ncclResult_t::Success {
            problems.push(format!("returned {}", rets[k].0));
        }
        let route = grown(&before[k], &route_calls(dev.world.comms[k]));
        let ok = problems.is_empty() && route == case.wire.route();
        let detail = if problems.is_empty() {
            format!("{moved} bytes received, counts {counts:?}")
        } else {
            problems.join("; ")
        };
        let written: Vec<u8> = prep.written()[..2].iter().flat_map(|w| got[w.clone()].iter().copied()).collect();
        report(index, p, ok, p, &device::hash(&written), &route, &detail);
    }
    Ok(())
}

pub fn run(dev: &mut Ranks, opts: &Opts) -> Result<(), Fail> {
    let half = dev.world.cliques[0].args().half_bytes;
    for (i, c) in cases(dev.nranks(), half, opts.quick, fp8_format(dev)).iter().enumerate() {
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
        let m = Model::new(&counts, 5, false, 2, None);
        assert_eq!(m.out[0], [Some(2), None, Some(10)]);
        assert_eq!(m.out[1], [Some(0), Some(0), Some(4)], "INVALID sends nothing");
        // Receiver 1 with a receive capacity of 4: rank 2's 5 units are dropped.
        assert_eq!(m.receive(1, 4, false, 2), [None, Some((0, 0)), None]);
        assert_eq!(m.receive(2, 5, false, 2), [Some((0, 10)), Some((0, 4)), Some((0, 10))]);
    }

    #[test]
    fn packed_sides_drop_a_segment_past_the_end_and_every_later_one() {
        // Sender packed, capacity 6: segments 4, 3 (ends at 7 > 6: dropped), 1 (dropped too).
        let m = Model::new(&[vec![4, 3, 1]], 6, true, 1, None);
        assert_eq!(m.out[0], [Some(4), None, None]);
        assert_eq!(m.soff[0], [0, 4, 4]);
        // Receiver packed, capacity 5: 2 + 2 fit, the third (2) ends at 6: dropped, as is the
        // zero-length one after it.
        let m = Model::new(&[vec![2], vec![2], vec![2], vec![0]], 10, false, 1, None);
        assert_eq!(m.receive(0, 5, true, 1), [Some((0, 2)), Some((2, 2)), None, None]);
    }

    #[test]
    fn coded_counts_are_whole_rows_but_one_ragged_segment_which_is_not_sent() {
        let c =
            Case { wire: Wire::Int8, scale_row: 256, ..Case::plain(Form::Split, Pattern::Over, Ty::F32, 1, 256 * 5) };
        let counts = c.counts(4, 1);
        let row_bytes = c.row_bytes().unwrap();
        let m = Model::new(&counts, c.capacities(4).0, true, 4, Some(row_bytes));
        let mut ragged = 0;
        for (r, row) in counts.iter().enumerate() {
            for (q, &x) in row.iter().enumerate() {
                if x == INV || x > c.cap {
                    continue;
                }
                if !x.is_multiple_of(256) {
                    ragged += 1;
                    assert_eq!(m.out[r][q], None, "a partial row is not sent");
                }
            }
        }
        assert!(ragged > 0, "{counts:?}");
    }

    #[test]
    fn the_check_sees_what_a_coded_call_did_not_write() {
        for wire in [Wire::Fp8(Fp8Format::E4m3fn), Wire::Fp8Codes(Fp8Format::E4m3fn), Wire::Int8] {
            let c = Case { wire, scale_row: 300, ..Case::plain(Form::Packed, Pattern::Exact, Ty::Bf16, 300, 3) };
            let prep = Prepared::new(&c, 2, 5, 0);
            // Nothing written: every landed byte and count is wrong.
            let (problems, moved, _) = prep.check(&c, 1, &prep.image(&c, 1));
            assert!(moved > 0 && problems.len() >= 2, "{wire:?}: {problems:?}");
            if wire.codes() {
                assert!(problems.iter().any(|p| p.contains("scale bytes")), "{problems:?}");
            }
        }
    }

    #[test]
    fn cases_cover_every_form_and_pattern_and_several_windows() {
        for n in 3..=8 {
            let half = 8 << 20;
            let cs = cases(n, half, false, Fp8Format::E4m3fn);
            let w = window_bytes(half, n as u64);
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
            for wire in ["fp8", "int8", "fp8-codes"] {
                for form in [Form::PerPeer, Form::Split, Form::Packed] {
                    // More blocks than a window carries.
                    let long = |c: &&Case| {
                        c.cap as usize * c.row / c.scale_row * c.scale_row.div_ceil(BLOCK) > ((w / 132) & !3) as usize
                    };
                    let cs: Vec<_> = cs.iter().filter(|c| c.wire.name() == wire && c.form == form).collect();
                    assert!(cs.iter().any(long), "{wire} {form:?}: one window only");
                }
            }
            let a = arena(&cs[0], n);
            assert!(
                a.send_counts.is_multiple_of(8) && a.recv_counts == a.send_counts + 8 * n && a.total > a.recv_counts
            );
        }
    }
}
