// GPU-resident AllToAllv (rcclxAllToAllvDynamic and its Split / Packed forms; host side:
// src/dda/alltoallv.rs). The counts live in device memory, written by the kernel that routed
// the data: no rank knows on the host what it sends or receives, so the counts travel with the
// data and the number of windows is agreed on the device.
//
// Per call, one grid of the clique's `max_blocks` blocks on every rank (it cannot depend on the
// counts, and per-block barriers need the same grid everywhere). Window w of the call:
//   push:    the bytes [w*W, (w+1)*W) of every outgoing segment into the destination's staging
//            half, in the region of this rank (rcclx_a2av_region); remote stores: every byte
//            crosses the link as a store, as in the FP8 kernels;
//            in window 0 also the header, in the own staging: the bytes for each destination
//            (or RCCLX_A2AV_INVALID);
//   barrier;
//   window 0 only: every rank reads every rank's header, so all agree on the number of windows
//            (the largest segment of any pair) and each knows what it receives and where;
//   copy-out: window w of the segment from each peer p, from the own staging (local), and in
//            window 0 the whole segment a rank keeps (local copy).
// Pipelined as the FP8 kernels: after the barrier of window w, one half of each block pushes
// window w + 1 while the other copies window w out, so the link and local memory work at once.
// Every block writes the same header (identical stores: a block's barrier publishes only its own
// writes, and each block reads the header after its own barrier). Reuse of the halves and the
// window counters: as common.cuh; the header is only written in window 0.
//
// Layout of the segments (`packed` bits): per-peer mode, segment q starts at send[q] / recv[q];
// packed mode, at send[0] / recv[0] plus the sum of the previous segments' lengths. Counts are
// in units of `unit_bytes` (an element, or a row of elements). Validation, so that a count never
// moves a byte outside the declared buffers: a sender's segment longer than max_send (per-peer)
// or ending past max_send (packed) is not sent, nor (packed) any after it; a receiver drops a
// segment longer than max_recv (per-peer) or ending past max_recv (packed), or whose length is
// not a whole number of its units. Dropped segments read back as RCCLX_A2AV_INVALID in
// recv_counts; the others move normally. A send count of RCCLX_A2AV_INVALID is taken as 0, so a
// received count can be passed back as it is (MoE combine after dispatch).
//
// Low precision (rcclx_alltoallv_coded, host side: dda::alltoallv::Coding): the same driver, the
// segments cut into rows of `row_elems` elements and each row into blocks of 128 elements
// (codec.cuh's codecs; the last block of a row is short). A window carries W/132 blocks (rounded
// down to a multiple of 4, for rcclx_put16's scale stores) per source: codes, then the scale
// words, in the source's region. Block k of a window belongs to GPU block (k / 32) % gridDim on
// both sides (rcclx_for_block_pairs), as the per-block barriers need. A segment that is not a
// whole number of rows is not sent. The receiver decodes into the input type, or (CODED bit,
// FP8) stores the codes in element order and the f32 scales row-major [rows][blocks per row].
// A rank's own segment never crosses a link: copied exactly when decoding, encoded locally when
// delivering codes.
#ifndef RCCLX_ALLTOALLV_CUH
#define RCCLX_ALLTOALLV_CUH

#include "common.cuh"
#include "codec.cuh"
#include "lowp.cuh"

#define RCCLX_A2AV_HDR 128  // bytes of the header at the start of each staging half
#define RCCLX_A2AV_INVALID UINT64_MAX

enum : uint32_t { RCCLX_A2AV_SEND_PACKED = 1, RCCLX_A2AV_RECV_PACKED = 2, RCCLX_A2AV_CODED = 4 };

// Mirror: AllToAllvArgs in src/clique/args.rs.
struct RcclxA2avArgs {
  RcclxArgs a;                         // send/recv/count unused; window_elems = W (bytes)
  uint64_t send[RCCLX_MAX_RANKS];      // segment starts (packed: send[0] only)
  uint64_t recv[RCCLX_MAX_RANKS];
  const uint64_t* send_counts;         // device, [nranks]
  uint64_t* recv_counts;               // device, [nranks], written
  uint64_t max_send;                   // in units
  uint64_t max_recv;
  uint64_t unit_bytes;
  uint32_t packed;                     // RCCLX_A2AV_* bits
  uint32_t pad_;
  uint64_t row_elems;                  // low precision: elements per row
  uint64_t scales[RCCLX_MAX_RANKS];    // CODED: f32 scale buffers (packed receive: [0] only)
};
RCCLX_ASSERT_SIZE(RcclxA2avArgs, 552);

