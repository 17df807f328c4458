// common.cuh - what every rcclx collective kernel shares: the argument struct, the element
// arithmetic of the reductions, the per-block barrier, the window counters, the slicing of a
// range over threads, and copy/reduce helpers.
//
// Per-rank resources (allocated by the host, src/clique/):
//   staging: 2 parity halves of `half_bytes`; window w of a call uses half (seq & 1).
//   flags:   uint32 [max_blocks][RCCLX_FLAG_STRIDE]; flags[b][p] = last barrier value that
//            block b of rank p announced to this rank (one 128-byte line per block).
//   ll:      LL inbox, uint64 [2 parities][nranks sources][ll_units][2], then the LL128 region
//            when LL128 is on (ll128.cuh).
//   seq:     uint32 [max_blocks], own memory only: windows run so far by block b.
//
// Barriers are per block index: block b of every rank handles the same element slice (the
// grid and the slicing depend only on count, dtype and rank count, identical on all ranks),
// so it only needs block b of the peers. Barrier values are seq*4 + k: monotonic, never reset,
// so replaying a CUDA/HIP graph needs nothing re-initialised, and the only per-call state, the
// window counter, lives in device memory (never in a kernel argument baked into a graph).
//
// Why one barrier per window is enough for reuse: window s+2 overwrites the half that window s
// used. A rank writes it only after passing the barrier of window s+1, which every peer
// reaches only after finishing its reads of window s. That holds per block because a position
// belongs to the same block in every window of a call (slicing never depends on the window's
// length). Across calls: a rank that finished a call passed a barrier (or received LL data, or
// an LL Broadcast's token) of it from every peer, so a peer is at most one call behind (calls
// of one communicator are serialized, also across streams: src/comm/order.rs); window counters
// are kept equal on all blocks (rcclx_seq_store), so the next call's first window writes the
// other half than the one that peer may still read. Every new kernel must keep that rule.
//
// Spin-waits end on the host's abort request (ncclCommAbort) and, only if the host set one,
// after `timeout_ns` (RCCLX_TIMEOUT_MS); either writes an error code into host-mapped
// `status[0]` and ends the kernel.
#ifndef RCCLX_COMMON_CUH
#define RCCLX_COMMON_CUH

#include "rcclx_port.h"

#define RCCLX_MAX_RANKS 8

// Traffic twin: a test program (gpu-tests' bench suite, hip_kernels/bench.cu) defines this to 1
// before including the kernels; their barriers then announce and wait for nothing, a flag wait
// (rcclx_wait_flag) returns at once and an LL pull loads its unit once without looking at its
// flag, so a kernel makes the same loads and stores without its synchronization (the proxy's
// T_kernel / T_twin). The library never sets it: the branches below fold away and its machine
// code is unchanged.
#ifndef RCCLX_TRAFFIC_TWIN
#define RCCLX_TRAFFIC_TWIN 0
#endif
#define RCCLX_THREADS 512
#define RCCLX_FLAG_STRIDE 32  // words per block in a flag array: no false sharing between blocks

enum : uint32_t { RCCLX_STATUS_OK = 0, RCCLX_STATUS_TIMEOUT = 1, RCCLX_STATUS_ABORTED = 2 };

// The one kernel argument of every rcclx kernel (mirror: src/clique/args.rs).
struct RcclxArgs {
  const void* send;            // user input (this rank)
  void* recv;                  // user output (this rank)
  uint64_t count;              // elements (bytes for the data-movement kernels)
  uint64_t window_elems;       // elements per window (multiple of the vector width; see each kernel)
  uint64_t half_bytes;         // bytes of one parity half of a staging buffer
  uint64_t timeout_ns;         // bound on each spin-wait (UINT64_MAX: none)
  char* staging[RCCLX_MAX_RANKS];       // every rank's staging buffer, mapped in this process
  uint32_t* flags[RCCLX_MAX_RANKS];     // every rank's flag array
  uint64_t* ll[RCCLX_MAX_RANKS];        // every rank's LL inbox (see the LL kernels)
  uint32_t* seq;               // this rank's per-block window counters
  uint32_t* status;            // host-mapped: [0] error (RCCLX_STATUS_*), [1] abort request
  uint64_t ll_units;           // 16-byte LL units per (parity, source rank) slot of an inbox
  uint64_t seq_slots;          // entries of `seq` (the largest grid)
  int32_t rank;
  int32_t nranks;
  int32_t root;                // rooted collectives: the root rank (0 for the others)
  int32_t pad;
  uint64_t stride;             // ReduceScatter: units between input blocks; AllGather: between
                               // output blocks (0: count; a host's blocks of a communicator
                               // spanning hosts are farther apart)
  uint64_t aux;                // the rail step's reduce-out: where the sums go (rail.cuh)
};
RCCLX_ASSERT_SIZE(RcclxArgs, 304);

