// DDA (Direct Data Access) AllReduce: every rank reads its peers' staging buffers directly
// over NVLink / xGMI. Two kernels:
//   flat (one-shot): copy-in -> barrier -> every rank reads all ranks' copies and reduces.
//   tree (two-shot): copy-in -> barrier -> rank r reduces chunk r (reduce-scatter, in place
//                    in its own staging) -> barrier -> every rank reads every reduced chunk.
//
// Layout per rank (allocated by the host, src/dda/setup.rs):
//   staging: 2 parity halves of `half_bytes`; window w of a call uses half (seq & 1).
//   flags:   uint32 [max_blocks][RCCLX_FLAG_STRIDE]; flags[b][p] = last barrier value that
//            block b of rank p announced to this rank (one 128-byte line per block).
//   ll:      LL inbox, uint64 [2 parities][RCCLX_MAX_RANKS sources][ll_units][2].
//   seq:     uint32 [max_blocks], own memory only: windows run so far by block b.
//
// Barriers are per block index: block b of every rank handles the same element slice (the
// grid and the slicing depend only on count, dtype and rank count, identical on all ranks),
// so it only needs block b of the peers. Barrier values are seq*4 + k: monotonic, never reset,
// so replaying a CUDA/HIP graph needs nothing re-initialised, and the only per-call state, the
// window counter, lives in device memory (never in a kernel argument baked into a graph).
//
// Why one barrier per window is enough for reuse (flat; tree likewise for its first barrier):
// window s+2 overwrites the half that window s used. A rank writes it only after passing the
// barrier of window s+1, which every peer reaches only after finishing its reads of window s.
// That holds per block because a position belongs to the same block in every window of a call
// (slicing never depends on the window's length). Across calls: a rank that finished a call
// passed a barrier (or received LL data) of it from every peer, so a peer is at most one call
// behind; window counters are kept equal on all blocks (rcclx_seq_store), so the next call's
// first window writes the other half than the one that peer may still read.
//
// Accumulation order: ranks 0, 1, ..., n-1, in float for fp16/bf16 (rounded once at the end),
// native otherwise; identical on every rank, so every rank's output is bit-identical.
// Tails: whole 16-byte vectors are sliced over threads; the last count % vector elements are
// handled one by one by block 0. Unaligned user buffers take an element-wise path.
// Spin-waits are bounded by `timeout_ns` and by the host's abort request; either writes an
// error code into host-mapped `status[0]` and ends the kernel.
#pragma once

#define RCCLX_MAX_RANKS 8
#define RCCLX_DDA_THREADS 512
#define RCCLX_FLAG_STRIDE 32  // words per block in a flag array: no false sharing between blocks

enum : uint32_t { RCCLX_STATUS_OK = 0, RCCLX_STATUS_TIMEOUT = 1, RCCLX_STATUS_ABORTED = 2 };

struct RcclxDdaArgs {
  const void* send;            // user input (this rank)
  void* recv;                  // user output (this rank)
  uint64_t count;              // elements
  uint64_t window_elems;       // elements per window: multiple of the vector width (x nranks for tree)
  uint64_t half_bytes;         // bytes of one parity half of a staging buffer
  uint64_t timeout_ns;         // bound on each spin-wait
  char* staging[RCCLX_MAX_RANKS];       // every rank's staging buffer, mapped in this process
  uint32_t* flags[RCCLX_MAX_RANKS];     // every rank's flag array
  uint64_t* ll[RCCLX_MAX_RANKS];        // every rank's LL inbox (see rcclx_dda_ll)
  uint32_t* seq;               // this rank's per-block window counters
  uint32_t* status;            // host-mapped: [0] error (RCCLX_STATUS_*), [1] abort request
  uint64_t ll_units;           // 16-byte LL units per (parity, source rank) slot of an inbox
  uint64_t seq_slots;          // entries of `seq` (the largest grid)
  int32_t rank;
  int32_t nranks;
};
RCCLX_ASSERT_SIZE(RcclxDdaArgs, 280);

// ---- element types and ops ---------------------------------------------------------------

