//! GPU-resident AllToAllv (`hip_kernels/alltoallv.cuh`): the counts are in device memory, so
//! the host only checks what it can see (pointers, capacities) and plans one grid that does not
//! depend on the counts. The kernel agrees the number of windows and checks the counts. With a
//! [`Coding`], FP8 or INT8 travels on the wire (the low-precision collectives' codecs).

use crate::clique::{
    A2AV_CODED, A2AV_HEADER_BYTES, A2AV_RECV_PACKED, A2AV_SEND_PACKED, AllToAllvArgs, Clique, Launch, LaunchArgs,
};
use crate::clique::{MAX_RANKS, THREADS};
use crate::config::LowpCodec;
use crate::error::Error;
use crate::types::ncclResult_t;

/// Where the segments of one side of the call lie.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segments {
    /// One buffer per peer (`nranks` device pointers), each of the side's capacity.
    PerPeer(Vec<u64>),
    /// One buffer: segment p follows segment p - 1; the capacity is the whole buffer's.
    Packed(u64),
}

impl Segments {
    pub fn packed(&self) -> bool {
        matches!(self, Segments::Packed(_))
    }

    /// The kernel's pointer array, after checking that every buffer that may be touched exists.
    fn pointers(&self, nranks: usize, capacity: u64, side: &str) -> Result<[u64; MAX_RANKS], Error> {
        let mut out = [0u64; MAX_RANKS];
        match self {
            Segments::Packed(p) => out[0] = *p,
            Segments::PerPeer(v) => {
                if v.len() != nranks {
                    return Err(invalid(format!("{side}: {} buffers for {nranks} ranks", v.len())));
                }
                out[..nranks].copy_from_slice(v);
            }
        }
        let used = if self.packed() { 1 } else { nranks };
        if capacity > 0 && out[..used].contains(&0) {
            return Err(invalid(format!("{side}: a NULL buffer with a capacity of {capacity}")));
        }
        Ok(out)
    }
}

/// Low precision on the wire (`rcclxAllToAllvOptions`): segments between two ranks travel as
/// blocks of 128 elements of each row, one 32-bit scale word per block.
#[derive(Clone, Debug)]
pub struct Coding {
    pub codec: LowpCodec,
    /// Elements per row (a row's blocks start at its first element; the last may be short).
    pub row_elems: u64,
    /// FP8 only: deliver the codes (one byte per element) and put the f32 scales here, laid out
    /// as the receive side (per source, or packed: a segment's scales after the previous
    /// segments' rows). None: the receiver decodes into the datatype.
    pub scales: Option<Segments>,
}

/// Bytes per block on the wire: 128 codes and a scale word.
const CODED_BLOCK_BYTES: u64 = 128 + 4;

/// One call, as the C functions describe it. Counts and capacities are in units of
/// `unit_bytes` (an element of the datatype, or a row of them).
#[derive(Clone, Debug)]
pub struct AllToAllvCall {
    pub send: Segments,
    pub recv: Segments,
    /// Device pointer to `nranks` counts this rank sends (read by the kernel).
    pub send_counts: u64,
    /// Device pointer to `nranks` counts this rank receives (written by the kernel; a dropped
    /// segment reads `u64::MAX`).
    pub recv_counts: u64,
    /// Per-peer: the largest segment; packed: the buffer.
    pub max_send: u64,
    pub max_recv: u64,
    pub unit_bytes: u64,
    /// The element type (`ncclDataType_t`): it matters only with a coding.
    pub datatype: i32,
    pub coding: Option<Coding>,
}

fn invalid(what: String) -> Error {
    Error::new(ncclResult_t::InvalidArgument, what)
}

/// The kernel family of a wire format (statistics routes `alltoallv.dynamic`, `alltoallv.lowp`
/// (FP8), `alltoallv.int8`).
pub fn family(codec: Option<LowpCodec>) -> usize {
    crate::intercept::family(crate::intercept::FamilyKey::AllToAllv(codec))
        .expect("the kernel table has the AllToAllv families")
}

