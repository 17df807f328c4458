// Low-precision (FP8) collectives: block-scaled E4M3 on the wire, FP32 arithmetic.
// Shares the DDA machinery (dda.cuh): the same staging buffers, flags, per-block window
// counters and barriers, so DDA and FP8 calls interleave on a communicator freely.
//
// Codec (identical to the CPU reference, src/lowp/codec.rs): blocks of 128 consecutive
// elements, one f32 scale each. amax = max |x| over the block's finite values; if
// amax < 1e-30 the block is all zero (scale 0); else scale = amax / FP8_MAX and
// inv = FP8_MAX / amax (IEEE divisions), code = e4m3_satfinite_rne(x * inv) and
// x' = decode(code) * scale. NaN/Inf inputs encode as NaN. E4M3 is OCP on NVIDIA and gfx950
// and FNUZ on gfx942 (the native conversion; every rank of a node has the same arch).
//
// Work split: 8 lanes handle one 128-element block (16 elements each, one 16-byte code load);
// a lane group's amax is reduced with xor shuffles. Block k of a range belongs to lane group
// k of the grid, so the same GPU block touches the same positions in every phase and on every
// rank, which is all the per-block barriers need (see dda.cuh).
//
// Staging half layout per window: codes (1 byte/element) then scales (4 bytes per block).
//   AllReduce: W elements (W a multiple of 128 * nranks): codes [0, W), scales [W, W + W/32).
//   ReduceScatter, AllToAll: nranks chunk slots of Wc elements: codes of chunk c at c*Wc,
//     scales at nranks*Wc + c*(Wc/128)*4.  AllGather: one slot of Wc elements.
// Accumulation: f32, ranks 0..n-1 in order; AllReduce output is the owner's re-quantized sum,
// so every rank's output is bit-identical. Tails: the last block of a range is short; its
// missing elements count as 0 and are never stored. Graph capture: as dda.cuh (no per-call
// kernel arguments beyond the user's buffers and counts).
#pragma once

#define RCCLX_QBLOCK 128
#define RCCLX_QLANES 8  // lanes per block: 16 elements each

RCCLX_DEV bool rcclx_isfinite(float x) { return (rcclx_f32_as_u32(x) & 0x7f800000u) != 0x7f800000u; }