// Storage type T, accumulator A, conversions.
template <typename T> struct RcclxElt {
  typedef T A;
  RCCLX_DEV static A load(T v) { return v; }
  RCCLX_DEV static T store(A v) { return (T)v; }
};
struct rcclx_half { uint16_t bits; };
struct rcclx_bf16 { uint16_t bits; };
template <> struct RcclxElt<rcclx_half> {
  typedef float A;
  RCCLX_DEV static A load(rcclx_half v) { return rcclx_f16_to_f32(v.bits); }
  RCCLX_DEV static rcclx_half store(A v) { rcclx_half h; h.bits = rcclx_f32_to_f16_rne(v); return h; }
};
template <> struct RcclxElt<rcclx_bf16> {
  typedef float A;
  RCCLX_DEV static A load(rcclx_bf16 v) { return rcclx_bf16_to_f32(v.bits); }
  RCCLX_DEV static rcclx_bf16 store(A v) { rcclx_bf16 h; h.bits = rcclx_f32_to_bf16_rne(v); return h; }
};

template <typename A> RCCLX_DEV bool rcclx_is_float() { return (A)0.5 != (A)0; }

enum { RCCLX_SUM = 0, RCCLX_PROD = 1, RCCLX_MAX = 2, RCCLX_MIN = 3, RCCLX_AVG = 4 };

template <int OP, typename A> struct RcclxOp {
  RCCLX_DEV static A apply(A a, A b) {
    if (OP == RCCLX_PROD) return a * b;
    if (OP == RCCLX_MAX) return a > b ? a : b;
    if (OP == RCCLX_MIN) return a < b ? a : b;
    return a + b;  // SUM, AVG
  }
  // AVG: the sum divided by the rank count (integer division for integer types, as NCCL).
  RCCLX_DEV static A finish(A a, int n) {
    if (OP != RCCLX_AVG) return a;
    if (rcclx_is_float<A>()) return a * ((A)1 / (A)n);
    return a / (A)n;
  }
};

// ---- barrier ----------------------------------------------------------------------------

// order: acquire, sys. Waits until *flag has reached `value`; false on timeout or abort
// (and then records why in status[0]). Tight spin first: the barrier is the latency floor.
RCCLX_DEV bool rcclx_dda_wait(const RcclxDdaArgs& a, const uint32_t* flag, uint32_t value, uint64_t deadline) {
  for (uint32_t round = 0;; ++round) {
    if (rcclx_epoch_geq(rcclx_ld_acquire_sys(flag), value)) return true;
    if ((round & 1023) == 1023) {  // the abort word is host memory: a PCIe round trip
      if (rcclx_ld_relaxed_sys(a.status + 1) != 0) {
        rcclx_st_release_sys(a.status, (uint32_t)RCCLX_STATUS_ABORTED);
        return false;
      }
      if (rcclx_now_ns() >= deadline) {
        rcclx_st_release_sys(a.status, (uint32_t)RCCLX_STATUS_TIMEOUT);
        return false;
      }
      if (round > 65536) rcclx_backoff(round);
    }
  }
}

// Contract: every write this block made before the call (to its own staging) is visible to
// block b of every peer after that peer's matching call returns, and vice versa. Release by
// one thread per peer after __syncthreads (cumulative over the block's writes), acquire by
// the same threads before the closing __syncthreads. Returns false on timeout/abort.
RCCLX_DEV bool rcclx_dda_barrier(const RcclxDdaArgs& a, uint32_t value, uint64_t deadline, int* s_fail) {
  rcclx_block_release_sys();
  __syncthreads();
  const int p = threadIdx.x;
  if (p < a.nranks) {
    rcclx_st_release_sys(a.flags[p] + blockIdx.x * RCCLX_FLAG_STRIDE + a.rank, value);
    if (!rcclx_dda_wait(a, a.flags[a.rank] + blockIdx.x * RCCLX_FLAG_STRIDE + p, value, deadline)) *s_fail = 1;
  }
  __syncthreads();
  return *s_fail == 0;
}

// ---- window counters ---------------------------------------------------------------------