/// Bytes per source per window (`window_elems` of the kernel): what a staging half holds after
/// the header, split evenly over the other ranks (`rcclx_a2av_region`), in whole 16-byte
/// vectors.
pub fn window_bytes(half_bytes: u64, nranks: u64) -> u64 {
    (half_bytes.saturating_sub(A2AV_HEADER_BYTES) / nranks.saturating_sub(1).max(1)) & !15
}

/// Checks `call` (`ncclInvalidArgument` for the caller's mistakes) and plans its launch: every
/// rank runs the same grid, the clique's largest.
pub fn plan(clique: &Clique, call: &AllToAllvCall) -> Result<Launch, Error> {
    let n = clique.nranks;
    if call.send_counts == 0 || call.recv_counts == 0 {
        return Err(invalid("NULL counts".into()));
    }
    if call.unit_bytes == 0 {
        return Err(invalid("a count unit of 0 bytes".into()));
    }
    for (side, max) in [("send", call.max_send), ("recv", call.max_recv)] {
        if max.checked_mul(call.unit_bytes).is_none() {
            return Err(invalid(format!("{side} capacity {max} x {} bytes overflows", call.unit_bytes)));
        }
    }
    let send = call.send.pointers(n, call.max_send, "send")?;
    let recv = call.recv.pointers(n, call.max_recv, "recv")?;
    let window = window_bytes(clique.args().half_bytes, n as u64);
    if window < 4 * CODED_BLOCK_BYTES {
        return Err(Error::internal("staging buffer too small for AllToAllv"));
    }
    let (row_elems, scales, coded) = match &call.coding {
        None => (0, [0; MAX_RANKS], false),
        Some(c) => coding_args(c, call, n, [&send, &recv])?,
    };
    let family = family(call.coding.as_ref().map(|c| c.codec));
    let dtype = if call.coding.is_some() { call.datatype } else { -1 };
    let func = clique.kernel(family, dtype, 0).ok_or_else(|| Error::internal("no AllToAllv kernel"))?.func;
    let mut base = clique.args();
    base.window_elems = window;
    let packed = if call.send.packed() { A2AV_SEND_PACKED } else { 0 }
        | if call.recv.packed() { A2AV_RECV_PACKED } else { 0 }
        | if coded { A2AV_CODED } else { 0 };
    let args = AllToAllvArgs {
        base,
        send,
        recv,
        send_counts: call.send_counts,
        recv_counts: call.recv_counts,
        max_send: call.max_send,
        max_recv: call.max_recv,
        unit_bytes: call.unit_bytes,
        packed,
        pad: 0,
        row_elems,
        scales,
    };
    Ok(Launch { family, func, grid: (clique.max_blocks, THREADS), args: LaunchArgs::AllToAllv(args) })
}

