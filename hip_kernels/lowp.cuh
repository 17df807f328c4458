// Low-precision (FP8) collectives: block-scaled E4M3 on the wire, FP32 arithmetic.
// Shares the DDA machinery (common.cuh): the same staging buffers, flags, per-block window
// counters and barriers, so DDA and FP8 calls interleave on a communicator freely.
//
// Codec (identical to the CPU reference, gpu-tests/src/codec.rs): blocks of 128 consecutive
// elements, one f32 scale each. amax = max |x| over the block's finite values; if
// amax < 1e-30 the block is all zero (scale 0); else scale = amax / FP8_MAX and
// inv = FP8_MAX / amax (IEEE divisions), code = e4m3_satfinite_rne(x * inv) and
// x' = decode(code) * scale. NaN/Inf inputs encode as NaN. E4M3 is OCP on NVIDIA and gfx950
// and FNUZ on gfx942 (the native conversion; every rank of a node has the same arch).
//
// Push, not pull: every byte crossing NVLink/xGMI is a store into a peer's staging (posted
// writes need no round trip, so a few in flight fill the link); every load is local.
//
// Lanes: 8 lanes handle one 128-element block, 16 elements each; the group's amax is reduced
// with xor shuffles. With N elements per 16-byte vector, lane i's vector j holds the block's
// elements j*8N + i*N + [0, N): each load/store instruction of a lane group covers 128
// consecutive bytes. Lane i's 16 codes are the 16 bytes at i*16 of the block's codes (code
// j*N + t is element j*8N + i*N + t), one 16-byte access. This order is internal to rcclx:
// writer and reader are both these kernels. Block k of a range belongs to one GPU block
// (rcclx_qloop), and every range of a call has fixed positions in every window, so a position
// is always handled by the same GPU block on every rank: all the per-block barriers need.
//
// Staging half layout (windows are multiples of 512 elements): slots of `wc` elements, codes
// (1 byte/element) of slot c at c*wc, then the scales (4 bytes per block) of slot c at
// slots*wc + c*(wc/128)*4.
//   AllReduce (window W, chunk capacity Cw = W / nranks): region A = nranks slots of Cw, slot p
//     receives rank p's codes of this rank's chunk; region B (at W*33/32 rounded up to 256
//     bytes) = nranks slots of Cw, slot c receives owner c's reduced codes of chunk c.
//   ReduceScatter, AllGather, AllToAll: nranks slots of W, slot p receives rank p's codes.
// Accumulation: f32, ranks 0..n-1 in order, every contribution (own too) quantized; the
// AllReduce output is the owner's re-quantized sum, so every rank's output is bit-identical.
// Tails: the last block of a range is short; its missing elements count as 0 and are never
// stored. Graph capture: as common.cuh (no per-call kernel arguments beyond buffers and counts).
#pragma once

#define RCCLX_QBLOCK 128
#define RCCLX_QLANES 8  // lanes per block: 16 elements each

RCCLX_DEV bool rcclx_isfinite(float x) { return (rcclx_f32_as_u32(x) & 0x7f800000u) != 0x7f800000u; }
RCCLX_DEV int rcclx_qlane() { return threadIdx.x & (RCCLX_QLANES - 1); }
#define RCCLX_MIN(x, y) ((x) < (y) ? (x) : (y))

