// rcclx_port.h - the ONLY file in hip_kernels/ that knows HIP (AMD) from CUDA (NVIDIA).
//
// Kernels include this header first and then use only what it provides (plus the CUDA
// keywords __global__ / __device__ / __shared__ / __launch_bounds__ / __restrict__ and
// threadIdx / blockIdx / blockDim / gridDim / __syncthreads(), which work on both).
//
// Compilers (see build/toolchain.rs):
//   NVIDIA  nvcc 13.0 (__CUDACC__)                       -> sm_90 cubin + compute_90 PTX
//   AMD     clang -x hip --cuda-device-only -nogpuinc    -> gfx942 (clang >= 19), gfx950 (clang >= 20)
//           (__HIP__). No ROCm headers or device libraries: everything below is a clang builtin.
//
// Conventions:
//   * Flags and counters are uint32_t "epochs": monotonic, never reset during a comm's life,
//     compared with rcclx_epoch_geq (wrap-around safe).
//   * Every "sys" helper is system scope: correct for memory of this GPU, of a peer GPU
//     (P2P / IPC mapping) and for host-mapped pinned memory. Pointers must be global memory
//     (device, peer or host-mapped), never __shared__ or local.
//   * Each helper's comment states its memory-ordering contract in one line ("order:").
//   * 16-byte vector helpers need 16-byte aligned pointers.
//
// Caveats:
//   * AMD gridDim.x is read from the code-object-v5 hidden kernel argument block_count_x, and
//     blockDim from the hidden group_size_x (clang does that itself). The code object MUST be
//     built with -mcode-object-version=5 (build/toolchain.rs pins it) and launched by the HIP runtime
//     (hipModuleLaunchKernel / hipExtModuleLaunchKernel fill the hidden arguments).
//   * FP8: NVIDIA and gfx950 use OCP E4M3FN (max 448, NaN 0x7F/0xFF); gfx942 hardware uses
//     E4M3FNUZ (max 240, bias 8, NaN 0x80, no -0). Bytes are NOT interchangeable between
//     the two: RCCLX_FP8_FNUZ tells which one this compilation produces.
//   * AMD s_sleep takes an immediate only, so the spin-wait back-off has two fixed steps.
#ifndef RCCLX_PORT_H
#define RCCLX_PORT_H 1

// =====================================================================================
// AMD: clang HIP mode, builtins only (embedded form of toolchain.md's mini_hip.h)
// =====================================================================================
#if defined(__HIP__)

#include <stdint.h>
#include <stddef.h>

// why: -nogpuinc drops the ROCm headers that normally define these keywords.
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
// why: CUDA's __launch_bounds__(maxThreads[, minBlocks]); AMD only takes the thread bound.
#define RCCLX_FIRST_ARG_(a, ...) a
#define __launch_bounds__(...) \
  __attribute__((amdgpu_flat_work_group_size(1, RCCLX_FIRST_ARG_(__VA_ARGS__, 0))))

#define RCCLX_DEV __device__ __forceinline__

// why: CUDA-style threadIdx.x etc. Same trick as clang's own HIP headers: a property whose
// getter is a builtin, on a weak extern object that is never really read.
#define RCCLX_DIM3_(name, ex, ey, ez)                                                  \
  struct rcclx_dim3_##name##_t {                                                      \
    RCCLX_DEV uint32_t get_x() const { return (ex); }                                 \
    RCCLX_DEV uint32_t get_y() const { return (ey); }                                 \
    RCCLX_DEV uint32_t get_z() const { return (ez); }                                 \
    __declspec(property(get = get_x)) uint32_t x;                                     \
    __declspec(property(get = get_y)) uint32_t y;                                     \
    __declspec(property(get = get_z)) uint32_t z;                                     \
  };                                                                                   \
  extern const __device__ __attribute__((weak)) rcclx_dim3_##name##_t name;
RCCLX_DIM3_(threadIdx, __builtin_amdgcn_workitem_id_x(), __builtin_amdgcn_workitem_id_y(),
            __builtin_amdgcn_workitem_id_z())
RCCLX_DIM3_(blockIdx, __builtin_amdgcn_workgroup_id_x(), __builtin_amdgcn_workgroup_id_y(),
            __builtin_amdgcn_workgroup_id_z())
RCCLX_DIM3_(blockDim, __builtin_amdgcn_workgroup_size_x(), __builtin_amdgcn_workgroup_size_y(),
            __builtin_amdgcn_workgroup_size_z())
// why: COv5 hidden args start with block_count_x/y/z (uint32 at +0/+4/+8 of implicitarg).
RCCLX_DIM3_(gridDim, ((const uint32_t*)__builtin_amdgcn_implicitarg_ptr())[0],
            ((const uint32_t*)__builtin_amdgcn_implicitarg_ptr())[1],
            ((const uint32_t*)__builtin_amdgcn_implicitarg_ptr())[2])
#undef RCCLX_DIM3_

// order: block barrier; every thread's earlier memory ops (any address) are visible to the
// block after it (workgroup-scope release + acquire around s_barrier, as HIP does).
__device__ __forceinline__ void __syncthreads() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

#if defined(__HIP_DEVICE_COMPILE__) && !defined(__GFX9__)
#error "rcclx_port.h: only gfx9 (gfx942, gfx950) AMD targets are supported (wave64, s_memrealtime)"
#endif
#define RCCLX_WARP_SIZE 64