// Bytes of window w of a segment of `len` bytes, each window W bytes.
RCCLX_DEV uint64_t rcclx_a2av_window(uint64_t len, uint64_t w, uint64_t W) {
  if (len == RCCLX_A2AV_INVALID || len <= w * W) return 0;
  return len - w * W < W ? len - w * W : W;
}

// Byte offset, in receiver `to`'s staging half, of the region that holds what `from` sends it:
// after the header, one region of W bytes per other rank (a rank sends itself nothing through
// staging, so n - 1 regions share the half: with 2 ranks one window is the whole half).
RCCLX_DEV uint64_t rcclx_a2av_region(int from, int to, uint64_t W) {
  return RCCLX_A2AV_HDR + (uint64_t)(from < to ? from : from - 1) * W;
}

#define RCCLX_A2AV_HALF (RCCLX_THREADS / 2)

// Copies n bytes. 16-byte vector j belongs to GPU block (j / HALF) % gridDim however many halves
// work on the range, so the block that pushes a position on one rank is the block that copies
// it out on the other (what the per-block barriers need). halves == 2: each half takes every
// other chunk of HALF vectors of its block; halves == 1: the calling half takes them all. The
// last n % 16 bytes: block 0 (half 0 when both work).
RCCLX_DEV void rcclx_a2av_copy(char* dst, const char* src, uint64_t n, int half, int halves) {
  constexpr int UNROLL = 4;
  const uint64_t nvec = n / 16, t = threadIdx.x % RCCLX_A2AV_HALF;
  const uint64_t nchunks = (nvec + RCCLX_A2AV_HALF - 1) / RCCLX_A2AV_HALF;
  const uint64_t step = (uint64_t)halves * gridDim.x;
  const bool aligned = rcclx_aligned16(src) && rcclx_aligned16(dst);
  for (uint64_t c0 = blockIdx.x + (uint64_t)(halves == 2 ? half : 0) * gridDim.x; c0 < nchunks; c0 += UNROLL * step) {
    if (aligned) {
      rcclx_u32x4 v[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const uint64_t j = (c0 + u * step) * RCCLX_A2AV_HALF + t;
        if (j < nvec) v[u] = rcclx_ld16((const rcclx_u32x4*)src + j);
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const uint64_t j = (c0 + u * step) * RCCLX_A2AV_HALF + t;
        if (j < nvec) rcclx_st16((rcclx_u32x4*)dst + j, v[u]);
      }
    } else {
      for (int u = 0; u < UNROLL; ++u) {
        const uint64_t j = (c0 + u * step) * RCCLX_A2AV_HALF + t;
        if (j < nvec)
          for (int e = 0; e < 16; ++e) dst[j * 16 + e] = src[j * 16 + e];
      }
    }
  }
  if (blockIdx.x == 0 && (halves == 1 || half == 0) && t < n % 16) dst[nvec * 16 + t] = src[nvec * 16 + t];
}

// The bytes as they are (the plain forms): the Codec argument of the driver below.
struct RcclxA2avBytes {};
template <typename C> struct RcclxIsBytes { static constexpr bool value = false; };
template <> struct RcclxIsBytes<RcclxA2avBytes> { static constexpr bool value = true; };

// Low precision: the rows of a segment of `len` bytes (type T, rows of H elements, B blocks
// each) and their blocks. Block g of a segment is block g % B of row g / B.
template <typename T>
struct RcclxA2avRows {
  uint64_t H, B, row_bytes, Wb;  // Wb: blocks per region per window
  RCCLX_DEV explicit RcclxA2avRows(const RcclxA2avArgs& v)
      : H(v.row_elems), B((v.row_elems + RCCLX_QBLOCK - 1) / RCCLX_QBLOCK), row_bytes(v.row_elems * sizeof(T)),
        Wb((v.a.window_elems / (RCCLX_QBLOCK + 4)) & ~(uint64_t)3) {}
  RCCLX_DEV uint64_t blocks(uint64_t len) const { return len == RCCLX_A2AV_INVALID ? 0 : len / row_bytes * B; }
  // Blocks of window w of a segment of `len` bytes.
  RCCLX_DEV uint64_t window(uint64_t len, uint64_t w) const {
    const uint64_t nb = blocks(len);
    return nb > w * Wb ? RCCLX_MIN(nb - w * Wb, Wb) : 0;
  }
  RCCLX_DEV RcclxQSlot region(char* base) const { return rcclx_qslot(base, Wb * RCCLX_QBLOCK, 1, 0); }
};