// One kernel of the table (src/kernel_table.rs; build/main.rs writes one line per kernel),
// taking its family's argument struct by value. MIN_BLOCKS: blocks per multiprocessor the
// registers must allow (NVIDIA; AMD's __launch_bounds__ takes only the thread count).
#define RCCLX_KERNEL(NAME, ARGS, MIN_BLOCKS, FN, ...)                                      \
  extern "C" __global__ void __launch_bounds__(RCCLX_THREADS, MIN_BLOCKS) NAME(ARGS a) { FN<__VA_ARGS__>(a); }

// Written after a lambda's parameter list: the lambda is inlined before the optimizer runs, like
// every RCCLX_DEV function (otherwise clang first optimizes the lambda on its own: other code,
// more registers on AMD).
#define RCCLX_INLINE __attribute__((always_inline))

// ---- element types and reduction ops -------------------------------------------------------

// Integer element types (the reductions' 16-bit floats are structs, specialised below).
template <typename T> struct rcclx_is_int { static constexpr bool value = (T)3 / (T)2 == (T)1; };
template <typename T> struct rcclx_unsigned { typedef T type; };
template <> struct rcclx_unsigned<int8_t> { typedef uint8_t type; };
template <> struct rcclx_unsigned<int32_t> { typedef uint32_t type; };
template <> struct rcclx_unsigned<int64_t> { typedef uint64_t type; };

struct rcclx_half { uint16_t bits; };
struct rcclx_bf16 { uint16_t bits; };
template <> struct rcclx_is_int<rcclx_half> { static constexpr bool value = false; };
template <> struct rcclx_is_int<rcclx_bf16> { static constexpr bool value = false; };

// f32 view of the float types (the low-precision kernels compute in f32).
template <typename T> struct RcclxF32;
template <> struct RcclxF32<float> {
  RCCLX_DEV static float load(float v) { return v; }
  RCCLX_DEV static float store(float v) { return v; }
};
// store2: two values packed in one word (lo first), one instruction where the GPU has it.
template <> struct RcclxF32<rcclx_half> {
  RCCLX_DEV static float load(rcclx_half v) { return rcclx_f16_to_f32(v.bits); }
  RCCLX_DEV static rcclx_half store(float v) { rcclx_half h; h.bits = rcclx_f32_to_f16_rne(v); return h; }
  RCCLX_DEV static uint32_t store2(float lo, float hi) { return rcclx_f32x2_to_f16x2_rne(lo, hi); }
};
template <> struct RcclxF32<rcclx_bf16> {
  RCCLX_DEV static float load(rcclx_bf16 v) { return rcclx_bf16_to_f32(v.bits); }
  RCCLX_DEV static rcclx_bf16 store(float v) { rcclx_bf16 h; h.bits = rcclx_f32_to_bf16_rne(v); return h; }
  RCCLX_DEV static uint32_t store2(float lo, float hi) { return rcclx_f32x2_to_bf16x2_rne(lo, hi); }
};

enum { RCCLX_SUM = 0, RCCLX_PROD = 1, RCCLX_MAX = 2, RCCLX_MIN = 3, RCCLX_AVG = 4 };