// 16-byte vectors. may_alias: kernels reinterpret float/bf16/fp8 buffers as 16-byte chunks.
struct __attribute__((aligned(16), may_alias)) rcclx_u32x4 { uint32_t x, y, z, w; };
struct __attribute__((aligned(16), may_alias)) rcclx_f32x4 { float x, y, z, w; };
struct __attribute__((aligned(8), may_alias)) rcclx_f32x2 { float x, y; };

RCCLX_DEV uint32_t rcclx_f32_as_u32(float f) { return __builtin_bit_cast(uint32_t, f); }
RCCLX_DEV float rcclx_u32_as_f32(uint32_t u) { return __builtin_bit_cast(float, u); }
// order: plain (weak) 16-byte store, one instruction. why: a struct copy (`*p = v`) may be
// split into four 4-byte stores when its fields come from different computations (seen in the
// NVIDIA PTX for the low-precision scale words, which go to a peer), so the store is written as
// one 4-word vector. p 16-byte aligned, global memory.
RCCLX_DEV void rcclx_st16(rcclx_u32x4* p, rcclx_u32x4 v) {
  typedef uint32_t rcclx_v4u_ __attribute__((ext_vector_type(4), may_alias));
  *(rcclx_v4u_*)p = rcclx_v4u_{v.x, v.y, v.z, v.w};
}

// ---- the memory model, AMD (GFX942 / GFX950) ----------------------------------------------
// What LLVM's AMDGPUUsage ("Memory Model GFX942") requires, written out so that nothing rests on
// the compiler: a system-scope release is `buffer_wbl2 sc0 sc1` (write the L2 back) followed by
// `s_waitcnt vmcnt(0)` (the writeback and this wave's earlier memory operations complete) before
// the store that publishes; an acquire is `buffer_inv sc0 sc1` (drop L1 and non-local L2 lines)
// after the load that observed the flag. clang 19 (gfx942) and 22 (gfx950) drop the wait after
// `buffer_wbl2` (llvm/llvm-project PR 178316), so every wait below is an explicit s_waitcnt,
// which the compiler keeps; build/isa_check.rs proves it on every kernel of every build.
// docs/memory-model.md lists each primitive and its instructions per target.

// s_waitcnt's immediate on gfx9: vmcnt in bits [3:0] and [15:14], expcnt [6:4], lgkmcnt [11:8].
#define RCCLX_WAITCNT_VMCNT0 0x0F70  // vmcnt(0); expcnt and lgkmcnt not waited for

// order: waits until every vector memory operation this wave issued (loads, stores, atomics,
// cache writebacks) has completed. A wave's own ordering point; orders nothing for other waves.
RCCLX_DEV void rcclx_wait_vmem() { __builtin_amdgcn_s_waitcnt(RCCLX_WAITCNT_VMCNT0); }

