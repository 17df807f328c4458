// Low-precision collectives: block-scaled FP8 E4M3 (default) or INT8 on the wire, FP32
// arithmetic. Shares the DDA machinery (common.cuh): the same staging buffers, flags, per-block
// window counters and barriers, so DDA and low-precision calls interleave on a communicator.
//
// Codecs: codec.cuh (RcclxFp8, RcclxInt8: blocks of 128 elements, one 32-bit scale word each,
// 1 + 1/32 bytes per element on the wire; the definition of the bytes is there).
//
// What never crosses a link is never quantized: a rank's own AllGather chunk and AllToAll
// chunk are exact copies, its own contribution to its ReduceScatter output is exact, and so is
// an AllReduce owner's own input when the sum is re-quantized (more than 2 ranks).
//
// Push, not pull: every byte crossing NVLink/xGMI is a store into a peer's staging (posted
// writes need no round trip, so a few in flight fill the link); every load is local.
//
// Lanes: 8 lanes handle one 128-element block, 16 elements each (the order: codec.cuh). Block
// k of a range belongs to one GPU block (rcclx_for_block_pairs), and every range of a call has
// fixed positions in every window, so a position is always handled by the same GPU block on
// every rank: all the per-block barriers need.
//
// Staging half layout (windows are multiples of 512 elements): slots of `wc` elements, codes
// (1 byte/element) of slot c at c*wc, then the scales (4 bytes per block) of slot c at
// slots*wc + c*(wc/128)*4.
//   AllReduce of more than 2 ranks (window W, chunk capacity Cw = W / nranks): region A = nranks slots of Cw, slot p
//     receives rank p's codes of this rank's chunk; region B (at W*33/32 rounded up to 256
//     bytes) = nranks slots of Cw, slot c receives owner c's reduced codes of chunk c.
//   ReduceScatter, AllGather, AllToAll, 2-rank AllReduce: nranks slots of W, slot p receives
//     rank p's codes.
// Accumulation: f32, ranks 0..n-1 in order. AllReduce outputs are bit-identical on every rank
// (see rcclx_allreduce_pair_coded, rcclx_allreduce_coded).
// Tails: the last block of a range is short; its missing elements count as 0 and are never
// stored. Graph capture: as common.cuh (no per-call kernel arguments beyond buffers and counts).
#ifndef RCCLX_LOWP_CUH
#define RCCLX_LOWP_CUH

#include "common.cuh"
#include "codec.cuh"

#define RCCLX_MIN(x, y) ((x) < (y) ? (x) : (y))

// Which threads handle which block. Block k of any range belongs to GPU block
// (k / 32) % gridDim (the same on every rank and in every window: all the per-block barriers
// need). Inside a GPU block, its blocks are handled by one or both halves of 256 threads (32
// lane groups each): a pipelined phase gives each half its own range, so one half encodes and
// pushes the next window while the other decodes the current one (link and local memory busy
// at once); any other phase splits its range's steps between the two halves.
#define RCCLX_QHALF 256
#define RCCLX_QGROUPS (RCCLX_QHALF / RCCLX_QLANES)
static_assert(RCCLX_THREADS == 2 * RCCLX_QHALF, "low-precision kernels run as two half-blocks");
// This thread's lane group within its half, and the first block of this block's first step.
RCCLX_DEV uint64_t rcclx_qgroup() { return (threadIdx.x % RCCLX_QHALF) / RCCLX_QLANES; }
RCCLX_DEV uint64_t rcclx_qstart(int half) {
  return (uint64_t)half * gridDim.x * RCCLX_QGROUPS + (uint64_t)blockIdx.x * RCCLX_QGROUPS;
}
// Calls body(k, active, k2, active2) for this half's blocks of [0, nqb): step j covers blocks
// (j * gridDim + blockIdx) * 32 + [0, 32); a call takes steps j and j + `halves` (two blocks
// per lane group, so that twice the loads are in flight). The trip count is uniform per warp
// (all lanes run the shuffles); `active` says whether this lane's block exists.
// `skip` steps are left out (done ahead by the caller: rcclx_allreduce_pair_coded).
template <typename F>
RCCLX_DEV void rcclx_for_block_pairs(uint64_t nqb, int half, int halves, F&& body, uint64_t skip = 0) {
  const uint64_t g = rcclx_qgroup();
  const uint64_t next = (uint64_t)halves * gridDim.x * RCCLX_QGROUPS;
  for (uint64_t j = rcclx_qstart(half) + skip * 2 * next; j < nqb; j += 2 * next)
    body(j + g, j + g < nqb, j + next + g, j + next + g < nqb);
}
// Element (relative to its block) of this lane's value c.
template <typename T>
RCCLX_DEV uint64_t rcclx_qpos(int c) {
  constexpr int N = RcclxVec<T>::N;
  return (uint64_t)(c / N) * 8 * N + rcclx_qlane() * N + c % N;
}

