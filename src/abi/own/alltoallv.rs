//! The GPU-resident AllToAllv forms (per-peer buffers, one split send buffer, two packed
//! buffers), each a plain export and an `...Ex` twin with options, generated from one list: the
//! plain form is its `Ex` twin with NULL options.

use std::ffi::{c_int, c_void};

use crate::abi::boundary;
use crate::config::LowpCodec;
use crate::dda::alltoallv::{AllToAllvCall, Coding, Segments};
use crate::types::{Stream, ncclComm_t, ncclDataType_t, ncclResult_t};

/// Value of a count in `actualRecvcounts` whose segment was dropped because it did not fit the
/// declared capacities (see `rcclxAllToAllvDynamic`).
pub const RCCLX_COUNT_INVALID: u64 = u64::MAX;

/// The host array of `nranks` pointers at `p` (NULL: `ncclInvalidArgument`).
///
/// # Safety
/// `p` is NULL or points to `nranks` readable pointers.
unsafe fn pointer_array<T>(p: *const *const T, nranks: usize, what: &str) -> Result<Vec<u64>, crate::error::Error> {
    if p.is_null() {
        return Err(crate::error::Error::new(ncclResult_t::InvalidArgument, format!("{what} is NULL")));
    }
    // SAFETY: non-null; the caller guarantees `nranks` readable entries.
    Ok(unsafe { std::slice::from_raw_parts(p, nranks) }.iter().map(|&x| x as u64).collect())
}

/// `rcclxAllToAllvOptions::wire`: the bytes as they are (the forms without options).
pub const RCCLX_WIRE_PLAIN: c_int = 0;
/// Block-scaled FP8 E4M3 on the wire (the low-precision collectives' codec).
pub const RCCLX_WIRE_FP8: c_int = 1;
/// Block-scaled INT8 on the wire.
pub const RCCLX_WIRE_INT8: c_int = 2;

/// Options of the `...Ex` AllToAllv forms. Zeroed (or a NULL pointer): the plain call.
///
/// With `wire` = `RCCLX_WIRE_FP8` or `RCCLX_WIRE_INT8` (datatype ncclFloat32, ncclFloat16 or
/// ncclBfloat16), a segment between two ranks travels quantized: each row of `rowElements`
/// elements (0: one count unit) is cut into blocks of 128 elements from its start (the last one
/// short), each with one scale word, as the low-precision collectives do. A segment that is not a
/// whole number of rows is not sent and its receiver reads `RCCLX_COUNT_INVALID`.
///
/// `recvScales` NULL: the receiver decodes into `datatype` (a rank's own segment is copied
/// exactly: it never crosses a link). Non-NULL (FP8 only): the receive buffers get the E4M3 codes,
/// one byte per element in element order (a segment at element offset E of a packed buffer starts
/// at byte E), and the scales go to f32 arrays `[rows][ceil(rowElements / 128)]`, a value being
/// `code * scale` (DeepEP's layout for FP8 GEMMs); the own segment is encoded too. `recvScales`
/// holds one pointer per source for the per-peer receive forms, one (a segment's scales after the
/// previous segments' rows) for the packed form; each holds the scales of the whole rows of
/// `maxRecvcount` units. E4M3 is OCP (e4m3fn) on NVIDIA and gfx950, FNUZ on gfx942.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rcclxAllToAllvOptions {
    /// `RCCLX_WIRE_PLAIN`, `RCCLX_WIRE_FP8` or `RCCLX_WIRE_INT8`.
    pub wire: c_int,
    /// Elements per row for the block scales; 0: one count unit.
    pub rowElements: usize,
    /// NULL: decode; else where the FP8 scales go (see above).
    pub recvScales: *const *mut f32,
}