// Lane-group loop: block k of [0, nqb) to lane group k of the grid. The bound is uniform per
// warp (all lanes run the shuffles); `active` says whether this lane's block exists.
#define RCCLX_FOR_QBLOCK(k, active, nqb)                                                          \
  for (uint64_t k##_0 = ((uint64_t)blockIdx.x * blockDim.x + (threadIdx.x & ~(RCCLX_WARP_SIZE - 1))) / RCCLX_QLANES; \
       k##_0 < (nqb); k##_0 += (uint64_t)gridDim.x * blockDim.x / RCCLX_QLANES)                   \
    for (uint64_t k = k##_0 + (threadIdx.x & (RCCLX_WARP_SIZE - 1)) / RCCLX_QLANES, k##_once = 1; k##_once; k##_once = 0) \
      for (bool active = k < (nqb); k##_once; k##_once = 0)

RCCLX_DEV int rcclx_qlane() { return threadIdx.x & (RCCLX_QLANES - 1); }

// order: n/a. Max over the 8 lanes of a block group.
RCCLX_DEV float rcclx_group_max(float v) {
  v = rcclx_fmaxf(v, rcclx_shfl_xor_f32(v, 1));
  v = rcclx_fmaxf(v, rcclx_shfl_xor_f32(v, 2));
  v = rcclx_fmaxf(v, rcclx_shfl_xor_f32(v, 4));
  return v;
}

// Loads this lane's 16 elements [first, first + 16) of src (positions >= n read as 0).
template <typename T>
RCCLX_DEV void rcclx_load16(const T* src, uint64_t first, uint64_t n, float v[16]) {
  typedef RcclxElt<T> E;
  if (first + 16 <= n && rcclx_aligned16(src + first)) {
    typename RcclxVec<T>::U u[16 / RcclxVec<T>::N];
#pragma unroll
    for (int i = 0; i < 16 / RcclxVec<T>::N; ++i) u[i].v = rcclx_ld16((const rcclx_u32x4*)(src + first) + i);
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = (float)E::load(u[i / RcclxVec<T>::N].e[i % RcclxVec<T>::N]);
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = first + i < n ? (float)E::load(src[first + i]) : 0.f;
  }
}

// Stores this lane's 16 elements at [first, first + 16) of dst (positions >= n skipped).
template <typename T>
RCCLX_DEV void rcclx_store16(T* dst, uint64_t first, uint64_t n, const float v[16]) {
  typedef RcclxElt<T> E;
  if (first + 16 <= n && rcclx_aligned16(dst + first)) {
    typename RcclxVec<T>::U u[16 / RcclxVec<T>::N];
#pragma unroll
    for (int i = 0; i < 16; ++i) u[i / RcclxVec<T>::N].e[i % RcclxVec<T>::N] = E::store((typename E::A)v[i]);
#pragma unroll
    for (int i = 0; i < 16 / RcclxVec<T>::N; ++i) rcclx_st16((rcclx_u32x4*)(dst + first) + i, u[i].v);
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i)
      if (first + i < n) dst[first + i] = E::store((typename E::A)v[i]);
  }
}

// Quantizes this lane's 16 values of a block (the group computes the block's amax) and
// writes 16 codes at `codes` and, from lane 0, the scale at `*scale_out`. All lanes of the
// warp must call it (active or not); inactive lanes pass zeros and write nothing.
RCCLX_DEV void rcclx_quantize16(const float v[16], bool active, uint8_t* codes, float* scale_out) {
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < 16; ++i)
    if (rcclx_isfinite(v[i])) amax = rcclx_fmaxf(amax, rcclx_fabsf(v[i]));
  amax = rcclx_group_max(amax);
  if (!active) return;
  const bool zero = !(amax >= 1e-30f);
  const float scale = zero ? 0.f : amax / RCCLX_FP8_MAX;
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
  rcclx_u32x4 c;
  c.x = w[0];
  c.y = w[1];
  c.z = w[2];
  c.w = w[3];
  rcclx_st16((rcclx_u32x4*)codes, c);
  if (rcclx_qlane() == 0) *scale_out = scale;
}

// Decodes 16 codes with their block scale (adds into acc if ACC, else overwrites).
template <bool ACC>
RCCLX_DEV void rcclx_dequantize16(const uint8_t* codes, const float* scale_in, float v[16]) {
  const rcclx_u32x4 c = rcclx_ld16((const rcclx_u32x4*)codes);
  const float scale = *scale_in;
  const uint32_t w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const rcclx_f32x4 f = rcclx_e4m3x4_to_f32x4(w[q]);
    const float d[4] = {f.x * scale, f.y * scale, f.z * scale, f.w * scale};
#pragma unroll
    for (int i = 0; i < 4; ++i) v[q * 4 + i] = ACC ? v[q * 4 + i] + d[i] : d[i];
  }
}

struct RcclxQSlot {
  uint8_t* codes;
  float* scales;
};
// Slot `c` of a staging half that holds `slots` slots of `wc` elements each.
RCCLX_DEV RcclxQSlot rcclx_qslot(char* half, uint64_t wc, int slots, int c) {
  RcclxQSlot s;
  s.codes = (uint8_t*)half + (uint64_t)c * wc;
  s.scales = (float*)((uint8_t*)half + (uint64_t)slots * wc) + (uint64_t)c * (wc / RCCLX_QBLOCK);
  return s;
}

