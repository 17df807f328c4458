// codec.cuh - the low-precision block codecs, FP8 E4M3 (RcclxFp8) and INT8 (RcclxInt8): the
// normative definition of the bytes rcclx puts on the wire. The low-precision collectives
// (lowp.cuh) and the coded AllToAllv (alltoallv.cuh) take a codec as a template argument.
// gpu-tests/src/codec.rs is the CPU model of exactly this (bit for bit, checked on the GPU) with
// the error bounds; python/rcclx/_codec_model.py is a second model for the Python package.
//
// Blocks. A range is cut into blocks of RCCLX_QBLOCK = 128 consecutive elements from its start
// (the last block may be short: its missing elements count as 0 and are never stored). Each
// block is 128 one-byte codes plus one 32-bit word (FP8: the f32 scale; INT8: a meta word), so
// both codecs move 1 + 1/32 bytes per element. Inputs are f32 (bf16/fp16 widened exactly);
// every operation below is one correctly rounded IEEE f32 operation, no fused multiply-add
// (the build compiles with -fmad=false / -ffp-contract=off).
//
// Lanes. RCCLX_QLANES = 8 lanes of a warp hold one block, 16 values each; the lane group's
// amax is reduced with xor shuffles. With N elements per 16-byte vector of the I/O type (f32: 4,
// bf16/fp16: 8), lane L's value c (0..16) is element (c / N) * 8N + L*N + c % N of the block
// (rcclx_qpos), so each load/store instruction of a lane group covers 128 consecutive bytes.
// Lane L's 16 codes are the 16 bytes at L*16 of the block's codes (code j*N + t is element
// j*8N + L*N + t). This order is internal to rcclx: writer and reader are both rcclx kernels.
// FP8's bytes do not depend on it; INT8's do (its per-lane shifts).
//
// FP8 E4M3 (RcclxFp8). Element format: 1 sign, 4 exponent, 3 mantissa bits, no infinities.
// OCP E4M3FN on NVIDIA and gfx950 (bias 7, max 448 = 0x7E, NaN 0x7F/0xFF, -0 = 0x80); E4M3FNUZ
// on gfx942 (bias 8, max 240 = 0x7F, NaN 0x80 only, no -0): the native conversion of each
// target (RCCLX_FP8_MAX, RCCLX_FP8_NAN in rcclx_port.h), the same on every rank of a node.
//   amax  = max |x| over the block's finite elements (NaN and +-inf ignored);
//   if !(amax >= 1e-30) (also: no finite element): scale = 0, inv = 0, so a finite x gets the
//         code of x * 0, a zero of x's sign (fnuz: 0x00, it has no -0: rcclx_f32x2_to_e4m3x2
//         turns a 0x80 from an input that is not NaN into 0x00, whatever the hardware gives);
//   else  scale = amax / FP8_MAX, inv = FP8_MAX / amax (two IEEE divisions);
//   code  = e4m3(x * inv): round to nearest even, saturating (|y| > max gives +-max); a NaN or
//         +-inf input gets the NaN code (the block's other elements are unaffected);
//   word  = the bits of scale; decode: e4m3_to_f32(code) * scale (NaN code: NaN).
//
// INT8 (RcclxInt8). amax_L = max |x| over lane L's finite elements, A = max over the 8 lanes.
//   if !(A >= 1e-30): meta = 0, every finite element gets code 0;
//   else  S = A / 127 rounded up to a bf16 value (8 significant bits: if the low 16 bits of
//         the f32 are not 0, clear them and add 0x10000), inv = 1 / S;
//         k_L = 3 if amax_L * inv * 8 <= 127, else 2 if ... * 4 <= 127, else 1 if ... * 2 <=
//         127, else 0 (t = amax_L * inv rounded first): a lane of small values keeps up to 3
//         more bits (heavy-tailed data);
//   code  = clamp(rint((x * inv) * 2^k_L), -127, 127) (ties to even; the second product is
//         exact); a NaN or +-inf input gets -128 (0x80), the NaN code;
//   meta  = S's upper 16 bits | k_L << 2L (the shifts in the low 16 bits);
//   decode: 0x80 is NaN, else code * (S * 2^-k_L), exact in f32 (7 x 8 significant bits).
#ifndef RCCLX_CODEC_CUH
#define RCCLX_CODEC_CUH

#include "rcclx_port.h"

#define RCCLX_QBLOCK 128
#define RCCLX_QLANES 8  // lanes per block: 16 elements each

RCCLX_DEV bool rcclx_isfinite(float x) { return (rcclx_f32_as_u32(x) & 0x7f800000u) != 0x7f800000u; }
RCCLX_DEV int rcclx_qlane() { return threadIdx.x & (RCCLX_QLANES - 1); }