/// What the three AllToAllv forms share: the count unit (`count_unit` elements of `datatype`),
/// the options, the communicator check, then `comm::alltoallv_dynamic` with the segments
/// `segments(nranks)` describes. `counts` = (sent, received), `max` = (send, receive)
/// capacities, in count units.
///
/// # Safety
/// `stream` is the caller's stream (NCCL's contract); `segments` reads only what the caller
/// guarantees for a communicator of that many ranks; `options` is NULL or points to a readable
/// `rcclxAllToAllvOptions` whose `recvScales` is NULL or holds as many pointers as the receive
/// buffers.
#[allow(clippy::too_many_arguments)]
unsafe fn alltoallv_dynamic(
    datatype: ncclDataType_t,
    count_unit: usize,
    comm: ncclComm_t,
    stream: Stream,
    counts: (*const usize, *mut usize),
    max: (usize, usize),
    options: *const rcclxAllToAllvOptions,
    segments: impl FnOnce(usize) -> Result<(Segments, Segments), crate::error::Error>,
) -> ncclResult_t {
    let unit = datatype.size().and_then(|s| (s as u64).checked_mul(count_unit as u64));
    let Some(unit_bytes) = unit else { return ncclResult_t::InvalidArgument };
    if comm.is_null() {
        return ncclResult_t::InvalidArgument;
    }
    // SAFETY: NULL or readable (the caller's contract).
    let options = unsafe { options.as_ref() }.copied();
    let codec = match options.map_or(RCCLX_WIRE_PLAIN, |o| o.wire) {
        RCCLX_WIRE_PLAIN => None,
        RCCLX_WIRE_FP8 => Some(LowpCodec::Fp8),
        RCCLX_WIRE_INT8 => Some(LowpCodec::Int8),
        wire => {
            crate::upstream::report_error(&format!(
                "rcclx: rcclxAllToAllvDynamic: rcclxAllToAllvOptions::wire {wire} is not RCCLX_WIRE_PLAIN, \
                 RCCLX_WIRE_FP8 or RCCLX_WIRE_INT8: ncclInvalidArgument"
            ));
            return ncclResult_t::InvalidArgument;
        }
    };
    // SAFETY: the caller's stream (NCCL's contract), forwarded by our caller.
    let stream = unsafe { crate::gpu::Stream::from_raw(stream) };
    crate::comm::alltoallv_dynamic(comm, stream, |n| {
        let (send, recv) = segments(n)?;
        let coding = match (codec, options) {
            (Some(codec), Some(o)) => {
                let scales = if o.recvScales.is_null() {
                    None
                } else {
                    let count = if recv.packed() { 1 } else { n };
                    // SAFETY: non-null; as many pointers as receive buffers (the caller's contract).
                    let p = unsafe { pointer_array(o.recvScales.cast::<*const f32>(), count, "recvScales") }?;
                    Some(if recv.packed() { Segments::Packed(p[0]) } else { Segments::PerPeer(p) })
                };
                Some(Coding { codec, row_elems: o.rowElements as u64, scales })
            }
            _ => None,
        };
        Ok(AllToAllvCall {
            send,
            recv,
            send_counts: counts.0 as u64,
            recv_counts: counts.1 as u64,
            max_send: max.0 as u64,
            max_recv: max.1 as u64,
            unit_bytes,
            datatype: datatype.0,
            coding,
        })
    })
}

/// One AllToAllv form of [`ALLTOALLV_EXPORTS`], as `tests/header.rs` declares it in
/// `include/rcclx.h` (cbindgen does not see into the macro that generates the exports).
#[derive(Debug, Clone, Copy)]
pub struct AllToAllvExport {
    /// The plain form, and its doc comment.
    pub name: &'static str,
    pub doc: &'static str,
    /// The `Ex` twin (the plain form's parameters, then `options`), and its doc comment.
    pub ex: &'static str,
    pub ex_doc: &'static str,
    /// `(name, Rust type)` of each parameter of the plain form.
    pub params: &'static [(&'static str, &'static str)],
}