// Every block starts from its own counter; at the end each stores its final value and block 0
// stores the same value for the counters this grid did not launch. All counters thus stay
// equal whatever grid each call had, so a call's first window always uses the other parity
// half than the previous call's last window, on every block: a peer still finishing the
// previous call (at most one call behind, see below) reads only that other half.
RCCLX_DEV uint32_t rcclx_seq_load(const RcclxDdaArgs& a, uint32_t* s_seq, int* s_fail) {
  if (threadIdx.x == 0) { *s_seq = a.seq[blockIdx.x]; *s_fail = 0; }
  __syncthreads();
  return *s_seq;
}
RCCLX_DEV void rcclx_seq_store(const RcclxDdaArgs& a, uint32_t seq) {
  if (threadIdx.x == 0) a.seq[blockIdx.x] = seq;
  if (blockIdx.x == 0)
    for (uint64_t b = gridDim.x + threadIdx.x; b < a.seq_slots; b += blockDim.x) a.seq[b] = seq;
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

// Copies elements [first, first + n) of `src` to the same positions of `dst` (dst aligned).
// Full vectors by the slicing above; the tail by block 0.
template <typename T>
RCCLX_DEV void rcclx_copy_range(T* dst, const T* src, uint64_t first, uint64_t n) {
  constexpr int N = RcclxVec<T>::N;
  constexpr int UNROLL = 4;
  const uint64_t nvec = n / N;
  if (rcclx_aligned16(src + first)) {
    const rcclx_u32x4* s = (const rcclx_u32x4*)(src + first);
    rcclx_u32x4* d = (rcclx_u32x4*)(dst + first);
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
    RCCLX_FOR_VEC(j, nvec) for (int e = 0; e < N; ++e) dst[first + j * N + e] = src[first + j * N + e];
  }
  if (blockIdx.x == 0 && threadIdx.x < n % N) dst[first + nvec * N + threadIdx.x] = src[first + nvec * N + threadIdx.x];
}

// Reduces elements [first, first + n) over all ranks' staging (half `half`), in rank order,
// and writes the result to out[first ...] and, if `keep` is set, back into keep[first ...].
template <typename T, int OP>
RCCLX_DEV void rcclx_reduce_range(const RcclxDdaArgs& a, uint64_t half_off, uint64_t first, uint64_t n, T* out, T* keep) {
  typedef RcclxElt<T> E;
  typedef typename E::A A;
  typedef RcclxOp<OP, A> O;
  constexpr int N = RcclxVec<T>::N;
  constexpr int UNROLL = 2;
  typedef typename RcclxVec<T>::U U;
  const uint64_t nvec = n / N;
  const bool out_aligned = rcclx_aligned16(out + first);
  RCCLX_FOR_VEC_UNROLLED(j0, nvec, UNROLL) {
    // All loads of this step first (UNROLL vectors x all ranks), then the arithmetic.
    U in[UNROLL][RCCLX_MAX_RANKS];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int r = 0; r < RCCLX_MAX_RANKS; ++r)
        if (r < a.nranks && j0 + u * RCCLX_VEC_STRIDE < nvec)
          in[u][r].v = rcclx_ld16((const rcclx_u32x4*)(a.staging[r] + half_off) + first / N + j0 + u * RCCLX_VEC_STRIDE);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const uint64_t j = j0 + u * RCCLX_VEC_STRIDE;
      if (j >= nvec) break;
      U res;
#pragma unroll
      for (int e = 0; e < N; ++e) {
        A acc = E::load(in[u][0].e[e]);
#pragma unroll
        for (int r = 1; r < RCCLX_MAX_RANKS; ++r)
          if (r < a.nranks) acc = O::apply(acc, E::load(in[u][r].e[e]));
        res.e[e] = E::store(O::finish(acc, a.nranks));
      }
      if (out_aligned) rcclx_st16((rcclx_u32x4*)(out + first) + j, res.v);
      else for (int e = 0; e < N; ++e) out[first + j * N + e] = res.e[e];
      if (keep) rcclx_st16((rcclx_u32x4*)(keep + first) + j, res.v);
    }
  }
  if (blockIdx.x == 0 && threadIdx.x < n % N) {
    const uint64_t i = first + nvec * N + threadIdx.x;
    A acc = E::load(((const T*)(a.staging[0] + half_off))[i]);
    for (int r = 1; r < a.nranks; ++r) acc = O::apply(acc, E::load(((const T*)(a.staging[r] + half_off))[i]));
    const T res = E::store(O::finish(acc, a.nranks));
    out[i] = res;
    if (keep) keep[i] = res;
  }
}