// Loads this lane's 16 values of the block at element `blk` of src (positions >= n read as 0).
template <typename T>
RCCLX_DEV void rcclx_load16(const T* src, uint64_t blk, uint64_t n, float v[16]) {
  typedef RcclxF32<T> E;
  constexpr int N = RcclxVec<T>::N;
  const T* p = src + blk;
  if (blk + RCCLX_QBLOCK <= n && rcclx_aligned16(p)) {
    typename RcclxVec<T>::U u[16 / N];
#pragma unroll
    for (int j = 0; j < 16 / N; ++j) u[j].v = rcclx_ld16((const rcclx_u32x4*)(p + j * 8 * N + rcclx_qlane() * N));
#pragma unroll
    for (int c = 0; c < 16; ++c) v[c] = (float)E::load(u[c / N].e[c % N]);
  } else {
#pragma unroll
    for (int c = 0; c < 16; ++c) {
      const uint64_t i = blk + rcclx_qpos<T>(c);
      v[c] = i < n ? (float)E::load(src[i]) : 0.f;
    }
  }
}

// Stores this lane's 16 values of the block at element `blk` of dst (positions >= n skipped).
template <typename T>
RCCLX_DEV void rcclx_store16(T* dst, uint64_t blk, uint64_t n, const float v[16]) {
  typedef RcclxF32<T> E;
  constexpr int N = RcclxVec<T>::N;
  T* p = dst + blk;
  if (blk + RCCLX_QBLOCK <= n && rcclx_aligned16(p)) {
    typename RcclxVec<T>::U u[16 / N];
    if constexpr (sizeof(T) == 2) {  // 16-bit types: converted in pairs
#pragma unroll
      for (int j = 0; j < 16 / N; ++j) {
        u[j].v.x = E::store2(v[j * N + 0], v[j * N + 1]);
        u[j].v.y = E::store2(v[j * N + 2], v[j * N + 3]);
        u[j].v.z = E::store2(v[j * N + 4], v[j * N + 5]);
        u[j].v.w = E::store2(v[j * N + 6], v[j * N + 7]);
      }
    } else {
#pragma unroll
      for (int c = 0; c < 16; ++c) u[c / N].e[c % N] = E::store(v[c]);
    }
#pragma unroll
    for (int j = 0; j < 16 / N; ++j) rcclx_st16((rcclx_u32x4*)(p + j * 8 * N + rcclx_qlane() * N), u[j].v);
  } else {
#pragma unroll
    for (int c = 0; c < 16; ++c) {
      const uint64_t i = blk + rcclx_qpos<T>(c);
      if (i < n) dst[i] = E::store(v[c]);
    }
  }
}

struct RcclxQSlot {
  uint8_t* codes;
  uint32_t* metas;
};
// Slot `c` of a region at `base` that holds `slots` slots of `wc` elements each.
RCCLX_DEV RcclxQSlot rcclx_qslot(char* base, uint64_t wc, int slots, int c) {
  RcclxQSlot s;
  s.codes = (uint8_t*)base + (uint64_t)c * wc;
  s.metas = (uint32_t*)((uint8_t*)base + (uint64_t)slots * wc) + (uint64_t)c * (wc / RCCLX_QBLOCK);
  return s;
}
// Writes this lane's share of block k of slot s. Warp-collective (all lanes call it, inactive
// ones too): the scale words of the 4 consecutive blocks of 32 lanes leave as one 16-byte
// store, because a 4-byte store to a peer costs nearly as much link time as a 128-byte one.
// The first of those blocks has k % 4 == 0 (rcclx_for_block_pairs) and scale arrays are 16-byte
// aligned (windows are multiples of 512 elements); words of blocks past the range are never read.
RCCLX_DEV void rcclx_put16(RcclxQSlot s, uint64_t k, const RcclxQ16& q, bool active) {
  if (active) rcclx_st16((rcclx_u32x4*)(s.codes + k * RCCLX_QBLOCK + rcclx_qlane() * 16), q.codes);
  rcclx_u32x4 four;
  four.x = q.meta;
  four.y = rcclx_shfl_xor_u32(q.meta, 8);
  four.z = rcclx_shfl_xor_u32(q.meta, 16);
  four.w = rcclx_shfl_xor_u32(q.meta, 24);
  if (active && (threadIdx.x & 31) == 0) rcclx_st16((rcclx_u32x4*)(s.metas + k), four);
}
RCCLX_DEV RcclxQ16 rcclx_get16(RcclxQSlot s, uint64_t k) {
  RcclxQ16 q;
  q.codes = rcclx_ld16((const rcclx_u32x4*)(s.codes + k * RCCLX_QBLOCK + rcclx_qlane() * 16));
  q.meta = s.metas[k];
  return q;
}