/// Generates, per form: the `Ex` export (the panic boundary, then its call of
/// [`alltoallv_dynamic`]), the plain export (the `Ex` one with NULL options) and its
/// [`AllToAllvExport`] row.
macro_rules! alltoallv_exports {
    ( $(
        $(#[doc = $doc:literal])*
        fn $name:ident ( $( $arg:ident : $ty:ty ),* $(,)? );
        $(#[doc = $ex_doc:literal])*
        fn $ex:ident ( .., $options:ident ) => $call:expr;
    )* ) => {
        /// The AllToAllv exports, in the order of the header.
        pub const ALLTOALLV_EXPORTS: &[AllToAllvExport] = &[ $( AllToAllvExport {
            name: stringify!($name),
            doc: concat!($( $doc, "\n" ),*),
            ex: stringify!($ex),
            ex_doc: concat!($( $ex_doc, "\n" ),*),
            params: &[ $( (stringify!($arg), stringify!($ty)) ),* ],
        }, )* ];

        $(
            $(#[doc = $doc])*
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name( $( $arg : $ty ),* ) -> ncclResult_t {
                // SAFETY: forwarded from the caller; no options.
                unsafe { $ex( $( $arg, )* std::ptr::null() ) }
            }

            $(#[doc = $ex_doc])*
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $ex( $( $arg : $ty, )* $options: *const rcclxAllToAllvOptions ) -> ncclResult_t {
                boundary(stringify!($name), || {
                    // SAFETY: forwarded from the caller, who guarantees `n` entries in each host
                    // array of pointers (its communicator's size) and the rest of the contract.
                    unsafe { $call }
                })
            }
        )*
    };
}

alltoallv_exports! {
    /// GPU-resident AllToAllv with one buffer per peer (NCCLX's `alltoallvDynamic`, without hints).
    ///
    /// Rank r sends `sendcounts[p]` elements from `sendbuffs[p]` to rank p, which receives them in
    /// `recvbuffs[r]`. `sendcounts` (`nranks` entries) is read and `actualRecvcounts` (`nranks`
    /// entries: what came from each rank) written on the device, in stream order, so the counts can
    /// come from the kernel that routed the data and the call can be captured in a CUDA/HIP graph.
    /// `sendbuffs` and `recvbuffs` are host arrays of `nranks` device pointers, read at the call.
    /// Each segment holds at most `maxSendcount` elements when sent and `maxRecvcount` when received;
    /// a segment over either is not moved and its receiver reads `RCCLX_COUNT_INVALID` (SIZE_MAX) in
    /// `actualRecvcounts` (the others move normally). A send count of `RCCLX_COUNT_INVALID` sends
    /// nothing, so received counts can be sent back as they are. Send and receive buffers must not
    /// overlap.
    ///
    /// Needs a communicator on which rcclx runs its own kernels (2-8 ranks on one host); on any
    /// other, `ncclInvalidUsage`. NULL arrays, NULL counts or a NULL buffer with a nonzero capacity:
    /// `ncclInvalidArgument`.
    ///
    /// # Safety
    /// `sendbuffs` and `recvbuffs` are NULL or hold `nranks` pointers; the device pointers are valid
    /// for the declared capacities on the stream's device; `stream` is a stream of that device.
    fn rcclxAllToAllvDynamic(sendbuffs: *const *const c_void, sendcounts: *const usize,
        recvbuffs: *const *mut c_void, maxSendcount: usize, maxRecvcount: usize,
        actualRecvcounts: *mut usize, datatype: ncclDataType_t, comm: ncclComm_t, stream: Stream);
    /// `rcclxAllToAllvDynamic` with options (`rcclxAllToAllvOptions`: FP8 or INT8 on the wire; NULL:
    /// as `rcclxAllToAllvDynamic`). Unknown `wire`, a datatype the codec does not take, codes for
    /// INT8, buffers not aligned to their elements (scales: to 4 bytes; codes need none):
    /// `ncclInvalidArgument`.
    ///
    /// # Safety
    /// As `rcclxAllToAllvDynamic`; `options` is NULL or points to an `rcclxAllToAllvOptions` whose
    /// `recvScales` is NULL or holds `nranks` pointers valid for the scale capacity.
    fn rcclxAllToAllvDynamicEx(.., options) => alltoallv_dynamic(
        datatype, 1, comm, stream, (sendcounts, actualRecvcounts), (maxSendcount, maxRecvcount), options, |n| {
            let send = Segments::PerPeer(pointer_array(sendbuffs, n, "sendbuffs")?);
            let recv = Segments::PerPeer(pointer_array(recvbuffs.cast::<*const c_void>(), n, "recvbuffs")?);
            Ok((send, recv))
        }
    );

    /// GPU-resident AllToAllv from one send buffer (NCCLX's `alltoallvDynamicSplit`, without hints):
    /// as `rcclxAllToAllvDynamic`, but the segments for ranks 0, 1, ... lie back to back in
    /// `sendbuff`, `sendSplitLengths[p]` elements each (device memory), and `maxSendcount` is the
    /// capacity of `sendbuff`: segments that end past it are not sent, nor any after them.
    ///
    /// # Safety
    /// As `rcclxAllToAllvDynamic`.
    fn rcclxAllToAllvDynamicSplit(sendbuff: *const c_void, sendSplitLengths: *const usize,
        recvbuffs: *const *mut c_void, maxSendcount: usize, maxRecvcount: usize,
        actualRecvcounts: *mut usize, datatype: ncclDataType_t, comm: ncclComm_t, stream: Stream);
    /// `rcclxAllToAllvDynamicSplit` with options (see `rcclxAllToAllvDynamicEx`).
    ///
    /// # Safety
    /// As `rcclxAllToAllvDynamicEx`.
    fn rcclxAllToAllvDynamicSplitEx(.., options) => alltoallv_dynamic(
        datatype, 1, comm, stream, (sendSplitLengths, actualRecvcounts), (maxSendcount, maxRecvcount), options, |n| {
            let recv = Segments::PerPeer(pointer_array(recvbuffs.cast::<*const c_void>(), n, "recvbuffs")?);
            Ok((Segments::Packed(sendbuff as u64), recv))
        }
    );

    /// GPU-resident AllToAllv between two packed buffers, the layout of PyTorch's
    /// `all_to_all_single`: segments for (from) ranks 0, 1, ... lie back to back in `sendbuff`
    /// (`recvbuff`). Counts and capacities are in units of `countUnit` elements (1: elements; the
    /// elements of one row: PyTorch's split sizes as they are). `maxSendcount` / `maxRecvcount` are
    /// the capacities of the two buffers; a segment that ends past either is dropped, as are those
    /// after it, and reads `RCCLX_COUNT_INVALID` in `actualRecvcounts`. Otherwise as
    /// `rcclxAllToAllvDynamic`.
    ///
    /// # Safety
    /// As `rcclxAllToAllvDynamic`.
    fn rcclxAllToAllvDynamicPacked(sendbuff: *const c_void, sendcounts: *const usize, recvbuff: *mut c_void,
        maxSendcount: usize, maxRecvcount: usize, actualRecvcounts: *mut usize, countUnit: usize,
        datatype: ncclDataType_t, comm: ncclComm_t, stream: Stream);
    /// `rcclxAllToAllvDynamicPacked` with options (see `rcclxAllToAllvDynamicEx`; `recvScales`
    /// holds one pointer).
    ///
    /// # Safety
    /// As `rcclxAllToAllvDynamicEx`, with one scale pointer.
    fn rcclxAllToAllvDynamicPackedEx(.., options) => alltoallv_dynamic(
        datatype, countUnit, comm, stream, (sendcounts, actualRecvcounts), (maxSendcount, maxRecvcount), options, |_| {
            Ok((Segments::Packed(sendbuff as u64), Segments::Packed(recvbuff as u64)))
        }
    );
}
