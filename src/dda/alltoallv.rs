//! GPU-resident AllToAllv (`hip_kernels/alltoallv.cuh`): the counts are in device memory, so
//! the host only checks what it can see (pointers, capacities) and plans one grid that does not
//! depend on the counts. The kernel agrees the number of windows and checks the counts.

use crate::clique::{A2AV_HEADER_BYTES, A2AV_RECV_PACKED, A2AV_SEND_PACKED, AllToAllvArgs, Clique, Launch, LaunchArgs};
use crate::clique::{MAX_RANKS, THREADS};
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
    fn packed(&self) -> bool {
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
}

fn invalid(what: String) -> Error {
    Error::new(ncclResult_t::InvalidArgument, what)
}

/// The kernel family (statistics route `alltoallv.dynamic`).
pub fn family() -> usize {
    crate::kernel_table::FAMILIES
        .iter()
        .position(|f| f.args == crate::kernel_table::ALLTOALLV_ARGS)
        .expect("the kernel table has the AllToAllv family")
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
    if window == 0 {
        return Err(Error::internal("staging buffer too small for AllToAllv"));
    }
    let family = family();
    let func = clique.kernel(family, -1, 0).ok_or_else(|| Error::internal("no AllToAllv kernel"))?.func;
    let mut base = clique.args();
    base.window_elems = window;
    let packed =
        if call.send.packed() { A2AV_SEND_PACKED } else { 0 } | if call.recv.packed() { A2AV_RECV_PACKED } else { 0 };
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
    };
    Ok(Launch { family, func, grid: (clique.max_blocks, THREADS), args: LaunchArgs::AllToAllv(args) })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn the_family_is_in_the_table_once() {
        let f = family();
        assert_eq!(crate::kernel_table::FAMILIES[f].coll, "alltoallv");
        assert_eq!(
            crate::kernel_table::FAMILIES.iter().filter(|x| x.args == crate::kernel_table::ALLTOALLV_ARGS).count(),
            1
        );
        assert!(crate::kernel_table::kernel_index(f, 7, 0).is_some(), "byte kernels serve any type");
    }
}