// Copies this lane's 16 elements of blocks k and k2 of src[0, n) to dst bit for bit (a rank's
// own share: never quantized, never converted, so NaN payloads survive too).
template <typename T>
RCCLX_DEV void rcclx_copy_block_pair(const T* src, uint64_t n, T* dst, uint64_t k, bool a, uint64_t k2, bool a2) {
  constexpr int N = RcclxVec<T>::N;
  const uint64_t blk[2] = {k * RCCLX_QBLOCK, k2 * RCCLX_QBLOCK};
  const bool act[2] = {a, a2};
  bool fast[2];
  rcclx_u32x4 u[2][16 / N] = {};  // set on every path (see rcclx_pull_range)
#pragma unroll
  for (int b = 0; b < 2; ++b) {  // loads of both blocks first
    fast[b] = act[b] && blk[b] + RCCLX_QBLOCK <= n && rcclx_aligned16(src + blk[b]) && rcclx_aligned16(dst + blk[b]);
#pragma unroll
    for (int j = 0; j < 16 / N; ++j)
      if (fast[b]) u[b][j] = rcclx_ld16((const rcclx_u32x4*)(src + blk[b] + j * 8 * N + rcclx_qlane() * N));
  }
#pragma unroll
  for (int b = 0; b < 2; ++b) {
    if (fast[b]) {
#pragma unroll
      for (int j = 0; j < 16 / N; ++j) rcclx_st16((rcclx_u32x4*)(dst + blk[b] + j * 8 * N + rcclx_qlane() * N), u[b][j]);
    } else if (act[b]) {
      for (int c = 0; c < 16; ++c) {
        const uint64_t i = blk[b] + rcclx_qpos<T>(c);
        if (i < n) dst[i] = src[i];
      }
    }
  }
}

// Loads this lane's 16 values of blocks k and k2 of src[0, n) (zeros where inactive), both
// loads in flight at once.
template <typename T>
RCCLX_DEV void rcclx_load_block_pair(const T* src, uint64_t n, uint64_t k, bool a, uint64_t k2, bool a2, float v[16], float u[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] = u[i] = 0.f;
  if (a) rcclx_load16<T>(src, k * RCCLX_QBLOCK, n, v);
  if (a2) rcclx_load16<T>(src, k2 * RCCLX_QBLOCK, n, u);
}

// Encodes blocks k and k2 of src[0, n) and writes them to slot dst(d) for d < ndst (peer
// staging: remote stores). If `own` is set, src's blocks are also copied to own[0, n) (a
// rank's own AllGather chunk: it never crosses a link, so it is never quantized).
template <typename T, typename C, typename D>
RCCLX_DEV void rcclx_push_block_pair(const T* src, uint64_t n, const D& dst, int ndst, T* own, uint64_t k, bool a,
                                      uint64_t k2, bool a2) {
  float v[16], u[16];
  rcclx_load_block_pair<T>(src, n, k, a, k2, a2, v, u);
  // Both loads are in flight first; then each block is encoded and stored before the next
  // is encoded: fewer live registers (the INT8 pair kernels spill 8-16 bytes per thread at 64
  // registers instead of 16-28). Measured on H200: AllReduce 0-11 % faster (design note 19).
  const RcclxQ16 q = C::quantize16(v);
  for (int d = 0; d < ndst; ++d) rcclx_put16(dst(d), k, q, a);
  const RcclxQ16 q2 = C::quantize16(u);
  for (int d = 0; d < ndst; ++d) rcclx_put16(dst(d), k2, q2, a2);
  if (own) rcclx_copy_block_pair<T>(src, n, own, k, a, k2, a2);  // reloads: from cache
}
template <typename T, typename C, typename D>
RCCLX_DEV void rcclx_push_range(const T* src, uint64_t n, const D& dst, int ndst, T* own, int half, int halves,
                                uint64_t skip = 0) {
  rcclx_for_block_pairs((n + RCCLX_QBLOCK - 1) / RCCLX_QBLOCK, half, halves, [&](uint64_t k, bool a, uint64_t k2, bool a2) {
    rcclx_push_block_pair<T, C>(src, n, dst, ndst, own, k, a, k2, a2);
  }, skip);
}
// The first step of this thread's rcclx_push_range(src, n, .., half 0, 1 half) encoded ahead of
// the barrier that must pass before it is stored: the loads and the arithmetic overlap the wait.
// The codes wait in shared memory, not registers: live across the barrier's spin loop they made
// AMD's compilers spill (768 bytes of scratch per lane on gfx942) and nvcc too.
struct RcclxQAhead {
  rcclx_u32x4 codes[2][RCCLX_QHALF];  // [block of the pair][thread of half 0]
  uint32_t metas[2][RCCLX_QHALF];
};
// This thread's step: its two blocks (each exists when it is below the range's block count).
RCCLX_DEV void rcclx_ahead_blocks(uint64_t* k, uint64_t* k2) {
  *k = rcclx_qstart(0) + rcclx_qgroup();
  *k2 = *k + (uint64_t)gridDim.x * RCCLX_QGROUPS;
}
template <typename T, typename C>
RCCLX_DEV void rcclx_encode_ahead(const T* src, uint64_t n, RcclxQAhead* s) {
  const uint64_t nqb = (n + RCCLX_QBLOCK - 1) / RCCLX_QBLOCK;
  uint64_t k, k2;
  rcclx_ahead_blocks(&k, &k2);
  float v[16], u[16];
  rcclx_load_block_pair<T>(src, n, k, k < nqb, k2, k2 < nqb, v, u);
  const RcclxQ16 q = C::quantize16(v);
  s->codes[0][threadIdx.x] = q.codes;
  s->metas[0][threadIdx.x] = q.meta;
  const RcclxQ16 q2 = C::quantize16(u);
  s->codes[1][threadIdx.x] = q2.codes;
  s->metas[1][threadIdx.x] = q2.meta;
}
// Stores what rcclx_encode_ahead(src, n, s) encoded, in rcclx_push_block_pair's order.
template <typename D>
RCCLX_DEV void rcclx_put_ahead(uint64_t n, const RcclxQAhead* s, const D& dst, int ndst) {
  const uint64_t nqb = (n + RCCLX_QBLOCK - 1) / RCCLX_QBLOCK;
  uint64_t k, k2;
  rcclx_ahead_blocks(&k, &k2);
  RcclxQ16 q;
  q.codes = s->codes[0][threadIdx.x];
  q.meta = s->metas[0][threadIdx.x];
  for (int d = 0; d < ndst; ++d) rcclx_put16(dst(d), k, q, k < nqb);
  q.codes = s->codes[1][threadIdx.x];
  q.meta = s->metas[1][threadIdx.x];
  for (int d = 0; d < ndst; ++d) rcclx_put16(dst(d), k2, q, k2 < nqb);
}