// Which threads handle which block. Block k of any range belongs to GPU block
// (k / 32) % gridDim (the same on every rank and in every window: all the per-block barriers
// need). Inside a GPU block, its blocks are handled by one or both halves of 256 threads (32
// lane groups each): a pipelined phase gives each half its own range, so one half encodes and
// pushes the next window while the other decodes the current one (link and local memory busy
// at once); any other phase splits its range's steps between the two halves.
#define RCCLX_QHALF 256
#define RCCLX_QGROUPS (RCCLX_QHALF / RCCLX_QLANES)
static_assert(RCCLX_THREADS == 2 * RCCLX_QHALF, "FP8 kernels run as two half-blocks");
// Calls body(k, active, k2, active2) for this half's blocks of [0, nqb): step j covers blocks
// (j * gridDim + blockIdx) * 32 + [0, 32); a call takes steps j and j + `halves` (two blocks
// per lane group, so that twice the loads are in flight). The trip count is uniform per warp
// (all lanes run the shuffles); `active` says whether this lane's block exists.
template <typename F>
RCCLX_DEV void rcclx_qloop(uint64_t nqb, int half, int halves, F&& body) {
  const uint64_t g = (threadIdx.x % RCCLX_QHALF) / RCCLX_QLANES;
  const uint64_t next = (uint64_t)halves * gridDim.x * RCCLX_QGROUPS;
  for (uint64_t j = (uint64_t)half * gridDim.x * RCCLX_QGROUPS + (uint64_t)blockIdx.x * RCCLX_QGROUPS; j < nqb; j += 2 * next)
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
#pragma unroll
    for (int c = 0; c < 16; ++c) u[c / N].e[c % N] = E::store(v[c]);
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

// One lane's share of an encoded block: its 16 codes and the block's scale.
struct RcclxQ16 {
  rcclx_u32x4 codes;
  float scale;
};

// Encodes this lane's 16 values; the lane group computes the block's amax. Every lane of the
// warp must call it (inactive lanes pass zeros).
RCCLX_DEV RcclxQ16 rcclx_quantize16(const float v[16]) {
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < 16; ++i)
    if (rcclx_isfinite(v[i])) amax = rcclx_fmaxf(amax, rcclx_fabsf(v[i]));
  amax = rcclx_fmaxf(amax, rcclx_shfl_xor_f32(amax, 1));
  amax = rcclx_fmaxf(amax, rcclx_shfl_xor_f32(amax, 2));
  amax = rcclx_fmaxf(amax, rcclx_shfl_xor_f32(amax, 4));
  const bool zero = !(amax >= 1e-30f);
  const float inv = zero ? 0.f : RCCLX_FP8_MAX / amax;
  uint32_t w[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t word = 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float a = v[q * 4 + h * 2], b = v[q * 4 + h * 2 + 1];
      uint32_t pair = rcclx_f32x2_to_e4m3x2(a * inv, b * inv);
      if (!rcclx_isfinite(a)) pair = (pair & 0xff00u) | RCCLX_FP8_NAN;
      if (!rcclx_isfinite(b)) pair = (pair & 0x00ffu) | (RCCLX_FP8_NAN << 8);
      word |= pair << (16 * h);
    }
    w[q] = word;
  }
  RcclxQ16 r;
  r.codes.x = w[0];
  r.codes.y = w[1];
  r.codes.z = w[2];
  r.codes.w = w[3];
  r.scale = zero ? 0.f : amax / RCCLX_FP8_MAX;
  return r;
}

// Decodes 16 codes: v = decoded (ACC false) or v += decoded (ACC true).
template <bool ACC>
RCCLX_DEV void rcclx_decode16(const RcclxQ16& q, float v[16]) {
  const uint32_t w[4] = {q.codes.x, q.codes.y, q.codes.z, q.codes.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const rcclx_f32x4 f = rcclx_e4m3x4_to_f32x4(w[i]);
    const float d[4] = {f.x * q.scale, f.y * q.scale, f.z * q.scale, f.w * q.scale};
#pragma unroll
    for (int e = 0; e < 4; ++e) v[i * 4 + e] = ACC ? v[i * 4 + e] + d[e] : d[e];
  }
}