// The reduction of the stock library, step for step (NCCL's reduce_kernel.h):
//   pre(x):       AVG of floating types multiplies each input by s = float(1.0 / nranks) (in the
//                 element type) before summing (PreMulSum); identity otherwise.
//   fold(acc, x): acc op pre(x), one op in the element type, one rounding: integers wrap,
//                 max/min of floats ignore a NaN unless both are NaN (fmaxf / __hmax). AVG of
//                 f32/f64 is one fused multiply-add, fma(x, s, acc): the stock library's
//                 compiled pre-multiply-then-add is contracted into one (measured on H200:
//                 avg(-maxsub, +maxsub) is -0 there, +0 with two roundings).
//   post(a):      AVG of integer types divides the (wrapped) sum by nranks, rounding toward 0.
// Ranks are combined in order 0, 1, ..., n-1, identical on every rank, so every rank's output
// is bit-identical. With 2 ranks that is the stock library's result for every input whose
// result does not depend on the order (fp64 NaN payloads and averages of subnormals do: the
// stock library itself gives different bits for them at different element positions).
template <typename T, int OP> struct RcclxRed;

template <typename T, int OP> struct RcclxIntRed {
  typedef typename rcclx_unsigned<T>::type U;
  RCCLX_DEV static T pre(T x, T) { return x; }
  RCCLX_DEV static T apply(T a, T b) {
    if (OP == RCCLX_PROD) return (T)((U)a * (U)b);
    if (OP == RCCLX_MAX) return a > b ? a : b;
    if (OP == RCCLX_MIN) return a < b ? a : b;
    return (T)((U)a + (U)b);  // SUM, AVG
  }
  RCCLX_DEV static T fold(T acc, T x, T) { return apply(acc, x); }
  RCCLX_DEV static T post(T a, int n) { return OP == RCCLX_AVG ? (T)(a / (T)n) : a; }
  RCCLX_DEV static T scalar(int) { return 0; }
};
#define RCCLX_INT_RED_(T) \
  template <int OP> struct RcclxRed<T, OP> : RcclxIntRed<T, OP> {};
RCCLX_INT_RED_(int8_t)
RCCLX_INT_RED_(uint8_t)
RCCLX_INT_RED_(int32_t)
RCCLX_INT_RED_(uint32_t)
RCCLX_INT_RED_(int64_t)
RCCLX_INT_RED_(uint64_t)
#undef RCCLX_INT_RED_