// Decodes elements [0, n) of (local) slot s into dst.
template <typename T, typename C>
RCCLX_DEV void rcclx_pull_range(RcclxQSlot s, uint64_t n, T* dst, int half, int halves) {
  rcclx_for_block_pairs((n + RCCLX_QBLOCK - 1) / RCCLX_QBLOCK, half, halves, [&](uint64_t k, bool a, uint64_t k2, bool a2) {
    float v[16];
    if (RCCLX_LOWP_DECODE_PAIRS) {
      // Both blocks' codes in flight at once. Set on every path: a register assigned on only
      // some paths stays live around the whole loop (ptxas spilled it every iteration).
      RcclxQ16 q = {}, q2 = {};
      if (a) q = rcclx_get16(s, k);
      if (a2) q2 = rcclx_get16(s, k2);
      if (a) { C::template decode16<false>(q, v); rcclx_store16<T>(dst, k * RCCLX_QBLOCK, n, v); }
      if (a2) { C::template decode16<false>(q2, v); rcclx_store16<T>(dst, k2 * RCCLX_QBLOCK, n, v); }
    } else {
      if (a) { C::template decode16<false>(rcclx_get16(s, k), v); rcclx_store16<T>(dst, k * RCCLX_QBLOCK, n, v); }
      if (a2) { C::template decode16<false>(rcclx_get16(s, k2), v); rcclx_store16<T>(dst, k2 * RCCLX_QBLOCK, n, v); }
    }
  });
}

// Copies elements [0, n) of src to dst bit for bit.
template <typename T>
RCCLX_DEV void rcclx_copy_range(const T* src, uint64_t n, T* dst, int half, int halves) {
  rcclx_for_block_pairs((n + RCCLX_QBLOCK - 1) / RCCLX_QBLOCK, half, halves,
                        [&](uint64_t k, bool a, uint64_t k2, bool a2) { rcclx_copy_block_pair<T>(src, n, dst, k, a, k2, a2); });
}

// Block k of a reduction: the f32 sum over ranks in order 0..n-1 of rank p's decoded codes
// from slot p of the local region `in` (slots of wc elements) and this rank's own values from
// src, exact (they never crossed a link). Inactive lanes get zeros.
template <typename T, typename C>
RCCLX_DEV void rcclx_reduce16(const RcclxArgs& a, const T* src, uint64_t k, uint64_t n, bool active,
                              char* in, uint64_t wc, float v[16]) {
  if (!active) {
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = 0.f;
    return;
  }
  // Ranks in groups of G, each group's loads first: a group's codes take
  // 5 registers a rank, and eight ranks' at once spilled (sm_90 at 64 and 128 registers).
  constexpr int G = sizeof(T) == 4 ? 1 : 2;
#pragma unroll
  for (int p0 = 0; p0 < RCCLX_MAX_RANKS; p0 += G) {
    if (p0 >= a.nranks) break;
    RcclxQ16 q[G];
#pragma unroll
    for (int j = 0; j < G; ++j)  // loads first
      if (p0 + j < a.nranks && p0 + j != a.rank) q[j] = rcclx_get16(rcclx_qslot(in, wc, a.nranks, p0 + j), k);
#pragma unroll
    for (int j = 0; j < G; ++j) {
      const int p = p0 + j;
      if (p >= a.nranks) break;
      if (p == a.rank) {
        // Loaded here, not up front: 16 more live registers would spill.
        float x[16];
        rcclx_load16<T>(src, k * RCCLX_QBLOCK, n, x);
#pragma unroll
        for (int i = 0; i < 16; ++i) v[i] = p == 0 ? x[i] : v[i] + x[i];
      } else if (p == 0) {
        C::template decode16<false>(q[j], v);
      } else {
        C::template decode16<true>(q[j], v);
      }
    }
  }
}