struct RcclxQSlot {
  uint8_t* codes;
  float* scales;
};
// Slot `c` of a region at `base` that holds `slots` slots of `wc` elements each.
RCCLX_DEV RcclxQSlot rcclx_qslot(char* base, uint64_t wc, int slots, int c) {
  RcclxQSlot s;
  s.codes = (uint8_t*)base + (uint64_t)c * wc;
  s.scales = (float*)((uint8_t*)base + (uint64_t)slots * wc) + (uint64_t)c * (wc / RCCLX_QBLOCK);
  return s;
}
// Writes this lane's share of block k of slot s. Warp-collective (all lanes call it, inactive
// ones too): the scales of the 4 consecutive blocks of 32 lanes leave as one 16-byte store,
// because a 4-byte store to a peer costs nearly as much link time as a 128-byte one. The first
// of those blocks has k % 4 == 0 (rcclx_qloop) and scale arrays are 16-byte aligned (windows
// are multiples of 512 elements); scales of blocks past the range are 0 and never read.
RCCLX_DEV void rcclx_put16(RcclxQSlot s, uint64_t k, const RcclxQ16& q, bool active) {
  if (active) rcclx_st16((rcclx_u32x4*)(s.codes + k * RCCLX_QBLOCK + rcclx_qlane() * 16), q.codes);
  rcclx_f32x4 four;
  four.x = q.scale;
  four.y = rcclx_shfl_xor_f32(q.scale, 8);
  four.z = rcclx_shfl_xor_f32(q.scale, 16);
  four.w = rcclx_shfl_xor_f32(q.scale, 24);
  if (active && (threadIdx.x & 31) == 0) rcclx_st16_f32((rcclx_f32x4*)(s.scales + k), four);
}
RCCLX_DEV RcclxQ16 rcclx_get16(RcclxQSlot s, uint64_t k) {
  RcclxQ16 q;
  q.codes = rcclx_ld16((const rcclx_u32x4*)(s.codes + k * RCCLX_QBLOCK + rcclx_qlane() * 16));
  q.scale = s.scales[k];
  return q;
}

// Encodes blocks k and k2 of src[0, n) and writes them to slot dst(d) for d < ndst (peer
// staging: remote stores). If `own` is set, the decoded values also go to own[0, n).
template <typename T, typename D>
RCCLX_DEV void rcclx_push2(const T* src, uint64_t n, const D& dst, int ndst, T* own, uint64_t k, bool a,
                           uint64_t k2, bool a2) {
  float v[16], u[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] = u[i] = 0.f;
  if (a) rcclx_load16<T>(src, k * RCCLX_QBLOCK, n, v);
  if (a2) rcclx_load16<T>(src, k2 * RCCLX_QBLOCK, n, u);
  const RcclxQ16 q = rcclx_quantize16(v), q2 = rcclx_quantize16(u);
  for (int d = 0; d < ndst; ++d) {
    const RcclxQSlot to = dst(d);
    rcclx_put16(to, k, q, a);
    rcclx_put16(to, k2, q2, a2);
  }
  if (own) {
    if (a) { rcclx_decode16<false>(q, v); rcclx_store16<T>(own, k * RCCLX_QBLOCK, n, v); }
    if (a2) { rcclx_decode16<false>(q2, u); rcclx_store16<T>(own, k2 * RCCLX_QBLOCK, n, u); }
  }
}
template <typename T, typename D>
RCCLX_DEV void rcclx_push_range(const T* src, uint64_t n, const D& dst, int ndst, T* own, int half, int halves) {
  rcclx_qloop((n + RCCLX_QBLOCK - 1) / RCCLX_QBLOCK, half, halves, [&](uint64_t k, bool a, uint64_t k2, bool a2) {
    rcclx_push2<T>(src, n, dst, ndst, own, k, a, k2, a2);
  });
}

// Decodes elements [0, n) of (local) slot s into dst.
template <typename T>
RCCLX_DEV void rcclx_pull_range(RcclxQSlot s, uint64_t n, T* dst, int half, int halves) {
  rcclx_qloop((n + RCCLX_QBLOCK - 1) / RCCLX_QBLOCK, half, halves, [&](uint64_t k, bool a, uint64_t k2, bool a2) {
    RcclxQ16 q, q2;
    if (a) q = rcclx_get16(s, k);
    if (a2) q2 = rcclx_get16(s, k2);
    float v[16];
    if (a) { rcclx_decode16<false>(q, v); rcclx_store16<T>(dst, k * RCCLX_QBLOCK, n, v); }
    if (a2) { rcclx_decode16<false>(q2, v); rcclx_store16<T>(dst, k2 * RCCLX_QBLOCK, n, v); }
  });
}