// Quantizes elements [0, n) of src into slot s (block k of the range -> lane group k).
template <typename T>
RCCLX_DEV void rcclx_quantize_range(const T* src, uint64_t n, RcclxQSlot s) {
  const uint64_t nqb = (n + RCCLX_QBLOCK - 1) / RCCLX_QBLOCK;
  RCCLX_FOR_QBLOCK(k, active, nqb) {
    float v[16];
    const uint64_t first = k * RCCLX_QBLOCK + rcclx_qlane() * 16;
    if (active) rcclx_load16<T>(src, first, n, v);
    else for (int i = 0; i < 16; ++i) v[i] = 0.f;
    rcclx_quantize16(v, active, s.codes + first, s.scales + k);
  }
}

// Decodes elements [0, n) of slot s into dst. No shuffles here, so each lane group simply
// walks its blocks, two per step so that two code loads (often over NVLink) are in flight.
template <typename T>
RCCLX_DEV void rcclx_dequantize_range(RcclxQSlot s, uint64_t n, T* dst) {
  const uint64_t nqb = (n + RCCLX_QBLOCK - 1) / RCCLX_QBLOCK;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x / RCCLX_QLANES;
  const uint64_t lane_off = rcclx_qlane() * 16;
  for (uint64_t k = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) / RCCLX_QLANES; k < nqb; k += 2 * stride) {
    const uint64_t k2 = k + stride;
    float v[16], w[16];
    rcclx_dequantize16<false>(s.codes + k * RCCLX_QBLOCK + lane_off, s.scales + k, v);
    if (k2 < nqb) rcclx_dequantize16<false>(s.codes + k2 * RCCLX_QBLOCK + lane_off, s.scales + k2, w);
    rcclx_store16<T>(dst, k * RCCLX_QBLOCK + lane_off, n, v);
    if (k2 < nqb) rcclx_store16<T>(dst, k2 * RCCLX_QBLOCK + lane_off, n, w);
  }
}

#define RCCLX_LP_PROLOGUE                                                   \
  __shared__ uint32_t s_seq;                                                \
  __shared__ int s_fail;                                                    \
  if (threadIdx.x == 0) { s_seq = a.seq[blockIdx.x]; s_fail = 0; }          \
  __syncthreads();                                                          \
  uint32_t seq = s_seq;                                                     \
  const uint64_t deadline = rcclx_deadline_after(a.timeout_ns);             \
  const int nr = a.nranks;
#define RCCLX_LP_EPILOGUE \
  if (threadIdx.x == 0) a.seq[blockIdx.x] = seq;
#define RCCLX_MIN(x, y) ((x) < (y) ? (x) : (y))