// One lane's share of an encoded block: its 16 codes and the block's 32-bit scale word.
struct RcclxQ16 {
  rcclx_u32x4 codes;
  uint32_t meta;
};

RCCLX_DEV uint32_t rcclx_shfl_xor_u32(uint32_t v, int mask) {
  return rcclx_f32_as_u32(rcclx_shfl_xor_f32(rcclx_u32_as_f32(v), mask));  // moves bits only
}
// This lane's amax (finite values only) and its lane group's.
struct RcclxAmax {
  float lane, group;
  bool finite;  // every value of this lane is finite
};
RCCLX_DEV RcclxAmax rcclx_amax16(const float v[16]) {
  // |x|'s bits as an integer grow with |x|, and inf and NaN (exponent all ones) lie above every
  // finite value: one integer max gives the amax and says whether all 16 values are finite
  // (sm_90: 1.5 instructions per value instead of 3; the NaN/inf path is taken only by lanes
  // that hold one).
  uint32_t bits = 0;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const uint32_t b = rcclx_f32_as_u32(v[i]) & 0x7fffffffu;
    bits = b > bits ? b : bits;
  }
  const bool finite = bits < 0x7f800000u;
  float m = rcclx_u32_as_f32(bits);
  if (!finite) {  // rare: the finite values only
    m = 0.f;
#pragma unroll
    for (int i = 0; i < 16; ++i)
      if (rcclx_isfinite(v[i])) m = rcclx_fmaxf(m, rcclx_fabsf(v[i]));
  }
  RcclxAmax r;
  r.finite = finite;
  r.lane = m;
  m = rcclx_fmaxf(m, rcclx_shfl_xor_f32(m, 1));
  m = rcclx_fmaxf(m, rcclx_shfl_xor_f32(m, 2));
  r.group = rcclx_fmaxf(m, rcclx_shfl_xor_f32(m, 4));
  return r;
}

// Replaces the code byte of every NaN/inf value of v (code i = byte i % 4 of w[i / 4]) by `nan`.
// Both encoders call it only for a lane that holds one (RcclxAmax::finite), so the common path
// carries no per-value test. (Written as a rebuild of each word: the in-place byte update form
// crashed clang 22's gfx950 backend in the INT8 encoder.)
RCCLX_DEV void rcclx_nan_codes(const float v[16], uint32_t w[4], uint32_t nan) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t word = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) word |= (rcclx_isfinite(v[q * 4 + e]) ? (w[q] >> (8 * e)) & 0xffu : nan) << (8 * e);
    w[q] = word;
  }
}

// The codecs (a template argument of every low-precision kernel). quantize16 encodes this
// lane's 16 values; the lane group computes the block's scale. Every lane of the warp must call
// it (inactive lanes pass zeros). decode16<ACC> sets (ACC false) or adds to (ACC true) v.
//
// FP8: meta = the f32 scale amax / FP8_MAX (see the top of this file).
struct RcclxFp8 {
  static RCCLX_DEV RcclxQ16 quantize16(const float v[16]) {
    const RcclxAmax am = rcclx_amax16(v);
    const float amax = am.group;
    const bool zero = !(amax >= 1e-30f);
    const float inv = zero ? 0.f : RCCLX_FP8_MAX / amax;
    uint32_t w[4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
      w[q] = rcclx_f32x4_to_e4m3x4(rcclx_f32x4{v[q * 4] * inv, v[q * 4 + 1] * inv, v[q * 4 + 2] * inv, v[q * 4 + 3] * inv});
    if (!am.finite) rcclx_nan_codes(v, w, RCCLX_FP8_NAN);  // rare
    RcclxQ16 r;
    r.codes.x = w[0];
    r.codes.y = w[1];
    r.codes.z = w[2];
    r.codes.w = w[3];
    r.meta = rcclx_f32_as_u32(zero ? 0.f : amax / RCCLX_FP8_MAX);
    return r;
  }
  template <bool ACC>
  static RCCLX_DEV void decode16(const RcclxQ16& q, float v[16]) {
    const uint32_t w[4] = {q.codes.x, q.codes.y, q.codes.z, q.codes.w};
    const float scale = rcclx_u32_as_f32(q.meta);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const rcclx_f32x4 f = rcclx_e4m3x4_to_f32x4(w[i]);
      const float d[4] = {f.x * scale, f.y * scale, f.z * scale, f.w * scale};
#pragma unroll
      for (int e = 0; e < 4; ++e) v[i * 4 + e] = ACC ? v[i * 4 + e] + d[e] : d[e];
    }
  }
};