// Offset of AllReduce's region B in a staging half: after region A (W codes and W/128
// scales), rounded up to 256 bytes so that its 16-byte accesses stay aligned.
RCCLX_DEV uint64_t rcclx_lowp_region_b(uint64_t W) { return (W / RCCLX_QBLOCK * (RCCLX_QBLOCK + 4) + 255) & ~(uint64_t)255; }

// What every low-precision kernel starts with: the session (seq, s_fail, deadline: common.cuh)
// and its windows.
#define RCCLX_LOWP_PROLOGUE                                                   \
  RCCLX_SESSION                                                               \
  const int nr = a.nranks;                                                    \
  const T* send = (const T*)a.send;                                           \
  T* recv = (T*)a.recv;                                                       \
  const uint64_t W = a.window_elems;                                          \
  const uint64_t nwin = (a.count + W - 1) / W;                                \
  /* window s: elements [s*W, s*W + len(s)), staging half (seq + s) & 1 */    \
  auto len = [&](uint64_t s) { return RCCLX_MIN(a.count - s * W, W); };       \
  auto half_of = [&](uint64_t s) { return (uint64_t)((seq + s) & 1) * a.half_bytes; };
// Pipeline of AllGather, AllToAll and ReduceScatter: push window 0; then for each window s:
// barrier, then half 0 pushes window s + 1 while half 1 finishes window s (decode or reduce),
// or the whole block finishes the last window. Reuse: push(s+1) overwrites what peers
// finished before the barrier of window s; what this rank reads in finish(s) is rewritten by
// peers only after the barrier of window s + 1.
template <typename P, typename F>
RCCLX_DEV void rcclx_lowp_pipeline(const RcclxArgs& a, uint32_t seq, uint64_t nwin, uint64_t deadline,
                                   int* s_fail, P&& push, F&& finish) {
  const int my_half = threadIdx.x / RCCLX_QHALF;
  if (nwin) push(0, my_half, 2);
  for (uint64_t s = 0; s < nwin; ++s) {
    if (!rcclx_barrier(a, (uint32_t)(seq + s) * 4 + 1, deadline, s_fail)) break;
    if (s + 1 == nwin) finish(s, my_half, 2);
    else if (my_half == 0) push(s + 1, 0, 1);
    else finish(s, 0, 1);
  }
  rcclx_seq_store(a, seq + (uint32_t)nwin);
}

// Decodes, for every peer p, slot p of this rank's staging half at `half_off` (n elements of a
// window of W) into out + p * count (AllGather's and AllToAll's receive side).
template <typename T, typename C>
RCCLX_DEV void rcclx_pull_peer_slots(const RcclxArgs& a, uint64_t half_off, uint64_t W, uint64_t n, T* out, int h, int hs) {
  for (int i = 1; i < a.nranks; ++i) {
    const int p = (a.rank + i) % a.nranks;
    rcclx_pull_range<T, C>(rcclx_qslot(a.staging[a.rank] + half_off, W, a.nranks, p), n, out + p * a.count, h, hs);
  }
}

// Encodes window s of every input chunk c other than this rank's (chunk c at c * count: its
// elements [s*W, s*W + len(s))) into slot [rank] (slots of W elements, nr of them) of rank c's
// staging half half_of(s): AllToAll's and ReduceScatter's send side. W, nr, len and half_of are
// RCCLX_LOWP_PROLOGUE's.
template <typename T, typename C, typename L, typename H>
RCCLX_DEV void rcclx_push_to_owners(const RcclxArgs& a, const T* send, uint64_t W, int nr, const L& len, const H& half_of,
                                    uint64_t s, int h, int hs) {
  for (int i = 1; i < nr; ++i) {
    const int c = (a.rank + i) % nr;
    rcclx_push_range<T, C>(send + c * a.count + s * W, len(s),
                           [&](int) { return rcclx_qslot(a.staging[c] + half_of(s), W, nr, a.rank); }, 1, (T*)nullptr, h, hs);
  }
}