// Copies elements [first, first + n) of rank `src_rank`'s staging half into out.
template <typename T>
RCCLX_DEV void rcclx_gather_range(const RcclxDdaArgs& a, int src_rank, uint64_t half_off, uint64_t first, uint64_t n, T* out) {
  constexpr int N = RcclxVec<T>::N;
  constexpr int UNROLL = 4;
  const T* src = (const T*)(a.staging[src_rank] + half_off);
  const uint64_t nvec = n / N;
  if (rcclx_aligned16(out + first)) {
    const rcclx_u32x4* s = (const rcclx_u32x4*)(src + first);
    rcclx_u32x4* d = (rcclx_u32x4*)(out + first);
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
    RCCLX_FOR_VEC(j, nvec) for (int e = 0; e < N; ++e) out[first + j * N + e] = src[first + j * N + e];
  }
  if (blockIdx.x == 0 && threadIdx.x < n % N) out[first + nvec * N + threadIdx.x] = src[first + nvec * N + threadIdx.x];
}

// ---- kernels ----------------------------------------------------------------------------

template <typename T, int OP>
RCCLX_DEV void rcclx_dda_flat(const RcclxDdaArgs& a) {
  __shared__ uint32_t s_seq;
  __shared__ int s_fail;
  uint32_t seq = rcclx_seq_load(a, &s_seq, &s_fail);
  const uint64_t deadline = rcclx_deadline_after(a.timeout_ns);
  const T* send = (const T*)a.send;
  T* recv = (T*)a.recv;
  for (uint64_t base = 0; base < a.count; base += a.window_elems, ++seq) {
    const uint64_t n = a.count - base < a.window_elems ? a.count - base : a.window_elems;
    const uint64_t half_off = (uint64_t)(seq & 1) * a.half_bytes;
    T* mine = (T*)(a.staging[a.rank] + half_off);
    // Staging holds the window at offset 0: shift the user pointers instead.
    rcclx_copy_range<T>(mine, send + base, 0, n);
    if (!rcclx_dda_barrier(a, seq * 4 + 1, deadline, &s_fail)) { ++seq; break; }
    rcclx_reduce_range<T, OP>(a, half_off, 0, n, recv + base, (T*)nullptr);
  }
  rcclx_seq_store(a, seq);
}

template <typename T, int OP>
RCCLX_DEV void rcclx_dda_tree(const RcclxDdaArgs& a) {
  constexpr int N = RcclxVec<T>::N;
  __shared__ uint32_t s_seq;
  __shared__ int s_fail;
  uint32_t seq = rcclx_seq_load(a, &s_seq, &s_fail);
  const uint64_t deadline = rcclx_deadline_after(a.timeout_ns);
  const T* send = (const T*)a.send;
  T* recv = (T*)a.recv;
  const int n_r = a.nranks;
  // Chunk c = elements [c*C, min((c+1)*C, n)) of a window; C is a whole number of vectors and
  // the same in every window of the call (also the short last one), so a position belongs to
  // the same block in every window, which the reuse argument above needs.
  const uint64_t first_window = a.count < a.window_elems ? a.count : a.window_elems;
  const uint64_t C = ((first_window + n_r - 1) / n_r + N - 1) / N * N;
  for (uint64_t base = 0; base < a.count; base += a.window_elems, ++seq) {
    const uint64_t n = a.count - base < a.window_elems ? a.count - base : a.window_elems;
    const uint64_t half_off = (uint64_t)(seq & 1) * a.half_bytes;
    T* mine = (T*)(a.staging[a.rank] + half_off);
    // Copy-in, sliced per chunk so that block b handles the same positions of every chunk.
    for (int c = 0; c < n_r; ++c) {
      const uint64_t first = c * C;
      if (first < n) rcclx_copy_range<T>(mine, send + base, first, (n - first < C ? n - first : C));
    }
    if (!rcclx_dda_barrier(a, seq * 4 + 1, deadline, &s_fail)) { ++seq; break; }
    // Reduce-scatter: this rank's chunk, kept in place in its staging for the peers.
    {
      const uint64_t first = a.rank * C;
      if (first < n) rcclx_reduce_range<T, OP>(a, half_off, first, (n - first < C ? n - first : C), recv + base, mine);
    }
    if (!rcclx_dda_barrier(a, seq * 4 + 2, deadline, &s_fail)) { ++seq; break; }
    // All-gather: every other chunk from its owner, starting after this rank (spreads links).
    for (int i = 1; i < n_r; ++i) {
      const int c = (a.rank + i) % n_r;
      const uint64_t first = c * C;
      if (first < n) rcclx_gather_range<T>(a, c, half_off, first, (n - first < C ? n - first : C), recv + base);
    }
  }
  rcclx_seq_store(a, seq);
}