// Stores this lane's 16 codes of the block at element `blk` of a row of n one-byte codes, in
// element order (positions >= n skipped): what FP8 GEMMs read.
template <typename T>
RCCLX_DEV void rcclx_store_codes16(uint8_t* dst, uint64_t blk, uint64_t n, const RcclxQ16& q) {
  constexpr int N = RcclxVec<T>::N;  // consecutive elements of a lane's value run
  const uint32_t w[4] = {q.codes.x, q.codes.y, q.codes.z, q.codes.w};
  uint8_t* p = dst + blk;
  if (blk + RCCLX_QBLOCK <= n && (uintptr_t)p % N == 0) {
#pragma unroll
    for (int j = 0; j < 16 / N; ++j) {
      uint8_t* at = p + j * 8 * N + rcclx_qlane() * N;
      if constexpr (N == 8) *(uint64_t*)at = (uint64_t)w[2 * j + 1] << 32 | w[2 * j];
      else *(uint32_t*)at = w[j];
    }
  } else {
#pragma unroll
    for (int c = 0; c < 16; ++c) {
      const uint64_t i = blk + rcclx_qpos<T>(c);
      if (i < n) dst[i] = (uint8_t)(w[c / 4] >> (8 * (c % 4)));
    }
  }
}

// The driver of every AllToAllv kernel: Codec = RcclxA2avBytes (T = uint8_t: bytes), RcclxFp8
// or RcclxInt8 (T = the element type).
template <typename T, typename Codec>
RCCLX_DEV void rcclx_alltoallv_run(const RcclxA2avArgs& v) {
  constexpr bool LOWP = !RcclxIsBytes<Codec>::value;
  const RcclxArgs& a = v.a;
  RCCLX_SESSION
  __shared__ uint64_t s_out[RCCLX_MAX_RANKS];   // bytes to each destination (or INVALID)
  __shared__ uint64_t s_soff[RCCLX_MAX_RANKS];  // byte offset of each outgoing segment
  __shared__ uint64_t s_in[RCCLX_MAX_RANKS];    // bytes from each source (or INVALID)
  __shared__ uint64_t s_roff[RCCLX_MAX_RANKS];  // byte offset of each incoming segment
  __shared__ uint64_t s_longest[RCCLX_MAX_RANKS];
  __shared__ uint64_t s_nwin;
  const uint64_t W = a.window_elems;
  const int n = a.nranks;
  const bool send_packed = v.packed & RCCLX_A2AV_SEND_PACKED;
  const bool recv_packed = v.packed & RCCLX_A2AV_RECV_PACKED;
  const bool coded = LOWP && (v.packed & RCCLX_A2AV_CODED);
  const int my_half = threadIdx.x / RCCLX_A2AV_HALF;
  const RcclxA2avRows<T> rows(v);  // unused by the byte kernels

  if (threadIdx.x == 0) {
    uint64_t end = 0;  // packed: units before segment q (<= max_send)
    bool over = false;
    for (int q = 0; q < n; ++q) {
      // RCCLX_A2AV_INVALID (a count that came back dropped, passed on) sends nothing.
      const uint64_t c = v.send_counts[q] == RCCLX_A2AV_INVALID ? 0 : v.send_counts[q];
      // max_send * unit_bytes fits in 64 bits (checked by the host), so c * unit_bytes does.
      if (send_packed) {
        over = over || c > v.max_send - end;
        s_soff[q] = end * v.unit_bytes;
        if (!over) end += c;
      } else {
        over = c > v.max_send;
        s_soff[q] = 0;
      }
      // Low precision: only whole rows (a partial row would read past the segment).
      const bool ragged = LOWP && !over && c * v.unit_bytes % rows.row_bytes != 0;
      s_out[q] = over || ragged ? RCCLX_A2AV_INVALID : c * v.unit_bytes;
    }
  }
  __syncthreads();

  auto half_of = [&](uint64_t w) { return (uint64_t)((seq + w) & 1) * a.half_bytes; };
  auto src_of = [&](int q) { return (const char*)(send_packed ? v.send[0] : v.send[q]) + s_soff[q]; };
  auto dst_of = [&](int p) {  // coded: one byte per element
    return (char*)(recv_packed ? v.recv[0] : v.recv[p]) + (coded ? s_roff[p] / sizeof(T) : s_roff[p]);
  };
  auto scales_of = [&](int p) {
    return (float*)(recv_packed ? v.scales[0] : v.scales[p]) + (recv_packed ? s_roff[p] / rows.row_bytes * rows.B : 0);
  };
  // Block g of a segment at src: load (zeros where inactive), encode (every lane: warp-collective).
  auto encode = [&](const char* src, uint64_t g, bool act) -> RcclxQ16 {
    RcclxQ16 c = {};
    if constexpr (LOWP) {
      float x[16] = {};
      if (act) rcclx_load16<T>((const T*)src + g / rows.B * rows.H, g % rows.B * RCCLX_QBLOCK, rows.H, x);
      c = Codec::quantize16(x);
    }
    return c;
  };
  // Block g of the segment from p, received as q.
  auto deliver = [&](int p, uint64_t g, const RcclxQ16& q) {
    if constexpr (LOWP) {
      const uint64_t r = g / rows.B, blk = g % rows.B * RCCLX_QBLOCK;
      if (coded) {
        rcclx_store_codes16<T>((uint8_t*)dst_of(p) + r * rows.H, blk, rows.H, q);
        if (rcclx_qlane() == 0) scales_of(p)[g] = rcclx_u32_as_f32(q.meta);
      } else {
        float x[16];
        Codec::template decode16<false>(q, x);
        rcclx_store16<T>((T*)dst_of(p) + r * rows.H, blk, rows.H, x);
      }
    }
  };

  // Window w of every outgoing segment into the destination's region of this rank.
  auto push = [&](uint64_t w, int h, int hs) {
    for (int i = 1; i < n; ++i) {
      const int q = (a.rank + i) % n;
      // Computed in each branch: shared, the byte kernel took 8 more registers (84 -> 92).
      if constexpr (LOWP) {
        const RcclxQSlot to = rows.region(a.staging[q] + half_of(w) + rcclx_a2av_region(a.rank, q, W));
        rcclx_for_block_pairs(rows.window(s_out[q], w), h, hs, [&](uint64_t k, bool act, uint64_t k2, bool act2) {
          const RcclxQ16 c = encode(src_of(q), w * rows.Wb + k, act);
          rcclx_put16(to, k, c, act);
          const RcclxQ16 c2 = encode(src_of(q), w * rows.Wb + k2, act2);
          rcclx_put16(to, k2, c2, act2);
        });
      } else {
        const uint64_t len = rcclx_a2av_window(s_out[q], w, W);
        const char* src = (const char*)(send_packed ? v.send[0] : v.send[q]) + s_soff[q] + w * W;
        if (len) rcclx_a2av_copy(a.staging[q] + half_of(w) + rcclx_a2av_region(a.rank, q, W), src, len, h, hs);
      }
    }
  };
  // Window w of every incoming segment out of the own staging; in window 0 also the segment
  // this rank keeps (local, whole: both checks passed in s_in).
  auto finish = [&](uint64_t w, int h, int hs) {
    const char* mine = a.staging[a.rank] + half_of(w);
    for (int i = 1; i < n; ++i) {
      const int p = (a.rank + i) % n;
      if constexpr (LOWP) {
        const RcclxQSlot from = rows.region((char*)mine + rcclx_a2av_region(p, a.rank, W));
        rcclx_for_block_pairs(rows.window(s_in[p], w), h, hs, [&](uint64_t k, bool act, uint64_t k2, bool act2) {
          RcclxQ16 q = {}, q2 = {};  // both loads in flight first
          if (act) q = rcclx_get16(from, k);
          if (act2) q2 = rcclx_get16(from, k2);
          if (act) deliver(p, w * rows.Wb + k, q);
          if (act2) deliver(p, w * rows.Wb + k2, q2);
        });
      } else {
        const uint64_t len = rcclx_a2av_window(s_in[p], w, W);
        char* dst = (char*)(recv_packed ? v.recv[0] : v.recv[p]) + s_roff[p] + w * W;
        if (len) rcclx_a2av_copy(dst, mine + rcclx_a2av_region(p, a.rank, W), len, h, hs);
      }
    }
    const uint64_t own = s_in[a.rank];
    if (w == 0 && own != RCCLX_A2AV_INVALID && own != 0) {
      if (coded) {  // the codes a peer would get
        rcclx_for_block_pairs(rows.blocks(own), h, hs, [&](uint64_t k, bool act, uint64_t k2, bool act2) {
          const RcclxQ16 c = encode(src_of(a.rank), k, act), c2 = encode(src_of(a.rank), k2, act2);
          if (act) deliver(a.rank, k, c);
          if (act2) deliver(a.rank, k2, c2);
        });
      } else {
        rcclx_a2av_copy(dst_of(a.rank), src_of(a.rank), own, h, hs);
      }
    }
  };

  // Window 0: header and push, barrier, then every rank's header.
  if (threadIdx.x < n) ((uint64_t*)(a.staging[a.rank] + half_of(0)))[threadIdx.x] = s_out[threadIdx.x];
  push(0, my_half, 2);
  uint64_t nwin = 1;
  if (rcclx_barrier(a, seq * 4 + 1, deadline, &s_fail)) {
    // Thread p: what p sends to me, and p's longest segment (for the number of windows).
    if (threadIdx.x < n) {
      const int p = threadIdx.x;
      const uint64_t* hdr = (const uint64_t*)(a.staging[p] + half_of(0));
      uint64_t longest = 0;
      for (int q = 0; q < n; ++q) {
        const uint64_t len = rcclx_ld_relaxed_sys_u64(hdr + q);
        if (len != RCCLX_A2AV_INVALID && len > longest) longest = len;
        if (q == a.rank) s_in[p] = len;
      }
      s_longest[p] = longest;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      uint64_t longest = 0, end = 0;  // packed: units before segment p (<= max_recv)
      bool over = false;
      for (int p = 0; p < n; ++p) {
        longest = s_longest[p] > longest ? s_longest[p] : longest;
        const uint64_t len = s_in[p];
        bool drop = len == RCCLX_A2AV_INVALID;
        if (!drop) {
          const uint64_t units = len / v.unit_bytes;
          const bool ragged = len % v.unit_bytes != 0 || (LOWP && len % rows.row_bytes != 0);
          if (recv_packed) {
            over = over || ragged || units > v.max_recv - end;
            s_roff[p] = end * v.unit_bytes;
            if (!over) end += units;
            drop = over;
          } else {
            s_roff[p] = 0;
            drop = ragged || units > v.max_recv;
          }
        }
        if (drop) s_in[p] = RCCLX_A2AV_INVALID;
      }
      // Windows of the longest segment: its blocks per Wb (low precision) or bytes per W.
      const uint64_t size = LOWP ? rows.blocks(longest) : longest, per = LOWP ? rows.Wb : W;
      s_nwin = size > per ? (size + per - 1) / per : 1;
    }
    __syncthreads();
    nwin = s_nwin;
    if (blockIdx.x == 0 && threadIdx.x < n) {
      const uint64_t len = s_in[threadIdx.x];
      v.recv_counts[threadIdx.x] = len == RCCLX_A2AV_INVALID ? RCCLX_A2AV_INVALID : len / v.unit_bytes;
    }
    // Pipeline (as the FP8 kernels): after the barrier of window w, half 0 pushes window w + 1
    // while half 1 copies window w out; the last window both halves copy out. Reuse: push(w+1)
    // overwrites what the peers copied out before the barrier of window w; what finish(w) reads
    // is rewritten only after the barrier of window w + 1.
    for (uint64_t w = 0; w < nwin; ++w) {
      if (w > 0 && !rcclx_barrier(a, (uint32_t)(seq + w) * 4 + 1, deadline, &s_fail)) break;
      if (w + 1 == nwin) finish(w, my_half, 2);
      else if (my_half == 0) push(w + 1, 0, 1);
      else finish(w, 0, 1);
    }
  }
  rcclx_seq_store(a, seq + (uint32_t)nwin);
}

// The kernel table's device functions: bytes; FP8 and INT8 on the wire.
template <typename T> RCCLX_DEV void rcclx_alltoallv_dynamic(const RcclxA2avArgs& v) { rcclx_alltoallv_run<T, RcclxA2avBytes>(v); }
template <typename T> RCCLX_DEV void rcclx_alltoallv_lowp(const RcclxA2avArgs& v) { rcclx_alltoallv_run<T, RcclxFp8>(v); }
template <typename T> RCCLX_DEV void rcclx_alltoallv_int8(const RcclxA2avArgs& v) { rcclx_alltoallv_run<T, RcclxInt8>(v); }

#endif  // RCCLX_ALLTOALLV_CUH