// AllReduce: quantize -> barrier -> owner reduces its chunk in f32 and re-quantizes in place
// -> barrier -> everyone decodes every chunk. count = elements per rank.
template <typename T>
RCCLX_DEV void rcclx_lowp_allreduce(const RcclxDdaArgs& a) {
  RCCLX_LP_PROLOGUE
  const T* send = (const T*)a.send;
  T* recv = (T*)a.recv;
  const uint64_t W = a.window_elems;
  for (uint64_t base = 0; base < a.count; base += W, ++seq) {
    const uint64_t n = RCCLX_MIN(a.count - base, W);
    const uint64_t nqb = (n + RCCLX_QBLOCK - 1) / RCCLX_QBLOCK;
    const uint64_t C = (nqb + nr - 1) / nr;  // blocks per chunk
    const uint64_t half_off = (uint64_t)(seq & 1) * a.half_bytes;
    // Codes of the whole window in slot 0 (W elements), chunks at multiples of C blocks.
    const RcclxQSlot mine = rcclx_qslot(a.staging[a.rank] + half_off, W, 1, 0);
    for (int c = 0; c < nr; ++c) {
      const uint64_t first = c * C * RCCLX_QBLOCK;
      if (first >= n) break;
      RcclxQSlot s = mine;
      s.codes += first;
      s.scales += c * C;
      rcclx_quantize_range<T>(send + base + first, RCCLX_MIN(n - first, C * RCCLX_QBLOCK), s);
    }
    if (!rcclx_dda_barrier(a, seq * 4 + 1, deadline, &s_fail)) { ++seq; break; }
    {
      const uint64_t first = a.rank * C * RCCLX_QBLOCK;
      const uint64_t len = first < n ? RCCLX_MIN(n - first, C * RCCLX_QBLOCK) : 0;
      const uint64_t cb = (len + RCCLX_QBLOCK - 1) / RCCLX_QBLOCK;
      RCCLX_FOR_QBLOCK(j, active, cb) {
        const uint64_t k = a.rank * C + j;  // block index in the window
        const uint64_t off = k * RCCLX_QBLOCK + rcclx_qlane() * 16;
        float v[16];
        if (active) {
          const RcclxQSlot p0 = rcclx_qslot(a.staging[0] + half_off, W, 1, 0);
          rcclx_dequantize16<false>(p0.codes + off, p0.scales + k, v);
          for (int p = 1; p < nr; ++p) {
            const RcclxQSlot pp = rcclx_qslot(a.staging[p] + half_off, W, 1, 0);
            rcclx_dequantize16<true>(pp.codes + off, pp.scales + k, v);
          }
        } else {
          for (int i = 0; i < 16; ++i) v[i] = 0.f;
        }
        // Elements past n are zero in every input, so their sum is 0: harmless in amax.
        rcclx_quantize16(v, active, mine.codes + off, mine.scales + k);
        if (active) {
          // Decode what the peers will decode, so every rank's output is identical. The
          // lane group's own writes are visible to itself (same lanes, program order).
          rcclx_dequantize16<false>(mine.codes + off, mine.scales + k, v);
          rcclx_store16<T>(recv + base, off, n, v);
        }
      }
    }
    if (!rcclx_dda_barrier(a, seq * 4 + 2, deadline, &s_fail)) { ++seq; break; }
    for (int i = 1; i < nr; ++i) {
      const int c = (a.rank + i) % nr;
      const uint64_t first = c * C * RCCLX_QBLOCK;
      if (first >= n) continue;
      RcclxQSlot s = rcclx_qslot(a.staging[c] + half_off, W, 1, 0);
      s.codes += first;
      s.scales += c * C;
      rcclx_dequantize_range<T>(s, RCCLX_MIN(n - first, C * RCCLX_QBLOCK), recv + base + first);
    }
  }
  RCCLX_LP_EPILOGUE
}

// ReduceScatter: count = elements per rank output; input chunk c at c*count.
template <typename T>
RCCLX_DEV void rcclx_lowp_reducescatter(const RcclxDdaArgs& a) {
  RCCLX_LP_PROLOGUE
  const T* send = (const T*)a.send;
  T* recv = (T*)a.recv;
  const uint64_t W = a.window_elems;  // per chunk
  for (uint64_t base = 0; base < a.count; base += W, ++seq) {
    const uint64_t n = RCCLX_MIN(a.count - base, W);
    const uint64_t nqb = (n + RCCLX_QBLOCK - 1) / RCCLX_QBLOCK;
    const uint64_t half_off = (uint64_t)(seq & 1) * a.half_bytes;
    char* mine = a.staging[a.rank] + half_off;
    for (int c = 0; c < nr; ++c) rcclx_quantize_range<T>(send + c * a.count + base, n, rcclx_qslot(mine, W, nr, c));
    if (!rcclx_dda_barrier(a, seq * 4 + 1, deadline, &s_fail)) { ++seq; break; }
    RCCLX_FOR_QBLOCK(k, active, nqb) {
      if (active) {
        const uint64_t off = k * RCCLX_QBLOCK + rcclx_qlane() * 16;
        float v[16];
        const RcclxQSlot s0 = rcclx_qslot(a.staging[0] + half_off, W, nr, a.rank);
        rcclx_dequantize16<false>(s0.codes + off, s0.scales + k, v);
        for (int p = 1; p < nr; ++p) {
          const RcclxQSlot sp = rcclx_qslot(a.staging[p] + half_off, W, nr, a.rank);
          rcclx_dequantize16<true>(sp.codes + off, sp.scales + k, v);
        }
        rcclx_store16<T>(recv + base, off, n, v);
      }
    }
  }
  RCCLX_LP_EPILOGUE
}