// order: release, sys: this wave's earlier loads/stores, and every store another wave of the
// block completed before a __syncthreads this thread passed (rcclx_block_publish), are visible
// to every agent before the value is. One L2 writeback per executing wave.
RCCLX_DEV void rcclx_st_release_sys(uint32_t* p, uint32_t v) {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "");  // buffer_wbl2 sc0 sc1
  rcclx_wait_vmem();                             // ... and its wait, which clang may drop
  __hip_atomic_store(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
// order: relaxed, sys: one poll of a flag another agent releases: atomic (never torn, never a
// stale cached copy), orders nothing. After the poll that succeeds: rcclx_acquire_sys().
RCCLX_DEV uint32_t rcclx_poll_sys(const uint32_t* p) {
  return __hip_atomic_load(p, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
// order: acquire, sys, after rcclx_poll_sys saw the flag: this wave's later loads see what the
// flag's releaser published (one L1 + L2 invalidate per wait, not one per poll, as RCCL).
RCCLX_DEV void rcclx_acquire_sys() {
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "");  // buffer_inv sc0 sc1
  rcclx_wait_vmem();                             // the invalidate done before the block barrier
}
// order: none. The pause between two polls: RCCL's s_sleep 1 (64 clocks) keeps spinning waves
// from flooding the memory system and the CU's issue slots.
RCCLX_DEV void rcclx_poll_pause() { __builtin_amdgcn_s_sleep(1); }
// order: every thread of a block, before the __syncthreads after which one thread releases
// for the whole block: this wave's stores have completed (reached L2 or, for uncached memory,
// memory). why: vmcnt is per wave, and a workgroup barrier does not wait for it, so the
// releasing wave's wait alone would not cover the other waves' stores.
RCCLX_DEV void rcclx_block_publish() { rcclx_wait_vmem(); }
// order: relaxed, sys: atomic (never torn, never cached stale), orders nothing else.
RCCLX_DEV uint32_t rcclx_ld_relaxed_sys(const uint32_t* p) {
  return __hip_atomic_load(p, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
// order: relaxed, sys; single-copy atomic 64-bit access (the LL protocol relies on a payload
// and its flag arriving together in one 8-byte word; nothing else is ordered).
RCCLX_DEV uint64_t rcclx_ld_relaxed_sys_u64(const uint64_t* p) {
  return __hip_atomic_load(p, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
RCCLX_DEV void rcclx_st_relaxed_sys_u64(uint64_t* p, uint64_t v) {
  __hip_atomic_store(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
// order: relaxed, sys. A 16-byte LL unit as two flagged 8-byte words; each word is
// single-copy atomic (the unit as a whole need not be). p 16-byte aligned.
RCCLX_DEV void rcclx_st_ll_unit(uint64_t* p, uint64_t w0, uint64_t w1) {
  rcclx_st_relaxed_sys_u64(p, w0);
  rcclx_st_relaxed_sys_u64(p + 1, w1);
}
RCCLX_DEV void rcclx_ld_ll_unit(const uint64_t* p, uint64_t* w0, uint64_t* w1) {
  *w0 = rcclx_ld_relaxed_sys_u64(p);
  *w1 = rcclx_ld_relaxed_sys_u64(p + 1);
}
// ---- LL128 lines (hip_kernels/ll128.cuh) -------------------------------------------------
// A line is the unit the hardware is assumed never to tear when one wave instruction stores it:
// 64 bytes (4 lanes x 16) on gfx942/gfx950, the unit RCCL's LL128 relies on there. Not part of
// AMD's memory model: hardware behaviour, as docs/memory-model.md says.
#define RCCLX_LL128_LINE 64
// Cache policy bits of a buffer instruction on gfx940+: sc0 (bit 0) and sc1 (bit 4), i.e.
// system coherence, the bits a system-scope atomic access carries.
#define RCCLX_BUFFER_SC_SYS 17
// Word 3 of a raw buffer resource on gfx9 (what AMD's own kernels use): no swizzle, no format.
#define RCCLX_BUFFER_WORD3 0x00020000
// A buffer resource over [base, base + bytes): the base must be the same in every lane (kernel
// arguments and uniform offsets), else clang loops over the lanes' values.
RCCLX_DEV __amdgpu_buffer_rsrc_t rcclx_buffer(const void* base, uint32_t bytes) {
  return __builtin_amdgcn_make_buffer_rsrc(const_cast<void*>(base), 0, (int)bytes, RCCLX_BUFFER_WORD3);
}
typedef uint32_t rcclx_v4u_t __attribute__((ext_vector_type(4)));
// order: relaxed, sys: one 16-byte store instruction (buffer_store_dwordx4 sc0 sc1), no wait
// after it; the lanes of a line store it in the same instruction. base uniform (rcclx_buffer),
// off 16-byte aligned and below `bytes`. why a buffer store: clang has no 16-byte atomic, and a
// volatile store waits for its completion (s_waitcnt vmcnt(0)) after every store.
RCCLX_DEV void rcclx_st_ll128(uint64_t* base, uint32_t bytes, uint32_t off, uint64_t w0, uint64_t w1) {
  const rcclx_v4u_t v = {(uint32_t)w0, (uint32_t)(w0 >> 32), (uint32_t)w1, (uint32_t)(w1 >> 32)};
  __builtin_amdgcn_raw_buffer_store_b128(v, rcclx_buffer(base, bytes), off, 0, RCCLX_BUFFER_SC_SYS);
}
// order: relaxed, sys: one 16-byte load instruction (buffer_load_dwordx4 sc0 sc1). As above.
RCCLX_DEV void rcclx_ld_ll128(const uint64_t* base, uint32_t bytes, uint32_t off, uint64_t* w0, uint64_t* w1) {
  const rcclx_v4u_t v = __builtin_amdgcn_raw_buffer_load_b128(rcclx_buffer(base, bytes), off, 0, RCCLX_BUFFER_SC_SYS);
  *w0 = (uint64_t)v.x | ((uint64_t)v.y << 32);
  *w1 = (uint64_t)v.z | ((uint64_t)v.w << 32);
}
// order: relaxed, sys: one 4-byte load instruction (buffer_load_dword sc0 sc1) of a word of an
// LL128 region (a credit; base uniform, as above). The same load as rcclx_ld_relaxed_sys, as a
// buffer load so that the machine code tells an LL128 credit wait (it gates only stores and
// takes no acquire, docs/memory-model.md) from a flag wait (global_load_dword: an acquire must
// follow, build/isa_check.rs rule `acquire-missing`).
RCCLX_DEV uint32_t rcclx_ld_ll128_credit(const uint64_t* base, uint32_t bytes, uint32_t off) {
  return __builtin_amdgcn_raw_buffer_load_b32(rcclx_buffer(base, bytes), off, 0, RCCLX_BUFFER_SC_SYS);
}
// order: n/a. True in every lane when p holds in every active lane of the wavefront (all
// lanes of the wavefront must execute it).
RCCLX_DEV bool rcclx_warp_all(bool p) { return __builtin_amdgcn_ballot_w64(!p) == 0; }
RCCLX_DEV bool rcclx_warp_any(bool p) { return __builtin_amdgcn_ballot_w64(p) != 0; }

// order: relaxed, sys: returns the old value; orders nothing else. Host-mapped targets need
// PCIe atomics on AMD.
RCCLX_DEV uint32_t rcclx_atomic_add_sys_u32(uint32_t* p, uint32_t v) {
  return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}

// ---- code shape ------------------------------------------------------------------------------
// The 2-rank low-precision AllReduce encodes the next window's first step before a barrier
// (lowp.cuh, design note 20: measured faster on H200). Not on AMD: there clang keeps that
// work's registers live around the barrier's spin loop and spills (768 bytes of scratch per lane
// on gfx942), and its gain was never measured.
#define RCCLX_LOWP_ENCODE_AHEAD 0
// Low-precision decoding loads one block's codes at a time: both at once spilled on gfx950 (the
// FP8 f32 AllGather, 272 bytes of scratch per lane).
#define RCCLX_LOWP_DECODE_PAIRS 0

// ---- time ---------------------------------------------------------------------------
// order: none. Nanoseconds from s_memrealtime, the gfx9 constant 100 MHz "real time"
// counter (10 ns resolution, independent of shader clock; NOT __builtin_readcyclecounter,
// which is s_memtime = shader cycles). Only differences on the same GPU are meaningful.
RCCLX_DEV uint64_t rcclx_now_ns() { return __builtin_amdgcn_s_memrealtime() * 10ull; }
// order: none. Polite pause inside a spin loop: ~64 cycles first, ~512 cycles later
// (s_sleep N = 64*N clocks; the operand must be an immediate).
RCCLX_DEV void rcclx_backoff(uint32_t round) {
  if (round < 32) __builtin_amdgcn_s_sleep(1);
  else __builtin_amdgcn_s_sleep(8);
}

// ---- lanes --------------------------------------------------------------------------------
// order: n/a. Exchange a float with lane (lane ^ mask) of the same wavefront (ds_bpermute).
// Every lane of the wavefront must execute it.
RCCLX_DEV float rcclx_fmaxf(float a, float b) { return __builtin_fmaxf(a, b); }
RCCLX_DEV float rcclx_fminf(float a, float b) { return __builtin_fminf(a, b); }
RCCLX_DEV float rcclx_fabsf(float a) { return __builtin_fabsf(a); }
// Round to the nearest integer, ties to even (v_rndne_f32).
RCCLX_DEV float rcclx_rintf(float a) { return __builtin_rintf(a); }
RCCLX_DEV float rcclx_shfl_xor_f32(float v, int mask) {
  const int lane = __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
  return __builtin_bit_cast(float, __builtin_amdgcn_ds_bpermute((lane ^ mask) << 2, __builtin_bit_cast(int, v)));
}

// ---- float formats --------------------------------------------------------------------
// order: n/a (pure). IEEE fp16 <-> f32 through clang's _Float16 (v_cvt_f16_f32: RNE).
RCCLX_DEV float rcclx_f16_to_f32(uint16_t h) { return (float)__builtin_bit_cast(_Float16, h); }
RCCLX_DEV uint16_t rcclx_f32_to_f16_rne(float f) {
  return __builtin_bit_cast(uint16_t, (_Float16)f);
}

// ---- element arithmetic of the reductions ----------------------------------------------
// order: n/a (pure). The reduction steps of the stock library, one rounding each. On AMD
// through f32 (exact for fp16/bf16 inputs, then one RNE rounding: the same value as a native
// fp16/bf16 operation). Not checked against RCCL on hardware yet.
RCCLX_DEV float rcclx_fma_f32(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
RCCLX_DEV double rcclx_fma_f64(double a, double b, double c) { return __builtin_fma(a, b, c); }
RCCLX_DEV float rcclx_max_f32(float a, float b) { return __builtin_fmaxf(a, b); }
RCCLX_DEV float rcclx_min_f32(float a, float b) { return __builtin_fminf(a, b); }
RCCLX_DEV double rcclx_max_f64(double a, double b) { return __builtin_fmax(a, b); }
RCCLX_DEV double rcclx_min_f64(double a, double b) { return __builtin_fmin(a, b); }
RCCLX_DEV uint16_t rcclx_f32_to_bf16_rne(float f);
RCCLX_DEV float rcclx_bf16_to_f32(uint16_t h);
RCCLX_DEV uint16_t rcclx_f16_add(uint16_t a, uint16_t b) { return rcclx_f32_to_f16_rne(rcclx_f16_to_f32(a) + rcclx_f16_to_f32(b)); }
RCCLX_DEV uint16_t rcclx_f16_mul(uint16_t a, uint16_t b) { return rcclx_f32_to_f16_rne(rcclx_f16_to_f32(a) * rcclx_f16_to_f32(b)); }
RCCLX_DEV uint16_t rcclx_f16_max(uint16_t a, uint16_t b) { return rcclx_f32_to_f16_rne(__builtin_fmaxf(rcclx_f16_to_f32(a), rcclx_f16_to_f32(b))); }
RCCLX_DEV uint16_t rcclx_f16_min(uint16_t a, uint16_t b) { return rcclx_f32_to_f16_rne(__builtin_fminf(rcclx_f16_to_f32(a), rcclx_f16_to_f32(b))); }
RCCLX_DEV uint16_t rcclx_bf16_add(uint16_t a, uint16_t b) { return rcclx_f32_to_bf16_rne(rcclx_bf16_to_f32(a) + rcclx_bf16_to_f32(b)); }
RCCLX_DEV uint16_t rcclx_bf16_mul(uint16_t a, uint16_t b) { return rcclx_f32_to_bf16_rne(rcclx_bf16_to_f32(a) * rcclx_bf16_to_f32(b)); }
RCCLX_DEV uint16_t rcclx_bf16_max(uint16_t a, uint16_t b) { return rcclx_f32_to_bf16_rne(__builtin_fmaxf(rcclx_bf16_to_f32(a), rcclx_bf16_to_f32(b))); }
RCCLX_DEV uint16_t rcclx_bf16_min(uint16_t a, uint16_t b) { return rcclx_f32_to_bf16_rne(__builtin_fminf(rcclx_bf16_to_f32(a), rcclx_bf16_to_f32(b))); }

#if defined(__HIP_DEVICE_COMPILE__)
#if defined(__gfx942__) || defined(__gfx940__) || defined(__gfx941__)
#define RCCLX_FP8_FNUZ 1       // gfx94x hardware fp8 = E4M3FNUZ
#define RCCLX_FP8_MAX 240.0f   // largest finite E4M3FNUZ (0x7F)
#define RCCLX_FP8_NAN 0x80u    // the only NaN of E4M3FNUZ
#elif defined(__gfx950__)
#define RCCLX_FP8_FNUZ 0       // gfx950 hardware fp8 = OCP E4M3FN
#define RCCLX_FP8_MAX 448.0f   // largest finite E4M3FN (0x7E)
#define RCCLX_FP8_NAN 0x7Fu    // canonical E4M3FN NaN (0xFF is -NaN)
#else
#error "rcclx_port.h: no fp8 conversion for this AMD target (needs gfx942 or gfx950)"
#endif
#else  // host pass of a non-device-only compile: not used, keep the names defined
#define RCCLX_FP8_FNUZ 0
#define RCCLX_FP8_MAX 448.0f
#define RCCLX_FP8_NAN 0x7Fu
#endif

// why: v_cvt_pk_fp8_f32 as emitted by the builtin has its clamp bit clear, and then a value
// whose magnitude rounds above the format's max becomes NaN (0x80 on gfx942, 0x7F/0xFF on
// gfx950), not max. Clamping to +-RCCLX_FP8_MAX first makes every target saturating like
// NVIDIA's __NV_SATFINITE: +-inf -> +-max, NaN stays NaN (the compares are false for NaN).
RCCLX_DEV float rcclx_fp8_clamp(float x) {
  return x > RCCLX_FP8_MAX ? RCCLX_FP8_MAX : (x < -RCCLX_FP8_MAX ? -RCCLX_FP8_MAX : x);
}
// order: n/a (pure). a -> low byte, b -> high byte; RNE, saturating (see rcclx_fp8_clamp).
// E4M3FNUZ has no -0 and 0x80 is its NaN: a -0 or a negative value that rounds to zero must be
// 0x00 (codec.cuh), so a 0x80 from an input that is not NaN becomes 0x00 here, whatever the
// conversion gives (AMD documents no rule for it; a few ALU ops on gfx942 only).
RCCLX_DEV uint16_t rcclx_f32x2_to_e4m3x2(float a, float b) {
  uint16_t c = (uint16_t)__builtin_amdgcn_cvt_pk_fp8_f32(rcclx_fp8_clamp(a), rcclx_fp8_clamp(b), 0,
                                                         false);
#if RCCLX_FP8_FNUZ
  if ((c & 0xffu) == 0x80u && a == a) c &= 0xff00u;
  if ((c >> 8) == 0x80u && b == b) c &= 0x00ffu;
#endif
  return c;
}
// order: n/a (pure). The float 2^23 + (byte e of u), i.e. bits 0x4B0000bb: a code byte as a
// float without an int-to-float conversion. e in 0..3.
RCCLX_DEV float rcclx_byte_plus_2p23(uint32_t u, int e) {
  return __builtin_bit_cast(float, 0x4B000000u | ((u >> (8 * e)) & 0xffu));
}
// order: n/a (pure). Low byte -> .x, high byte -> .y.
RCCLX_DEV rcclx_f32x2 rcclx_e4m3x2_to_f32x2(uint16_t v) {
  typedef float rcclx_v2f_ __attribute__((ext_vector_type(2)));
  rcclx_v2f_ r = __builtin_amdgcn_cvt_pk_f32_fp8((int)v, false);
  return rcclx_f32x2{r.x, r.y};
}

// =====================================================================================
// NVIDIA: nvcc
// =====================================================================================
#elif defined(__CUDACC__)

#include <stdint.h>
#include <stddef.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#define RCCLX_DEV __device__ __forceinline__
#define RCCLX_WARP_SIZE 32

// why: CUDA already has 16-byte vector types with the right alignment; alias them.
typedef uint4 rcclx_u32x4;
typedef float4 rcclx_f32x4;
typedef float2 rcclx_f32x2;

// order: plain (weak) 16-byte store, one instruction. why: nvcc split `*p = v` into four
// 4-byte stores where the fields came from different computations (the low-precision scale
// words, a 16-byte store to a peer, and the first output vector of a decode: measured in the
// PTX), and a small store to a peer costs nearly as much link time as a large one.
// p 16-byte aligned, global memory.
RCCLX_DEV void rcclx_st16(rcclx_u32x4* p, rcclx_u32x4 v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

RCCLX_DEV uint32_t rcclx_f32_as_u32(float f) { return __float_as_uint(f); }
RCCLX_DEV float rcclx_u32_as_f32(uint32_t u) { return __uint_as_float(u); }

// ---- the memory model, NVIDIA (PTX, sm_70+) -------------------------------------------------
// The same primitives as AMD's above, in the PTX memory model, where the hardware orders a
// release itself (ptxas emits the fence with the store) and a release by one thread after
// bar.sync is cumulative over the block's earlier writes (NCCL's pattern): nothing to wait for
// by hand. docs/memory-model.md lists the SASS each compiles to.

// order: release, sys: this thread's earlier loads/stores, and the block's before a
// __syncthreads it passed, are visible before the value is.
RCCLX_DEV void rcclx_st_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// order: acquire, sys: one poll; an acquire load is the cheapest correct poll in PTX (NCCL's).
RCCLX_DEV uint32_t rcclx_poll_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// order: none needed: every poll was an acquire.
RCCLX_DEV void rcclx_acquire_sys() {}
// order: none. Polls spin without a pause (the barrier is the latency floor).
RCCLX_DEV void rcclx_poll_pause() {}
// order: none needed: bar.sync orders the block's stores before the flag thread's
// st.release.sys, and PTX release is cumulative over them.
RCCLX_DEV void rcclx_block_publish() {}
// order: relaxed, sys: atomic (never torn, never cached stale), orders nothing else.
RCCLX_DEV uint32_t rcclx_ld_relaxed_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// order: relaxed, sys; single-copy atomic 64-bit access (the LL protocol relies on a payload
// and its flag arriving together in one 8-byte word; nothing else is ordered).
RCCLX_DEV uint64_t rcclx_ld_relaxed_sys_u64(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
// order: relaxed (volatile: never cached, as NCCL's LL protocol). A 16-byte LL unit in one
// vector access; each 8-byte half is single-copy atomic, which is all the protocol needs
// (every half carries its own flag). p 16-byte aligned.
RCCLX_DEV void rcclx_st_ll_unit(uint64_t* p, uint64_t w0, uint64_t w1) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" :: "l"(p), "l"(w0), "l"(w1) : "memory");
}
RCCLX_DEV void rcclx_ld_ll_unit(const uint64_t* p, uint64_t* w0, uint64_t* w1) {
  uint64_t a, b;
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
  *w0 = a;
  *w1 = b;
}
// order: relaxed, sys: returns the old value; orders nothing else.
RCCLX_DEV uint32_t rcclx_atomic_add_sys_u32(uint32_t* p, uint32_t v) {
  return atomicAdd_system(p, v);
}
// ---- LL128 lines (hip_kernels/ll128.cuh) -------------------------------------------------
// 128 bytes (8 lanes x 16) on NVIDIA: the unit NCCL's LL128 relies on over NVLink (hardware
// behaviour, not the PTX model; docs/memory-model.md).
#define RCCLX_LL128_LINE 128
// order: relaxed, sys: one 16-byte store instruction (st.relaxed.sys.global.v2.b64); the lanes of
// a line store it in the same instruction. base + off 16-byte aligned, global memory; `bytes`
// (the region's size) is AMD's bounds check, unused here.
RCCLX_DEV void rcclx_st_ll128(uint64_t* base, uint32_t, uint32_t off, uint64_t w0, uint64_t w1) {
  asm volatile("st.relaxed.sys.global.v2.b64 [%0], {%1, %2};" ::"l"((char*)base + off), "l"(w0), "l"(w1) : "memory");
}
// order: relaxed, sys: one 16-byte load instruction (ld.relaxed.sys.global.v2.b64).
RCCLX_DEV void rcclx_ld_ll128(const uint64_t* base, uint32_t, uint32_t off, uint64_t* w0, uint64_t* w1) {
  uint64_t x, y;
  asm volatile("ld.relaxed.sys.global.v2.b64 {%0, %1}, [%2];" : "=l"(x), "=l"(y) : "l"((const char*)base + off) : "memory");
  *w0 = x;
  *w1 = y;
}
// order: relaxed, sys: a word of an LL128 region (a credit), rcclx_ld_relaxed_sys at base + off.
RCCLX_DEV uint32_t rcclx_ld_ll128_credit(const uint64_t* base, uint32_t, uint32_t off) {
  return rcclx_ld_relaxed_sys((const uint32_t*)((const char*)base + off));
}
// order: n/a. True in every lane when p holds in every lane of the warp (all 32 lanes must
// execute it).
RCCLX_DEV bool rcclx_warp_all(bool p) { return __all_sync(0xffffffffu, p); }
RCCLX_DEV bool rcclx_warp_any(bool p) { return __any_sync(0xffffffffu, p); }


// ---- code shape ------------------------------------------------------------------------------
// See the AMD section: encode ahead of the barrier in the 2-rank low-precision AllReduce.
#define RCCLX_LOWP_ENCODE_AHEAD 1
// See the AMD section: both blocks' codes in flight when decoding (2 % faster AllGather on H200).
#define RCCLX_LOWP_DECODE_PAIRS 1

// ---- time ---------------------------------------------------------------------------
// order: none. %globaltimer: nanoseconds (updates every ~0.03-1 us depending on the GPU).
// Only differences on the same GPU are meaningful.
RCCLX_DEV uint64_t rcclx_now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// order: none. Polite pause inside a spin loop: ~20 ns first, ~200 ns later.
RCCLX_DEV void rcclx_backoff(uint32_t round) { __nanosleep(round < 32 ? 20u : 200u); }

// ---- lanes --------------------------------------------------------------------------------
// order: n/a. Exchange a float with lane (lane ^ mask) of the same warp. Every lane of the
// warp must execute it.
RCCLX_DEV float rcclx_shfl_xor_f32(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
RCCLX_DEV float rcclx_fmaxf(float a, float b) { return fmaxf(a, b); }
RCCLX_DEV float rcclx_fminf(float a, float b) { return fminf(a, b); }
RCCLX_DEV float rcclx_fabsf(float a) { return fabsf(a); }
// Round to the nearest integer, ties to even (cvt.rni.f32.f32).
RCCLX_DEV float rcclx_rintf(float a) { return rintf(a); }

// ---- float formats --------------------------------------------------------------------
// order: n/a (pure). IEEE fp16 <-> f32 (cvt.rn).
RCCLX_DEV float rcclx_f16_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }
RCCLX_DEV uint16_t rcclx_f32_to_f16_rne(float f) { return __half_as_ushort(__float2half_rn(f)); }

// ---- element arithmetic of the reductions ----------------------------------------------
// order: n/a (pure). why: results must be bit-identical to NCCL's, so these are the very
// intrinsics of NCCL's reduction functions (src/device/reduce_kernel.h, sm_80+): fmaxf/fminf,
// fmax/fmin, and __hadd/__hmul/__hmax/__hmin on half and bf16 (NaN ignored by max/min unless
// both are NaN, +0 > -0).
RCCLX_DEV float rcclx_fma_f32(float a, float b, float c) { return fmaf(a, b, c); }
RCCLX_DEV double rcclx_fma_f64(double a, double b, double c) { return fma(a, b, c); }
RCCLX_DEV float rcclx_max_f32(float a, float b) { return fmaxf(a, b); }
RCCLX_DEV float rcclx_min_f32(float a, float b) { return fminf(a, b); }
RCCLX_DEV double rcclx_max_f64(double a, double b) { return fmax(a, b); }
RCCLX_DEV double rcclx_min_f64(double a, double b) { return fmin(a, b); }
#define RCCLX_H_(name, expr)                                                           \
  RCCLX_DEV uint16_t rcclx_f16_##name(uint16_t a_, uint16_t b_) {                      \
    const __half a = __ushort_as_half(a_), b = __ushort_as_half(b_);                  \
    return __half_as_ushort(expr);                                                    \
  }                                                                                   \
  RCCLX_DEV uint16_t rcclx_bf16_##name(uint16_t a_, uint16_t b_) {                     \
    const __nv_bfloat16 a = __ushort_as_bfloat16(a_), b = __ushort_as_bfloat16(b_);   \
    return __bfloat16_as_ushort(expr);                                                \
  }
RCCLX_H_(add, __hadd(a, b))
RCCLX_H_(mul, __hmul(a, b))
RCCLX_H_(max, __hmax(a, b))
RCCLX_H_(min, __hmin(a, b))
#undef RCCLX_H_

#define RCCLX_FP8_FNUZ 0       // NVIDIA fp8 = OCP E4M3FN
#define RCCLX_FP8_MAX 448.0f   // largest finite E4M3FN (0x7E)
#define RCCLX_FP8_NAN 0x7Fu    // canonical E4M3FN NaN

// Provided for symmetry with AMD; the NVIDIA conversion already saturates in hardware.
RCCLX_DEV float rcclx_fp8_clamp(float x) {
  return x > RCCLX_FP8_MAX ? RCCLX_FP8_MAX : (x < -RCCLX_FP8_MAX ? -RCCLX_FP8_MAX : x);
}
// order: n/a (pure). a -> low byte, b -> high byte; RNE, saturating (cvt.rn.satfinite:
// +-inf -> +-448, NaN -> NaN).
RCCLX_DEV uint16_t rcclx_f32x2_to_e4m3x2(float a, float b) {
  return (uint16_t)__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
}
// order: n/a (pure). The float 2^23 + (byte e of u), i.e. bits 0x4B0000bb: a code byte as a
// float without an int-to-float conversion, in one byte permute (nvcc made the shift, mask and
// or three instructions). e in 0..3.
RCCLX_DEV float rcclx_byte_plus_2p23(uint32_t u, int e) {
  return __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7440u | (uint32_t)e));
}
// order: n/a (pure). Low byte -> .x, high byte -> .y.
RCCLX_DEV rcclx_f32x2 rcclx_e4m3x2_to_f32x2(uint16_t v) {
  return __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)v, __NV_E4M3)));
}

#else
#error "rcclx_port.h: compile with nvcc (CUDA) or clang -x hip (AMD)"
#endif

// =====================================================================================
// Common to both vendors (built only from the primitives above)
// =====================================================================================

// Size check for kernel argument structs; the Rust mirror has the same assert (STYLE 14).
#define RCCLX_ASSERT_SIZE(T, N) \
  static_assert(sizeof(T) == (N), "sizeof(" #T ") != " #N ": update the Rust #[repr(C)] mirror")
#define RCCLX_ASSERT_ALIGN(T, N) \
  static_assert(alignof(T) == (N), "alignof(" #T ") != " #N ": update the Rust #[repr(C)] mirror")

RCCLX_ASSERT_SIZE(rcclx_u32x4, 16);
RCCLX_ASSERT_ALIGN(rcclx_u32x4, 16);
RCCLX_ASSERT_SIZE(rcclx_f32x4, 16);
RCCLX_ASSERT_SIZE(rcclx_f32x2, 8);

// order: n/a. Global linear thread index and grid-wide thread count (64-bit: no overflow in
// grid-stride loops).
RCCLX_DEV uint64_t rcclx_global_thread_id() {
  return (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
}
RCCLX_DEV uint64_t rcclx_grid_threads() { return (uint64_t)gridDim.x * blockDim.x; }

// order: plain (weak) 16-byte load (the store, rcclx_st16, is per vendor, above); use only on
// data published by a release/acquire pair or a barrier. p must be 16-byte aligned.
RCCLX_DEV rcclx_u32x4 rcclx_ld16(const rcclx_u32x4* p) { return *p; }

// order: n/a (pure). Wrap-around-safe epoch compare: true when a is at or after b, i.e.
// (int32_t)(a - b) >= 0 (RFC 1982 serial numbers; valid while |a - b| < 2^31).
RCCLX_DEV bool rcclx_epoch_geq(uint32_t a, uint32_t b) { return (int32_t)(a - b) >= 0; }

// order: none. Absolute deadline for rcclx_wait_geq_u32: now + timeout_ns, saturating
// (timeout_ns = UINT64_MAX means "never"; 0 means "check once").
RCCLX_DEV uint64_t rcclx_deadline_after(uint64_t timeout_ns) {
  const uint64_t now = rcclx_now_ns();
  return timeout_ns > UINT64_MAX - now ? UINT64_MAX : now + timeout_ns;
}

// order: acquire, sys (rcclx_poll_sys, then rcclx_acquire_sys). Spins with back-off until
// rcclx_epoch_geq(*flag, target); returns true then, or false once rcclx_now_ns() passes
// deadline_ns (from rcclx_deadline_after). Bounded: callers report false as a timeout.
RCCLX_DEV bool rcclx_wait_geq_u32(const uint32_t* flag, uint32_t target, uint64_t deadline_ns) {
  for (uint32_t round = 0;; ++round) {
    if (rcclx_epoch_geq(rcclx_poll_sys(flag), target)) {
      rcclx_acquire_sys();
      return true;
    }
    if (rcclx_now_ns() >= deadline_ns) return false;
    rcclx_backoff(round);
  }
}

// order: n/a (pure). bf16 <-> f32 by bit manipulation (identical on every target).
RCCLX_DEV float rcclx_bf16_to_f32(uint16_t h) { return rcclx_u32_as_f32((uint32_t)h << 16); }
// order: n/a (pure). Round to nearest even; overflow -> inf; NaN stays NaN (sign and top
// payload bits kept, forced quiet).
RCCLX_DEV uint16_t rcclx_f32_to_bf16_rne(float f) {
  uint32_t u = rcclx_f32_as_u32(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
// order: n/a (pure). Two f32 -> two bf16 / fp16 (lo in the low half), round to nearest even,
// overflow -> inf; finite results as rcclx_f32_to_bf16_rne / rcclx_f32_to_f16_rne, a NaN stays
// a NaN (its payload may not). One instruction on NVIDIA (cvt.rn.{bf16,f16}x2.f32, sm_80+).
#if defined(__HIP__)
RCCLX_DEV uint32_t rcclx_f32x2_to_bf16x2_rne(float lo, float hi) {
  return (uint32_t)rcclx_f32_to_bf16_rne(lo) | ((uint32_t)rcclx_f32_to_bf16_rne(hi) << 16);
}
RCCLX_DEV uint32_t rcclx_f32x2_to_f16x2_rne(float lo, float hi) {
  return (uint32_t)rcclx_f32_to_f16_rne(lo) | ((uint32_t)rcclx_f32_to_f16_rne(hi) << 16);
}
#else
RCCLX_DEV uint32_t rcclx_f32x2_to_bf16x2_rne(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
RCCLX_DEV uint32_t rcclx_f32x2_to_f16x2_rne(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
#endif

// order: n/a (pure). Four f32 -> four e4m3 bytes (x in the lowest byte), saturating RNE.
RCCLX_DEV uint32_t rcclx_f32x4_to_e4m3x4(rcclx_f32x4 v) {
  return (uint32_t)rcclx_f32x2_to_e4m3x2(v.x, v.y) |
         ((uint32_t)rcclx_f32x2_to_e4m3x2(v.z, v.w) << 16);
}
// order: n/a (pure). Four e4m3 bytes (lowest byte -> .x) -> four f32.
RCCLX_DEV rcclx_f32x4 rcclx_e4m3x4_to_f32x4(uint32_t v) {
  const rcclx_f32x2 lo = rcclx_e4m3x2_to_f32x2((uint16_t)v);
  const rcclx_f32x2 hi = rcclx_e4m3x2_to_f32x2((uint16_t)(v >> 16));
  rcclx_f32x4 r;
  r.x = lo.x;
  r.y = lo.y;
  r.z = hi.x;
  r.w = hi.y;
  return r;
}

#endif  // RCCLX_PORT_H