template <int OP> struct RcclxRed<float, OP> {
  RCCLX_DEV static float scalar(int n) { return (float)(1.0 / n); }
  RCCLX_DEV static float pre(float x, float s) { return OP == RCCLX_AVG ? x * s : x; }
  RCCLX_DEV static float apply(float a, float b) {
    if (OP == RCCLX_PROD) return a * b;
    if (OP == RCCLX_MAX) return rcclx_max_f32(a, b);
    if (OP == RCCLX_MIN) return rcclx_min_f32(a, b);
    return a + b;
  }
  RCCLX_DEV static float fold(float acc, float x, float s) { return OP == RCCLX_AVG ? rcclx_fma_f32(x, s, acc) : apply(acc, x); }
  RCCLX_DEV static float post(float a, int) { return a; }
};
template <int OP> struct RcclxRed<double, OP> {
  RCCLX_DEV static double scalar(int n) { return 1.0 / n; }
  RCCLX_DEV static double pre(double x, double s) { return OP == RCCLX_AVG ? x * s : x; }
  RCCLX_DEV static double apply(double a, double b) {
    if (OP == RCCLX_PROD) return a * b;
    if (OP == RCCLX_MAX) return rcclx_max_f64(a, b);
    if (OP == RCCLX_MIN) return rcclx_min_f64(a, b);
    return a + b;
  }
  RCCLX_DEV static double fold(double acc, double x, double s) { return OP == RCCLX_AVG ? rcclx_fma_f64(x, s, acc) : apply(acc, x); }
  RCCLX_DEV static double post(double a, int) { return a; }
};
#define RCCLX_HALF_RED_(T, P, TO_BITS_)                                                  \
  template <int OP> struct RcclxRed<T, OP> {                                             \
    RCCLX_DEV static T mk(uint16_t b) { T t; t.bits = b; return t; }                      \
    RCCLX_DEV static T scalar(int n) { return mk(TO_BITS_((float)(1.0 / n))); }           \
    RCCLX_DEV static T pre(T x, T s) { return OP == RCCLX_AVG ? mk(P##_mul(x.bits, s.bits)) : x; } \
    RCCLX_DEV static T apply(T a, T b) {                                                  \
      if (OP == RCCLX_PROD) return mk(P##_mul(a.bits, b.bits));                          \
      if (OP == RCCLX_MAX) return mk(P##_max(a.bits, b.bits));                           \
      if (OP == RCCLX_MIN) return mk(P##_min(a.bits, b.bits));                           \
      return mk(P##_add(a.bits, b.bits));                                                \
    }                                                                                     \
    RCCLX_DEV static T fold(T acc, T x, T s) { return apply(acc, pre(x, s)); }             \
    RCCLX_DEV static T post(T a, int) { return a; }                                       \
  };
RCCLX_HALF_RED_(rcclx_half, rcclx_f16, rcclx_f32_to_f16_rne)
RCCLX_HALF_RED_(rcclx_bf16, rcclx_bf16, rcclx_f32_to_bf16_rne)
#undef RCCLX_HALF_RED_

// ---- barrier ----------------------------------------------------------------------------

// A deadline that never passes when the host set no timeout.
RCCLX_DEV uint64_t rcclx_call_deadline(const RcclxArgs& a) {
  return a.timeout_ns == UINT64_MAX ? UINT64_MAX : rcclx_deadline_after(a.timeout_ns);
}

// Called every 1024 spins of a wait: true (and status[0] set) when the host asked to abort or
// the deadline passed. The abort word is host memory: a PCIe round trip, hence not every spin.
RCCLX_DEV bool rcclx_should_stop(const RcclxArgs& a, uint64_t deadline) {
  if (rcclx_ld_relaxed_sys(a.status + 1) != 0) {
    rcclx_st_release_sys(a.status, (uint32_t)RCCLX_STATUS_ABORTED);
    return true;
  }
  if (deadline != UINT64_MAX && rcclx_now_ns() >= deadline) {
    rcclx_st_release_sys(a.status, (uint32_t)RCCLX_STATUS_TIMEOUT);
    return true;
  }
  return false;
}

// order: acquire, sys (rcclx_poll_sys, then rcclx_acquire_sys). Waits until *flag has reached
// `value`; false on abort or timeout. Tight spin first (paused on AMD): the barrier is the
// latency floor.
RCCLX_DEV bool rcclx_wait_flag(const RcclxArgs& a, const uint32_t* flag, uint32_t value, uint64_t deadline) {
#if RCCLX_TRAFFIC_TWIN
  // A twin waits for nothing (an `if` would leave the loop below unreachable: a compiler warning).
  return true;
#else
  for (uint32_t round = 0;; ++round) {
    if (rcclx_epoch_geq(rcclx_poll_sys(flag), value)) {
      rcclx_acquire_sys();
      return true;
    }
    rcclx_poll_pause();
    if ((round & 1023) == 1023) {
      if (rcclx_should_stop(a, deadline)) return false;
      if (round > 65536) rcclx_backoff(round);
    }
  }
#endif
}

// Contract: every write this block made before the call (to its own staging or a peer's) is
// visible to block b of every peer after that peer's matching call returns, and vice versa.
// The port's publication protocol (rcclx_port.h): every wave completes its own memory
// operations (rcclx_block_publish), __syncthreads, then one thread per peer releases (one
// writeback per block on AMD) and waits for that peer's flag (one acquire per wait); the
// closing __syncthreads hands the acquire to the whole block. Returns false on abort/timeout.
RCCLX_DEV bool rcclx_barrier(const RcclxArgs& a, uint32_t value, uint64_t deadline, int* s_fail) {
  if (RCCLX_TRAFFIC_TWIN) return true;
  rcclx_block_publish();
  __syncthreads();
  const int p = threadIdx.x;
  if (p < a.nranks) {
    rcclx_st_release_sys(a.flags[p] + blockIdx.x * RCCLX_FLAG_STRIDE + a.rank, value);
    if (!rcclx_wait_flag(a, a.flags[a.rank] + blockIdx.x * RCCLX_FLAG_STRIDE + p, value, deadline)) *s_fail = 1;
  }
  __syncthreads();
  return *s_fail == 0;
}

// ---- window counters ---------------------------------------------------------------------

// Every block starts from its own counter; at the end each stores its final value and block 0
// stores the same value for the counters this grid did not launch. All counters thus stay
// equal whatever grid each call had, so a call's first window always uses the other parity
// half than the previous call's last window, on every block.
RCCLX_DEV uint32_t rcclx_seq_load(const RcclxArgs& a, uint32_t* s_seq, int* s_fail) {
  if (threadIdx.x == 0) { *s_seq = a.seq[blockIdx.x]; *s_fail = 0; }
  __syncthreads();
  return *s_seq;
}
RCCLX_DEV void rcclx_seq_store(const RcclxArgs& a, uint32_t seq) {
  if (threadIdx.x == 0) a.seq[blockIdx.x] = seq;
  if (blockIdx.x == 0)
    for (uint64_t b = gridDim.x + threadIdx.x; b < a.seq_slots; b += blockDim.x) a.seq[b] = seq;
}

// The barrier session of one call on one block, which every kernel opens first (in a kernel
// whose argument is `a`): `seq`, the block's window counter at the start of the call (a windowed
// loop advances it; rcclx_seq_store closes the session with its final value), `s_fail`, the
// block's failure flag (shared, set by a failed wait), and the wait `deadline`.
#define RCCLX_SESSION                                \
  __shared__ uint32_t s_seq;                         \
  __shared__ int s_fail;                             \
  uint32_t seq = rcclx_seq_load(a, &s_seq, &s_fail); \
  const uint64_t deadline = rcclx_call_deadline(a);

// ---- the window loop of the DDA kernels --------------------------------------------------

// One window of a call: elements [base, base + n) of the message, staged in the parity half at
// byte offset `half` of every rank's staging buffer.
struct RcclxWindow {
  uint64_t base;
  uint64_t n;
  uint64_t half;
};

// The head of a phase of rcclx_windows: a lambda of the kernel's arguments `a` and the window
// `w`, capturing the kernel's other locals by reference, inlined like an RCCLX_DEV function.
// `a` comes in as an argument, not a capture: a captured `a` goes through the closure's memory,
// where clang loses that it is kernel-argument memory (generic loads, more registers).
#define RCCLX_PHASE [&](const RcclxArgs& a, const RcclxWindow& w) RCCLX_INLINE

// No third phase (rcclx_windows with two).
struct RcclxNoPhase {
  RCCLX_DEV void operator()(const RcclxArgs&, const RcclxWindow&) const {}
};
template <typename P> struct RcclxIsPhase { static constexpr bool value = true; };
template <> struct RcclxIsPhase<RcclxNoPhase> { static constexpr bool value = false; };

// The work loop of every windowed DDA kernel (flat, tree, Broadcast, Reduce), which is then only its
// copy/reduce lines, one RCCLX_PHASE per phase, separated by barriers:
//   rcclx_windows(a, copy_in, reduce)          window: copy_in; barrier seq*4+1; reduce
//   rcclx_windows(a, copy_in, reduce, gather)  ...; barrier seq*4+2; gather
// over the windows of `window_elems` elements of [0, count). The session (RCCLX_SESSION) gives
// the window counter `seq`; it advances by one per window (the window's half: seq & 1), and
// rcclx_seq_store closes the call. A failed barrier (abort, timeout) ends the call; the failed
// window still counts. Everything inlines: the hot loops are the phases' own.
template <typename P0, typename P1, typename P2 = RcclxNoPhase>
RCCLX_DEV void rcclx_windows(const RcclxArgs& a, P0&& phase0, P1&& phase1, P2&& phase2 = P2()) {
  RCCLX_SESSION
  for (uint64_t base = 0; base < a.count; base += a.window_elems, ++seq) {
    const RcclxWindow w = {base, a.count - base < a.window_elems ? a.count - base : a.window_elems,
                           (uint64_t)(seq & 1) * a.half_bytes};
    phase0(a, w);
    if (!rcclx_barrier(a, seq * 4 + 1, deadline, &s_fail)) { ++seq; break; }
    phase1(a, w);
    if constexpr (RcclxIsPhase<P2>::value) {
      if (!rcclx_barrier(a, seq * 4 + 2, deadline, &s_fail)) { ++seq; break; }
      phase2(a, w);
    }
  }
  rcclx_seq_store(a, seq);
}

// ---- slicing: which block/thread handles which vector -----------------------------------

// Vector j of a range of `nvec` vectors belongs to block (j / blockDim) % gridDim: the same on
// every rank for the same range, which is what per-block barriers need. Each thread takes
// UNROLL vectors j, j + stride, ... per step so that many loads are in flight (bandwidth).
#define RCCLX_FOR_VEC_UNROLLED(j0, nvec, UNROLL)                                          \
  for (uint64_t j0 = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; j0 < (nvec);         \
       j0 += (uint64_t)(UNROLL) * gridDim.x * blockDim.x)
#define RCCLX_VEC_STRIDE ((uint64_t)gridDim.x * blockDim.x)
#define RCCLX_FOR_VEC(j, nvec)                                                          \
  for (uint64_t j = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; j < (nvec); j += RCCLX_VEC_STRIDE)

template <typename T> struct RcclxVec {
  static constexpr int N = 16 / sizeof(T);
  union U { rcclx_u32x4 v; T e[N]; };
};

RCCLX_DEV bool rcclx_aligned16(const void* p) { return ((uintptr_t)p & 15) == 0; }

// Copies n elements of src to dst. 16-byte vectors when both are aligned (sliced as above),
// element by element otherwise; the last n % vector elements by block 0.
template <typename T>
RCCLX_DEV void rcclx_copy(T* dst, const T* src, uint64_t n) {
  constexpr int N = RcclxVec<T>::N;
  constexpr int UNROLL = 4;
  const uint64_t nvec = n / N;
  if (rcclx_aligned16(src) && rcclx_aligned16(dst)) {
    const rcclx_u32x4* s = (const rcclx_u32x4*)src;
    rcclx_u32x4* d = (rcclx_u32x4*)dst;
    RCCLX_FOR_VEC_UNROLLED(j0, nvec, UNROLL) {
      rcclx_u32x4 v[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
        if (j0 + u * RCCLX_VEC_STRIDE < nvec) v[u] = rcclx_ld16(s + j0 + u * RCCLX_VEC_STRIDE);
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
        if (j0 + u * RCCLX_VEC_STRIDE < nvec) rcclx_st16(d + j0 + u * RCCLX_VEC_STRIDE, v[u]);
    }
  } else {
    RCCLX_FOR_VEC(j, nvec) for (int e = 0; e < N; ++e) dst[j * N + e] = src[j * N + e];
  }
  if (blockIdx.x == 0 && threadIdx.x < n % N) dst[nvec * N + threadIdx.x] = src[nvec * N + threadIdx.x];
}

// Reduces n elements at byte offset `off` of every rank's staging, in rank order (RcclxRed),
// into out[0, n) and, if `keep` is set, also into keep[0, n) (16-byte aligned).
template <typename T, int OP>
RCCLX_DEV void rcclx_reduce(const RcclxArgs& a, uint64_t off, uint64_t n, T* out, T* keep) {
  typedef RcclxRed<T, OP> R;
  constexpr int N = RcclxVec<T>::N;
  // Two vectors in flight per rank, except where two spilled on some target (build/isa_check.rs
  // fails such a build): 1-byte types, AVG, 64-bit integers, f32 MIN/MAX on sm_90.
  constexpr bool one = sizeof(T) == 1 || OP == RCCLX_AVG || (sizeof(T) == 8 && rcclx_is_int<T>::value) ||
                       (sizeof(T) == 4 && !rcclx_is_int<T>::value && (OP == RCCLX_MIN || OP == RCCLX_MAX));
  constexpr int UNROLL = one ? 1 : 2;
  typedef typename RcclxVec<T>::U U;
  const T s = R::scalar(a.nranks);
  const uint64_t nvec = n / N;
  const bool out_aligned = rcclx_aligned16(out);
  RCCLX_FOR_VEC_UNROLLED(j0, nvec, UNROLL) {
    // All loads of this step first (UNROLL vectors x all ranks), then the arithmetic.
    U in[UNROLL][RCCLX_MAX_RANKS];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int r = 0; r < RCCLX_MAX_RANKS; ++r)
        if (r < a.nranks && j0 + u * RCCLX_VEC_STRIDE < nvec)
          in[u][r].v = rcclx_ld16((const rcclx_u32x4*)(a.staging[r] + off) + j0 + u * RCCLX_VEC_STRIDE);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const uint64_t j = j0 + u * RCCLX_VEC_STRIDE;
      if (j >= nvec) break;
      U res;
#pragma unroll
      for (int e = 0; e < N; ++e) {
        T acc = R::pre(in[u][0].e[e], s);
#pragma unroll
        for (int r = 1; r < RCCLX_MAX_RANKS; ++r)
          if (r < a.nranks) acc = R::fold(acc, in[u][r].e[e], s);
        res.e[e] = R::post(acc, a.nranks);
      }
      if (out_aligned) rcclx_st16((rcclx_u32x4*)out + j, res.v);
      else for (int e = 0; e < N; ++e) out[j * N + e] = res.e[e];
      if (keep) rcclx_st16((rcclx_u32x4*)keep + j, res.v);
    }
  }
  if (blockIdx.x == 0 && threadIdx.x < n % N) {
    const uint64_t i = nvec * N + threadIdx.x;
    T acc = R::pre(((const T*)(a.staging[0] + off))[i], s);
    for (int r = 1; r < a.nranks; ++r) acc = R::fold(acc, ((const T*)(a.staging[r] + off))[i], s);
    const T res = R::post(acc, a.nranks);
    out[i] = res;
    if (keep) keep[i] = res;
  }
}

// ---- LL protocol (flagged 8-byte words; see the LL kernels) --------------------------------

// What every LL kernel starts with: the session's lines (RCCLX_SESSION: its call counter `seq`,
// s_fail, deadline) with this call's flag value between them (in that order the LL kernels
// compile to fewer registers). An LL call advances the counter by one: rcclx_seq_store(a, seq + 1).
#define RCCLX_LL_PROLOGUE                                    \
  __shared__ uint32_t s_seq;                                 \
  __shared__ int s_fail;                                     \
  const uint32_t seq = rcclx_seq_load(a, &s_seq, &s_fail);   \
  const uint32_t flag = seq + 1;                             \
  const uint64_t deadline = rcclx_call_deadline(a);

// Offset of inbox half `seq & 1` (in uint64 words); the host sizes the inbox by the clique's
// rank count (src/clique/local.rs ll_inbox_bytes).
RCCLX_DEV uint64_t rcclx_ll_parity(const RcclxArgs& a, uint32_t seq) {
  return (uint64_t)(seq & 1) * (uint64_t)a.nranks * a.ll_units * 2;
}

// The 8 payload bytes of unit u of p[0, bytes) (zero past the end) as two words.
RCCLX_DEV void rcclx_ll_load8(const unsigned char* p, uint64_t u, uint64_t bytes, uint32_t* lo, uint32_t* hi) {
  if (((uintptr_t)p & 7) == 0 && (u + 1) * 8 <= bytes) {
    *lo = ((const uint32_t*)p)[2 * u];
    *hi = ((const uint32_t*)p)[2 * u + 1];
    return;
  }
  uint32_t l = 0, h = 0;
  for (int b = 0; b < 8; ++b)
    if (u * 8 + b < bytes) (b < 4 ? l : h) |= (uint32_t)p[u * 8 + b] << (8 * (b & 3));
  *lo = l;
  *hi = h;
}

// Writes the bytes of unit u that fall inside p[0, bytes).
RCCLX_DEV void rcclx_ll_store8(unsigned char* p, uint64_t u, uint64_t bytes, uint32_t lo, uint32_t hi) {
  if (((uintptr_t)p & 7) == 0 && (u + 1) * 8 <= bytes) {
    ((uint32_t*)p)[2 * u] = lo;
    ((uint32_t*)p)[2 * u + 1] = hi;
    return;
  }
  const uint32_t w[2] = {lo, hi};
  for (int b = 0; b < 8; ++b)
    if (u * 8 + b < bytes) p[u * 8 + b] = (unsigned char)(w[b >> 2] >> (8 * (b & 3)));
}

// Stores unit u (payload lo/hi, this call's flag) into slot [this rank] of `peer`'s inbox.
RCCLX_DEV void rcclx_ll_push(const RcclxArgs& a, int peer, uint64_t parity_off, uint64_t u, uint32_t flag, uint32_t lo, uint32_t hi) {
  rcclx_st_ll_unit(a.ll[peer] + parity_off + ((uint64_t)a.rank * a.ll_units + u) * 2, ((uint64_t)flag << 32) | lo,
                   ((uint64_t)flag << 32) | hi);
}

// Waits for unit u of this call from `src` in this rank's inbox and returns its payload. On
// abort or timeout it sets *s_fail and returns garbage (the call's result is then undefined,
// as the stock library's after an abort).
RCCLX_DEV void rcclx_ll_pull(const RcclxArgs& a, int src, uint64_t parity_off, uint64_t u, uint32_t flag, uint64_t deadline,
                             int* s_fail, uint32_t* lo, uint32_t* hi) {
  const uint64_t* slot = a.ll[a.rank] + parity_off + ((uint64_t)src * a.ll_units + u) * 2;
  uint64_t v0, v1;
  for (uint32_t round = 0;; ++round) {
    rcclx_ld_ll_unit(slot, &v0, &v1);
    if (RCCLX_TRAFFIC_TWIN || ((uint32_t)(v0 >> 32) == flag && (uint32_t)(v1 >> 32) == flag)) break;
    rcclx_poll_pause();  // AMD: s_sleep 1 between polls, as RCCL's; nothing on NVIDIA
    if ((round & 1023) == 1023) {
      if (rcclx_should_stop(a, deadline)) *s_fail = 1;
      if (*(volatile int*)s_fail) break;
    }
  }
  *lo = (uint32_t)v0;
  *hi = (uint32_t)v1;
}

// One LL unit (8 payload bytes) of a reduction: the ranks' units combined in rank order 0..n-1
// (RcclxRed), this rank's from `own`, every other one pulled from the inbox as it is needed.
// Streaming in rank order keeps no per-rank array (no local memory).
template <typename T, int OP>
RCCLX_DEV void rcclx_ll_reduce_unit(const RcclxArgs& a, uint64_t parity_off, uint64_t u, uint32_t flag, uint64_t deadline,
                                    int* s_fail, uint32_t own_lo, uint32_t own_hi, uint32_t* lo, uint32_t* hi) {
  typedef RcclxRed<T, OP> R;
  constexpr int PER = 8 / sizeof(T) > 0 ? 8 / sizeof(T) : 1;  // elements per unit
  union Unit { uint32_t w[2]; T e[PER]; };
  const T s = R::scalar(a.nranks);
  Unit acc;
#pragma unroll
  for (int p = 0; p < RCCLX_MAX_RANKS; ++p) {
    if (p >= a.nranks) break;
    Unit v;
    if (p == a.rank) {
      v.w[0] = own_lo;
      v.w[1] = own_hi;
    } else {
      rcclx_ll_pull(a, p, parity_off, u, flag, deadline, s_fail, &v.w[0], &v.w[1]);
    }
#pragma unroll
    for (int e = 0; e < PER; ++e) acc.e[e] = p == 0 ? R::pre(v.e[e], s) : R::fold(acc.e[e], v.e[e], s);
  }
#pragma unroll
  for (int e = 0; e < PER; ++e) acc.e[e] = R::post(acc.e[e], a.nranks);
  *lo = acc.w[0];
  *hi = acc.w[1];
}

#endif  // RCCLX_COMMON_CUH