// LL one-shot (small messages): no barrier and no fence. Each 8-byte word carries 4 payload
// bytes and a 4-byte flag, written with one single-copy-atomic store, so a reader that sees
// the flag sees the payload. Every rank pushes its input, 8 payload bytes per 16-byte unit,
// straight into every peer's inbox (remote stores), then polls its own inbox for the peers'
// units of this call and reduces them with its own input in rank order.
// Flag value: this block's call counter + 1 (distinct from the value of the slot's previous
// use, two calls earlier). Inbox halves alternate by call parity: a peer can be at most one
// call ahead, because finishing a call needs every rank's data of that call.
// Unit u of the message belongs to block (u / blockDim) % gridDim on every rank, so writer
// and reader of a unit share a block index and hence a call counter.
template <typename T, int OP>
RCCLX_DEV void rcclx_dda_ll(const RcclxDdaArgs& a) {
  typedef RcclxElt<T> E;
  typedef typename E::A A;
  typedef RcclxOp<OP, A> O;
  constexpr int PER = 8 / sizeof(T) > 0 ? 8 / sizeof(T) : 1;  // elements per unit
  __shared__ uint32_t s_seq;
  __shared__ int s_fail;
  const uint32_t seq = rcclx_seq_load(a, &s_seq, &s_fail);
  const uint32_t flag = seq + 1;
  const uint64_t deadline = rcclx_deadline_after(a.timeout_ns);
  const uint64_t bytes = a.count * sizeof(T);
  const uint64_t units = (bytes + 7) / 8;
  const uint64_t parity_off = (uint64_t)(seq & 1) * RCCLX_MAX_RANKS * a.ll_units * 2;
  const unsigned char* send = (const unsigned char*)a.send;
  unsigned char* recv = (unsigned char*)a.recv;
  const bool aligned = (((uintptr_t)send | (uintptr_t)recv) & 7) == 0;
  RCCLX_FOR_VEC(u, units) {
    // Own 8 payload bytes (zero past the end of the message).
    uint32_t lo = 0, hi = 0;
    if (aligned && (u + 1) * 8 <= bytes) {
      lo = ((const uint32_t*)send)[2 * u];
      hi = ((const uint32_t*)send)[2 * u + 1];
    } else {
      for (int b = 0; b < 8; ++b)
        if (u * 8 + b < bytes) (b < 4 ? lo : hi) |= (uint32_t)send[u * 8 + b] << (8 * (b & 3));
    }
    const uint64_t w0 = ((uint64_t)flag << 32) | lo, w1 = ((uint64_t)flag << 32) | hi;
    for (int i = 1; i < a.nranks; ++i) {
      const int p = (a.rank + i) % a.nranks;
      rcclx_st_ll_unit(a.ll[p] + parity_off + ((uint64_t)a.rank * a.ll_units + u) * 2, w0, w1);
    }
    // Gather every rank's 8 bytes (own from registers), reduce in rank order.
    union { uint32_t w[2]; T e[PER]; } in[RCCLX_MAX_RANKS];
#pragma unroll
    for (int p = 0; p < RCCLX_MAX_RANKS; ++p) {
      if (p >= a.nranks) continue;
      if (p == a.rank) { in[p].w[0] = lo; in[p].w[1] = hi; continue; }
      const uint64_t* slot = a.ll[a.rank] + parity_off + ((uint64_t)p * a.ll_units + u) * 2;
      uint64_t v0, v1;
      for (uint32_t round = 0;; ++round) {
        rcclx_ld_ll_unit(slot, &v0, &v1);
        if ((uint32_t)(v0 >> 32) == flag && (uint32_t)(v1 >> 32) == flag) break;
        if ((round & 1023) == 1023) {
          if (rcclx_ld_relaxed_sys(a.status + 1) != 0) { rcclx_st_release_sys(a.status, (uint32_t)RCCLX_STATUS_ABORTED); s_fail = 1; }
          else if (rcclx_now_ns() >= deadline) { rcclx_st_release_sys(a.status, (uint32_t)RCCLX_STATUS_TIMEOUT); s_fail = 1; }
          if (*(volatile int*)&s_fail) break;
        }
      }
      in[p].w[0] = (uint32_t)v0;
      in[p].w[1] = (uint32_t)v1;
    }
    union { uint32_t w[2]; T e[PER]; } res;
#pragma unroll
    for (int e = 0; e < PER; ++e) {
      A acc = E::load(in[0].e[e]);
#pragma unroll
      for (int p = 1; p < RCCLX_MAX_RANKS; ++p)
        if (p < a.nranks) acc = O::apply(acc, E::load(in[p].e[e]));
      res.e[e] = E::store(O::finish(acc, a.nranks));
    }
    if (aligned && (u + 1) * 8 <= bytes) {
      ((uint32_t*)recv)[2 * u] = res.w[0];
      ((uint32_t*)recv)[2 * u + 1] = res.w[1];
    } else {
      for (int b = 0; b < 8; ++b)
        if (u * 8 + b < bytes) recv[u * 8 + b] = (unsigned char)(res.w[b >> 2] >> (8 * (b & 3)));
    }
  }
  rcclx_seq_store(a, seq + 1);
}