// Copies elements [0, n) of src to dst exactly.
template <typename T>
RCCLX_DEV void rcclx_copy_qrange(const T* src, uint64_t n, T* dst, int half, int halves) {
  rcclx_qloop((n + RCCLX_QBLOCK - 1) / RCCLX_QBLOCK, half, halves, [&](uint64_t k, bool a, uint64_t k2, bool a2) {
    float v[16], u[16];
    if (a) rcclx_load16<T>(src, k * RCCLX_QBLOCK, n, v);
    if (a2) rcclx_load16<T>(src, k2 * RCCLX_QBLOCK, n, u);
    if (a) rcclx_store16<T>(dst, k * RCCLX_QBLOCK, n, v);
    if (a2) rcclx_store16<T>(dst, k2 * RCCLX_QBLOCK, n, u);
  });
}

// Block k of a reduction: the sum over ranks in order of the quantized contributions, own
// from src (quantized here), rank p's from slot p of the local region `in` (slots of wc).
// Every lane of the warp calls it; inactive lanes get zeros.
template <typename T>
RCCLX_DEV void rcclx_reduce16(const RcclxArgs& a, const T* src, uint64_t k, uint64_t n, bool active,
                              char* in, uint64_t wc, float v[16]) {
  RcclxQ16 q[RCCLX_MAX_RANKS];
#pragma unroll
  for (int p = 0; p < RCCLX_MAX_RANKS; ++p)  // loads first
    if (active && p < a.nranks && p != a.rank) q[p] = rcclx_get16(rcclx_qslot(in, wc, a.nranks, p), k);
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] = 0.f;
  if (active) rcclx_load16<T>(src, k * RCCLX_QBLOCK, n, v);
  const RcclxQ16 mine = rcclx_quantize16(v);
  if (!active) return;
#pragma unroll
  for (int p = 0; p < RCCLX_MAX_RANKS; ++p) {
    if (p >= a.nranks) break;
    const RcclxQ16 x = p == a.rank ? mine : q[p];
    if (p == 0) rcclx_decode16<false>(x, v);
    else rcclx_decode16<true>(x, v);
  }
}

// Offset of AllReduce's region B in a staging half: after region A (W codes and W/128
// scales), rounded up to 256 bytes so that its 16-byte accesses stay aligned.
RCCLX_DEV uint64_t rcclx_lowp_region_b(uint64_t W) { return (W / RCCLX_QBLOCK * (RCCLX_QBLOCK + 4) + 255) & ~(uint64_t)255; }

#define RCCLX_LP_PROLOGUE                                      \
  __shared__ uint32_t s_seq;                                   \
  __shared__ int s_fail;                                       \
  const uint32_t seq = rcclx_seq_load(a, &s_seq, &s_fail);     \
  const uint64_t deadline = rcclx_call_deadline(a);            \
  const int nr = a.nranks;                                     \
  const T* send = (const T*)a.send;                            \
  T* recv = (T*)a.recv;                                        \
  const uint64_t W = a.window_elems;                           \
  const uint64_t nwin = (a.count + W - 1) / W;                 \
  /* window s: elements [s*W, s*W + len(s)), staging half (seq + s) & 1 */ \
  auto len = [&](uint64_t s) { return RCCLX_MIN(a.count - s * W, W); };   \
  auto half_of = [&](uint64_t s) { return (uint64_t)((seq + s) & 1) * a.half_bytes; };