// AllGather: count = elements per rank; output chunk c at c*count. Window s: push -> barrier
// -> decode (rcclx_lowp_pipeline). A rank's own chunk is its exact input (peers hold its decode).
template <typename T, typename C>
RCCLX_DEV void rcclx_allgather_coded(const RcclxArgs& a) {
  RCCLX_LOWP_PROLOGUE
  auto push = [&](uint64_t s, int h, int hs) {
    T* own = recv + a.rank * a.count + s * W;
    rcclx_push_range<T, C>(send + s * W, len(s),
                           [&](int d) { return rcclx_qslot(a.staging[(a.rank + 1 + d) % nr] + half_of(s), W, nr, a.rank); },
                           nr - 1, own == send + s * W ? (T*)nullptr : own, h, hs);  // in place: already there
  };
  auto pull = [&](uint64_t s, int h, int hs) { rcclx_pull_peer_slots<T, C>(a, half_of(s), W, len(s), recv + s * W, h, hs); };
  rcclx_lowp_pipeline(a, seq, nwin, deadline, &s_fail, push, pull);
}

// AllToAll: count = elements per peer; input chunk p goes to rank p, output chunk p comes
// from rank p. The chunk a rank keeps is copied exactly (rcclx_lowp_pipeline).
template <typename T, typename C>
RCCLX_DEV void rcclx_alltoall_coded(const RcclxArgs& a) {
  RCCLX_LOWP_PROLOGUE
  auto push = [&](uint64_t s, int h, int hs) { rcclx_push_to_owners<T, C>(a, send, W, nr, len, half_of, s, h, hs); };
  // In place, output chunk p of window s is input chunk p of window s, read by the push of
  // window s before the barrier.
  auto pull = [&](uint64_t s, int h, int hs) {
    rcclx_pull_peer_slots<T, C>(a, half_of(s), W, len(s), recv + s * W, h, hs);
    const uint64_t own = a.rank * a.count + s * W;
    if (send != recv) rcclx_copy_range<T>(send + own, len(s), recv + own, h, hs);
  };
  rcclx_lowp_pipeline(a, seq, nwin, deadline, &s_fail, push, pull);
}

// ReduceScatter: count = elements per rank output; input chunk c at c*count. Window s: push
// each chunk to its owner -> barrier -> reduce, the owner's own chunk exact
// (rcclx_lowp_pipeline).
template <typename T, typename C>
RCCLX_DEV void rcclx_reducescatter_coded(const RcclxArgs& a) {
  RCCLX_LOWP_PROLOGUE
  auto push = [&](uint64_t s, int h, int hs) { rcclx_push_to_owners<T, C>(a, send, W, nr, len, half_of, s, h, hs); };
  auto reduce = [&](uint64_t s, int h, int hs) {
    const uint64_t n = len(s);
    const T* mine = send + a.rank * a.count + s * W;
    char* in = a.staging[a.rank] + half_of(s);
    rcclx_for_block_pairs((n + RCCLX_QBLOCK - 1) / RCCLX_QBLOCK, h, hs, [&](uint64_t k, bool act, uint64_t k2, bool act2) {
      float v[16];
      rcclx_reduce16<T, C>(a, mine, k, n, act, in, W, v);
      if (act) rcclx_store16<T>(recv + s * W, k * RCCLX_QBLOCK, n, v);
      rcclx_reduce16<T, C>(a, mine, k2, n, act2, in, W, v);
      if (act2) rcclx_store16<T>(recv + s * W, k2 * RCCLX_QBLOCK, n, v);
    });
  };
  rcclx_lowp_pipeline(a, seq, nwin, deadline, &s_fail, push, reduce);
}