// Instantiation: one kernel per (algorithm, type, op), named rcclx_allreduce_<algo>_<type>_<op>.
#define RCCLX_DDA_KERNEL(ALGO, TNAME, T, ONAME, OP)                                         \
  extern "C" __global__ void __launch_bounds__(RCCLX_DDA_THREADS)                           \
      rcclx_allreduce_##ALGO##_##TNAME##_##ONAME(RcclxDdaArgs a) {                            \
    rcclx_dda_##ALGO<T, OP>(a);                                                              \
  }
#define RCCLX_DDA_OPS(ALGO, TNAME, T)                  \
  RCCLX_DDA_KERNEL(ALGO, TNAME, T, sum, RCCLX_SUM)    \
  RCCLX_DDA_KERNEL(ALGO, TNAME, T, prod, RCCLX_PROD)  \
  RCCLX_DDA_KERNEL(ALGO, TNAME, T, max, RCCLX_MAX)    \
  RCCLX_DDA_KERNEL(ALGO, TNAME, T, min, RCCLX_MIN)    \
  RCCLX_DDA_KERNEL(ALGO, TNAME, T, avg, RCCLX_AVG)
#define RCCLX_DDA_TYPES(ALGO)                  \
  RCCLX_DDA_OPS(ALGO, i8, int8_t)              \
  RCCLX_DDA_OPS(ALGO, u8, uint8_t)             \
  RCCLX_DDA_OPS(ALGO, i32, int32_t)            \
  RCCLX_DDA_OPS(ALGO, u32, uint32_t)           \
  RCCLX_DDA_OPS(ALGO, i64, int64_t)            \
  RCCLX_DDA_OPS(ALGO, u64, uint64_t)           \
  RCCLX_DDA_OPS(ALGO, f16, rcclx_half)         \
  RCCLX_DDA_OPS(ALGO, f32, float)              \
  RCCLX_DDA_OPS(ALGO, f64, double)             \
  RCCLX_DDA_OPS(ALGO, bf16, rcclx_bf16)
RCCLX_DDA_TYPES(ll)
RCCLX_DDA_TYPES(flat)
RCCLX_DDA_TYPES(tree)