// AllGather: count = elements per rank; output chunk c at c*count. Every rank (the sender
// too) decodes every chunk, so all ranks hold the same tensor.
template <typename T>
RCCLX_DEV void rcclx_lowp_allgather(const RcclxDdaArgs& a) {
  RCCLX_LP_PROLOGUE
  const T* send = (const T*)a.send;
  T* recv = (T*)a.recv;
  const uint64_t W = a.window_elems;
  for (uint64_t base = 0; base < a.count; base += W, ++seq) {
    const uint64_t n = RCCLX_MIN(a.count - base, W);
    const uint64_t half_off = (uint64_t)(seq & 1) * a.half_bytes;
    rcclx_quantize_range<T>(send + base, n, rcclx_qslot(a.staging[a.rank] + half_off, W, 1, 0));
    if (!rcclx_dda_barrier(a, seq * 4 + 1, deadline, &s_fail)) { ++seq; break; }
    for (int i = 0; i < nr; ++i) {
      const int c = (a.rank + 1 + i) % nr;  // own chunk last: in place, it overwrites the input
      rcclx_dequantize_range<T>(rcclx_qslot(a.staging[c] + half_off, W, 1, 0), n, recv + c * a.count + base);
    }
  }
  RCCLX_LP_EPILOGUE
}

// AllToAll: count = elements per peer; input chunk p goes to rank p, output chunk p comes
// from rank p. The chunk a rank keeps is copied exactly.
template <typename T>
RCCLX_DEV void rcclx_lowp_alltoall(const RcclxDdaArgs& a) {
  RCCLX_LP_PROLOGUE
  const T* send = (const T*)a.send;
  T* recv = (T*)a.recv;
  const uint64_t W = a.window_elems;
  for (uint64_t base = 0; base < a.count; base += W, ++seq) {
    const uint64_t n = RCCLX_MIN(a.count - base, W);
    const uint64_t half_off = (uint64_t)(seq & 1) * a.half_bytes;
    char* mine = a.staging[a.rank] + half_off;
    for (int c = 0; c < nr; ++c)
      if (c != a.rank) rcclx_quantize_range<T>(send + c * a.count + base, n, rcclx_qslot(mine, W, nr, c));
    if (!rcclx_dda_barrier(a, seq * 4 + 1, deadline, &s_fail)) { ++seq; break; }
    for (int i = 1; i < nr; ++i) {
      const int p = (a.rank + i) % nr;
      rcclx_dequantize_range<T>(rcclx_qslot(a.staging[p] + half_off, W, nr, a.rank), n, recv + p * a.count + base);
    }
    if (send != recv) {
      const uint64_t nqb = (n + RCCLX_QBLOCK - 1) / RCCLX_QBLOCK;
      RCCLX_FOR_QBLOCK(k, active, nqb) {
        if (active) {
          float v[16];
          const uint64_t off = k * RCCLX_QBLOCK + rcclx_qlane() * 16;
          rcclx_load16<T>(send + a.rank * a.count + base, off, n, v);
          rcclx_store16<T>(recv + a.rank * a.count + base, off, n, v);
        }
      }
    }
  }
  RCCLX_LP_EPILOGUE
}

#define RCCLX_LP_KERNEL(COLL, TNAME, T)                                                   \
  extern "C" __global__ void __launch_bounds__(RCCLX_DDA_THREADS)                          \
      rcclx_lowp_##COLL##_##TNAME(RcclxDdaArgs a) {                                        \
    rcclx_lowp_##COLL<T>(a);                                                               \
  }
#define RCCLX_LP_TYPES(COLL)              \
  RCCLX_LP_KERNEL(COLL, f32, float)       \
  RCCLX_LP_KERNEL(COLL, bf16, rcclx_bf16) \
  RCCLX_LP_KERNEL(COLL, f16, rcclx_half)
RCCLX_LP_TYPES(allreduce)
RCCLX_LP_TYPES(reducescatter)
RCCLX_LP_TYPES(allgather)
RCCLX_LP_TYPES(alltoall)