// Pipeline of AllGather, AllToAll and ReduceScatter: push window 0; then for each window s:
// barrier, then half 0 pushes window s + 1 while half 1 finishes window s (decode or reduce),
// or the whole block finishes the last window. Reuse: push(s+1) overwrites what peers
// finished before the barrier of window s; what this rank reads in finish(s) is rewritten by
// peers only after the barrier of window s + 1.
template <typename P, typename F>
RCCLX_DEV void rcclx_lp_pipeline(const RcclxArgs& a, uint32_t seq, uint64_t nwin, uint64_t deadline,
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
template <typename T>
RCCLX_DEV void rcclx_pull_peer_slots(const RcclxArgs& a, uint64_t half_off, uint64_t W, uint64_t n, T* out, int h, int hs) {
  for (int i = 1; i < a.nranks; ++i) {
    const int p = (a.rank + i) % a.nranks;
    rcclx_pull_range<T>(rcclx_qslot(a.staging[a.rank] + half_off, W, a.nranks, p), n, out + p * a.count, h, hs);
  }
}

// AllGather: count = elements per rank; output chunk c at c*count. Window s: push -> barrier
// -> decode (rcclx_lp_pipeline). A rank's own chunk is the decode of its own codes, like every
// peer's copy of it, so all ranks hold the same tensor.
template <typename T>
RCCLX_DEV void rcclx_allgather_lowp(const RcclxArgs& a) {
  RCCLX_LP_PROLOGUE
  // In place the own output chunk is the input: each lane rewrites only what it just read.
  auto push = [&](uint64_t s, int h, int hs) {
    rcclx_push_range<T>(send + s * W, len(s),
                        [&](int d) { return rcclx_qslot(a.staging[(a.rank + 1 + d) % nr] + half_of(s), W, nr, a.rank); },
                        nr - 1, recv + a.rank * a.count + s * W, h, hs);
  };
  auto pull = [&](uint64_t s, int h, int hs) { rcclx_pull_peer_slots<T>(a, half_of(s), W, len(s), recv + s * W, h, hs); };
  rcclx_lp_pipeline(a, seq, nwin, deadline, &s_fail, push, pull);
}

// AllToAll: count = elements per peer; input chunk p goes to rank p, output chunk p comes
// from rank p. The chunk a rank keeps is copied exactly (rcclx_lp_pipeline).
template <typename T>
RCCLX_DEV void rcclx_alltoall_lowp(const RcclxArgs& a) {
  RCCLX_LP_PROLOGUE
  auto push = [&](uint64_t s, int h, int hs) {
    for (int i = 1; i < nr; ++i) {
      const int c = (a.rank + i) % nr;
      rcclx_push_range<T>(send + c * a.count + s * W, len(s),
                          [&](int) { return rcclx_qslot(a.staging[c] + half_of(s), W, nr, a.rank); }, 1, (T*)nullptr, h, hs);
    }
  };
  // In place, output chunk p of window s is input chunk p of window s, read by the push of
  // window s before the barrier.
  auto pull = [&](uint64_t s, int h, int hs) {
    rcclx_pull_peer_slots<T>(a, half_of(s), W, len(s), recv + s * W, h, hs);
    const uint64_t own = a.rank * a.count + s * W;
    if (send != recv) rcclx_copy_qrange<T>(send + own, len(s), recv + own, h, hs);
  };
  rcclx_lp_pipeline(a, seq, nwin, deadline, &s_fail, push, pull);
}

// ReduceScatter: count = elements per rank output; input chunk c at c*count. Window s: push
// each chunk to its owner -> barrier -> reduce (rcclx_lp_pipeline).
template <typename T>
RCCLX_DEV void rcclx_reducescatter_lowp(const RcclxArgs& a) {
  RCCLX_LP_PROLOGUE
  auto push = [&](uint64_t s, int h, int hs) {
    for (int i = 1; i < nr; ++i) {
      const int c = (a.rank + i) % nr;
      rcclx_push_range<T>(send + c * a.count + s * W, len(s),
                          [&](int) { return rcclx_qslot(a.staging[c] + half_of(s), W, nr, a.rank); }, 1, (T*)nullptr, h, hs);
    }
  };
  auto reduce = [&](uint64_t s, int h, int hs) {
    const uint64_t n = len(s);
    const T* mine = send + a.rank * a.count + s * W;
    char* in = a.staging[a.rank] + half_of(s);
    rcclx_qloop((n + RCCLX_QBLOCK - 1) / RCCLX_QBLOCK, h, hs, [&](uint64_t k, bool act, uint64_t k2, bool act2) {
      float v[16];
      rcclx_reduce16<T>(a, mine, k, n, act, in, W, v);
      if (act) rcclx_store16<T>(recv + s * W, k * RCCLX_QBLOCK, n, v);
      rcclx_reduce16<T>(a, mine, k2, n, act2, in, W, v);
      if (act2) rcclx_store16<T>(recv + s * W, k2 * RCCLX_QBLOCK, n, v);
    });
  };
  rcclx_lp_pipeline(a, seq, nwin, deadline, &s_fail, push, reduce);
}

// AllReduce: window s = push each chunk's codes to its owner (region A) -> owner reduces its
// chunk in f32, re-quantizes, pushes the codes to every peer (region B) and decodes them itself
// -> everyone decodes the other chunks. Pipelined with one barrier X(s) per window: before
// X(s) half 0 reduces window s while half 1 pushes window s + 1 and decodes window s - 1.
//   Reuse: push(s+1) overwrites region A of window s-1, which peers reduced before X(s-1);
//   reduce(s) overwrites region B of window s-2, which peers decoded before X(s-1); what this
//   rank reads before X(s) is rewritten by peers only after X(s).
// count = elements per rank.
template <typename T>
RCCLX_DEV void rcclx_allreduce_lowp(const RcclxArgs& a) {
  RCCLX_LP_PROLOGUE
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
      rcclx_push_range<T>(send + s * W + c * Cb * RCCLX_QBLOCK, chunk_len(s, c),
                          [&](int) { return rcclx_qslot(a.staging[c] + half_of(s), Cw, nr, a.rank); }, 1, (T*)nullptr, h, hs);
    }
  };
  auto reduce = [&](uint64_t s, int h, int hs) {
    const uint64_t first = s * W + (uint64_t)a.rank * Cb * RCCLX_QBLOCK, n = chunk_len(s, a.rank);
    char* in = a.staging[a.rank] + half_of(s);
    auto one = [&](uint64_t k, bool act) {
      float v[16];
      rcclx_reduce16<T>(a, send + first, k, n, act, in, Cw, v);
      // Positions past n are zero in every input, so their sum is 0: harmless in amax.
      const RcclxQ16 q = rcclx_quantize16(v);
      for (int i = 1; i < nr; ++i)
        rcclx_put16(rcclx_qslot(a.staging[(a.rank + i) % nr] + half_of(s) + region_b, Cw, nr, a.rank), k, q, act);
      if (!act) return;
      // Decode what the peers decode, so that every rank's output is identical.
      rcclx_decode16<false>(q, v);
      rcclx_store16<T>(recv + first, k * RCCLX_QBLOCK, n, v);
    };
    rcclx_qloop((n + RCCLX_QBLOCK - 1) / RCCLX_QBLOCK, h, hs, [&](uint64_t k, bool act, uint64_t k2, bool act2) {
      one(k, act);
      one(k2, act2);
    });
  };
  auto pull = [&](uint64_t s, int h, int hs) {
    for (int i = 1; i < nr; ++i) {
      const int c = (a.rank + i) % nr;
      const uint64_t n = chunk_len(s, c);
      if (n) rcclx_pull_range<T>(rcclx_qslot(a.staging[a.rank] + half_of(s) + region_b, Cw, nr, c), n,
                                 recv + s * W + c * Cb * RCCLX_QBLOCK, h, hs);
    }
  };
  // Barrier values: seq*4+1 after the first push, then (seq+s)*4+2 for X(s): monotonic, and
  // below the next call's first value.
  const int my_half = threadIdx.x / RCCLX_QHALF;
  bool ok = nwin == 0;
  if (nwin) {
    push(0, my_half, 2);
    ok = rcclx_barrier(a, seq * 4 + 1, deadline, &s_fail);
  }
  for (uint64_t s = 0; ok && s < nwin; ++s) {
    if (my_half == 0) {
      reduce(s, 0, 1);
    } else {
      if (s + 1 < nwin) push(s + 1, 0, 1);
      if (s > 0) pull(s - 1, 0, 1);
    }
    ok = rcclx_barrier(a, (uint32_t)(seq + s) * 4 + 2, deadline, &s_fail);
  }
  if (ok && nwin) pull(nwin - 1, my_half, 2);
  rcclx_seq_store(a, seq + (uint32_t)nwin);
}