/// Checks the call's coding `c` against the call and its checked segment pointers
/// `[send, recv]`: (elements per row, scale pointers, codes delivered).
fn coding_args(
    c: &Coding,
    call: &AllToAllvCall,
    n: usize,
    [send, recv]: [&[u64; MAX_RANKS]; 2],
) -> Result<(u64, [u64; MAX_RANKS], bool), Error> {
    let Some(ty) = crate::kernel_table::LOWP_TYPES.iter().find(|t| t.nccl == call.datatype) else {
        return Err(invalid(format!(
            "{} on the wire needs float32, float16 or bfloat16 elements, not datatype {}",
            c.codec.name(),
            call.datatype
        )));
    };
    let elem = ty.bytes as u64;
    let unit_elems = call.unit_bytes / elem; // the unit is a whole number of elements
    let row_elems = if c.row_elems == 0 { unit_elems } else { c.row_elems };
    if row_elems.checked_mul(elem).is_none() {
        return Err(invalid(format!("rows of {row_elems} elements overflow")));
    }
    // The kernels load and store whole elements (and f32 scales): a misaligned buffer would
    // fault on the GPU.
    let aligned = |p: &[u64; MAX_RANKS], to: u64| p.iter().all(|x| x % to == 0);
    if !aligned(send, elem) || (c.scales.is_none() && !aligned(recv, elem)) {
        return Err(invalid(format!(
            "{} on the wire needs buffers aligned to their {elem}-byte elements",
            c.codec.name()
        )));
    }
    let Some(scales) = &c.scales else { return Ok((row_elems, [0; MAX_RANKS], false)) };
    if c.codec != LowpCodec::Fp8 {
        return Err(invalid(format!("codes and scales are delivered for fp8 only, not {}", c.codec.name())));
    }
    if scales.packed() != call.recv.packed() {
        return Err(invalid("the scales must be laid out as the receive buffers (one per source, or one)".into()));
    }
    // Whole rows of the receive capacity, each with its blocks' scales.
    let rows = (call.max_recv as u128 * unit_elems as u128 / row_elems as u128) as u64;
    let capacity = rows.saturating_mul(row_elems.div_ceil(128));
    let scales = scales.pointers(n, capacity, "recv scales")?;
    if !aligned(&scales, 4) {
        return Err(invalid("recv scales: a buffer not aligned to its 4-byte floats".into()));
    }
    Ok((row_elems, scales, true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel_table::ALLTOALLV_ARGS;

    #[test]
    fn window_leaves_the_header_and_is_whole_vectors() {
        for (half, n) in [(8u64 << 20, 2u64), (8 << 20, 3), (16 << 20, 8), (32 << 10, 7)] {
            let w = window_bytes(half, n);
            assert_eq!(w % 16, 0);
            // n - 1 regions (no rank sends itself anything through staging).
            assert!(A2AV_HEADER_BYTES + (n - 1) * w <= half, "{half} {n}");
            assert!(A2AV_HEADER_BYTES + (n - 1) * (w + 16) > half, "window could be larger: {half} {n}");
        }
        assert_eq!(window_bytes(8 << 20, 2), (8 << 20) - 128, "2 ranks: one region, the whole half");
        assert_eq!(window_bytes(64, 2), 0);
    }

    #[test]
    fn per_peer_buffers_must_match_the_ranks_and_exist() {
        let s = Segments::PerPeer(vec![0x1000, 0x2000]);
        assert_eq!(s.pointers(2, 10, "send").unwrap()[..2], [0x1000, 0x2000]);
        assert!(s.pointers(3, 10, "send").is_err());
        let holes = Segments::PerPeer(vec![0x1000, 0]);
        assert_eq!(holes.pointers(2, 10, "send").unwrap_err().code, ncclResult_t::InvalidArgument);
        // Capacity 0: nothing can be moved, so NULL buffers are fine (as NCCL's zero counts).
        assert!(holes.pointers(2, 0, "send").is_ok());
        assert!(Segments::Packed(0).pointers(2, 1, "recv").is_err());
        assert_eq!(Segments::Packed(0x40).pointers(4, 1, "recv").unwrap()[..2], [0x40, 0]);
    }

    #[test]
    fn each_wire_format_has_its_family() {
        use crate::kernel_table::{FAMILIES, kernel_index};
        let plain = family(None);
        assert_eq!((FAMILIES[plain].coll, FAMILIES[plain].algo), ("alltoallv", "dynamic"));
        assert!(kernel_index(plain, 7, 0).is_some(), "byte kernels serve any type");
        for (codec, algo) in [(LowpCodec::Fp8, "lowp"), (LowpCodec::Int8, "int8")] {
            let f = family(Some(codec));
            assert_eq!((FAMILIES[f].coll, FAMILIES[f].algo, FAMILIES[f].args), ("alltoallv", algo, ALLTOALLV_ARGS));
            for ty in [6, 7, 9] {
                assert!(kernel_index(f, ty, 0).is_some(), "{algo} {ty}");
            }
            assert!(kernel_index(f, 2, 0).is_none(), "no int32 kernel: the host refuses it first");
        }
    }

    /// `coding_args` with the call's own segment pointers, as `plan` passes them.
    fn coding_args(c: &Coding, call: &AllToAllvCall, n: usize) -> Result<(u64, [u64; MAX_RANKS], bool), Error> {
        let send = call.send.pointers(n, 0, "send")?;
        let recv = call.recv.pointers(n, 0, "recv")?;
        super::coding_args(c, call, n, [&send, &recv])
    }

    fn call(datatype: i32, unit_bytes: u64, max_recv: u64, recv: Segments, coding: Coding) -> AllToAllvCall {
        AllToAllvCall {
            send: Segments::Packed(0x1000),
            recv,
            send_counts: 0x2000,
            recv_counts: 0x3000,
            max_send: 64,
            max_recv,
            unit_bytes,
            datatype,
            coding: Some(coding),
        }
    }

    #[test]
    fn a_coding_checks_type_codec_and_scales() {
        let decode = |codec| Coding { codec, row_elems: 0, scales: None };
        let bf16_rows = |coding| call(9, 2 * 300, 10, Segments::Packed(0x4000), coding);
        // Rows default to the count unit: 300 bf16 elements.
        assert_eq!(coding_args(&decode(LowpCodec::Int8), &bf16_rows(decode(LowpCodec::Int8)), 2).unwrap().0, 300);
        let int32 = call(2, 4, 10, Segments::Packed(0x4000), decode(LowpCodec::Fp8));
        assert_eq!(coding_args(&decode(LowpCodec::Fp8), &int32, 2).unwrap_err().code, ncclResult_t::InvalidArgument);

        let codes = |codec, scales| Coding { codec, row_elems: 0, scales: Some(scales) };
        let c = codes(LowpCodec::Fp8, Segments::Packed(0x5000));
        let (row, scales, coded) = coding_args(&c, &bf16_rows(c.clone()), 2).unwrap();
        assert_eq!((row, scales[0], coded), (300, 0x5000, true));
        let int8 = codes(LowpCodec::Int8, Segments::Packed(0x5000));
        assert_eq!(coding_args(&int8, &bf16_rows(int8.clone()), 2).unwrap_err().code, ncclResult_t::InvalidArgument);
        // The scales are laid out as the receive side.
        let per_peer = codes(LowpCodec::Fp8, Segments::PerPeer(vec![0x5000, 0x6000]));
        assert!(coding_args(&per_peer, &bf16_rows(per_peer.clone()), 2).is_err());
        // A NULL scale buffer only where no whole row fits.
        let holes = codes(LowpCodec::Fp8, Segments::PerPeer(vec![0x5000, 0]));
        let rows_of = |max_recv, c: &Coding| {
            let c = Coding { row_elems: 256, ..c.clone() };
            coding_args(&c, &call(7, 4, max_recv, Segments::PerPeer(vec![0x1, 0x2]), c.clone()), 2)
        };
        assert!(rows_of(256, &holes).is_err(), "one row of 2 blocks fits");
        assert!(rows_of(255, &holes).is_ok(), "no whole row fits: nothing is written");
        // Misaligned buffers: refused, not a fault in the kernel.
        let odd_scales = codes(LowpCodec::Fp8, Segments::Packed(0x5002));
        assert!(coding_args(&odd_scales, &bf16_rows(odd_scales.clone()), 2).is_err());
        let mut odd_send = bf16_rows(decode(LowpCodec::Fp8));
        odd_send.send = Segments::Packed(0x1001);
        assert!(coding_args(&decode(LowpCodec::Fp8), &odd_send, 2).is_err());
        // Codes are bytes: the receive buffer needs no alignment then.
        let c = codes(LowpCodec::Fp8, Segments::Packed(0x5000));
        let mut odd_recv = bf16_rows(c.clone());
        odd_recv.recv = Segments::Packed(0x4001);
        assert!(coding_args(&c, &odd_recv, 2).is_ok());
    }
}