// INT8 (defined at the top of this file): block scale S = amax / 127
// rounded up to a bf16 value (8 significant bits); lane L of the block's 8 lanes scales by
// S * 2^-k_L, k_L in 0..3 the largest with lane amax * (1/S) * 2^k_L <= 127, so a lane of
// small values keeps up to 3 more bits (heavy-tailed data). code = clamp(rint(x * (1/S) *
// 2^k_L), -127, 127); -128 (0x80) is NaN (NaN/inf inputs). meta = S's upper 16 bits | k_L at
// bits 2L. Decode: code * (S * 2^-k_L), exact in f32 (7 x 8 significant bits). Wire size is
// FP8's: one byte per element and 4 bytes per block.
struct RcclxInt8 {
  static RCCLX_DEV RcclxQ16 quantize16(const float v[16]) {
    const RcclxAmax amax = rcclx_amax16(v);
    const bool zero = !(amax.group >= 1e-30f);
    uint32_t sbits = rcclx_f32_as_u32(amax.group / 127.f);
    if (sbits & 0xffffu) sbits = (sbits & 0xffff0000u) + 0x10000u;  // round up to bf16
    const float inv = zero ? 0.f : 1.f / rcclx_u32_as_f32(sbits);
    const float t = amax.lane * inv;
    const int k = t * 8.f <= 127.f ? 3 : t * 4.f <= 127.f ? 2 : t * 2.f <= 127.f ? 1 : 0;
    // x * (inv * 2^k) == (x * inv) * 2^k: scaling by 2^k is exact (values small enough to be
    // subnormal round to code 0 either way).
    const float lane_inv = inv * (float)(1 << k);
    // |x * lane_inv| < 127.5 for finite x (amax_lane * inv * 2^k <= 127 for k > 0, and
    // amax * inv <= 127 (1 + 2^-24)^3 for k = 0), so rint() is already in [-127, 127] and the
    // model's clamp never acts. Adding 1.5 * 2^23 rounds to an integer (ties to even, as
    // rint) held in the low bits: the code byte, without a float-to-int conversion.
    uint32_t w[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint32_t word = 0;
#pragma unroll
      for (int e = 0; e < 4; ++e) word |= (rcclx_f32_as_u32(v[q * 4 + e] * lane_inv + 12582912.f) & 0xffu) << (8 * e);
      w[q] = word;
    }
    if (!amax.finite) rcclx_nan_codes(v, w, 0x80u);  // rare
    uint32_t shifts = zero ? 0u : (uint32_t)k << (2 * rcclx_qlane());
    shifts |= rcclx_shfl_xor_u32(shifts, 1);
    shifts |= rcclx_shfl_xor_u32(shifts, 2);
    shifts |= rcclx_shfl_xor_u32(shifts, 4);
    RcclxQ16 r;
    r.codes.x = w[0];
    r.codes.y = w[1];
    r.codes.z = w[2];
    r.codes.w = w[3];
    r.meta = zero ? 0u : (sbits & 0xffff0000u) | shifts;
    return r;
  }
  template <bool ACC>
  static RCCLX_DEV void decode16(const RcclxQ16& q, float v[16]) {
    // Biased codes (code + 128, 0..255); 0 is the NaN code.
    const uint32_t u[4] = {q.codes.x ^ 0x80808080u, q.codes.y ^ 0x80808080u, q.codes.z ^ 0x80808080u,
                           q.codes.w ^ 0x80808080u};
    const int k = (q.meta >> (2 * rcclx_qlane())) & 3;
    const float scale = rcclx_u32_as_f32(q.meta & 0xffff0000u) * rcclx_u32_as_f32((uint32_t)(127 - k) << 23);
    // A zero byte in any word (the classic has-zero-byte test): a NaN code is present.
    uint32_t zero_byte = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) zero_byte |= (u[i] - 0x01010101u) & ~u[i] & 0x80808080u;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        // 2^23 + biased code, exactly, minus 2^23 + 128: the code as a float, with no
        // int-to-float conversion (a quarter-rate instruction).
        const float d = (rcclx_byte_plus_2p23(u[i], e) - 8388736.f) * scale;
        v[i * 4 + e] = ACC ? v[i * 4 + e] + d : d;
      }
    }
    if (zero_byte) {  // rare
#pragma unroll
      for (int i = 0; i < 16; ++i)
        if (((u[i / 4] >> (8 * (i % 4))) & 0xffu) == 0) v[i] = rcclx_u32_as_f32(0x7fc00000u);
    }
  }
};

#endif  // RCCLX_CODEC_CUH