// AllReduce of 2 ranks ("pair"): an AllGather of the inputs' codes, then each rank decodes
// both ranks' codes and adds them in rank order. Each input is quantized once and nothing is
// re-quantized (the error of one quantization), both ranks compute the same bits, and the
// bytes are two-shot's (at 2 ranks one-shot moves the same). Each rank also keeps its own codes
// in its own slot (which no peer writes), so it decodes what its peer decodes without encoding
// twice. Window s: push -> barrier -> sum, pipelined as rcclx_lowp_pipeline; a window's two
// directions do not wait on each other. In place, sum(s) writes window s, which push(s) read
// before the barrier. Measured on H200 (design note 20): barriers stay (the link waits for
// them, but system-scope releases while stores stream cost more), so the wait is filled
// instead: the next window's first step is encoded before the barrier.
template <typename T, typename C>
RCCLX_DEV void rcclx_allreduce_pair_coded(const RcclxArgs& a) {
  RCCLX_LOWP_PROLOGUE
  const int peer = 1 - a.rank;
  // The peer's copy first: the link is the bottleneck.
  auto to = [&](uint64_t s, int d) { return rcclx_qslot(a.staging[d == 0 ? peer : a.rank] + half_of(s), W, nr, a.rank); };
  auto push = [&](uint64_t s, int h, int hs, uint64_t skip) {
    rcclx_push_range<T, C>(send + s * W, len(s), [&](int d) { return to(s, d); }, 2, (T*)nullptr, h, hs, skip);
  };
  auto sum = [&](uint64_t s, int h, int hs) {
    const uint64_t n = len(s);
    char* in = a.staging[a.rank] + half_of(s);
    const RcclxQSlot r0 = rcclx_qslot(in, W, nr, 0), r1 = rcclx_qslot(in, W, nr, 1);
    // One block at a time: issuing all four loads first measured no faster for FP8 and 1-2 %
    // slower for INT8 (more spills; design note 20).
    auto one = [&](uint64_t k, bool act) {
      if (!act) return;
      const RcclxQ16 q0 = rcclx_get16(r0, k), q1 = rcclx_get16(r1, k);
      float v[16];
      C::template decode16<false>(q0, v);
      C::template decode16<true>(q1, v);
      rcclx_store16<T>(recv + s * W, k * RCCLX_QBLOCK, n, v);
    };
    rcclx_for_block_pairs((n + RCCLX_QBLOCK - 1) / RCCLX_QBLOCK, h, hs, [&](uint64_t k, bool act, uint64_t k2, bool act2) {
      one(k, act);
      one(k2, act2);
    });
  };
  // rcclx_lowp_pipeline, but half 0 encodes the first step of window s + 1 before the barrier of
  // window s (it reads only the input): the barrier's wait hides those loads and arithmetic
  // (measured faster on H200: design note 20; NVIDIA only, RCCLX_LOWP_ENCODE_AHEAD).
  __shared__ RcclxQAhead s_ahead;
  const int my_half = threadIdx.x / RCCLX_QHALF;
  if (nwin) push(0, my_half, 2, 0);
  for (uint64_t s = 0; s < nwin; ++s) {
    const bool ahead = RCCLX_LOWP_ENCODE_AHEAD && my_half == 0 && s + 1 < nwin;
    if (ahead) rcclx_encode_ahead<T, C>(send + (s + 1) * W, len(s + 1), &s_ahead);
    if (!rcclx_barrier(a, (uint32_t)(seq + s) * 4 + 1, deadline, &s_fail)) break;
    if (s + 1 == nwin) {
      sum(s, my_half, 2);
    } else if (my_half == 0) {
      if (ahead) rcclx_put_ahead(len(s + 1), &s_ahead, [&](int d) { return to(s + 1, d); }, 2);
      push(s + 1, 0, 1, ahead ? 1 : 0);
    } else {
      sum(s, 0, 1);
    }
  }
  rcclx_seq_store(a, seq + (uint32_t)nwin);
}

// AllReduce of any rank count: window s = push each chunk's codes to its owner (region A) ->
// the owner reduces its chunk in f32, its own input exact, and re-quantizes the sum once ->
// the sum's codes travel to every peer (region B) -> everyone, the owner included, decodes
// them, so every rank's output has the same bits.
// Pipelined with one barrier X(s) per window: before X(s) half 0 reduces window s while half
// 1 pushes window s + 1 and finishes window s - 1.
//   Reuse: push(s+1) overwrites region A of window s-1, which peers reduced before X(s-1);
//   reduce(s) overwrites region B of window s-2, which peers finished before X(s-1); what this
//   rank reads before X(s) is rewritten by peers only after X(s). In place, reduce(s) reads
//   each input element of its chunk before it writes that output element, in the same lane.
// count = elements per rank.
template <typename T, typename C>
RCCLX_DEV void rcclx_allreduce_coded(const RcclxArgs& a) {
  RCCLX_LOWP_PROLOGUE
  const uint64_t Cw = W / nr;  // slot capacity (elements)
  const uint64_t region_b = rcclx_lowp_region_b(W);
  // Chunk length in blocks, the same in every window of the call (positions stay fixed).
  const uint64_t Cb = ((RCCLX_MIN(a.count, W) + RCCLX_QBLOCK - 1) / RCCLX_QBLOCK + nr - 1) / nr;
  auto chunk_len = [&](uint64_t s, int c) -> uint64_t {
    const uint64_t first = (uint64_t)c * Cb * RCCLX_QBLOCK, n = len(s);
    return first < n ? RCCLX_MIN(n - first, Cb * RCCLX_QBLOCK) : 0;
  };
  auto push = [&](uint64_t s, int h, int hs) {
    for (int i = 1; i < nr; ++i) {
      const int c = (a.rank + i) % nr;
      auto to = [&](int) { return rcclx_qslot(a.staging[c] + half_of(s), Cw, nr, a.rank); };
      rcclx_push_range<T, C>(send + s * W + c * Cb * RCCLX_QBLOCK, chunk_len(s, c), to, 1, (T*)nullptr, h, hs);
    }
  };
  auto reduce = [&](uint64_t s, int h, int hs) {
    const uint64_t first = s * W + (uint64_t)a.rank * Cb * RCCLX_QBLOCK, n = chunk_len(s, a.rank);
    char* in = a.staging[a.rank] + half_of(s);
    auto one = [&](uint64_t k, bool act) {
      float v[16];
      rcclx_reduce16<T, C>(a, send + first, k, n, act, in, Cw, v);
      // Positions past n are zero in every input, so their sum is 0: harmless in amax.
      const RcclxQ16 q = C::quantize16(v);
      for (int i = 1; i < nr; ++i)
        rcclx_put16(rcclx_qslot(a.staging[(a.rank + i) % nr] + half_of(s) + region_b, Cw, nr, a.rank), k, q, act);
      if (!act) return;
      C::template decode16<false>(q, v);  // what the peers decode
      rcclx_store16<T>(recv + first, k * RCCLX_QBLOCK, n, v);
    };
    rcclx_for_block_pairs((n + RCCLX_QBLOCK - 1) / RCCLX_QBLOCK, h, hs, [&](uint64_t k, bool act, uint64_t k2, bool act2) {
      one(k, act);
      one(k2, act2);
    });
  };
  auto finish = [&](uint64_t s, int h, int hs) {
    for (int i = 1; i < nr; ++i) {
      const int c = (a.rank + i) % nr;
      const uint64_t n = chunk_len(s, c), first = s * W + c * Cb * RCCLX_QBLOCK;
      if (n) rcclx_pull_range<T, C>(rcclx_qslot(a.staging[a.rank] + half_of(s) + region_b, Cw, nr, c), n, recv + first, h, hs);
    }
  };
  // Barrier values: seq*4+1 after the first push, then (seq+s)*4+2 for X(s): monotonic, and
  // below the next call's first value.
  const int my_half = threadIdx.x / RCCLX_QHALF;
  // Steps t = 0 .. nwin + 1: push(0) by the whole block; then reduce(s) by half 0 while half 1
  // finishes s - 1 and pushes s + 1; then finish(nwin - 1) by the whole block. One call site
  // per phase: inlined copies of each kept their values live together (gfx950's clang spilled).
  bool ok = true;
  for (uint64_t t = 0; ok && nwin && t <= nwin + 1; ++t) {
    const bool whole = t == 0 || t == nwin + 1;
    const int h = whole ? my_half : 0, hs = whole ? 2 : 1;
    const uint64_t s = t - 1;  // the window reduced at step t (1 .. nwin)
    if (t > 0 && t <= nwin && my_half == 0) reduce(s, h, hs);
    if ((t > 1 && my_half == 1) || t == nwin + 1) finish(t - 2, h, hs);
    if ((t == 0 || (my_half == 1 && t < nwin))) push(t, h, hs);
    if (t <= nwin) ok = rcclx_barrier(a, t == 0 ? seq * 4 + 1 : (uint32_t)(seq + s) * 4 + 2, deadline, &s_fail);
  }
  rcclx_seq_store(a, seq + (uint32_t)nwin);
}
// The kernel table's device functions: the four collectives with each codec.
template <typename T> RCCLX_DEV void rcclx_allreduce_lowp(const RcclxArgs& a) { rcclx_allreduce_coded<T, RcclxFp8>(a); }
template <typename T> RCCLX_DEV void rcclx_allreduce_lowp_pair(const RcclxArgs& a) { rcclx_allreduce_pair_coded<T, RcclxFp8>(a); }
template <typename T> RCCLX_DEV void rcclx_allgather_lowp(const RcclxArgs& a) { rcclx_allgather_coded<T, RcclxFp8>(a); }
template <typename T> RCCLX_DEV void rcclx_reducescatter_lowp(const RcclxArgs& a) { rcclx_reducescatter_coded<T, RcclxFp8>(a); }
template <typename T> RCCLX_DEV void rcclx_alltoall_lowp(const RcclxArgs& a) { rcclx_alltoall_coded<T, RcclxFp8>(a); }
template <typename T> RCCLX_DEV void rcclx_allreduce_int8(const RcclxArgs& a) { rcclx_allreduce_coded<T, RcclxInt8>(a); }
template <typename T> RCCLX_DEV void rcclx_allreduce_int8_pair(const RcclxArgs& a) { rcclx_allreduce_pair_coded<T, RcclxInt8>(a); }
template <typename T> RCCLX_DEV void rcclx_allgather_int8(const RcclxArgs& a) { rcclx_allgather_coded<T, RcclxInt8>(a); }
template <typename T> RCCLX_DEV void rcclx_reducescatter_int8(const RcclxArgs& a) { rcclx_reducescatter_coded<T, RcclxInt8>(a); }
template <typename T> RCCLX_DEV void rcclx_alltoall_int8(const RcclxArgs& a) { rcclx_alltoall_coded<T, RcclxInt8>(a); }

#endif  // RCCLX_LOWP_CUH
